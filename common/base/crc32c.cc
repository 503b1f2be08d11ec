#include "common/base/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#endif

namespace gift::crc32c {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<uint32_t, 256> MakeTable() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr std::array<uint32_t, 256> kTable = MakeTable();

#if defined(__x86_64__)
// One _mm_crc32_u64 has a latency of 3 cycles and a throughput of 1 per
// cycle, so a single dependent stream runs at a third of the unit's rate.
// Long buffers are cut into chunks of three equal stripes A, B, C whose CRC
// registers advance independently (B and C from 0), then merged: the raw
// register is linear over GF(2), so reg(A||B) = Z_L(reg(A)) ^ reg(B), where
// Z_L is "feed L zero bytes", itself a linear map of the 32-bit register,
// applied through four byte-indexed tables.

// Z_L as four 256-entry tables: Z_L(x) = t[0][x & 0xFF] ^ ... ^ t[3][x >> 24].
struct ZeroShift {
  uint32_t t[4][256];
};

// The raw register after feeding `len` (a multiple of 8) zero bytes.
__attribute__((target("sse4.2"))) uint32_t FeedZeros(uint32_t reg, size_t len) {
  uint64_t c = reg;
  for (size_t i = 0; i < len; i += 8) c = _mm_crc32_u64(c, 0);
  return static_cast<uint32_t>(c);
}

// Builds Z_len from the images of the 32 basis registers (linearity again).
ZeroShift MakeZeroShift(size_t len) {
  uint32_t basis[32];
  for (int i = 0; i < 32; ++i) basis[i] = FeedZeros(1u << i, len);
  ZeroShift z;
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t v = 0;
      for (int j = 0; j < 8; ++j) {
        if (b & (1u << j)) v ^= basis[8 * k + j];
      }
      z.t[k][b] = v;
    }
  }
  return z;
}

inline uint32_t Shift(const ZeroShift& z, uint32_t x) {
  return z.t[0][x & 0xFF] ^ z.t[1][(x >> 8) & 0xFF] ^ z.t[2][(x >> 16) & 0xFF] ^ z.t[3][x >> 24];
}

inline uint64_t Load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Consumes whole chunks of 3 * kStripe bytes from (*p, *n), advancing the raw
// register `c`.
template <size_t kStripe>
__attribute__((target("sse4.2"))) uint64_t ThreeWay(uint64_t c, const uint8_t** p, size_t* n) {
  static const ZeroShift shift = MakeZeroShift(kStripe);
  const uint8_t* q = *p;
  size_t left = *n;
  for (; left >= 3 * kStripe; left -= 3 * kStripe, q += 3 * kStripe) {
    uint64_t a = c, b = 0, d = 0;
    for (size_t i = 0; i < kStripe; i += 8) {
      a = _mm_crc32_u64(a, Load64(q + i));
      b = _mm_crc32_u64(b, Load64(q + kStripe + i));
      d = _mm_crc32_u64(d, Load64(q + 2 * kStripe + i));
    }
    const uint32_t ab = Shift(shift, static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b);
    c = Shift(shift, ab) ^ static_cast<uint32_t>(d);
  }
  *p = q;
  *n = left;
  return c;
}

__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = static_cast<uint32_t>(~crc);
  c = ThreeWay<8192>(c, &p, &n);  // 24 KiB chunks: the merge is negligible
  c = ThreeWay<256>(c, &p, &n);   // 768-byte chunks for the rest
  for (; n >= 8; n -= 8, p += 8) c = _mm_crc32_u64(c, Load64(p));
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = _mm_crc32_u8(c32, *p);
  return ~c32;
}
#endif

}  // namespace

uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  for (size_t i = 0; i < n; ++i) c = kTable[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return ~c;
}

uint32_t Extend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  if (has_sse42) return ExtendSse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return ExtendPortable(crc, data, n);
}

}  // namespace gift::crc32c
