// Fuzzes dataplane::ParseChunkHeader (common/dataplane/chunk_header.h). A
// header that parses must serialize back to the same bytes (version 1: all
// 64; version 2: all but the nonce and tags, which only chunk_mac.h checks)
// and print.
#include <cstring>
#include <vector>

#include "common/base/crc32c.h"
#include "common/dataplane/chunk_header.h"
#include "tests/fuzz/fuzz_input.h"

namespace {
constexpr size_t kCrcOffset = 56;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gift::fuzz::ModedInput in = gift::fuzz::SplitMode(data, size);
  if (in.fix_checksum && in.bytes.size() >= kCrcOffset + 4) {
    const uint32_t crc = gift::crc32c::Value(in.bytes.data(), kCrcOffset);
    std::memcpy(in.bytes.data() + kCrcOffset, &crc, 4);
  }
  auto header = gift::dataplane::ParseChunkHeader(in.bytes);
  if (!header.ok()) return 0;
  if (gift::dataplane::IsSealedChunkHeader(in.bytes)) {
    uint32_t signer = 0;
    std::memcpy(&signer, in.bytes.data() + gift::dataplane::kSealSignerOffset, 4);
    const auto algorithm =
        static_cast<gift::dataplane::MacAlgorithm>(in.bytes[gift::dataplane::kSealAlgorithmOffset]);
    const auto again =
        gift::dataplane::SerializeSealedChunkHeaderPrefix(*header, signer, algorithm);
    if (std::memcmp(again.data(), in.bytes.data(), gift::dataplane::kSealNonceOffset) != 0) {
      gift::fuzz::Fail("parse + serialize changed the sealed chunk header bytes");
    }
  } else {
    const auto again = gift::dataplane::SerializeChunkHeader(*header);
    if (std::memcmp(again.data(), in.bytes.data(), again.size()) != 0) {
      gift::fuzz::Fail("parse + serialize changed the chunk header bytes");
    }
  }
  if (gift::dataplane::ToString(*header).empty()) gift::fuzz::Fail("empty ToString");
  return 0;
}
