#include "common/transform/second_moment_ema.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/base/finite.h"

namespace gift::transform {
namespace {

using RowMajorFloatMap =
    Eigen::Map<const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>;

// Rows (or columns) widened to double at a time.
constexpr int64_t kBlock = 64;

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
  Eigen::MatrixXd sample = Eigen::MatrixXd::Zero(n_, n_);
  for (const float* g : grads) {
    const RowMajorFloatMap map(g, d_out, d_in);
    for (int64_t r = 0; r < d_out; r += kBlock) {
      const int64_t b = std::min(kBlock, d_out - r);
      const Eigen::MatrixXd block = map.middleRows(r, b).cast<double>();
      sample.noalias() += block.transpose() * block;
    }
  }
  sample *= 1.0 / (static_cast<double>(d_out) * static_cast<double>(grads.size()));
  Fold(sample);
  return absl::OkStatus();
}

absl::Status SecondMomentEma::UpdateOutputSide(absl::Span<const float* const> grads, int64_t d_out,
                                               int64_t d_in) {
  if (auto s = CheckGradients(grads, d_out, d_in); !s.ok()) return s;
  if (d_out != n_) {
    return absl::InvalidArgumentError(
        absl::StrCat("output side of dimension ", n_, " given a gradient with d_out = ", d_out));
  }
  Eigen::MatrixXd sample = Eigen::MatrixXd::Zero(n_, n_);
  for (const float* g : grads) {
    const RowMajorFloatMap map(g, d_out, d_in);
    for (int64_t c = 0; c < d_in; c += kBlock) {
      const int64_t b = std::min(kBlock, d_in - c);
      const Eigen::MatrixXd block = map.middleCols(c, b).cast<double>();
      sample.noalias() += block * block.transpose();
    }
  }
  sample *= 1.0 / (static_cast<double>(d_in) * static_cast<double>(grads.size()));
  Fold(sample);
  return absl::OkStatus();
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
