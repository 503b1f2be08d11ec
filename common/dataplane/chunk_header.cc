#include "common/dataplane/chunk_header.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/crc32c.h"

namespace gift::dataplane {
namespace {

constexpr char kMagic[4] = {'G', 'F', 'T', 'D'};
constexpr size_t kCrcOffset = 56;

template <typename T>
void Put(T v, uint8_t* out) {
  for (size_t i = 0; i < sizeof(T); ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

template <typename T>
T Get(const uint8_t* in) {
  T v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(in[i]) << (8 * i);
  return v;
}

absl::string_view KindName(ChunkKind kind) {
  switch (kind) {
    case ChunkKind::kPush:
      return "push";
    case ChunkKind::kResult:
      return "result";
    case ChunkKind::kAbort:
      return "abort";
    case ChunkKind::kNodePush:
      return "node-push";
    case ChunkKind::kNodeMember:
      return "node-member";
  }
  return "unknown";
}

}  // namespace

std::string ToString(const ChunkHeader& h) {
  return absl::StrCat(KindName(h.kind), " epoch=", h.epoch, " step=", h.step,
                      " tensor=", h.tensor_id, " chunk=", h.chunk_index, " basis=", h.basis_version,
                      h.kind == ChunkKind::kPush || h.kind == ChunkKind::kNodeMember
                          ? absl::StrCat(" rank=", h.rank, "/", h.world_size)
                          : absl::StrCat(" ranks=", h.ranks_summed(), "/", h.world_size),
                      h.status_code != 0 ? absl::StrCat(" status=", h.status_code) : "");
}

namespace {

// Bytes 0..59 of either version.
void SerializeFields(const ChunkHeader& h, uint16_t version, uint8_t* p) {
  std::memcpy(p, kMagic, 4);
  Put<uint16_t>(version, p + 4);
  p[6] = static_cast<uint8_t>(h.kind);
  Put(h.epoch, p + 8);
  Put(h.step, p + 16);
  Put(h.tensor_id, p + 24);
  Put(h.basis_version, p + 32);
  Put(h.chunk_index, p + 40);
  Put(h.rank, p + 44);
  Put(h.world_size, p + 48);
  Put(h.status_code, p + 52);
  Put(crc32c::Value(p, kCrcOffset), p + kCrcOffset);
}

}  // namespace

std::array<uint8_t, kChunkHeaderBytes> SerializeChunkHeader(const ChunkHeader& h) {
  std::array<uint8_t, kChunkHeaderBytes> out{};
  SerializeFields(h, kUnsealedChunkHeaderVersion, out.data());
  return out;
}

const char* MacAlgorithmName(MacAlgorithm algorithm) {
  switch (algorithm) {
    case MacAlgorithm::kAes256Gmac:
      return "aes-256-gmac";
    case MacAlgorithm::kChaCha20Poly1305:
      return "chacha20-poly1305";
  }
  return "unknown";
}

std::optional<MacAlgorithm> ParseMacAlgorithm(absl::string_view name) {
  for (MacAlgorithm a : kMacAlgorithms) {
    if (name == MacAlgorithmName(a)) return a;
  }
  return std::nullopt;
}

std::vector<std::string> MacAlgorithmNames() {
  std::vector<std::string> names;
  for (MacAlgorithm a : kMacAlgorithms) names.emplace_back(MacAlgorithmName(a));
  return names;
}

std::optional<MacAlgorithm> MacAlgorithmOf(uint32_t value) {
  for (MacAlgorithm a : kMacAlgorithms) {
    if (value == static_cast<uint32_t>(a)) return a;
  }
  return std::nullopt;
}

std::array<uint8_t, kSealedChunkHeaderBytes> SerializeSealedChunkHeaderPrefix(
    const ChunkHeader& h, uint32_t signer, MacAlgorithm algorithm) {
  std::array<uint8_t, kSealedChunkHeaderBytes> out{};
  SerializeFields(h, kSealedChunkHeaderVersion, out.data());
  out[kSealAlgorithmOffset] = static_cast<uint8_t>(algorithm);
  Put(signer, out.data() + kSealSignerOffset);
  return out;
}

absl::StatusOr<ChunkHeader> ParseChunkHeader(absl::Span<const uint8_t> bytes) {
  if (bytes.size() < kChunkHeaderBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk header is ", bytes.size(), " bytes, expected ", kChunkHeaderBytes));
  }
  const uint8_t* p = bytes.data();
  if (std::memcmp(p, kMagic, 4) != 0) return absl::InvalidArgumentError("chunk header magic");
  const uint16_t version = Get<uint16_t>(p + 4);
  if (version > kChunkHeaderVersion) {
    return absl::UnimplementedError(
        absl::StrCat("chunk header version ", version, " is newer than ", kChunkHeaderVersion));
  }
  if (version == 0) return absl::InvalidArgumentError("chunk header version 0");
  const size_t expected =
      version == kSealedChunkHeaderVersion ? kSealedChunkHeaderBytes : kChunkHeaderBytes;
  if (bytes.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("chunk header version ", version, " is ",
                                                   bytes.size(), " bytes, expected ", expected));
  }
  if (crc32c::Value(p, kCrcOffset) != Get<uint32_t>(p + kCrcOffset)) {
    return absl::DataLossError("chunk header checksum mismatch");
  }
  if (p[7] != 0) return absl::InvalidArgumentError("chunk header reserved bytes are not zero");
  if (version == kUnsealedChunkHeaderVersion && Get<uint32_t>(p + 60) != 0) {
    return absl::InvalidArgumentError("chunk header reserved bytes are not zero");
  }
  if (version == kSealedChunkHeaderVersion) {
    if (!MacAlgorithmOf(p[kSealAlgorithmOffset]).has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chunk header MAC algorithm ", int{p[kSealAlgorithmOffset]}));
    }
    if (p[61] != 0 || p[62] != 0 || p[63] != 0) {
      return absl::InvalidArgumentError("chunk header reserved bytes are not zero");
    }
  }
  ChunkHeader h;
  const uint8_t kind = p[6];
  if (kind < 1 || kind > 5) {
    return absl::InvalidArgumentError(absl::StrCat("chunk header kind ", int{kind}));
  }
  h.kind = static_cast<ChunkKind>(kind);
  h.epoch = Get<uint64_t>(p + 8);
  h.step = Get<uint64_t>(p + 16);
  h.tensor_id = Get<uint64_t>(p + 24);
  h.basis_version = Get<uint64_t>(p + 32);
  h.chunk_index = Get<uint32_t>(p + 40);
  h.rank = Get<uint32_t>(p + 44);
  h.world_size = Get<uint32_t>(p + 48);
  h.status_code = Get<uint32_t>(p + 52);
  if (h.world_size == 0) return absl::InvalidArgumentError("chunk header world size 0");
  const bool from_rank = h.kind == ChunkKind::kPush || h.kind == ChunkKind::kNodePush ||
                         h.kind == ChunkKind::kNodeMember;
  if (from_rank && h.rank >= h.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("chunk header rank ", h.rank, " is not below world size ", h.world_size));
  }
  if (h.kind == ChunkKind::kNodePush &&
      (h.ranks_summed() == 0 || h.ranks_summed() > h.world_size)) {
    return absl::InvalidArgumentError(absl::StrCat("chunk header node sum of ", h.ranks_summed(),
                                                   " ranks in a world of ", h.world_size));
  }
  return h;
}

}  // namespace gift::dataplane
