#include "common/transform/encoder_pipeline.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gift::transform {

EncoderPipeline::EncoderPipeline(std::shared_ptr<const GradientTransform> transform,
                                 const EncoderPipelineOptions& options)
    : transform_(std::move(transform)), options_(options) {
  if (options_.error_feedback) residual_.assign(size(), 0.0f);
}

absl::StatusOr<EncoderPipeline> EncoderPipeline::Create(
    std::shared_ptr<const GradientTransform> transform, const EncoderPipelineOptions& options) {
  if (transform == nullptr) return absl::InvalidArgumentError("null transform");
  GIFT_RETURN_IF_ERROR(codec::Validate(options.spec));
  return EncoderPipeline(std::move(transform), options);
}

absl::StatusOr<codec::EncodedTensor> EncoderPipeline::Encode(const float* g,
                                                             const codec::RngKey& key) {
  if (g == nullptr) return absl::InvalidArgumentError("null gradient");
  const int64_t d_out = transform_->d_out(), d_in = transform_->d_in();
  std::vector<float> x(size());
  GIFT_RETURN_IF_ERROR(transform_->Forward(g, d_out, d_in, x.data()));
  if (options_.error_feedback) {
    for (int64_t i = 0; i < size(); ++i) x[i] += residual_[i];
  }
  GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor encoded,
                        codec::EncodedTensor::Create(options_.spec, d_out, d_in));
  GIFT_RETURN_IF_ERROR(
      codec::Encode(x.data(), encoded.mutable_view(), key, options_.codec_options));
  if (options_.error_feedback) {
    std::vector<float> decoded(size());
    GIFT_RETURN_IF_ERROR(codec::Decode(encoded.view(), decoded.data(), options_.codec_options));
    for (int64_t i = 0; i < size(); ++i) residual_[i] = x[i] - decoded[i];
  }
  return encoded;
}

absl::Status EncoderPipeline::Decode(const codec::EncodedView& reduced, float post_scale,
                                     float* out) const {
  if (out == nullptr) return absl::InvalidArgumentError("null output");
  if (reduced.rows != static_cast<uint64_t>(transform_->d_out()) ||
      reduced.cols != static_cast<uint64_t>(transform_->d_in())) {
    return absl::InvalidArgumentError(absl::StrCat("reduced tensor of shape ", reduced.rows, "x",
                                                   reduced.cols, " for a pipeline of shape ",
                                                   transform_->d_out(), "x", transform_->d_in()));
  }
  std::vector<float> sum(size());
  GIFT_RETURN_IF_ERROR(codec::Decode(reduced, sum.data(), options_.codec_options));
  return DecodeSum(sum.data(), post_scale, out);
}

absl::Status EncoderPipeline::DecodeSum(const float* sum, float post_scale, float* out) const {
  if (sum == nullptr || out == nullptr) return absl::InvalidArgumentError("null buffer");
  if (!std::isfinite(post_scale)) {
    return absl::InvalidArgumentError(absl::StrCat("post_scale ", post_scale, " is not finite"));
  }
  const int64_t d_out = transform_->d_out(), d_in = transform_->d_in();
  if (post_scale == 1.0f) return transform_->Inverse(sum, d_out, d_in, out);
  std::vector<float> scaled(sum, sum + size());
  for (float& v : scaled) v *= post_scale;
  return transform_->Inverse(scaled.data(), d_out, d_in, out);
}

absl::Status EncoderPipeline::SwitchBasis(std::shared_ptr<const GradientTransform> next) {
  if (next == nullptr) return absl::InvalidArgumentError("null transform");
  if (next->d_out() != transform_->d_out() || next->d_in() != transform_->d_in()) {
    return absl::InvalidArgumentError(absl::StrCat("new transform of shape ", next->d_out(), "x",
                                                   next->d_in(), " for a pipeline of shape ",
                                                   transform_->d_out(), "x", transform_->d_in()));
  }
  if (options_.error_feedback) {
    const int64_t d_out = transform_->d_out(), d_in = transform_->d_in();
    std::vector<float> remapped(size());
    GIFT_RETURN_IF_ERROR(transform_->Inverse(residual_.data(), d_out, d_in, remapped.data()));
    GIFT_RETURN_IF_ERROR(next->Forward(remapped.data(), d_out, d_in, remapped.data()));
    residual_ = std::move(remapped);
  }
  transform_ = std::move(next);
  return absl::OkStatus();
}

void EncoderPipeline::ResetResidual() {
  if (options_.error_feedback) residual_.assign(size(), 0.0f);
}

}  // namespace gift::transform
