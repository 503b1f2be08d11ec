// Fuzzes transform::ParseTensorBasis (common/transform/basis_serialization.h),
// which turns published basis bytes into a TensorBasis. A basis that parses
// serializes to the same bytes, and, when small, transforms a matrix forward
// and back without crashing (errors such as an FP32 overflow are fine).
#include <cstring>
#include <string>
#include <vector>

#include "common/base/crc32c.h"
#include "common/transform/basis_serialization.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

// The size field at offset 8 and the CRC-32C of everything before the last 4
// bytes, as the writer sets them.
void FixSizeAndChecksum(std::vector<uint8_t>& b) {
  if (b.size() < 20) return;
  const uint64_t total = b.size();
  std::memcpy(b.data() + 8, &total, 8);
  const uint32_t crc = gift::crc32c::Value(b.data(), b.size() - 4);
  std::memcpy(b.data() + b.size() - 4, &crc, 4);
}

constexpr int64_t kMaxTransformedElements = 1 << 14;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gift::fuzz::ModedInput in = gift::fuzz::SplitMode(data, size);
  if (in.fix_checksum) FixSizeAndChecksum(in.bytes);
  const std::string bytes(in.bytes.begin(), in.bytes.end());
  auto basis = gift::transform::ParseTensorBasis(bytes);
  if (!basis.ok()) return 0;
  if (gift::transform::SerializeTensorBasis(*basis) != bytes) {
    gift::fuzz::Fail("parse + serialize changed the basis bytes");
  }
  const int64_t m = basis->header().d_out, n = basis->header().d_in;
  int64_t elements = 0;
  if (__builtin_mul_overflow(m, n, &elements) || elements > kMaxTransformedElements) return 0;
  std::vector<float> g(elements), x(elements), back(elements);
  for (int64_t i = 0; i < elements; ++i) g[i] = static_cast<float>((i % 7) - 3) * 0.25f;
  for (auto precision : {gift::transform::Precision::kFp32Blas, gift::transform::Precision::kFp64Reference}) {
    if (basis->Forward(g.data(), m, n, x.data(), precision).ok()) {
      (void)basis->Inverse(x.data(), m, n, back.data(), precision);
    }
  }
  return 0;
}
