// CRC-32C (Castagnoli), as used by iSCSI, ext4 and LevelDB. Uses the SSE4.2
// instruction where the CPU has it, a table otherwise; both give the same
// values.
//
// Stateless; thread-safe.
#ifndef GIFT_COMMON_BASE_CRC32C_H_
#define GIFT_COMMON_BASE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace gift::crc32c {

// CRC-32C of data[0, n) continued from the CRC of earlier bytes `crc`
// (Extend(Extend(0, a), b) == Value(a ++ b)).
uint32_t Extend(uint32_t crc, const void* data, size_t n);

inline uint32_t Value(const void* data, size_t n) { return Extend(0, data, n); }

// The portable implementation, exposed so tests can compare the two.
uint32_t ExtendPortable(uint32_t crc, const void* data, size_t n);

}  // namespace gift::crc32c

#endif  // GIFT_COMMON_BASE_CRC32C_H_
