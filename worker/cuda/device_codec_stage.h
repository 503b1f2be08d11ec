// The push-pull engine's stage (worker/tensor_codec_stage.h) for a tensor
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
// and chunk:
//
//   Prepare:      T(G) on the stream into the stage's FP32 device buffer
//                 (TensorBasisCuda::Forward, cuBLAS); direct codecs encode
//                 from the training process's tensor itself (no copy).
//   EncodeChunk k: EncodeCuda of the chunk into the stage's device mirror of
//                 the engine's send arena (same offsets), then one
//                 device-to-host copy of its codes and scales into the
//                 arena, which is page-locked (cudaHostRegister, once per
//                 arena, in AttachSendBuffer); an event recorded after the
//                 copy; EncodeChunk k waits for event k only. (EncodeCuda
//                 synchronizes the stream itself, to report non-finite
//                 input, so chunk k's copy does not overlap chunk k+1's
//                 encode yet.)
//   DecodeChunk k: the result's codes and scales copied host-to-device (the
//                 result slots are pageable, so this copy is synchronous),
//                 DecodeCuda into the FP32 device sum at the chunk's offset.
//   FinishDecode: the inverse transform on the device, in place.
//   WriteResult:  a device-to-device copy into the training process's
//                 tensor, and the stream synchronized before it returns
//                 (so the step's reply follows the data).
//
// Not used: ForwardEncoderCuda (the fused forward + encode) writes one
// tensor-wide block layout, while the engine sends each chunk as a payload
// of its own shape (its own blocks and scales); a per-chunk fused encode is
// not built. Transforms other than the identity and a TensorBasis
// (tensor_basis_transform.h) are refused (Unimplemented).
//
// Error feedback is NOT kept for device tensors: a stage created with
// options.error_feedback runs without it, logs "device_error_feedback_refused"
// (warning) and counts it in error_feedback_refusals(); error_feedback()
// then answers false. (A device residual needs a device decode of the
// stage's own payload per chunk and the basis remap of SwitchBasis on the
// device; not built.)
//
// Ownership and thread safety: as TensorCodecStage (one thread). The stage
// owns its stream, events and device buffers; it does not own the gradient
// or the send arena (which it unpins when destroyed or re-attached, so the
// arena must outlive the stage's attachment).
#ifndef GIFT_WORKER_CUDA_DEVICE_CODEC_STAGE_H_
#define GIFT_WORKER_CUDA_DEVICE_CODEC_STAGE_H_

#include <cuda_runtime_api.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/transform/transform_cuda.h"
#include "worker/tensor_codec_stage.h"

namespace gift::worker {

struct DeviceCodecStageOptions {
  // cuBLAS products of the transform (transform_cuda.h).
  kernels::TransformMath math = kernels::TransformMath::kFp32;
};

class DeviceCodecStage final : public TensorCodecStage {
 public:
  // FailedPrecondition without a CUDA device; Unimplemented for a transform
  // other than the identity or a TensorBasis; InvalidArgument for a bad
  // spec; Internal for a CUDA failure.
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
  absl::Status EncodeChunk(uint64_t offset, const codec::MutableEncodedView& out,
                           const codec::RngKey& key) override;
  absl::Status DecodeChunk(const codec::EncodedView& chunk, uint64_t offset) override;
  absl::Status FinishDecode() override;
  absl::Status WriteResult(float* gradient) override;
  void CommitResidual() override {}
  void ResetResidual() override {}
  bool error_feedback() const override { return false; }
  uint64_t error_feedback_bytes() const override { return 0; }

 private:
  DeviceCodecStage(int64_t rows, int64_t cols, const DeviceCodecStageOptions& device)
      : rows_(rows), cols_(cols), device_(device) {}
  void ReleaseArena();

  const int64_t rows_, cols_;
  const DeviceCodecStageOptions device_;
  cudaStream_t stream_ = nullptr;
  std::shared_ptr<const transform::GradientTransform> transform_;
  std::optional<kernels::TensorBasisCuda> basis_;  // none: the identity
  float* work_ = nullptr;                          // device: T(G), then the sum, then the average
  const float* prepared_ = nullptr;                // device: what the step's chunks encode from
  uint8_t* arena_ = nullptr;                       // host: the attached send arena
  size_t arena_bytes_ = 0;
  bool arena_pinned_ = false;
  uint8_t* device_arena_ = nullptr;  // device: its mirror
  uint8_t* result_ = nullptr;        // device: one result chunk's codes + scales
  size_t result_bytes_ = 0;
  std::vector<cudaEvent_t> events_;  // one per chunk of a step, reused
  size_t encoded_ = 0;               // chunks encoded since Prepare
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_CUDA_DEVICE_CODEC_STAGE_H_
