#include "worker/engine/tensor_buffers.h"

#include <utility>

#include "common/base/status_macros.h"
#include "common/codec/payload.h"
#include "common/policy/policy.h"
#include "common/transform/identity_transform.h"
#include "common/transform/rotated_transform.h"

namespace gift::worker {
namespace {

static_assert(policy::kMaxRotationBlock <= transform::RotatedTransform::kMaxBlock,
              "every rotation block the policy accepts must build a RotatedTransform");

constexpr size_t kPayloadAlignment = 64;  // each chunk's payload starts on a cache line

size_t AlignUp(size_t n) {
  return (n + kPayloadAlignment - 1) / kPayloadAlignment * kPayloadAlignment;
}

// Registers `buffer`; null when the transport cannot (it is an optimisation).
std::unique_ptr<transport::MemoryRegion> Register(transport::Transport* transport,
                                                  absl::Span<uint8_t> buffer) {
  if (transport == nullptr || buffer.empty()) return nullptr;
  auto region = transport->RegisterMemory(buffer);
  return region.ok() ? *std::move(region) : nullptr;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TensorBuffers>> TensorBuffers::Create(
    const TensorStep& t, absl::Span<const dataplane::ChunkShape> shapes,
    const codec::CodecSpec& spec, const transform::EncoderPipelineOptions& pipeline_options,
    transport::Transport* transport, TensorBuffers* previous,
    const DeviceStageFactory& device_stages) {
  if (shapes.size() != t.chunks.size()) {
    return absl::InvalidArgumentError("one shape per chunk expected");
  }
  GIFT_ASSIGN_OR_RETURN(transform::IdentityTransform identity,
                        transform::IdentityTransform::Create(static_cast<int64_t>(t.rows),
                                                             static_cast<int64_t>(t.cols)));
  std::unique_ptr<TensorBuffers> buffers(new TensorBuffers(
      std::make_shared<transform::IdentityTransform>(std::move(identity)), transport));
  transform::EncoderPipelineOptions options = pipeline_options;
  options.spec = spec;
  const bool keep_residual = previous != nullptr && previous->stage_ != nullptr &&
                             t.error_feedback && previous->error_feedback_ &&
                             previous->device_ == t.device && previous->rows_ == t.rows &&
                             previous->cols_ == t.cols;
  std::unique_ptr<TensorCodecStage> stage;
  if (keep_residual) {
    stage = std::move(previous->stage_);
    // The stage's current transforms, so that the same plan finds the same
    // objects (no residual remap through a new but equal transform).
    buffers->identity_ = previous->identity_;
    buffers->rotated_ = std::move(previous->rotated_);
  } else {
    GIFT_ASSIGN_OR_RETURN(std::shared_ptr<const transform::GradientTransform> transform,
                          buffers->StageTransform(t.transform, t.rotation_block));
    if (t.device) {
      if (device_stages == nullptr) {
        return absl::UnimplementedError(
            "a device tensor, and this worker was built without CUDA (no device stage)");
      }
      GIFT_ASSIGN_OR_RETURN(stage, device_stages(std::move(transform), options));
    } else {
      GIFT_ASSIGN_OR_RETURN(stage, HostCodecStage::Create(std::move(transform), options));
    }
  }
  buffers->rows_ = t.rows;
  buffers->cols_ = t.cols;
  buffers->device_ = t.device;
  buffers->error_feedback_ = t.error_feedback;

  std::vector<size_t> starts;
  size_t arena = 0;
  for (const dataplane::ChunkShape& shape : shapes) {
    const uint64_t dims[] = {shape.rows, shape.cols};
    GIFT_ASSIGN_OR_RETURN(uint64_t bytes, codec::PayloadSizeFor(spec, dims));
    starts.push_back(arena);
    arena += AlignUp(bytes);
  }
  buffers->send_arena_.resize(arena);
  buffers->chunks_.resize(t.chunks.size());
  for (size_t c = 0; c < t.chunks.size(); ++c) {
    ChunkSlot& slot = buffers->chunks_[c];
    slot.index = t.chunks[c].index;
    slot.offset = t.chunks[c].offset;
    slot.shape = shapes[c];
    const uint64_t dims[] = {shapes[c].rows, shapes[c].cols};
    slot.send =
        absl::MakeSpan(buffers->send_arena_.data() + starts[c], *codec::PayloadSizeFor(spec, dims));
  }
  buffers->send_region_ = Register(transport, absl::MakeSpan(buffers->send_arena_));
  GIFT_RETURN_IF_ERROR(stage->AttachSendBuffer(absl::MakeSpan(buffers->send_arena_)));
  buffers->stage_ = std::move(stage);
  return buffers;
}

TensorBuffers::~TensorBuffers() { ReleaseRegions(); }

bool TensorBuffers::Fits(const TensorStep& t) const {
  if (t.rows != rows_ || t.cols != cols_ || t.chunks.size() != chunks_.size() ||
      t.error_feedback != error_feedback_ || t.device != device_) {
    return false;
  }
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const ChunkRoute& route = t.chunks[c];
    const ChunkSlot& slot = chunks_[c];
    if (route.index != slot.index || route.offset != slot.offset ||
        route.num_elements != slot.shape.rows * slot.shape.cols) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::shared_ptr<const transform::GradientTransform>> TensorBuffers::StageTransform(
    const std::shared_ptr<const transform::GradientTransform>& t, uint32_t rotation_block) {
  const std::shared_ptr<const transform::GradientTransform>& inner = t != nullptr ? t : identity_;
  if (rotation_block == 0) return inner;
  if (rotated_ == nullptr || rotated_->shared_inner() != inner ||
      rotated_->rotation().block() != static_cast<int64_t>(rotation_block)) {
    GIFT_ASSIGN_OR_RETURN(rotated_, transform::RotatedTransform::Create(inner, rotation_block));
  }
  return rotated_;
}

absl::Status TensorBuffers::UseTransform(const TensorStep& t) {
  GIFT_ASSIGN_OR_RETURN(std::shared_ptr<const transform::GradientTransform> next,
                        StageTransform(t.transform, t.rotation_block));
  return stage_->UseTransform(std::move(next));
}

void TensorBuffers::GrowResult(ChunkSlot& slot, size_t bytes) {
  slot.result_region.reset();
  slot.result = std::vector<uint8_t>(bytes);  // fresh: the old capacity was too small
  slot.result_region = Register(transport_, absl::MakeSpan(slot.result));
}

absl::Status TensorBuffers::RenewSendArena() {
  std::vector<uint8_t> fresh(send_arena_.size());
  for (ChunkSlot& slot : chunks_) {
    const size_t at = static_cast<size_t>(slot.send.data() - send_arena_.data());
    slot.send = absl::MakeSpan(fresh.data() + at, slot.send.size());
  }
  // Moving a vector keeps its bytes where they are: the sends still read them.
  retired_arenas_.push_back({std::move(send_arena_), std::move(send_region_)});
  send_arena_ = std::move(fresh);
  send_region_ = Register(transport_, absl::MakeSpan(send_arena_));
  return stage_->AttachSendBuffer(absl::MakeSpan(send_arena_));
}

void TensorBuffers::FreeRetiredArenas() { retired_arenas_.clear(); }

void TensorBuffers::ReleaseRegions() {
  send_region_.reset();
  for (RetiredArena& retired : retired_arenas_) retired.region.reset();
  for (ChunkSlot& slot : chunks_) slot.result_region.reset();
}

}  // namespace gift::worker
