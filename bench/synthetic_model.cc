#include "bench/synthetic_model.h"

#include <cblas.h>

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/split_mix64.h"

namespace gift::bench {

std::vector<ModelTensor> ModelTensors(int64_t d, int layers) {
  const int64_t ff = static_cast<int64_t>(std::llround(2.75 * static_cast<double>(d)));
  std::vector<ModelTensor> out;
  auto matrix = [&](std::string name, int64_t rows, int64_t cols) {
    out.push_back({std::move(name), {rows, cols}, rows, cols});
  };
  for (int l = 0; l < layers; ++l) {
    const std::string p = absl::StrCat("layers.", l, ".");
    for (const char* m : {"q", "k", "v", "o"}) matrix(absl::StrCat(p, "attn.", m, ".weight"), d, d);
    matrix(p + "mlp.gate.weight", ff, d);
    matrix(p + "mlp.up.weight", ff, d);
    matrix(p + "mlp.down.weight", d, ff);
    out.push_back({p + "attn_norm.weight", {d}, 1, d});
    out.push_back({p + "mlp_norm.weight", {d}, 1, d});
  }
  return out;
}

namespace {

// The low-rank component's depth.
constexpr int kLowRank = 16;

// n Gaussian values (Box-Muller) from the generator state `s`.
std::vector<float> Gaussian(size_t n, uint64_t& s) {
  std::vector<float> out(n);
  for (size_t i = 0; i + 1 < n; i += 2) {
    const double u1 = 1.0 - SplitMix64Uniform(s), u2 = SplitMix64Uniform(s);
    const double r = std::sqrt(-2.0 * std::log(u1));
    out[i] = static_cast<float>(r * std::cos(2 * M_PI * u2));
    out[i + 1] = static_cast<float>(r * std::sin(2 * M_PI * u2));
  }
  if (n % 2 == 1) out.back() = static_cast<float>(SplitMix64Uniform(s) - 0.5);
  return out;
}

}  // namespace

GradientSource::GradientSource(const std::vector<ModelTensor>& tensors, GradientShape shape)
    : tensors_(tensors) {
  for (size_t t = 0; t < tensors.size(); ++t) {
    uint64_t s = 0x5EED0000ull + t;
    fields_.push_back(Gaussian(tensors[t].elements(), s));
    std::vector<float> profile(tensors[t].cols);
    for (float& p : profile) p = static_cast<float>(std::pow(10.0, -3.0 * SplitMix64Uniform(s)));
    profiles_.push_back(std::move(profile));
    if (shape == GradientShape::kLowRank && tensors[t].matrix()) {
      uint64_t ls = 0x10A4000ull + t;
      left_.push_back(Gaussian(static_cast<size_t>(tensors[t].rows) * kLowRank, ls));
      right_.push_back(Gaussian(static_cast<size_t>(kLowRank) * tensors[t].cols, ls));
    } else {
      left_.emplace_back();
      right_.emplace_back();
    }
  }
}

void GradientSource::Fill(size_t t, uint64_t step, int worker, float* out) const {
  const ModelTensor& m = tensors_[t];
  uint64_t s = (step + 1) * 0x1000193ull + static_cast<uint64_t>(worker) * 0x10001ull + t;
  const int64_t shift = static_cast<int64_t>(SplitMix64(s) % static_cast<uint64_t>(m.rows));
  std::vector<float> scale(m.cols);
  for (int64_t c = 0; c < m.cols; ++c) {
    scale[c] = profiles_[t][c] * static_cast<float>(std::exp2(2.0 * SplitMix64Uniform(s) - 1.0));
  }
  const float* field = fields_[t].data();
  // 1-D tensors: roll within the single row instead.
  const int64_t col_shift = m.rows == 1 ? shift + static_cast<int64_t>(SplitMix64(s) % m.cols) : 0;
  for (int64_t r = 0; r < m.rows; ++r) {
    const float* src = field + ((r + shift) % m.rows) * m.cols;
    float* dst = out + r * m.cols;
    if (col_shift == 0) {
      for (int64_t c = 0; c < m.cols; ++c) dst[c] = src[c] * scale[c];
    } else {
      for (int64_t c = 0; c < m.cols; ++c) dst[c] = src[(c + col_shift) % m.cols] * scale[c];
    }
  }
  if (left_[t].empty()) return;
  // out += A diag(s c) B: the field's RMS is that of the profile (about
  // 0.27, the jitter's mean square is near 1), the component's
  // amp * sqrt(sum 1/j^2) (about 1.26 amp) with unit Gaussian A, B, c.
  constexpr double kAmp = 2.0 * 0.27 / 1.26;
  std::vector<float> a(left_[t]);
  for (int j = 0; j < kLowRank; ++j) {
    const double u1 = 1.0 - SplitMix64Uniform(s), u2 = SplitMix64Uniform(s);
    const double c = std::sqrt(-2.0 * std::log(u1)) * std::cos(2 * M_PI * u2);
    const float w = static_cast<float>(kAmp * c / (j + 1));
    for (int64_t r = 0; r < m.rows; ++r) a[r * kLowRank + j] *= w;
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m.rows),
              static_cast<int>(m.cols), kLowRank, 1.0f, a.data(), kLowRank, right_[t].data(),
              static_cast<int>(m.cols), 1.0f, out, static_cast<int>(m.cols));
}

uint64_t HashFloats(const float* data, size_t n, uint64_t h) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(data);
  const size_t len = n * sizeof(float);
  size_t i = 0;
  for (; i + 8 <= len; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    h = (h ^ (w * 0x9E3779B97F4A7C15ull)) * 0xBF58476D1CE4E5B9ull;
    h ^= h >> 29;
  }
  for (; i < len; ++i) h = (h ^ bytes[i]) * 0x100000001B3ull;
  return h;
}

}  // namespace gift::bench
