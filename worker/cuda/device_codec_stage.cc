#include "worker/cuda/device_codec_stage.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec.h"
#include "common/transform/identity_transform.h"
#include "common/transform/rotated_transform.h"
#include "common/transform/tensor_basis_transform.h"
#include "kernels/codec/codec_cuda.h"
#include "kernels/cuda_status.h"

namespace gift::worker {
namespace {

using kernels::CudaStatus;

std::atomic<uint64_t> error_feedback_refusals_{0};

}  // namespace

uint64_t DeviceCodecStage::error_feedback_refusals() {
  return error_feedback_refusals_.load(std::memory_order_relaxed);
}

DeviceStageFactory DeviceCodecStage::Factory(const DeviceCodecStageOptions& device) {
  return [device](std::shared_ptr<const transform::GradientTransform> transform,
                  const transform::EncoderPipelineOptions& options)
             -> absl::StatusOr<std::unique_ptr<TensorCodecStage>> {
    GIFT_ASSIGN_OR_RETURN(std::unique_ptr<DeviceCodecStage> stage,
                          Create(std::move(transform), options, device));
    return std::unique_ptr<TensorCodecStage>(std::move(stage));
  };
}

absl::StatusOr<std::unique_ptr<DeviceCodecStage>> DeviceCodecStage::Create(
    std::shared_ptr<const transform::GradientTransform> transform,
    const transform::EncoderPipelineOptions& options, const DeviceCodecStageOptions& device) {
  if (transform == nullptr) return absl::InvalidArgumentError("null transform");
  GIFT_RETURN_IF_ERROR(codec::Validate(options.spec));
  if (!kernels::CudaDeviceAvailable()) {
    return absl::FailedPreconditionError("a device tensor, and no CUDA device is available");
  }
  if (device.result_staging == 0) {
    return absl::InvalidArgumentError("a device stage needs at least one result staging buffer");
  }
  int least = 0, greatest = 0;
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaDeviceGetStreamPriorityRange(&least, &greatest),
                                  "cudaDeviceGetStreamPriorityRange"));
  const int priority = device.stream_priority.value_or(least);
  if (priority > least || priority < greatest) {
    return absl::InvalidArgumentError(absl::StrCat("stream priority ", priority,
                                                   " is outside the device's range [", greatest,
                                                   ", ", least, "]"));
  }
  std::unique_ptr<DeviceCodecStage> stage(
      new DeviceCodecStage(transform->d_out(), transform->d_in(), device));
  GIFT_RETURN_IF_ERROR(
      CudaStatus(cudaStreamCreateWithPriority(&stage->stream_, cudaStreamNonBlocking, priority),
                 "cudaStreamCreate"));
  stage->staging_.resize(device.result_staging);
  for (Staging& s : stage->staging_) {
    GIFT_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&s.copied, cudaEventDisableTiming), "cudaEventCreate"));
  }
  void* work = nullptr;
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&work, sizeof(float) * stage->rows_ * stage->cols_),
                                  "cudaMalloc (sum)"));
  stage->work_ = static_cast<float*>(work);
  GIFT_RETURN_IF_ERROR(stage->UseTransform(std::move(transform)));
  if (options.error_feedback) {
    error_feedback_refusals_.fetch_add(1, std::memory_order_relaxed);
    logging::Log(logging::Level::kWarning, "device_error_feedback_refused",
                 {{"reason", "error feedback is not built for device tensors; running without"},
                  {"rows", static_cast<int64_t>(stage->rows_)},
                  {"cols", static_cast<int64_t>(stage->cols_)}});
  }
  return stage;
}

DeviceCodecStage::~DeviceCodecStage() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  ReleaseArena();
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
  if (device_checks_ != nullptr) cudaFree(device_checks_);
  if (host_checks_ != nullptr) cudaFreeHost(host_checks_);
  for (Staging& s : staging_) {
    if (s.host != nullptr) cudaFreeHost(s.host);
    if (s.copied != nullptr) cudaEventDestroy(s.copied);
  }
  basis_.reset();  // before the stream it uses
  if (result_ != nullptr) cudaFree(result_);
  if (work_ != nullptr) cudaFree(work_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void DeviceCodecStage::ReleaseArena() {
  if (arena_pinned_) cudaHostUnregister(arena_);
  if (device_arena_ != nullptr) cudaFree(device_arena_);
  arena_ = nullptr;
  arena_bytes_ = 0;
  arena_pinned_ = false;
  device_arena_ = nullptr;
}

absl::Status DeviceCodecStage::AttachSendBuffer(absl::Span<uint8_t> arena) {
  cudaStreamSynchronize(stream_);  // no copy into the old arena is pending
  ReleaseArena();
  schedule_.Forget();
  if (arena.empty()) return absl::OkStatus();
  void* mirror = nullptr;
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&mirror, arena.size()), "cudaMalloc (send mirror)"));
  device_arena_ = static_cast<uint8_t*>(mirror);
  arena_ = arena.data();
  arena_bytes_ = arena.size();
  // Page-locked so that the copies of the encoded chunks are DMA straight
  // into the arena; a failure (e.g. a locked-memory limit) is not an error,
  // the copies then go through the driver's staging buffer.
  arena_pinned_ = cudaHostRegister(arena_, arena_bytes_, cudaHostRegisterDefault) == cudaSuccess;
  if (!arena_pinned_) {
    cudaGetLastError();  // clear it
    logging::Log(logging::Level::kWarning, "device_send_buffer_not_pinned",
                 {{"bytes", static_cast<int64_t>(arena_bytes_)}});
  }
  return absl::OkStatus();
}

absl::Status DeviceCodecStage::UseTransform(std::shared_ptr<const transform::GradientTransform> t) {
  if (t == nullptr) return absl::InvalidArgumentError("null transform");
  if (t == transform_) return absl::OkStatus();
  if (t->d_out() != rows_ || t->d_in() != cols_) {
    return absl::InvalidArgumentError(absl::StrCat("transform is ", t->d_out(), "x", t->d_in(),
                                                   ", tensor is ", rows_, "x", cols_));
  }
  // The old basis may still be in use by queued work (a failed step's
  // inverse, encodes ahead of the prepared tensor).
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  // A rotation after the transform (the policy's rotation_block) runs as
  // its own kernel after the inner transform's forward and before its
  // inverse.
  const transform::GradientTransform* inner = t.get();
  std::optional<kernels::RowRotationCuda> rotation;
  if (const auto* r = dynamic_cast<const transform::RotatedTransform*>(t.get())) {
    GIFT_ASSIGN_OR_RETURN(kernels::RowRotationCuda device_rotation,
                          kernels::RowRotationCuda::Create(r->rotation(), stream_));
    rotation.emplace(std::move(device_rotation));
    inner = &r->inner();
  }
  if (dynamic_cast<const transform::IdentityTransform*>(inner) != nullptr) {
    basis_.reset();
  } else if (const auto* b = dynamic_cast<const transform::TensorBasisTransform*>(inner)) {
    GIFT_ASSIGN_OR_RETURN(kernels::TensorBasisCuda basis,
                          kernels::TensorBasisCuda::Create(b->basis(), stream_, device_.math));
    basis_.emplace(std::move(basis));
  } else {
    return absl::UnimplementedError(
        absl::StrCat("transform ", t->name(), " has no device implementation"));
  }
  rotation_ = std::move(rotation);
  transform_ = std::move(t);
  return absl::OkStatus();
}

absl::StatusOr<const float*> DeviceCodecStage::Prepare(const float* gradient) {
  if (gradient == nullptr) return absl::InvalidArgumentError("null gradient");
  schedule_.StartStep();
  prepared_ = nullptr;
  if (basis_.has_value()) {
    GIFT_RETURN_IF_ERROR(basis_->Forward(gradient, rows_, cols_, work_));
    prepared_ = work_;
  } else if (rotation_.has_value()) {
    GIFT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(work_, gradient, sizeof(float) * rows_ * cols_,
                                                    cudaMemcpyDeviceToDevice, stream_),
                                    "copy of the gradient to rotate"));
    prepared_ = work_;
  } else {
    prepared_ = gradient;
  }
  if (rotation_.has_value()) GIFT_RETURN_IF_ERROR(rotation_->Forward(work_, rows_));
  return nullptr;  // no host copy of the prepared tensor
}

absl::StatusOr<codec::MutableEncodedView> DeviceCodecStage::Mirrored(
    const ChunkEncode& call) const {
  auto mirrored = [&](uint8_t* p, uint64_t bytes) -> absl::StatusOr<uint8_t*> {
    if (bytes == 0) return p == nullptr ? nullptr : device_arena_ + (p - arena_);
    if (p < arena_ || p + bytes > arena_ + arena_bytes_) {
      return absl::InvalidArgumentError("encoded view outside the attached send buffer");
    }
    return device_arena_ + (p - arena_);
  };
  codec::MutableEncodedView on_device = call.view;
  GIFT_ASSIGN_OR_RETURN(on_device.codes, mirrored(call.view.codes, call.code_bytes));
  GIFT_ASSIGN_OR_RETURN(on_device.scales, mirrored(call.view.scales, call.scale_bytes));
  return on_device;
}

absl::Status DeviceCodecStage::EnsureSlots(size_t n) {
  if (n <= slots_) return absl::OkStatus();
  const size_t want = std::max(n, 2 * slots_);
  constexpr size_t kCheck = sizeof(kernels::EncodeCheck);
  // Encodes ahead may still write the old device checks: let them finish,
  // and keep what they wrote. No copy into the host checks is pending
  // between calls (each EncodeChunk waits for its own).
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "stream"));
  void* device = nullptr;
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&device, want * kCheck), "cudaMalloc (checks)"));
  void* host = nullptr;
  cudaError_t e = cudaHostAlloc(&host, want * kCheck, cudaHostAllocDefault);
  if (e == cudaSuccess && slots_ > 0) {
    e = cudaMemcpyAsync(device, device_checks_, slots_ * kCheck, cudaMemcpyDeviceToDevice, stream_);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  }
  if (e != cudaSuccess) {
    cudaFree(device);
    if (host != nullptr) cudaFreeHost(host);
    return CudaStatus(e, "the check slots");
  }
  if (device_checks_ != nullptr) cudaFree(device_checks_);
  if (host_checks_ != nullptr) cudaFreeHost(host_checks_);
  device_checks_ = static_cast<kernels::EncodeCheck*>(device);
  host_checks_ = static_cast<kernels::EncodeCheck*>(host);
  while (events_.size() < want) {
    cudaEvent_t event = nullptr;
    GIFT_RETURN_IF_ERROR(
        CudaStatus(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate"));
    events_.push_back(event);
  }
  slots_ = want;
  return absl::OkStatus();
}

absl::Status DeviceCodecStage::EncodeChunk(uint64_t offset, const codec::MutableEncodedView& out,
                                           const codec::RngKey& key) {
  if (prepared_ == nullptr) return absl::FailedPreconditionError("EncodeChunk before Prepare");
  const uint64_t total = static_cast<uint64_t>(rows_) * static_cast<uint64_t>(cols_);
  if (offset > total || out.rows * out.cols > total - offset) {
    return absl::InvalidArgumentError("chunk runs past the tensor");
  }
  GIFT_ASSIGN_OR_RETURN(codec::EncodedLayout layout,
                        codec::ComputeLayout(out.spec, out.rows, out.cols));
  const ChunkEncode call{offset, out, key, layout.code_bytes, layout.scale_bytes};
  // The view points into the attached arena; the device mirror has the same
  // offsets.
  GIFT_ASSIGN_OR_RETURN(const codec::MutableEncodedView on_device, Mirrored(call));
  const EncodeSchedule::Plan plan = schedule_.Next(call);
  GIFT_RETURN_IF_ERROR(
      EnsureSlots(plan.ahead.empty() ? plan.slot + 1 : plan.ahead.back().slot + 1));
  const size_t k = plan.slot;
  if (plan.encode) {
    GIFT_RETURN_IF_ERROR(
        kernels::EncodeCudaAsync(prepared_ + offset, on_device, key, stream_, device_checks_ + k));
  } else {
    ++encodes_ahead_used_;
  }
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(out.codes, on_device.codes, layout.code_bytes,
                                                  cudaMemcpyDeviceToHost, stream_),
                                  "copy of codes"));
  if (layout.scale_bytes > 0) {
    GIFT_RETURN_IF_ERROR(
        CudaStatus(cudaMemcpyAsync(out.scales, on_device.scales, layout.scale_bytes,
                                   cudaMemcpyDeviceToHost, stream_),
                   "copy of scales"));
  }
  GIFT_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(host_checks_ + k, device_checks_ + k, sizeof(kernels::EncodeCheck),
                                 cudaMemcpyDeviceToHost, stream_),
                 "copy of the check"));
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(events_[k], stream_), "cudaEventRecord"));
  // The next chunks' encodes run while this one's copy completes and the
  // engine sends it. A failure to enqueue one is not this chunk's: that
  // chunk is then encoded when its call comes.
  for (const EncodeSchedule::Ahead& next : plan.ahead) {
    auto mirror = Mirrored(next.call);
    absl::Status s = mirror.status();
    if (s.ok()) {
      s = kernels::EncodeCudaAsync(prepared_ + next.call.offset, *mirror, next.call.key, stream_,
                                   device_checks_ + next.slot);
    }
    if (!s.ok()) {
      schedule_.NotEnqueued(next.slot);
      break;
    }
    ++encodes_ahead_;
  }
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(events_[k]), "chunk copy"));
  return kernels::EncodeCheckStatus(host_checks_[k], out.rows, out.cols);
}

absl::Status DeviceCodecStage::StageResult(const codec::EncodedView& chunk, uint64_t code_bytes,
                                           uint64_t scale_bytes) {
  const size_t bytes = code_bytes + scale_bytes;
  Staging& s = staging_[next_staging_];
  next_staging_ = (next_staging_ + 1) % staging_.size();
  if (s.pending) {  // its previous copy, `result_staging` results ago
    GIFT_RETURN_IF_ERROR(CudaStatus(cudaEventSynchronize(s.copied), "result staging"));
    s.pending = false;
  }
  if (staging_pinned_ && s.bytes < bytes) {
    if (s.host != nullptr) cudaFreeHost(s.host);
    s.host = nullptr;
    s.bytes = 0;
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess) {
      s.host = static_cast<uint8_t*>(p);
      s.bytes = bytes;
    } else {
      cudaGetLastError();  // clear it
      staging_pinned_ = false;
      logging::Log(logging::Level::kWarning, "device_result_staging_not_pinned",
                   {{"bytes", static_cast<int64_t>(bytes)}});
    }
  }
  const uint8_t* codes = chunk.codes;
  const uint8_t* scales = chunk.scales;
  if (staging_pinned_) {
    std::memcpy(s.host, chunk.codes, code_bytes);
    if (scale_bytes > 0) std::memcpy(s.host + code_bytes, chunk.scales, scale_bytes);
    codes = s.host;
    scales = s.host + code_bytes;
  }
  GIFT_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(result_, codes, code_bytes, cudaMemcpyHostToDevice, stream_),
                 "copy of result codes"));
  if (scale_bytes > 0) {
    GIFT_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(result_ + code_bytes, scales, scale_bytes, cudaMemcpyHostToDevice, stream_),
        "copy of result scales"));
  }
  if (staging_pinned_) {
    GIFT_RETURN_IF_ERROR(CudaStatus(cudaEventRecord(s.copied, stream_), "cudaEventRecord"));
    s.pending = true;
  }
  return absl::OkStatus();
}

absl::Status DeviceCodecStage::DecodeChunk(const codec::EncodedView& chunk, uint64_t offset) {
  const uint64_t total = static_cast<uint64_t>(rows_) * static_cast<uint64_t>(cols_);
  if (offset > total || chunk.rows * chunk.cols > total - offset) {
    return absl::InvalidArgumentError("chunk runs past the tensor");
  }
  GIFT_ASSIGN_OR_RETURN(codec::EncodedLayout layout,
                        codec::ComputeLayout(chunk.spec, chunk.rows, chunk.cols));
  const size_t bytes = layout.code_bytes + layout.scale_bytes;
  if (bytes > result_bytes_) {
    GIFT_RETURN_IF_ERROR(CudaStatus(cudaStreamSynchronize(stream_), "stream"));
    if (result_ != nullptr) cudaFree(result_);
    result_ = nullptr;
    result_bytes_ = 0;
    void* p = nullptr;
    GIFT_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&p, bytes), "cudaMalloc (result)"));
    result_ = static_cast<uint8_t*>(p);
    result_bytes_ = bytes;
  }
  if (layout.num_elements > 0) {
    if (chunk.codes == nullptr || (layout.scale_bytes > 0 && chunk.scales == nullptr)) {
      return absl::InvalidArgumentError("result chunk without its codes or scales");
    }
    GIFT_RETURN_IF_ERROR(StageResult(chunk, layout.code_bytes, layout.scale_bytes));
  }
  codec::EncodedView on_device = chunk;
  on_device.codes = result_;
  on_device.scales = layout.scale_bytes > 0 ? result_ + layout.code_bytes : nullptr;
  // One stream: the decode runs after the copy into result_, and the next
  // result's copy into result_ after this decode.
  return kernels::DecodeCudaAsync(on_device, work_ + offset, /*accumulate=*/false, stream_);
}

absl::Status DeviceCodecStage::FinishDecode() {
  if (rotation_.has_value()) GIFT_RETURN_IF_ERROR(rotation_->Inverse(work_, rows_));
  if (!basis_.has_value()) return absl::OkStatus();
  return basis_->Inverse(work_, rows_, cols_, work_);
}

absl::Status DeviceCodecStage::WriteResult(float* gradient) {
  if (gradient == nullptr) return absl::InvalidArgumentError("null gradient");
  GIFT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(gradient, work_, sizeof(float) * rows_ * cols_,
                                                  cudaMemcpyDeviceToDevice, stream_),
                                  "copy of the average"));
  return CudaStatus(cudaStreamSynchronize(stream_), "stream");
}

}  // namespace gift::worker
