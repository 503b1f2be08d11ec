// The byte form of a TensorBasis, so that the basis owner can ship it and
// every process that loads the same bytes transforms bit-identically.
//
// Layout (all integers and doubles little-endian, no padding):
//   u32 magic "GFTB" | u32 format version (1) | u64 total size in bytes
//   u64 tensor id | u64 basis version | u64 d_out | u64 d_in
//   u8 sides | 7 zero bytes | f64 power
//   per enabled side, output side first:
//     u8 residual model | 7 zero bytes | u64 n | u64 r
//     f64 damping_eps | f64 damping | f64 trace
//     f64 lam[r] | f64 d[1 (isotropic) or n (diagonal)]
//     f64 u[n * r] (column-major) | f64 z[n * r] (diagonal model only)
//     f64 one_plus_sig[r]
//   u32 CRC-32C of every byte before it
// The doubles are the basis's own values (nothing is recomputed on load), so
// a loaded basis applies exactly the same arithmetic as the original.
//
// Thread safety: reentrant functions.
#ifndef GIFT_COMMON_TRANSFORM_BASIS_SERIALIZATION_H_
#define GIFT_COMMON_TRANSFORM_BASIS_SERIALIZATION_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/transform/tensor_basis.h"

namespace gift::transform {

inline constexpr uint32_t kBasisFormatVersion = 1;

std::string SerializeTensorBasis(const TensorBasis& basis);

// Parses bytes written by SerializeTensorBasis. Never reads outside `bytes`.
// Fails with DataLoss for a truncated or corrupt input (size, checksum),
// InvalidArgument for a well-formed checksum over inconsistent contents
// (bad magic or version, shapes, non-finite or out-of-range values), as
// checked by SideBasis::FromParts and TensorBasis::Create.
absl::StatusOr<TensorBasis> ParseTensorBasis(absl::string_view bytes);

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_BASIS_SERIALIZATION_H_
