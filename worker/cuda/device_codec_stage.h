// The push-pull engine's stage (worker/engine/tensor_codec_stage.h) for a tensor
// whose gradient lives in CUDA device memory (TensorStep::device): the
// transform and the codec run on the GPU, on a CUDA stream the stage owns,
// and only the encoded bytes cross to the host.
//
// Which path runs, and why: the staging path, always. The transport (UCX) is
// given host send buffers: Debian's UCX, the one the project links, ships no
// CUDA transport module (its ucx/ modules are cma, ib and rdmacm), and the
// UCX transport maps host spans only (RegisterMemory: ucp_mem_map without a
// memory type), so device memory is never handed to UCX; detecting a
// CUDA-capable UCX (ucp_context_query's memory types) is not built. Per step
// and chunk, everything on the one stream, so stream order is the order
// below:
//
//   Prepare:      T(G) on the stream into the stage's FP32 device buffer
//                 (TensorBasisCuda::Forward, cuBLAS), then the rows'
//                 rotation when T is a RotatedTransform (RowRotationCuda,
//                 in place, after a device copy of G for a rotated direct
//                 tensor); direct codecs without rotation encode from the
//                 training process's tensor itself (no copy).
//   EncodeChunk k: EncodeCudaAsync of the chunk into the stage's device
//                 mirror of the engine's send arena (same offsets), unless
//                 it was enqueued ahead (below); then one device-to-host copy
//                 of its codes and scales into the arena, page-locked
//                 (cudaHostRegister, once per arena, in AttachSendBuffer),
//                 and of its non-finite check (EncodeCheck, slot k) into a
//                 page-locked array; event k; then the encodes of chunks
//                 k + 1 .. k + encode_ahead, so that they run while chunk
//                 k's copy completes and the engine sends it. EncodeChunk k
//                 waits for event k only, then reads check k: non-finite
//                 input fails chunk k's call (EncodeCuda's InvalidArgument),
//                 whatever the checks of chunks encoded ahead say.
//   DecodeChunk k: the result's codes and scales memcpy'd into one of
//                 `result_staging` page-locked staging buffers (round robin;
//                 a buffer is reused once the event recorded after its copy
//                 completed), an asynchronous host-to-device copy from it,
//                 then DecodeCudaAsync into the FP32 device sum at the
//                 chunk's offset (stream order: after the copy). The call
//                 returns without waiting; the engine's result slot is read
//                 only during the call (its std::vector may be reallocated
//                 by TensorBuffers::GrowResult, so it is never registered).
//                 Without page-locked memory (a failed cudaHostAlloc: logged
//                 once) the copy is from the slot itself, which CUDA makes
//                 synchronous for pageable memory.
//   FinishDecode: the inverse rotation, then the inverse transform, on the
//                 device, in place.
//   WriteResult:  a device-to-device copy into the training process's
//                 tensor, and the stream synchronized before it returns
//                 (so the step's reply follows the data). CUDA errors of
//                 the asynchronous decodes surface here at the latest.
//
// Encoding ahead: the engine hands over chunk k + 1 only after chunk k's
// call returned, so the stage predicts it: within one attached arena the
// engine asks for the same chunks in the same order every step, and
// EncodeSchedule (encode_schedule.h) predicts chunk j from the previous
// step's call j and checks the prediction against the call when it comes
// (a differing call is encoded then; nothing is predicted in the first step
// on an arena). An encode ahead writes only the stage's own device memory
// (the mirror, check j); the arena is written only by the copy of the chunk
// asked for. It reads the prepared tensor: for a direct codec the training
// process's tensor, which the worker keeps registered and mapped for as long
// as it runs steps on it, so when a step fails after chunk k, the up to
// `encode_ahead` encodes still queued read valid memory, and their results
// are dropped at the next Prepare.
//
// Stream priority: the stage's stream is created with the least priority
// the device reports (cudaDeviceGetStreamPriorityRange), unless
// DeviceCodecStageOptions::stream_priority names another in the range. Why:
// the training process's backward is on the step's critical path and the
// worker's encodes and decodes are not (they only have to be done before
// the network needs them), and a GPU starts pending work of a
// higher-priority stream first, so where priorities apply the worker should
// be the one that waits. Where they apply is narrow (docs/gpu.md, "Sharing
// the GPU"): priorities order streams of one CUDA context, and the daemon
// is a process of its own, so between it and a training process on the
// same GPU the GPU time-slices contexts and priorities do nothing (unless
// both run in one context, the in-process mode, not built). And on current
// NVIDIA GPUs the least priority is also the default (0, greater ones down
// to -5), so even in one context the worker yields only to streams created
// with a greater priority (e.g. torch.cuda.Stream(priority=-1)).
//
// Not used: ForwardEncoderCuda (the fused forward + encode) writes one
// tensor-wide block layout, while the engine sends each chunk as a payload
// of its own shape (its own blocks and scales); a per-chunk fused encode is
// not built. Transforms other than the identity and a TensorBasis
// (tensor_basis_transform.h), each optionally rotated (rotated_transform.h),
// are refused (Unimplemented).
//
// Error feedback is NOT kept for device tensors: a stage created with
// options.error_feedback runs without it, logs "device_error_feedback_refused"
// (warning) and counts it in error_feedback_refusals(); error_feedback()
// then answers false. (A device residual needs a device decode of the
// stage's own payload per chunk and the basis remap of SwitchBasis on the
// device; not built.)
//
// Ownership and thread safety: as TensorCodecStage (one thread). The stage
// owns its stream, events, device buffers, check arrays and result staging;
// it does not own the gradient or the send arena (which it unpins when
// destroyed or re-attached, so the arena must outlive the stage's
// attachment). Between calls, work may still be queued on the stream:
// encodes ahead (writing the stage's memory only) and decodes; the stage
// waits for the work that uses a buffer before it frees, grows or
// re-attaches it, and WriteResult returns only once everything queued is
// done.
#ifndef GIFT_WORKER_CUDA_DEVICE_CODEC_STAGE_H_
#define GIFT_WORKER_CUDA_DEVICE_CODEC_STAGE_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/codec/codec_cuda.h"
#include "kernels/transform/rotation_cuda.h"
#include "kernels/transform/transform_cuda.h"
#include "worker/cuda/encode_schedule.h"
#include "worker/engine/tensor_codec_stage.h"

namespace gift::worker {

struct DeviceCodecStageOptions {
  // cuBLAS products of the transform (transform_cuda.h).
  kernels::TransformMath math = kernels::TransformMath::kFp32;
  // The stream's priority (lower numbers: greater priority); none: the
  // least the device has (see above). Outside the device's range:
  // InvalidArgument.
  std::optional<int> stream_priority;
  // Chunks encoded ahead of the one EncodeChunk asks for (0: none).
  size_t encode_ahead = 2;
  // Page-locked staging buffers of result chunks (at least 1).
  size_t result_staging = 4;
};

class DeviceCodecStage final : public TensorCodecStage {
 public:
  // FailedPrecondition without a CUDA device; Unimplemented for a transform
  // other than the identity or a TensorBasis (either optionally rotated);
  // InvalidArgument for a bad
  // spec, a stream priority out of range or no result staging; Internal for
  // a CUDA failure.
  static absl::StatusOr<std::unique_ptr<DeviceCodecStage>> Create(
      std::shared_ptr<const transform::GradientTransform> transform,
      const transform::EncoderPipelineOptions& options, const DeviceCodecStageOptions& device = {});
  ~DeviceCodecStage() override;

  // The engine's factory (PushPullEngineOptions::device_stages).
  static DeviceStageFactory Factory(const DeviceCodecStageOptions& device = {});
  // Stages of this process created with error feedback requested, which
  // run without it (see above). Any thread.
  static uint64_t error_feedback_refusals();

  absl::Status AttachSendBuffer(absl::Span<uint8_t> arena) override;
  absl::Status UseTransform(std::shared_ptr<const transform::GradientTransform> t) override;
  absl::StatusOr<const float*> Prepare(const float* gradient) override;
  // Prepare transforms the whole tensor on the device; nothing is left.
  absl::Status PrepareRange(uint64_t, uint64_t) override { return absl::OkStatus(); }
  absl::Status EncodeChunk(uint64_t offset, const codec::MutableEncodedView& out,
                           const codec::RngKey& key) override;
  absl::Status DecodeChunk(const codec::EncodedView& chunk, uint64_t offset) override;
  absl::Status FinishDecode() override;
  absl::Status WriteResult(float* gradient) override;
  void CommitResidual() override {}
  void ResetResidual() override {}
  bool error_feedback() const override { return false; }
  uint64_t error_feedback_bytes() const override { return 0; }

  // The stage's stream (its priority: cudaStreamGetPriority).
  cudaStream_t stream() const { return stream_; }
  // Encodes enqueued ahead of their call, and calls they served (the rest
  // were predicted wrongly, or dropped by a failed step). Since creation.
  uint64_t encodes_ahead() const { return encodes_ahead_; }
  uint64_t encodes_ahead_used() const { return encodes_ahead_used_; }

 private:
  DeviceCodecStage(int64_t rows, int64_t cols, const DeviceCodecStageOptions& device)
      : rows_(rows), cols_(cols), device_(device), schedule_(device.encode_ahead) {}
  void ReleaseArena();
  // The device mirror of `out` (a view into the attached arena).
  absl::StatusOr<codec::MutableEncodedView> Mirrored(const ChunkEncode& call) const;
  // Events and checks for slots [0, n).
  absl::Status EnsureSlots(size_t n);
  // Copies a result chunk's bytes to result_ on the stream.
  absl::Status StageResult(const codec::EncodedView& chunk, uint64_t code_bytes,
                           uint64_t scale_bytes);

  // A page-locked buffer a result chunk is staged in.
  struct Staging {
    uint8_t* host = nullptr;  // cudaHostAlloc
    size_t bytes = 0;
    cudaEvent_t copied = nullptr;  // after its host-to-device copy
    bool pending = false;          // copied recorded, not waited for
  };

  const int64_t rows_, cols_;
  const DeviceCodecStageOptions device_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<const transform::GradientTransform> transform_;
  std::optional<kernels::TensorBasisCuda> basis_;  // none: the identity
  std::optional<kernels::RowRotationCuda> rotation_;  // after basis_, when the transform rotates
  float* work_ = nullptr;                          // device: T(G), then the sum, then the average
  const float* prepared_ = nullptr;                // device: what the step's chunks encode from
  uint8_t* arena_ = nullptr;                       // host: the attached send arena
  size_t arena_bytes_ = 0;
  bool arena_pinned_ = false;
  uint8_t* device_arena_ = nullptr;  // device: its mirror
  uint8_t* result_ = nullptr;        // device: one result chunk's codes + scales
  size_t result_bytes_ = 0;
  EncodeSchedule schedule_;
  size_t slots_ = 0;                               // of each of the three below
  std::vector<cudaEvent_t> events_;                // by slot: after the chunk's copies
  kernels::EncodeCheck* device_checks_ = nullptr;  // by slot
  kernels::EncodeCheck* host_checks_ = nullptr;    // page-locked copies of them
  std::vector<Staging> staging_;                   // device_.result_staging
  size_t next_staging_ = 0;
  bool staging_pinned_ = true;  // false once cudaHostAlloc failed
  uint64_t encodes_ahead_ = 0, encodes_ahead_used_ = 0;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_CUDA_DEVICE_CODEC_STAGE_H_
