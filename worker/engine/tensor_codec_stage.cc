#include "worker/engine/tensor_codec_stage.h"

#include <cstring>
#include <utility>

#include "common/base/status_macros.h"

namespace gift::worker {

absl::StatusOr<std::unique_ptr<HostCodecStage>> HostCodecStage::Create(
    std::shared_ptr<const transform::GradientTransform> transform,
    const transform::EncoderPipelineOptions& options) {
  GIFT_ASSIGN_OR_RETURN(transform::EncoderPipeline pipeline,
                        transform::EncoderPipeline::Create(std::move(transform), options));
  return std::unique_ptr<HostCodecStage>(new HostCodecStage(std::move(pipeline)));
}

HostCodecStage::HostCodecStage(transform::EncoderPipeline pipeline)
    : pipeline_(std::move(pipeline)),
      work_(pipeline_.transform().d_out() * pipeline_.transform().d_in()) {}

absl::Status HostCodecStage::UseTransform(std::shared_ptr<const transform::GradientTransform> t) {
  if (pipeline_.shared_transform() == t) return absl::OkStatus();
  return pipeline_.SwitchBasis(std::move(t));
}

absl::StatusOr<const float*> HostCodecStage::Prepare(const float* gradient) {
  GIFT_ASSIGN_OR_RETURN(prepared_, pipeline_.Prepare(gradient, work_.data()));
  return prepared_;
}

absl::Status HostCodecStage::EncodeChunk(uint64_t offset, const codec::MutableEncodedView& out,
                                         const codec::RngKey& key) {
  if (prepared_ == nullptr) return absl::FailedPreconditionError("EncodeChunk before Prepare");
  return pipeline_.EncodeChunk(prepared_, offset, out, key);
}

absl::Status HostCodecStage::DecodeChunk(const codec::EncodedView& chunk, uint64_t offset) {
  return pipeline_.DecodeChunk(chunk, offset, work_.data());
}

absl::Status HostCodecStage::FinishDecode() { return pipeline_.FinishDecode(work_.data()); }

absl::Status HostCodecStage::WriteResult(float* gradient) {
  if (gradient == nullptr) return absl::InvalidArgumentError("null gradient");
  std::memcpy(gradient, work_.data(), sizeof(float) * work_.size());
  return absl::OkStatus();
}

}  // namespace gift::worker
