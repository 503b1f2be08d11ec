#include "common/transform/encoder_pipeline.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/transform/identity_transform.h"

namespace gift::transform {
namespace {

bool IsIdentity(const GradientTransform& t) {
  return dynamic_cast<const IdentityTransform*>(&t) != nullptr;
}

}  // namespace

EncoderPipeline::EncoderPipeline(std::shared_ptr<const GradientTransform> transform,
                                 const EncoderPipelineOptions& options)
    : transform_(std::move(transform)), direct_(IsIdentity(*transform_)), options_(options) {
  if (options_.error_feedback) {
    residual_.assign(size(), 0.0f);
    pending_residual_.assign(size(), 0.0f);
  }
}

absl::StatusOr<EncoderPipeline> EncoderPipeline::Create(
    std::shared_ptr<const GradientTransform> transform, const EncoderPipelineOptions& options) {
  if (transform == nullptr) return absl::InvalidArgumentError("null transform");
  GIFT_RETURN_IF_ERROR(codec::Validate(options.spec));
  return EncoderPipeline(std::move(transform), options);
}

absl::StatusOr<const float*> EncoderPipeline::Prepare(const float* g, float* work) {
  prepared_ = nullptr;
  if (g == nullptr) return absl::InvalidArgumentError("null gradient");
  const int64_t d_out = transform_->d_out();
  if (direct_ && !options_.error_feedback) {
    g_ = g;
    prepared_ = const_cast<float*>(g);  // never written: every row is ready
    rows_ready_ = d_out;
    return g;
  }
  if (work == nullptr) return absl::InvalidArgumentError("null work buffer");
  int64_t ready = d_out;
  if (direct_) {
    if (work != g) std::memcpy(work, g, sizeof(float) * size());
  } else {
    GIFT_ASSIGN_OR_RETURN(ready, transform_->BeginForward(g, work, &forward_state_));
  }
  g_ = g;
  prepared_ = work;
  rows_ready_ = 0;
  AddResidualRows(ready);
  return work;
}

void EncoderPipeline::AddResidualRows(int64_t row_end) {
  if (options_.error_feedback) {
    const int64_t d_in = transform_->d_in();
    for (int64_t i = rows_ready_ * d_in; i < row_end * d_in; ++i) prepared_[i] += residual_[i];
  }
  rows_ready_ = row_end;
}

absl::Status EncoderPipeline::PrepareRange(uint64_t offset, uint64_t n) {
  if (offset > static_cast<uint64_t>(size()) || n > static_cast<uint64_t>(size()) - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk [", offset, ", ", offset + n, ") runs past a tensor of ", size(), " elements"));
  }
  const int64_t d_out = transform_->d_out(), d_in = transform_->d_in();
  const int64_t needed = d_in == 0 ? 0 : static_cast<int64_t>((offset + n + d_in - 1) / d_in);
  if (prepared_ == nullptr) {
    return absl::FailedPreconditionError("encoding without an open Prepare (or after SwitchBasis)");
  }
  if (needed <= rows_ready_) return absl::OkStatus();
  // Whole blocks from rows_ready_ (itself on a block bound) on, so that every
  // row has the whole-tensor bits.
  const int64_t block = std::max<int64_t>(1, transform_->forward_row_block());
  const int64_t end = std::min(d_out, (needed + block - 1) / block * block);
  if (absl::Status s = transform_->ForwardRows(*forward_state_, g_, rows_ready_, end, prepared_);
      !s.ok()) {
    prepared_ = nullptr;
    return s;
  }
  AddResidualRows(end);
  return absl::OkStatus();
}

absl::Status EncoderPipeline::EncodeChunk(const float* x, uint64_t offset,
                                          const codec::MutableEncodedView& out,
                                          const codec::RngKey& key) {
  if (x == nullptr) return absl::InvalidArgumentError("null input");
  const uint64_t n = out.rows * out.cols;
  GIFT_RETURN_IF_ERROR(PrepareRange(offset, n));
  GIFT_RETURN_IF_ERROR(codec::Encode(x + offset, out, key, options_.codec_options));
  if (options_.error_feedback) {
    // E = V - decode(Q(V)), from the bytes actually encoded.
    float* e = pending_residual_.data() + offset;
    GIFT_RETURN_IF_ERROR(codec::Decode(out, e, options_.codec_options));
    for (uint64_t i = 0; i < n; ++i) e[i] = x[offset + i] - e[i];
  }
  return absl::OkStatus();
}

void EncoderPipeline::CommitResidual() {
  if (options_.error_feedback) residual_.swap(pending_residual_);
}

absl::StatusOr<codec::EncodedTensor> EncoderPipeline::Encode(const float* g,
                                                             const codec::RngKey& key) {
  std::vector<float> work;
  if (!direct_ || options_.error_feedback) work.resize(size());
  GIFT_ASSIGN_OR_RETURN(const float* x, Prepare(g, work.data()));
  GIFT_ASSIGN_OR_RETURN(
      codec::EncodedTensor encoded,
      codec::EncodedTensor::Create(options_.spec, transform_->d_out(), transform_->d_in()));
  absl::Status encoded_status = EncodeChunk(x, 0, encoded.mutable_view(), key);
  prepared_ = nullptr;  // `work` ends here
  GIFT_RETURN_IF_ERROR(encoded_status);
  CommitResidual();
  return encoded;
}

absl::Status EncoderPipeline::DecodeChunk(const codec::EncodedView& chunk, uint64_t offset,
                                          float* sum) const {
  if (sum == nullptr) return absl::InvalidArgumentError("null output");
  const uint64_t n = chunk.rows * chunk.cols;
  if (offset > static_cast<uint64_t>(size()) || n > static_cast<uint64_t>(size()) - offset) {
    return absl::InvalidArgumentError(absl::StrCat(
        "chunk [", offset, ", ", offset + n, ") runs past a tensor of ", size(), " elements"));
  }
  return codec::Decode(chunk, sum + offset, options_.codec_options);
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
  GIFT_RETURN_IF_ERROR(DecodeChunk(reduced, 0, out));
  return DecodeSum(out, post_scale, out);
}

absl::Status EncoderPipeline::DecodeSum(const float* sum, float post_scale, float* out) const {
  if (sum == nullptr || out == nullptr) return absl::InvalidArgumentError("null buffer");
  if (!std::isfinite(post_scale)) {
    return absl::InvalidArgumentError(absl::StrCat("post_scale ", post_scale, " is not finite"));
  }
  const float* src = sum;
  if (post_scale != 1.0f) {
    for (int64_t i = 0; i < size(); ++i) out[i] = sum[i] * post_scale;
    src = out;
  }
  if (direct_) {
    if (src != out) std::memcpy(out, src, sizeof(float) * size());
    return absl::OkStatus();
  }
  return transform_->Inverse(src, transform_->d_out(), transform_->d_in(), out);
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
  direct_ = IsIdentity(*transform_);
  prepared_ = nullptr;
  forward_state_.reset();
  return absl::OkStatus();
}

void EncoderPipeline::ResetResidual() {
  if (options_.error_feedback) residual_.assign(size(), 0.0f);
}

}  // namespace gift::transform
