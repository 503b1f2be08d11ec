// The baseline of `gift-bench transform`'s CPU rows: TensorBasis's forward
// (both sides) written plainly on CBLAS, one library call per step, with no
// fusion, as one would write it straight from the formula
//   H = D_out^{-p} G D_in^{-p}
//   H = H + ((H Z_in) C_in) Z_in^T       (input side)
//   H = H + Z_out (C_out (Z_out^T H))    (output side)
// (C = (1 + Sig)^{-p} - 1): a scaling pass, then two SGEMMs per side, each
// reading and writing all of H. For sides of rank r < n only (the identity
// term is assumed); both sides must be present.
//
// Thread safety: immutable after Create; Forward may run concurrently on
// different output buffers (its scratch is per call).
#ifndef GIFT_BENCH_PLAIN_BLAS_FORWARD_H_
#define GIFT_BENCH_PLAIN_BLAS_FORWARD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/transform/tensor_basis.h"

namespace gift::bench {

class PlainBlasForward {
 public:
  // FP32 copies of the basis's parts; InvalidArgument unless both sides are
  // present with rank < dimension.
  static absl::StatusOr<PlainBlasForward> Create(const transform::TensorBasis& basis);

  // out = T(g), g and out d_out x d_in (out may equal g).
  void Forward(const float* g, float* out) const;

 private:
  struct Side {
    int64_t n = 0, r = 0;
    std::vector<float> scale;  // n: D^{-p}
    std::vector<float> z;      // n x r
    std::vector<float> core;   // r: (1 + Sig)^{-p} - 1
  };
  static Side MakeSide(const transform::SideBasis& side, double p);

  int64_t d_out_ = 0, d_in_ = 0;
  Side out_, in_;
};

}  // namespace gift::bench

#endif  // GIFT_BENCH_PLAIN_BLAS_FORWARD_H_
