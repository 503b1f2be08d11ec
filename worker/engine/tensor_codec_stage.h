// Where one tensor's transform and codec run in the push-pull engine: the
// chunked operations the engine calls per step, whatever memory the
// tensor's gradient lives in (Gloo-style: one interface, one implementation
// per place the data lives).
//
//   stage->AttachSendBuffer(arena);              // once per send arena
//   auto x = stage->Prepare(gradient);            // T(G) [+ E] of the step,
//   for (each chunk k) stage->EncodeChunk(offset_k, view_k, key_k);  // by rows
//   ...   stage->DecodeChunk(result_k, offset_k);  // as results arrive
//   stage->FinishDecode();                        // T^{-1} of the sum
//   ... the step succeeded: stage->WriteResult(gradient); CommitResidual();
//
// Implementations: HostCodecStage (below; host memory, the CPU codec and
// transform through transform::EncoderPipeline), and DeviceCodecStage
// (worker/cuda/device_codec_stage.h; CUDA device memory, built only with
// CUDA), which the engine uses for a TensorStep marked `device`.
//
// Contract: the views passed to EncodeChunk point into the buffer given to
// the last AttachSendBuffer; when EncodeChunk returns, the chunk's codes and
// scales are in host memory there (the engine sends them right away).
// DecodeChunk's view is host memory, read only during the call. The sum and
// the step's transformed gradient are the stage's own memory: nothing is
// written into the gradient before WriteResult, which the engine calls only
// once every tensor of the step decoded.
//
// Ownership and thread safety: owned by the tensor's TensorBuffers and used
// only by the engine's Run thread. A stage keeps no pointer to the gradient
// after a call returns.
#ifndef GIFT_WORKER_ENGINE_TENSOR_CODEC_STAGE_H_
#define GIFT_WORKER_ENGINE_TENSOR_CODEC_STAGE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/codec/encoded_tensor.h"
#include "common/transform/encoder_pipeline.h"
#include "common/transform/gradient_transform.h"

namespace gift::worker {

class TensorCodecStage {
 public:
  virtual ~TensorCodecStage() = default;

  // The host buffer the encoded chunks are delivered into (the engine's
  // send arena; it outlives its use here). Called once per arena, before
  // the first EncodeChunk into it.
  virtual absl::Status AttachSendBuffer(absl::Span<uint8_t> arena) = 0;

  // Uses `t` as the transform from the next Prepare on (same shape; the
  // error feedback residual is remapped when it has one).
  virtual absl::Status UseTransform(std::shared_ptr<const transform::GradientTransform> t) = 0;

  // Prepares the step's tensor to encode from `gradient` (rows x cols FP32,
  // in the stage's memory kind, unchanged until the last EncodeChunk).
  // Returns a host pointer to it when the stage has one (node-local
  // aggregation sums that), else null. A stage may write its rows only as
  // EncodeChunk or PrepareRange reach them (the host stage streams the
  // transform by rows), so a caller reading the pointer calls PrepareRange
  // first.
  virtual absl::StatusOr<const float*> Prepare(const float* gradient) = 0;

  // Makes elements [offset, offset + n) of Prepare's host tensor final.
  virtual absl::Status PrepareRange(uint64_t offset, uint64_t n) = 0;

  // Encodes out.rows x out.cols elements at `offset` of the prepared tensor
  // into `out` (host, in the attached send buffer), with `key` for
  // stochastic rounding. Error feedback: the chunk's residual is pending
  // until CommitResidual.
  virtual absl::Status EncodeChunk(uint64_t offset, const codec::MutableEncodedView& out,
                                   const codec::RngKey& key) = 0;

  // Decodes a result chunk (host, any spec) into the sum at `offset`; the
  // first chunk of a step at an offset overwrites, so no zeroing is needed.
  virtual absl::Status DecodeChunk(const codec::EncodedView& chunk, uint64_t offset) = 0;

  // The inverse transform of the sum, once every chunk is in.
  virtual absl::Status FinishDecode() = 0;

  // Writes the finished sum into `gradient` (the stage's memory kind) and
  // returns once it is there.
  virtual absl::Status WriteResult(float* gradient) = 0;

  virtual void CommitResidual() = 0;
  virtual void ResetResidual() = 0;
  // Whether error feedback runs (it may be refused: DeviceCodecStage).
  virtual bool error_feedback() const = 0;
  // FP32 bytes of the residual and its pending copy (0 without).
  virtual uint64_t error_feedback_bytes() const = 0;
};

// Builds the stage of a device tensor (TensorStep::device) for `transform`
// and `options` (the push codec in options.spec). Injected into the engine
// (PushPullEngineOptions::device_stages) only by builds with CUDA.
using DeviceStageFactory = std::function<absl::StatusOr<std::unique_ptr<TensorCodecStage>>(
    std::shared_ptr<const transform::GradientTransform> transform,
    const transform::EncoderPipelineOptions& options)>;

// The host stage: EncoderPipeline over a work buffer of the tensor's size
// (the transformed gradient, then the decoded sum the inverse runs on in
// place). The gradient is host memory.
class HostCodecStage final : public TensorCodecStage {
 public:
  // `options.spec` is the push codec. Errors: the pipeline's.
  static absl::StatusOr<std::unique_ptr<HostCodecStage>> Create(
      std::shared_ptr<const transform::GradientTransform> transform,
      const transform::EncoderPipelineOptions& options);

  absl::Status AttachSendBuffer(absl::Span<uint8_t>) override { return absl::OkStatus(); }
  absl::Status UseTransform(std::shared_ptr<const transform::GradientTransform> t) override;
  absl::StatusOr<const float*> Prepare(const float* gradient) override;
  absl::Status PrepareRange(uint64_t offset, uint64_t n) override {
    return pipeline_.PrepareRange(offset, n);
  }
  absl::Status EncodeChunk(uint64_t offset, const codec::MutableEncodedView& out,
                           const codec::RngKey& key) override;
  absl::Status DecodeChunk(const codec::EncodedView& chunk, uint64_t offset) override;
  absl::Status FinishDecode() override;
  absl::Status WriteResult(float* gradient) override;
  void CommitResidual() override { pipeline_.CommitResidual(); }
  void ResetResidual() override { pipeline_.ResetResidual(); }
  bool error_feedback() const override { return pipeline_.options().error_feedback; }
  uint64_t error_feedback_bytes() const override {
    return 2 * sizeof(float) * pipeline_.residual().size();
  }

 private:
  explicit HostCodecStage(transform::EncoderPipeline pipeline);

  transform::EncoderPipeline pipeline_;
  std::vector<float> work_;
  const float* prepared_ = nullptr;  // as Prepare returned it, for the step
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_ENGINE_TENSOR_CODEC_STAGE_H_
