// A randomized Hadamard rotation on the input side (a reference transform):
//
//   Forward:  X = G H D / sqrt(b)        Inverse:  G = X D H / sqrt(b)
//
// with H the b x b Walsh-Hadamard (Sylvester) matrix, applied to each row by
// the fast O(b log b) transform, and D a seeded random +-1 diagonal. H D /
// sqrt(b) is orthogonal (H = H^T, H H = b I, D D = I), so the inverse is exact
// up to FP32 rounding and the Frobenius norm is preserved. It spreads the
// energy of each row evenly over its coordinates, which lowers the amax and
// so the error of scaled low-precision formats on outlier-heavy rows.
//
// The block size b: by default (block = 0) the whole row, b = d_in, which
// must then be a power of two. For other d_in the caller chooses a block
// b that is a power of two and divides d_in (e.g. 128 for d_in = 3456); each
// row is then rotated block by block (a block-diagonal orthogonal map, still
// exact). Create refuses (InvalidArgument) a d_in that is not a power of two
// with block = 0 and any block that is not a power of two dividing d_in; no
// padding is done, so the transformed tensor keeps the gradient's shape and
// codec layout.
//
// Arithmetic is double per row; results are rounded to FP32 once. D comes
// from a fixed-algorithm generator (SplitMix64) seeded by `seed`, so every
// process given the same seed and d_in builds the same transform.
//
// Thread safety: immutable; see gradient_transform.h.
#ifndef GIFT_COMMON_TRANSFORM_HADAMARD_TRANSFORM_H_
#define GIFT_COMMON_TRANSFORM_HADAMARD_TRANSFORM_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/transform/gradient_transform.h"

namespace gift::transform {

struct HadamardOptions {
  uint64_t seed = 0x6ad4a3d;
  int64_t block = 0;  // 0: the whole row (d_in a power of two)
};

class HadamardTransform final : public GradientTransform {
 public:
  // Fails (InvalidArgument) on a bad shape or block (see above).
  static absl::StatusOr<HadamardTransform> Create(int64_t d_out, int64_t d_in,
                                                  const HadamardOptions& options = {});

  absl::Status Forward(const float* in, int64_t d_out, int64_t d_in, float* out) const override;
  absl::Status Inverse(const float* in, int64_t d_out, int64_t d_in, float* out) const override;
  int64_t d_out() const override { return d_out_; }
  int64_t d_in() const override { return static_cast<int64_t>(signs_.size()); }
  // E.g. "hadamard(block=512)".
  std::string name() const override;

  // Rotates `rows` rows of d_in() floats at `in` into `out` (forward, or
  // the inverse with `inverse`): exactly the bits Forward / Inverse write
  // for those rows. `out` may equal `in`. No shape or finiteness check (the
  // caller has made them: RotatedTransform); allocates nothing for blocks
  // of at most 1,024 elements (it rotates spans of a row on the stack).
  void RotateRows(const float* in, int64_t rows, bool inverse, float* out) const;

  int64_t block() const { return block_; }
  // The diagonal of D (d_in values, each +1 or -1).
  const std::vector<double>& signs() const { return signs_; }

 private:
  HadamardTransform(int64_t d_out, int64_t block, std::vector<double> signs)
      : d_out_(d_out), block_(block), signs_(std::move(signs)) {}

  absl::Status Apply(const float* in, int64_t d_out, int64_t d_in, bool inverse, float* out) const;

  int64_t d_out_;
  int64_t block_;
  std::vector<double> signs_;
};

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_HADAMARD_TRANSFORM_H_
