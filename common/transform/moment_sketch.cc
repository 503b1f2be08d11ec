#include "common/transform/moment_sketch.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/finite.h"
#include "common/base/status_macros.h"
#include "common/transform/blas_runtime.h"
#include "common/transform/dense_factorizations.h"
#include "common/transform/gaussian_sketch.h"

namespace gift::transform {
namespace {

using RowMajorFloatMap =
    Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Rows of G widened to double at a time (the double fallback).
constexpr int64_t kDoubleFallbackRows = 64;

absl::Status CheckGradient(const float* g, int64_t d_out, int64_t d_in, const float* out) {
  if (g == nullptr || out == nullptr) return absl::InvalidArgumentError("null buffer");
  if (d_out < 1 || d_in < 1) {
    return absl::InvalidArgumentError(absl::StrCat("gradient shape ", d_out, "x", d_in));
  }
  if (const int64_t i = FirstNonFinite(g, d_out * d_in); i >= 0) {
    return absl::InvalidArgumentError(absl::StrCat("gradient element ", i, " (row ", i / d_in,
                                                   ", column ", i % d_in, ") is not finite"));
  }
  return absl::OkStatus();
}

// Writes y (n x k), diag (n) and their trace as floats: the contribution layout.
void WriteContribution(const Eigen::MatrixXd& y, const Eigen::VectorXd& diag, float* out) {
  const int64_t n = y.rows();
  const int64_t k = y.cols();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) out[i * k + j] = static_cast<float>(y(i, j));
  }
  for (int64_t i = 0; i < n; ++i) out[n * k + i] = static_cast<float>(diag(i));
  out[n * k + n] = static_cast<float>(diag.sum());
}

// Writes diag * scale and its trace after the n*k products already in
// `out`; false when any of the products or these is not finite (the FP32
// products overflowed), so the caller redoes it in double.
bool WriteDiagonal(const std::vector<double>& diag, double scale, int64_t products, float* out) {
  if (FirstNonFinite(out, products) >= 0) return false;
  double trace = 0.0;
  for (size_t i = 0; i < diag.size(); ++i) {
    out[products + static_cast<int64_t>(i)] = static_cast<float>(diag[i] * scale);
    trace += diag[i] * scale;
  }
  out[products + static_cast<int64_t>(diag.size())] = static_cast<float>(trace);
  return FirstNonFinite(out + products, static_cast<int64_t>(diag.size()) + 1) < 0;
}

// Per-thread scratch of the contributions, kept across calls: a worker
// sketches the same tensors every collect step, and fresh buffers of a few
// hundred KiB each cost page faults every time (the const methods stay safe
// to call concurrently).
std::vector<float>& ProductScratch(int64_t size) {
  thread_local std::vector<float> scratch;
  scratch.resize(static_cast<size_t>(size));
  return scratch;
}

// Zeroed.
std::vector<double>& DiagonalScratch(int64_t size) {
  thread_local std::vector<double> scratch;
  scratch.assign(static_cast<size_t>(size), 0.0);
  return scratch;
}

}  // namespace

absl::StatusOr<MomentSketch> MomentSketch::Create(int64_t n, int64_t sketch_size, uint64_t seed) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("dimension ", n, " is not >= 1"));
  if (sketch_size < 1 || sketch_size > n) {
    return absl::InvalidArgumentError(
        absl::StrCat("sketch size ", sketch_size, " is not in [1, ", n, "]"));
  }
  GIFT_ASSIGN_OR_RETURN(ThinQr qr, ThinQrOf(GaussianSketch(n, sketch_size, seed)));
  return MomentSketch(std::move(qr.q));
}

MomentSketch::MomentSketch(Eigen::MatrixXd omega)
    : omega_(std::move(omega)), omega_f32_(static_cast<size_t>(omega_.size())) {
  const int64_t k = omega_.cols();
  for (int64_t i = 0; i < omega_.rows(); ++i) {
    for (int64_t j = 0; j < k; ++j) omega_f32_[i * k + j] = static_cast<float>(omega_(i, j));
  }
}

absl::StatusOr<MomentSketch> MomentSketch::Prefix(int64_t columns) const {
  if (columns < 1 || columns > sketch_size()) {
    return absl::InvalidArgumentError(absl::StrCat("a prefix of ", columns,
                                                   " columns of a sketch of ", sketch_size()));
  }
  return MomentSketch(omega_.leftCols(columns));
}

absl::Status MomentSketch::InputSideContribution(const float* g, int64_t d_out, int64_t d_in,
                                                 float* out) const {
  if (auto s = CheckGradient(g, d_out, d_in, out); !s.ok()) return s;
  if (d_in != dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input-side sketch of dimension ", dim(), " given d_in = ", d_in));
  }
  const int64_t k = sketch_size();
  const float inv = static_cast<float>(1.0 / static_cast<double>(d_out));
  // T = G Omega (d_out x k), Y = G^T T / d_out (d_in x k) straight into `out`.
  std::vector<float>& t = ProductScratch(d_out * k);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BlasInt(d_out), BlasInt(k), BlasInt(d_in),
              1.0f, g, BlasInt(d_in), omega_f32_.data(), BlasInt(k), 0.0f, t.data(), BlasInt(k));
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, BlasInt(d_in), BlasInt(k), BlasInt(d_out),
              inv, g, BlasInt(d_in), t.data(), BlasInt(k), 0.0f, out, BlasInt(k));
  std::vector<double>& diag = DiagonalScratch(d_in);
  for (int64_t r = 0; r < d_out; ++r) {
    const float* row = g + r * d_in;
    for (int64_t c = 0; c < d_in; ++c) diag[c] += static_cast<double>(row[c]) * row[c];
  }
  if (!WriteDiagonal(diag, 1.0 / static_cast<double>(d_out), d_in * k, out)) {
    return DoubleContribution(g, d_out, d_in, /*input_side=*/true, out);
  }
  return absl::OkStatus();
}

absl::Status MomentSketch::OutputSideContribution(const float* g, int64_t d_out, int64_t d_in,
                                                  float* out) const {
  if (auto s = CheckGradient(g, d_out, d_in, out); !s.ok()) return s;
  if (d_out != dim()) {
    return absl::InvalidArgumentError(
        absl::StrCat("output-side sketch of dimension ", dim(), " given d_out = ", d_out));
  }
  const int64_t k = sketch_size();
  const float inv = static_cast<float>(1.0 / static_cast<double>(d_in));
  // U = G^T Omega (d_in x k), Y = G U / d_in (d_out x k) straight into `out`.
  std::vector<float>& u = ProductScratch(d_in * k);
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, BlasInt(d_in), BlasInt(k), BlasInt(d_out),
              1.0f, g, BlasInt(d_in), omega_f32_.data(), BlasInt(k), 0.0f, u.data(), BlasInt(k));
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BlasInt(d_out), BlasInt(k), BlasInt(d_in),
              inv, g, BlasInt(d_in), u.data(), BlasInt(k), 0.0f, out, BlasInt(k));
  std::vector<double>& diag = DiagonalScratch(d_out);
  for (int64_t r = 0; r < d_out; ++r) {
    const float* row = g + r * d_in;
    double sum = 0.0;
    for (int64_t c = 0; c < d_in; ++c) sum += static_cast<double>(row[c]) * row[c];
    diag[r] = sum;
  }
  if (!WriteDiagonal(diag, 1.0 / static_cast<double>(d_in), d_out * k, out)) {
    return DoubleContribution(g, d_out, d_in, /*input_side=*/false, out);
  }
  return absl::OkStatus();
}

absl::Status MomentSketch::MatrixContribution(const Eigen::Ref<const Eigen::MatrixXd>& m,
                                              float* out) const {
  if (out == nullptr) return absl::InvalidArgumentError("null buffer");
  if (m.rows() != dim() || m.cols() != dim()) {
    return absl::InvalidArgumentError(absl::StrCat("sketch of dimension ", dim(), " given a ",
                                                   m.rows(), "x", m.cols(), " matrix"));
  }
  if (!m.allFinite()) return absl::InvalidArgumentError("matrix has non-finite elements");
  WriteContribution(m * omega_, m.diagonal(), out);
  return absl::OkStatus();
}

absl::Status MomentSketch::DoubleContribution(const float* g, int64_t d_out, int64_t d_in,
                                              bool input_side, float* out) const {
  const RowMajorFloatMap map(g, d_out, d_in);
  if (input_side) {
    Eigen::MatrixXd y = Eigen::MatrixXd::Zero(d_in, sketch_size());
    Eigen::VectorXd diag = Eigen::VectorXd::Zero(d_in);
    for (int64_t r = 0; r < d_out; r += kDoubleFallbackRows) {
      const int64_t b = std::min(kDoubleFallbackRows, d_out - r);
      const Eigen::MatrixXd block = map.middleRows(r, b).cast<double>();
      const Eigen::MatrixXd t = block * omega_;  // b x k
      y.noalias() += block.transpose() * t;
      diag += block.colwise().squaredNorm().transpose();
    }
    const double inv = 1.0 / static_cast<double>(d_out);
    WriteContribution(y * inv, diag * inv, out);
    return absl::OkStatus();
  }
  // G^T Omega (d_in x k), accumulated over blocks of rows.
  Eigen::MatrixXd gt_omega = Eigen::MatrixXd::Zero(d_in, sketch_size());
  for (int64_t r = 0; r < d_out; r += kDoubleFallbackRows) {
    const int64_t b = std::min(kDoubleFallbackRows, d_out - r);
    gt_omega.noalias() += map.middleRows(r, b).cast<double>().transpose() * omega_.middleRows(r, b);
  }
  Eigen::MatrixXd y(d_out, sketch_size());
  Eigen::VectorXd diag(d_out);
  for (int64_t r = 0; r < d_out; r += kDoubleFallbackRows) {
    const int64_t b = std::min(kDoubleFallbackRows, d_out - r);
    const Eigen::MatrixXd block = map.middleRows(r, b).cast<double>();
    y.middleRows(r, b).noalias() = block * gt_omega;
    diag.segment(r, b) = block.rowwise().squaredNorm();
  }
  const double inv = 1.0 / static_cast<double>(d_in);
  WriteContribution(y * inv, diag * inv, out);
  return absl::OkStatus();
}

SketchedMomentEma::SketchedMomentEma(std::shared_ptr<const MomentSketch> sketch, double decay,
                                     double noise)
    : sketch_(std::move(sketch)),
      decay_(decay),
      noise_(noise),
      y_(Eigen::MatrixXd::Zero(sketch_->dim(), sketch_->sketch_size())),
      diag_(Eigen::VectorXd::Zero(sketch_->dim())) {}

absl::StatusOr<SketchedMomentEma> SketchedMomentEma::Create(
    std::shared_ptr<const MomentSketch> sketch, double decay, double noise) {
  if (sketch == nullptr) return absl::InvalidArgumentError("null sketch");
  if (!(decay >= 0.0 && decay < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("EMA decay ", decay, " is not in [0, 1)"));
  }
  if (!(noise >= 0.0 && std::isfinite(noise))) {
    return absl::InvalidArgumentError(absl::StrCat("sketch noise ", noise, " is not finite >= 0"));
  }
  return SketchedMomentEma(std::move(sketch), decay, noise);
}

absl::Status SketchedMomentEma::Update(absl::Span<const float> contribution) {
  const int64_t n = sketch_->dim();
  const int64_t k = sketch_->sketch_size();
  if (static_cast<int64_t>(contribution.size()) != sketch_->contribution_size()) {
    return absl::InvalidArgumentError(absl::StrCat("sketch contribution has ", contribution.size(),
                                                   " values, expected ",
                                                   sketch_->contribution_size()));
  }
  if (const int64_t i = FirstNonFinite(contribution.data(), contribution.size()); i >= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sketch contribution value ", i, " is not finite"));
  }
  // Folded in place, element by element (no n x k temporary).
  const RowMajorFloatMap y(contribution.data(), n, k);
  const Eigen::Map<const Eigen::VectorXf> diag(contribution.data() + n * k, n);
  const double trace = contribution[n * k + n];
  if (num_updates_ == 0) {
    y_ = y.cast<double>();
    diag_ = diag.cast<double>();
    trace_ = trace;
  } else {
    y_ = decay_ * y_ + (1.0 - decay_) * y.cast<double>();
    diag_ = decay_ * diag_ + (1.0 - decay_) * diag.cast<double>();
    trace_ = decay_ * trace_ + (1.0 - decay_) * trace;
  }
  ++num_updates_;
  return absl::OkStatus();
}

absl::StatusOr<SketchedMomentEma> SketchedMomentEma::Prefix(int64_t columns) const {
  GIFT_ASSIGN_OR_RETURN(MomentSketch prefix, sketch_->Prefix(columns));
  SketchedMomentEma out(std::make_shared<const MomentSketch>(std::move(prefix)), decay_, noise_);
  out.num_updates_ = num_updates_;
  out.y_ = y_.leftCols(columns);
  out.diag_ = diag_;
  out.trace_ = trace_;
  return out;
}

absl::StatusOr<LowRankEigenpairs> SketchedMomentEma::TopEigenpairs(int64_t rank) const {
  const int64_t k = sketch_->sketch_size();
  if (rank < 1 || rank > k) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " is not in [1, sketch size ", k, "]"));
  }
  if (num_updates_ == 0) return absl::FailedPreconditionError("no sketch contribution yet");
  const double y_norm = y_.norm();
  if (!(y_norm > 0.0)) return absl::FailedPreconditionError("the sketch is all zero");
  const Eigen::MatrixXd& omega = sketch_->omega();
  // The shift keeps Omega^T Y_nu positive definite despite rounding (the
  // arithmetic's, and the contributions' own, noise_); grow it if the
  // Cholesky factorization still fails.
  double nu = std::max(std::sqrt(static_cast<double>(sketch_->dim())) *
                           std::numeric_limits<double>::epsilon() * y_norm,
                       noise_ * y_norm / std::sqrt(static_cast<double>(k)));
  for (int attempt = 0; attempt < 8; ++attempt, nu *= 100.0) {
    const Eigen::MatrixXd y_nu = y_ + nu * omega;
    Eigen::MatrixXd core = omega.transpose() * y_nu;
    core = 0.5 * (core + core.transpose()).eval();
    const Eigen::LLT<Eigen::MatrixXd> llt(core);
    if (llt.info() != Eigen::Success) continue;
    // B = Y_nu C^{-1} with C = L^T: B^T = L^{-1} Y_nu^T.
    const Eigen::MatrixXd b = llt.matrixL().solve(y_nu.transpose()).transpose();  // n x k
    GIFT_ASSIGN_OR_RETURN(const ThinSvdLeft svd, ThinSvdLeftOf(b));
    LowRankEigenpairs out;
    out.vectors = svd.u.leftCols(rank);
    out.values.resize(rank);
    for (int64_t j = 0; j < rank; ++j) {
      const double s = svd.singular_values(j);
      out.values(j) = std::max(s * s - nu, 0.0);
    }
    out.trace = trace_;
    return out;
  }
  return absl::InternalError("Nystrom core matrix is not positive definite even with a shift");
}

}  // namespace gift::transform
