// Fuzzes the .npy reader of gift-bench (bench/npy_file.h): magic, version,
// header length, the header dict, dtype, shape, data size. A file that parses
// as doubles is encoded again in its dtype and must parse to the same values.
#include <cmath>
#include <cstring>
#include <string>

#include "bench/npy_file.h"
#include "tests/fuzz/fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  (void)gift::bench::ParseNpyFloat(bytes, "fuzz.npy");
  auto matrix = gift::bench::ParseNpyDouble(bytes, "fuzz.npy");
  if (!matrix.ok()) return 0;
  if (static_cast<int64_t>(matrix->values.size()) != matrix->rows * matrix->cols) {
    gift::fuzz::Fail("values do not match the shape");
  }
  if (matrix->rows < 1 || matrix->cols < 1) return 0;  // EncodeNpy wants a positive shape
  auto encoded = gift::bench::EncodeNpy(matrix->values, matrix->rows, matrix->cols, matrix->stored);
  if (!encoded.ok()) gift::fuzz::Fail("a parsed matrix failed to encode");
  auto again = gift::bench::ParseNpyDouble(*encoded, "again.npy");
  if (!again.ok()) gift::fuzz::Fail("an encoded matrix failed to parse");
  if (again->rows != matrix->rows || again->cols != matrix->cols) {
    gift::fuzz::Fail("encode + parse changed the shape");
  }
  for (size_t i = 0; i < matrix->values.size(); ++i) {
    const double a = matrix->values[i], b = again->values[i];
    // NaNs may change payload bits on the way through a narrower dtype.
    if (!(std::isnan(a) && std::isnan(b)) && std::memcmp(&a, &b, sizeof(a)) != 0) {
      gift::fuzz::Fail("encode + parse changed a value");
    }
  }
  return 0;
}
