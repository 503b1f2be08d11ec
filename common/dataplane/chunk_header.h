// The header of every data-plane message (transport.h carries it beside the
// payload): which (epoch, step, tensor, chunk, basis version, rank) a chunk
// belongs to. Little-endian, checksummed, in two versions:
//
// Version 1 (unsealed, 64 bytes: data-plane authentication off):
//
//   offset size field
//        0    4 magic "GFTD"
//        4    2 version (1)
//        6    1 kind (ChunkKind)
//        7    1 reserved, 0
//        8    8 epoch
//       16    8 step
//       24    8 tensor id
//       32    8 basis version (0: direct)
//       40    4 chunk index
//       44    4 rank: the sender's rank (kPush, kNodePush, kNodeMember) or
//                 the number of ranks summed (kResult)
//       48    4 world size of the epoch
//       52    4 status code (kAbort: an absl::StatusCode); kNodePush: the
//                 number of ranks its sum holds (the sender's node group,
//                 at least 1); else 0
//       56    4 CRC-32C of bytes 0..55
//       60    4 reserved, 0
//
// Version 2 (sealed, 112 bytes: bytes 0..59 as version 1 with version 2,
// then the seal that common/dataplane/chunk_mac.h writes and checks):
//
//       60    1 MAC algorithm (MacAlgorithm: 1 AES-256-GMAC, 2 ChaCha20-Poly1305)
//       61    3 reserved, 0
//       64    4 signer: the sender's rank (kPush, kNodePush, kNodeMember) or shard id (kResult,
//                 kAbort); its key of the epoch made the tags
//       68   12 nonce (random, lowest bit of byte 79 zero)
//       80   16 header tag: the MAC with IV (nonce) = nonce, over bytes 0..79
//       96   16 chunk tag: the MAC with the nonce's lowest bit set, over
//                 bytes 0..95 followed by the payload
//
// ParseChunkHeader reads both versions and checks neither tag; a receiver
// with authentication on refuses version 1 (chunk_mac.h).
//
// The payload is a codec payload (common/codec/payload.h) for kPush,
// kNodePush, kNodeMember and kResult, and a UTF-8 reason for kAbort.
//
// Node-local aggregation (docs/design.md section 6.7) adds kinds 4 and 5 in
// the same two versions: a leader's kNodePush carries the FP32 sum of its
// node group's ranks (in the push codec) as one contribution; a member's
// kNodeMember carries its own chunk (FP32) to the chunk's leader, worker to
// worker. Receivers of an older build refuse them as an unknown kind.
//
// Thread safety: reentrant functions on values.
#ifndef GIFT_COMMON_DATAPLANE_CHUNK_HEADER_H_
#define GIFT_COMMON_DATAPLANE_CHUNK_HEADER_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace gift::dataplane {

// The newest version this code reads.
inline constexpr uint16_t kChunkHeaderVersion = 2;
inline constexpr uint16_t kUnsealedChunkHeaderVersion = 1;
inline constexpr uint16_t kSealedChunkHeaderVersion = 2;
inline constexpr size_t kChunkHeaderBytes = 64;         // version 1
inline constexpr size_t kSealedChunkHeaderBytes = 112;  // version 2
// The seal's fields (version 2).
// The MAC of a sealed header (byte 60); values are on the wire. Both are an
// AEAD with every byte as additional data and no plaintext; the coordinator
// chooses one for the whole cluster (coordinator.proto DataPlaneKey).
enum class MacAlgorithm : uint8_t {
  kAes256Gmac = 1,
  kChaCha20Poly1305 = 2,
};
inline constexpr MacAlgorithm kMacAlgorithms[] = {MacAlgorithm::kAes256Gmac,
                                                  MacAlgorithm::kChaCha20Poly1305};
// "aes-256-gmac", "chacha20-poly1305".
const char* MacAlgorithmName(MacAlgorithm algorithm);
// The algorithm named `name` (as MacAlgorithmName), or nullopt.
std::optional<MacAlgorithm> ParseMacAlgorithm(absl::string_view name);
// Every algorithm's name, in kMacAlgorithms' order (a flag's allowed values).
std::vector<std::string> MacAlgorithmNames();
// The algorithm of wire value `value` (a sealed header's byte 60, and
// cluster.proto's MacAlgorithm, which has the same values), or nullopt.
std::optional<MacAlgorithm> MacAlgorithmOf(uint32_t value);
inline constexpr size_t kSealAlgorithmOffset = 60;
inline constexpr size_t kSealSignerOffset = 64;
inline constexpr size_t kSealNonceOffset = 68;
inline constexpr size_t kSealNonceBytes = 12;
inline constexpr size_t kSealHeaderTagOffset = 80;
inline constexpr size_t kSealChunkTagOffset = 96;
inline constexpr size_t kSealTagBytes = 16;

// Values are on the wire; never renumber.
enum class ChunkKind : uint8_t {
  kPush = 1,        // worker -> server: one rank's encoded chunk
  kResult = 2,      // server -> worker: the encoded average of all ranks
  kAbort = 3,       // server -> worker: the (epoch, step) will not complete
  kNodePush = 4,    // leader -> server: the node group's sum (ranks_summed() ranks)
  kNodeMember = 5,  // member -> the chunk's leader on its node: its FP32 chunk
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

  // How many ranks' gradients the chunk holds: 1 for a kPush and a
  // kNodeMember; the node group's size for a kNodePush (carried in
  // `status_code`); the ranks summed for a kResult and the ranks received
  // before it ended for a kAbort (both carried in `rank`, which names a
  // sender only in pushes).
  uint32_t ranks_summed() const {
    switch (kind) {
      case ChunkKind::kPush:
      case ChunkKind::kNodeMember:
        return 1;
      case ChunkKind::kNodePush:
        return status_code;
      case ChunkKind::kResult:
      case ChunkKind::kAbort:
        break;
    }
    return rank;
  }
  // Sets what ranks_summed() returns, for a kNodePush, kResult or kAbort
  // (set `kind` first; pushes of one rank have nothing to set).
  void set_ranks_summed(uint32_t ranks) {
    if (kind == ChunkKind::kNodePush) {
      status_code = ranks;
    } else if (kind == ChunkKind::kResult || kind == ChunkKind::kAbort) {
      rank = ranks;
    }
  }

  bool operator==(const ChunkHeader&) const = default;
};

// "push epoch=3 step=10 tensor=7 chunk=2 basis=1 rank=0/4", for logs.
std::string ToString(const ChunkHeader& header);

// Version 1.
std::array<uint8_t, kChunkHeaderBytes> SerializeChunkHeader(const ChunkHeader& header);

// Version 2 with `algorithm` and `signer` set, nonce and tags zero: what
// chunk_mac.h's SealChunk completes.
std::array<uint8_t, kSealedChunkHeaderBytes> SerializeSealedChunkHeaderPrefix(
    const ChunkHeader& header, uint32_t signer, MacAlgorithm algorithm);

// Either version. InvalidArgument naming the bad field (size for the
// version, magic, kind, reserved bytes, MAC algorithm, world size 0, a kPush,
// kNodePush or kNodeMember rank not below the world size, a kNodePush of 0
// ranks or of more than the world size), DataLoss for a checksum mismatch,
// Unimplemented for a newer version. The tags are not checked.
absl::StatusOr<ChunkHeader> ParseChunkHeader(absl::Span<const uint8_t> bytes);

// Whether `bytes` is a version 2 header's size (Parse it first).
inline bool IsSealedChunkHeader(absl::Span<const uint8_t> bytes) {
  return bytes.size() == kSealedChunkHeaderBytes;
}

}  // namespace gift::dataplane

#endif  // GIFT_COMMON_DATAPLANE_CHUNK_HEADER_H_
