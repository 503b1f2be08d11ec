// Data-plane authentication (docs/design.md section 8.2): every chunk, push,
// result or abort, carries two MAC tags in its version 2 header
// (chunk_header.h), made with its sender's key of the chunk's epoch and the
// cluster's MAC algorithm (ChaCha20-Poly1305 or AES-256-GMAC):
//
//   auto header = SealChunk(h, /*signer=*/rank, payload, keys.own,
//                           keys.algorithm);                           // sender
//   ...
//   if (auto failure = CheckChunk(keys, header_bytes, payload)) {    // receiver
//     drop the chunk; count AuthFailureName(*failure)
//   }
//
// The header tag (bytes 0..79) lets a receiver check who sent a chunk before
// it places the payload anywhere; the chunk tag covers the whole header and
// the payload. Keys: the coordinator hands every member its member key over
// the authenticated control plane (coordinator.proto DataPlaneKey); the key
// of (member, epoch) is DeriveEpochKey(member key, epoch, algorithm), so a
// chunk of one epoch never verifies under another's key, and no key serves
// two algorithms. AES-256-GMAC (with AES-NI and PCLMULQDQ) and
// ChaCha20-Poly1305 measured several times faster than HMAC-SHA256 and
// BLAKE2b-MAC, ChaCha20-Poly1305 1.5x GMAC with OpenSSL 3.0 on AVX-512
// machines (docs/design.md section 8.2); the coordinator chooses one for the
// cluster (gift-coordinator --dataplane-mac; ChaCha20-Poly1305 by default).
//
// Nonces are 95 random bits per chunk (RAND_bytes): a key may seal about
// 2^32 chunks before a nonce collision is a concern; keys change with every
// epoch and member.
//
// Cost: each thread keeps one AEAD context keyed with the last algorithm and
// key it used, so sealing or checking a chunk under the key of the previous one sets
// only a new IV (common/dataplane/chunk_mac.cc); the payload is read once.
//
// Thread safety: reentrant functions; EpochKeys is an immutable value.
#ifndef GIFT_COMMON_DATAPLANE_CHUNK_MAC_H_
#define GIFT_COMMON_DATAPLANE_CHUNK_MAC_H_

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/dataplane/chunk_header.h"

namespace gift::dataplane {

inline constexpr size_t kMacKeyBytes = 32;
// Secret: never log it.
using MacKey = std::array<uint8_t, kMacKeyBytes>;

// A member's keys for one epoch.
struct EpochKeys {
  uint64_t epoch = 0;
  // Every key below is of this algorithm; a chunk sealed with another is
  // refused (kUnknownKey).
  MacAlgorithm algorithm = MacAlgorithm::kAes256Gmac;
  uint32_t signer = 0;  // this member's rank (workers) or shard id (servers)
  MacKey own;           // seals what this member sends
  // The senders this member accepts chunks from, by rank (a server: the
  // workers; a worker: the servers, by shard id); nullopt: unknown.
  std::vector<std::optional<MacKey>> peers;
  // A worker in a node group: its node's key of the epoch, which seals and
  // checks the members' chunks to their leader (kNodeMember), whoever the
  // signer; nullopt: none.
  std::optional<MacKey> node;
};

// HKDF-SHA256 of `secret` with `salt` and `info` (32 bytes): the
// coordinator's member keys and every member's epoch keys.
absl::StatusOr<MacKey> DeriveKey(absl::Span<const uint8_t> secret, absl::string_view salt,
                                 absl::Span<const uint8_t> info);
// DeriveKey(member_key, salt, little-endian epoch); the salt is
// "gift-dataplane-epoch-v1" for AES-256-GMAC (the format's first algorithm)
// and "gift-dataplane-epoch-chacha20-poly1305-v1" for ChaCha20-Poly1305.
absl::StatusOr<MacKey> DeriveEpochKey(const MacKey& member_key, uint64_t epoch,
                                      MacAlgorithm algorithm = MacAlgorithm::kAes256Gmac);

// A version 2 header for `header` and `payload`, sealed with `algorithm` and
// `key` (the signer's key of header.epoch for that algorithm). Internal only
// on an OpenSSL failure.
absl::StatusOr<std::array<uint8_t, kSealedChunkHeaderBytes>> SealChunk(
    const ChunkHeader& header, uint32_t signer, absl::Span<const uint8_t> payload,
    const MacKey& key, MacAlgorithm algorithm = MacAlgorithm::kAes256Gmac);

// Why a chunk is refused; names are the metrics' reason labels.
enum class AuthFailure {
  kMissing,      // a version 1 (unsealed) header
  kUnknownKey,   // no key for the epoch, the signer or the MAC algorithm
  kWrongSigner,  // a push whose signer is not its rank
  kBadMac,       // a tag does not verify: tampered, forged or another key
};
inline constexpr AuthFailure kAllAuthFailures[] = {AuthFailure::kMissing, AuthFailure::kUnknownKey,
                                                   AuthFailure::kWrongSigner, AuthFailure::kBadMac};
// "missing", "unknown_key", "wrong_signer", "bad_mac".
absl::string_view AuthFailureName(AuthFailure failure);

// Checks a header (already parsed by ParseChunkHeader as `parsed`) and,
// unless `payload` is nullopt, the chunk tag over it; `keys` are the
// receiver's keys and must be of parsed.epoch (else kUnknownKey). nullopt
// when the chunk is authentic.
std::optional<AuthFailure> CheckChunk(const EpochKeys& keys, const ChunkHeader& parsed,
                                      absl::Span<const uint8_t> header_bytes,
                                      std::optional<absl::Span<const uint8_t>> payload);

// Whether CheckChunk's kUnknownKey for this sealed chunk is one its
// receiver may still resolve by fetching keys: the chunk is of `keys`' epoch
// and MAC, its signer is below `world_size` (a rank of the epoch), and the
// key that checks it (its signer's; a node member's chunk: the node's) is
// not in `keys` yet. Any other kUnknownKey is final.
bool AwaitsSignerKey(const EpochKeys& keys, const ChunkHeader& parsed,
                     absl::Span<const uint8_t> header_bytes, uint32_t world_size);

// Unauthenticated: "chunk authentication failed (bad_mac): push epoch=..."
absl::Status AuthFailureStatus(AuthFailure failure, const ChunkHeader& parsed);

}  // namespace gift::dataplane

#endif  // GIFT_COMMON_DATAPLANE_CHUNK_MAC_H_
