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
// (design note section 2): E_new = T_next(T_prev^{-1}(E_old)), i.e.
// E_new = E_old W_old^{-T} W_new^T, so the residual represents the same
// gradient-space error before and after the switch. Decode always uses the
// current T: switch only after the last step encoded with the old transform
// has been decoded.
//
// Ownership: the pipeline shares ownership of its transform (immutable and
// safe to share across pipelines and threads) and owns its residual. Encode
// returns an owned EncodedTensor.
//
// Thread safety: NOT thread-safe (Encode and SwitchBasis mutate the
// residual). Use one pipeline object per tensor per worker, from one thread
// at a time; Decode alone is const and may run concurrently with other
// Decode calls.
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
  const EncoderPipelineOptions& options() const { return options_; }
  // The residual in the current transformed coordinates (d_out x d_in
  // floats; all zero before the first step), empty without error feedback.
  absl::Span<const float> residual() const { return residual_; }

 private:
  EncoderPipeline(std::shared_ptr<const GradientTransform> transform,
                  const EncoderPipelineOptions& options);

  int64_t size() const { return transform_->d_out() * transform_->d_in(); }

  std::shared_ptr<const GradientTransform> transform_;
  EncoderPipelineOptions options_;
  std::vector<float> residual_;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_ENCODER_PIPELINE_H_
