#include "common/transform/second_moment_ema.h"

#include <cblas.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/finite.h"

namespace gift::transform {
namespace {

// Rows (or columns) widened to double at a time (a BLAS-friendly depth).
constexpr int64_t kWidenedRows = 256;

absl::Status CheckGradients(absl::Span<const float* const> grads, int64_t d_out, int64_t d_in) {
  if (grads.empty()) return absl::InvalidArgumentError("no gradients given");
  if (d_out < 1 || d_in < 1) {
    return absl::InvalidArgumentError(absl::StrCat("bad gradient shape ", d_out, "x", d_in));
  }
  for (size_t k = 0; k < grads.size(); ++k) {
    if (grads[k] == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("gradient ", k, " is null"));
    if (const int64_t i = FirstNonFinite(grads[k], d_out * d_in); i >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gradient ", k, " element ", i, " is not finite"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SecondMomentEma> SecondMomentEma::Create(int64_t n, double decay) {
  if (n < 1) return absl::InvalidArgumentError(absl::StrCat("dimension ", n, " < 1"));
  if (!(decay >= 0.0 && decay < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("decay ", decay, " is not in [0, 1)"));
  }
  return SecondMomentEma(n, decay);
}

absl::Status SecondMomentEma::UpdateInputSide(absl::Span<const float* const> grads, int64_t d_out,
                                              int64_t d_in) {
  if (auto s = CheckGradients(grads, d_out, d_in); !s.ok()) return s;
  if (d_in != n_) {
    return absl::InvalidArgumentError(
        absl::StrCat("input side of dimension ", n_, " given a gradient with d_in = ", d_in));
  }
  const double weight = 1.0 / (static_cast<double>(d_out) * static_cast<double>(grads.size()));
  bool first = true;
  for (const float* g : grads) {
    for (int64_t r = 0; r < d_out; r += kWidenedRows) {
      const int64_t b = std::min(kWidenedRows, d_out - r);
      // The block's rows widened: a b x n row-major matrix B; M += w B^T B.
      widened_.resize(static_cast<size_t>(b * n_));
      std::copy(g + r * d_in, g + (r + b) * d_in, widened_.begin());
      AccumulateGram(/*rows_are_samples=*/true, b, weight, first);
      first = false;
    }
  }
  FinishUpdate();
  return absl::OkStatus();
}

absl::Status SecondMomentEma::UpdateOutputSide(absl::Span<const float* const> grads, int64_t d_out,
                                               int64_t d_in) {
  if (auto s = CheckGradients(grads, d_out, d_in); !s.ok()) return s;
  if (d_out != n_) {
    return absl::InvalidArgumentError(
        absl::StrCat("output side of dimension ", n_, " given a gradient with d_out = ", d_out));
  }
  const double weight = 1.0 / (static_cast<double>(d_in) * static_cast<double>(grads.size()));
  bool first = true;
  for (const float* g : grads) {
    for (int64_t c = 0; c < d_in; c += kWidenedRows) {
      const int64_t b = std::min(kWidenedRows, d_in - c);
      // The block's columns widened: an n x b row-major matrix B; M += w B B^T.
      widened_.resize(static_cast<size_t>(n_ * b));
      for (int64_t i = 0; i < n_; ++i) {
        std::copy(g + i * d_in + c, g + i * d_in + c + b, widened_.begin() + i * b);
      }
      AccumulateGram(/*rows_are_samples=*/false, b, weight, first);
      first = false;
    }
  }
  FinishUpdate();
  return absl::OkStatus();
}

void SecondMomentEma::AccumulateGram(bool rows_are_samples, int64_t b, double weight, bool first) {
  // value_ (column-major, only its lower triangle written here; Eigen's
  // column-major lower triangle is CBLAS row-major's upper one) becomes
  // beta * value_ + (1 - decay) * weight * (sum of the block Grams), where
  // the first block of an update scales the old average by decay (or drops
  // it on the first update ever) and later blocks accumulate.
  const double keep = num_updates_ == 0 ? 0.0 : decay_;
  const double alpha = (num_updates_ == 0 ? 1.0 : 1.0 - decay_) * weight;
  const double beta = first ? keep : 1.0;
  const int n = static_cast<int>(n_);
  const int k = static_cast<int>(b);
  if (rows_are_samples) {
    // widened_: b x n row-major; value += alpha * B^T B.
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasTrans, n, k, alpha, widened_.data(), n, beta,
                value_.data(), n);
  } else {
    // widened_: n x b row-major; value += alpha * B B^T.
    cblas_dsyrk(CblasRowMajor, CblasUpper, CblasNoTrans, n, k, alpha, widened_.data(), k, beta,
                value_.data(), n);
  }
}

void SecondMomentEma::FinishUpdate() {
  // Mirror the triangle written by dsyrk (value_'s lower, column-major).
  for (int64_t j = 1; j < n_; ++j) {
    for (int64_t i = 0; i < j; ++i) value_(i, j) = value_(j, i);
  }
  ++num_updates_;
}

absl::Status SecondMomentEma::UpdateFromMatrix(const Eigen::Ref<const Eigen::MatrixXd>& x) {
  if (x.rows() != n_ || x.cols() != n_) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected a ", n_, "x", n_, " matrix, got ", x.rows(), "x", x.cols()));
  }
  if (!x.allFinite()) return absl::InvalidArgumentError("matrix has non-finite elements");
  const double scale = x.cwiseAbs().maxCoeff();
  if ((x - x.transpose()).cwiseAbs().maxCoeff() > 1e-12 * scale) {
    return absl::InvalidArgumentError("matrix is not symmetric");
  }
  Fold(0.5 * (x + x.transpose()));
  return absl::OkStatus();
}

void SecondMomentEma::Fold(const Eigen::MatrixXd& sample) {
  if (num_updates_ == 0) {
    value_ = sample;
  } else {
    value_ = decay_ * value_ + (1.0 - decay_) * sample;
  }
  ++num_updates_;
}

}  // namespace gift::transform
