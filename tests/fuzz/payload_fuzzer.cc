// Fuzzes codec::ParsePayload (common/codec/payload.h): the header fields, the
// sizes against the layout, the CRC-32C, the contents. A payload that parses
// is decoded (every code and scale read) and serialized again, which must give
// back the same bytes.
#include <cstring>
#include <vector>

#include "common/base/crc32c.h"
#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "tests/fuzz/fuzz_input.h"

namespace {

constexpr size_t kChecksumOffset = 40;
// Decoding allocates rows * cols floats; a fuzz input's size bounds it.
constexpr uint64_t kMaxDecodedElements = uint64_t{1} << 20;

void FixChecksum(std::vector<uint8_t>& b) {
  if (b.size() < gift::codec::kPayloadFixedHeaderBytes) return;
  std::memset(b.data() + kChecksumOffset, 0, 4);
  const uint32_t crc = gift::crc32c::Value(b.data(), b.size());
  std::memcpy(b.data() + kChecksumOffset, &crc, 4);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gift::fuzz::ModedInput in = gift::fuzz::SplitMode(data, size);
  if (in.fix_checksum) FixChecksum(in.bytes);
  // A limit below the input's size must be refused, whatever the bytes.
  if (!in.bytes.empty()) {
    auto limited = gift::codec::ParsePayload(in.bytes, {.max_bytes = in.bytes.size() - 1});
    if (limited.ok()) gift::fuzz::Fail("a payload over the limit parsed");
  }
  auto parsed = gift::codec::ParsePayload(in.bytes);
  if (!parsed.ok()) return 0;
  const gift::codec::EncodedView& view = parsed->view;
  if (view.rows * view.cols <= kMaxDecodedElements) {
    std::vector<float> out(view.rows * view.cols);
    if (!gift::codec::Decode(view, out.data()).ok()) gift::fuzz::Fail("a parsed payload failed to decode");
  }
  auto again = gift::codec::SerializePayload(view, parsed->shape);
  if (!again.ok()) gift::fuzz::Fail("a parsed payload failed to serialize");
  if (*again != in.bytes) gift::fuzz::Fail("parse + serialize changed the payload bytes");
  return 0;
}
