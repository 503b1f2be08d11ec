#include "bench/plain_blas_forward.h"

#include <cblas.h>

#include <cmath>

namespace gift::bench {

PlainBlasForward::Side PlainBlasForward::MakeSide(const transform::SideBasis& side, double p) {
  const transform::SideBasis::Parts& parts = side.parts();
  Side s;
  s.n = side.dim();
  s.r = side.rank();
  s.scale.resize(s.n);
  for (int64_t i = 0; i < s.n; ++i) {
    s.scale[i] = static_cast<float>(std::pow(parts.d.size() == 1 ? parts.d(0) : parts.d(i), -p));
  }
  s.z.resize(s.n * s.r);
  for (int64_t i = 0; i < s.n; ++i) {
    for (int64_t j = 0; j < s.r; ++j) s.z[i * s.r + j] = static_cast<float>(parts.z(i, j));
  }
  s.core.resize(s.r);
  for (int64_t j = 0; j < s.r; ++j) {
    s.core[j] = static_cast<float>(std::pow(parts.one_plus_sig(j), -p) - 1.0);
  }
  return s;
}

absl::StatusOr<PlainBlasForward> PlainBlasForward::Create(const transform::TensorBasis& basis) {
  const auto& out_side = basis.output_side();
  const auto& in_side = basis.input_side();
  if (!out_side || !in_side || out_side->rank() >= out_side->dim() ||
      in_side->rank() >= in_side->dim()) {
    return absl::InvalidArgumentError("the plain BLAS forward needs both sides with r < n");
  }
  PlainBlasForward f;
  f.d_out_ = basis.header().d_out;
  f.d_in_ = basis.header().d_in;
  f.out_ = MakeSide(*out_side, basis.header().config.power);
  f.in_ = MakeSide(*in_side, basis.header().config.power);
  return f;
}

void PlainBlasForward::Forward(const float* g, float* out) const {
  const int m = static_cast<int>(d_out_), n = static_cast<int>(d_in_);
  const int ri = static_cast<int>(in_.r), ro = static_cast<int>(out_.r);
  // H = D_out^{-p} G D_in^{-p}
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      out[int64_t{i} * n + j] = out_.scale[i] * g[int64_t{i} * n + j] * in_.scale[j];
    }
  }
  // Input side: T = H Z_in; T = T C_in; H += T Z_in^T.
  std::vector<float> t(int64_t{m} * ri);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, ri, n, 1.0f, out, n, in_.z.data(), ri,
              0.0f, t.data(), ri);
  for (int i = 0; i < m; ++i) {
    for (int c = 0; c < ri; ++c) t[int64_t{i} * ri + c] *= in_.core[c];
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, ri, 1.0f, t.data(), ri, in_.z.data(),
              ri, 1.0f, out, n);
  // Output side: U = Z_out^T H; U = C_out U; H += Z_out U.
  std::vector<float> u(int64_t{ro} * n);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ro, n, m, 1.0f, out_.z.data(), ro, out, n,
              0.0f, u.data(), n);
  for (int c = 0; c < ro; ++c) {
    for (int j = 0; j < n; ++j) u[int64_t{c} * n + j] *= out_.core[c];
  }
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, ro, 1.0f, out_.z.data(), ro,
              u.data(), n, 1.0f, out, n);
}

}  // namespace gift::bench
