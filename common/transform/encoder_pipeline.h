// The per-tensor encoder pipeline of a worker:
//
//   Encode:  X = T(G) [+ E]  ->  quantize with any codec::CodecSpec  -> payload
//   (servers: decode, sum in FP32, optionally re-encode; codec/reduce.h)
//   Decode:  sum (encoded or FP32) * post_scale  ->  T^{-1}  -> caller buffer
//
// T is a GradientTransform (gradient_transform.h). Because T is linear and
// every worker uses the same T for a step, the inverse of the sum equals the
// sum of the inverses: with post_scale = 1/P the decode yields the average.
//
// Optional error feedback, kept in transformed coordinates: with
// V = T(G) + E_prev, the payload is Q(V) and the new residual is
// E = V - decode(Q(V)), computed from the payload itself (so with stochastic
// rounding it is exactly what was sent). Over steps the decoded
// contributions then telescope: sum_t decode(Q(V_t)) = sum_t T(G_t) - E_last.
//
// SwitchBasis(next) changes T between steps and remaps the residual exactly
// (docs/design.md section 5.2): E_new = T_next(T_prev^{-1}(E_old)), i.e.
// E_new = E_old W_old^{-T} W_new^T, so the residual represents the same
// gradient-space error before and after the switch. Decode always uses the
// current T: switch only after the last step encoded with the old transform
// has been decoded.
//
// Chunked, in place (the worker's push-pull engine: no allocation per step,
// the encoder writes straight into the send buffers):
//
//   auto x = pipeline.Prepare(g, work);                   // T(G) [+ E], in `work`
//   for (each chunk [offset, offset + rows * cols))       //   (or g itself when
//     pipeline.EncodeChunk(*x, offset, view, key);        //   direct without EF)
//   ... the step succeeded: pipeline.CommitResidual();
//
// The forward transform streams by rows (GradientTransform::BeginForward):
// Prepare runs only what reads all of G, and each EncodeChunk first
// transforms the rows its chunk covers (in whole blocks of the transform's
// forward_row_block(), so every row has exactly the whole-tensor bits), so
// the caller sends a tensor's first chunks while its later rows are still
// to transform. A caller that reads x itself calls PrepareRange first.
//   pipeline.DecodeChunk(result_view, offset, sum);       // per arriving chunk
//   pipeline.FinishDecode(sum);                           // T^{-1} in place
//
// EncodeChunk writes the chunk's new residual into a pending buffer, which
// CommitResidual makes current: a step abandoned before its commit (an
// aborted epoch) can be encoded again from the same gradient and residual.
// Encode (the whole tensor at once) is Prepare + EncodeChunk + commit.
//
// Direct quantization is the identity transform: the pipeline then encodes
// from the gradient itself and skips the inverse (no copies).
//
// Ownership: the pipeline shares ownership of its transform (immutable and
// safe to share across pipelines and threads) and owns its residual. Encode
// returns an owned EncodedTensor; the chunked calls use the caller's buffers
// and keep no pointer to them.
//
// Thread safety: NOT thread-safe (Prepare and PrepareRange keep the open
// step's rows; Encode, EncodeChunk, CommitResidual, SwitchBasis and
// ResetResidual mutate the residual). Use one pipeline object per tensor per
// worker, from one thread at a time; the const calls (the decodes) may run
// concurrently with other const calls.
#ifndef GIFT_COMMON_TRANSFORM_ENCODER_PIPELINE_H_
#define GIFT_COMMON_TRANSFORM_ENCODER_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/codec/encoded_tensor.h"
#include "common/transform/gradient_transform.h"

namespace gift::transform {

struct EncoderPipelineOptions {
  codec::CodecSpec spec;
  bool error_feedback = false;
  codec::CodecOptions codec_options = {};  // the pool is not owned
};

class EncoderPipeline {
 public:
  // Fails (InvalidArgument) on a null transform or an invalid spec.
  static absl::StatusOr<EncoderPipeline> Create(std::shared_ptr<const GradientTransform> transform,
                                                const EncoderPipelineOptions& options);

  // Transforms `g` (d_out x d_in of the transform, row-major FP32), adds the
  // residual when error feedback is on, and encodes with the spec (`key`
  // seeds stochastic rounding). Updates the residual only on success: on any
  // error (a non-finite gradient, an overflow) the pipeline is unchanged.
  absl::StatusOr<codec::EncodedTensor> Encode(const float* g, const codec::RngKey& key = {});

  // Chunked encoding (see above). Prepare returns the tensor to encode:
  // `work` (d_out x d_in floats, to hold T(g) [+ residual]) or `g` itself
  // for the identity without error feedback (then `work` is unused and may
  // be null). Its rows are written as EncodeChunk or PrepareRange reach
  // them: `g` and `work` must stay valid and `g` unchanged until the last
  // chunk is encoded. InvalidArgument for a null `g` (or a null `work` when
  // it is needed), and the transform's errors.
  absl::StatusOr<const float*> Prepare(const float* g, float* work);

  // Writes the rows of the prepared tensor that hold elements [offset,
  // offset + n) (nothing when they are written). InvalidArgument past the
  // tensor; FailedPrecondition when rows are missing and no Prepare is open
  // (none yet, or SwitchBasis since); the transform's errors (then the
  // step's tensor is unusable: Prepare again).
  absl::Status PrepareRange(uint64_t offset, uint64_t n);

  // Encodes the out.rows x out.cols elements at x + offset (x as Prepare
  // returned it; PrepareRange first) into `out` and, with error feedback,
  // stores their new residual (pending until CommitResidual).
  // InvalidArgument when the chunk runs past the tensor; PrepareRange's and
  // the codec's errors.
  absl::Status EncodeChunk(const float* x, uint64_t offset, const codec::MutableEncodedView& out,
                           const codec::RngKey& key = {});

  // Makes the residuals EncodeChunk stored current (every chunk of the
  // tensor must have been encoded since the last Prepare). No-op without
  // error feedback.
  void CommitResidual();

  // Decodes `chunk` (any spec) into sum + offset, a chunk of the tensor's
  // d_out x d_in FP32 sum. InvalidArgument when it runs past the tensor.
  absl::Status DecodeChunk(const codec::EncodedView& chunk, uint64_t offset, float* sum) const;

  // sum = T^{-1}(sum), in place, once every chunk is in (nothing for the
  // identity).
  absl::Status FinishDecode(float* sum) const { return DecodeSum(sum, 1.0f, sum); }

  // out = T^{-1}(post_scale * decode(reduced)). `reduced` is the servers'
  // encoded sum (any spec) of the transform's shape; `out` holds d_out x
  // d_in floats. post_scale = 1/P turns the sum of P contributions into the
  // average; with post_scale = 1 no scaling is done.
  absl::Status Decode(const codec::EncodedView& reduced, float post_scale, float* out) const;

  // As Decode, from the servers' FP32 sum (d_out x d_in floats). `sum` may
  // equal `out`.
  absl::Status DecodeSum(const float* sum, float post_scale, float* out) const;

  // Replaces the transform by `next` (same shape), remapping the residual
  // exactly (see above). Fails (InvalidArgument) on a null transform or a
  // different shape, and with the transforms' errors; the pipeline is then
  // unchanged.
  absl::Status SwitchBasis(std::shared_ptr<const GradientTransform> next);

  // Clears the residual (e.g. after a step was abandoned).
  void ResetResidual();

  const GradientTransform& transform() const { return *transform_; }
  const std::shared_ptr<const GradientTransform>& shared_transform() const { return transform_; }
  // True when the transform is the identity (direct quantization).
  bool direct() const { return direct_; }
  const EncoderPipelineOptions& options() const { return options_; }
  // The residual in the current transformed coordinates (d_out x d_in
  // floats; all zero before the first step), empty without error feedback.
  absl::Span<const float> residual() const { return residual_; }

 private:
  EncoderPipeline(std::shared_ptr<const GradientTransform> transform,
                  const EncoderPipelineOptions& options);

  int64_t size() const { return transform_->d_out() * transform_->d_in(); }
  // Adds the residual to rows [rows_ready_, row_end) of the open Prepare
  // (with error feedback) and marks them ready.
  void AddResidualRows(int64_t row_end);

  std::shared_ptr<const GradientTransform> transform_;
  bool direct_ = false;
  EncoderPipelineOptions options_;
  std::vector<float> residual_;          // current; empty without error feedback
  std::vector<float> pending_residual_;  // written by EncodeChunk

  // The open Prepare's rows: rows [0, rows_ready_) of prepared_ are written;
  // the rest come from g_ through forward_state_.
  const float* g_ = nullptr;
  float* prepared_ = nullptr;  // null: no Prepare open
  int64_t rows_ready_ = 0;
  std::unique_ptr<ForwardRowsState> forward_state_;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_ENCODER_PIPELINE_H_
