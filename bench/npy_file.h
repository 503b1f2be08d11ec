// Reading and writing 2-D NumPy .npy files: how gift-bench takes real
// gradients and second-moment statistics recorded by a training script.
//
// Supported: format versions 1.0, 2.0 and 3.0; little-endian dtypes '<f2'
// (IEEE half), '<f4' and '<f8'; 2-D C-order arrays. Anything else is refused
// with InvalidArgument naming the file and the problem: a bad magic string or
// version, a header whose stated length runs past the file or exceeds
// kMaxNpyHeaderBytes, a header that is not the dict NumPy writes, another
// dtype or byte order, fortran_order True, a shape that is not 2-D, sizes
// that overflow, and data shorter or longer than the shape says. Parsing
// never reads outside the given bytes and never throws.
//
// Conversion: gradients are read as float (ReadNpyFloat accepts '<f2' and
// '<f4'; an '<f8' gradient is refused rather than silently rounded),
// statistics as double (ReadNpyDouble accepts all three dtypes, exactly).
// Writing rounds each double to the requested dtype (to nearest even; '<f2'
// through float, so a double exactly between two halves may round twice).
//
// Thread safety: reentrant functions; results are owned values.
#ifndef GIFT_BENCH_NPY_FILE_H_
#define GIFT_BENCH_NPY_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gift::bench {

enum class NpyDtype : uint8_t {
  kFloat16,  // '<f2'
  kFloat32,  // '<f4'
  kFloat64,  // '<f8'
};

// The largest header accepted (NumPy's own readers refuse beyond 10 000
// bytes by default; this leaves room for hand-written files).
inline constexpr uint32_t kMaxNpyHeaderBytes = 1 << 16;

// A row-major rows x cols matrix as read from a file, with the dtype it was
// stored in.
template <typename T>
struct NpyMatrix {
  int64_t rows = 0;
  int64_t cols = 0;
  NpyDtype stored = NpyDtype::kFloat32;
  std::vector<T> values;  // rows * cols, row-major
};

// Parse the bytes of a .npy file; `name` is used in error messages only.
absl::StatusOr<NpyMatrix<float>> ParseNpyFloat(absl::string_view bytes, absl::string_view name);
absl::StatusOr<NpyMatrix<double>> ParseNpyDouble(absl::string_view bytes, absl::string_view name);

// Read and parse a file. A file that cannot be opened or read is NotFound /
// InvalidArgument with the path and the reason.
absl::StatusOr<NpyMatrix<float>> ReadNpyFloat(const std::string& path);
absl::StatusOr<NpyMatrix<double>> ReadNpyDouble(const std::string& path);

// The bytes of a .npy file holding `values` (rows x cols, row-major) as
// `dtype`, in format `major_version` (1, 2 or 3). Fails (InvalidArgument) on
// a size mismatch, a non-positive shape or an unsupported version.
absl::StatusOr<std::string> EncodeNpy(absl::Span<const double> values, int64_t rows, int64_t cols,
                                      NpyDtype dtype, int major_version = 1);

// EncodeNpy written to `path` (replaced if it exists).
absl::Status WriteNpy(const std::string& path, absl::Span<const double> values, int64_t rows,
                      int64_t cols, NpyDtype dtype, int major_version = 1);

}  // namespace gift::bench

#endif  // GIFT_BENCH_NPY_FILE_H_
