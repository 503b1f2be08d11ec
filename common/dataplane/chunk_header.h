// The header of every data-plane message (transport.h carries it beside the
// payload): which (epoch, step, tensor, chunk, basis version, rank) a chunk
// belongs to. Fixed 64 bytes, little-endian, checksummed:
//
//   offset size field
//        0    4 magic "GFTD"
//        4    2 version (kChunkHeaderVersion)
//        6    1 kind (ChunkKind)
//        7    1 reserved, 0
//        8    8 epoch
//       16    8 step
//       24    8 tensor id
//       32    8 basis version (0: direct)
//       40    4 chunk index
//       44    4 rank: the sender's rank (kPush) or the number of ranks summed
//                 (kResult)
//       48    4 world size of the epoch
//       52    4 status code (kAbort: an absl::StatusCode), else 0
//       56    4 CRC-32C of bytes 0..55
//       60    4 reserved, 0
//
// The payload is a codec payload (common/codec/payload.h) for kPush and
// kResult, and a UTF-8 reason for kAbort.
//
// Thread safety: reentrant functions on values.
#ifndef GIFT_COMMON_DATAPLANE_CHUNK_HEADER_H_
#define GIFT_COMMON_DATAPLANE_CHUNK_HEADER_H_

#include <array>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace gift::dataplane {

inline constexpr uint16_t kChunkHeaderVersion = 1;
inline constexpr size_t kChunkHeaderBytes = 64;

// Values are on the wire; never renumber.
enum class ChunkKind : uint8_t {
  kPush = 1,    // worker -> server: one rank's encoded chunk
  kResult = 2,  // server -> worker: the encoded average of all ranks
  kAbort = 3,   // server -> worker: the (epoch, step) will not complete
};

struct ChunkHeader {
  ChunkKind kind = ChunkKind::kPush;
  uint64_t epoch = 0;
  uint64_t step = 0;
  uint64_t tensor_id = 0;
  uint64_t basis_version = 0;
  uint32_t chunk_index = 0;
  uint32_t rank = 0;
  uint32_t world_size = 0;
  uint32_t status_code = 0;

  bool operator==(const ChunkHeader&) const = default;
};

// "push epoch=3 step=10 tensor=7 chunk=2 basis=1 rank=0/4", for logs.
std::string ToString(const ChunkHeader& header);

std::array<uint8_t, kChunkHeaderBytes> SerializeChunkHeader(const ChunkHeader& header);

// InvalidArgument naming the bad field (size, magic, kind, reserved bytes,
// world size 0, a kPush rank not below the world size), DataLoss for a
// checksum mismatch, Unimplemented for a newer version.
absl::StatusOr<ChunkHeader> ParseChunkHeader(absl::Span<const uint8_t> bytes);

}  // namespace gift::dataplane

#endif  // GIFT_COMMON_DATAPLANE_CHUNK_HEADER_H_
