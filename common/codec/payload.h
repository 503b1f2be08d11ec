// The wire format of one compressed tensor ("payload"): a versioned header,
// the scales, the codes. Little-endian throughout.
//
//   offset  size  field
//        0     4  magic "GFTP"
//        4     2  format version (kPayloadVersion)
//        6     2  header bytes = 48 + 8 * ndims
//        8     1  element format   (codec::Format)
//        9     1  scaling          (codec::Scaling)
//       10     1  rounding         (codec::Rounding)
//       11     1  ndims, 1..8
//       12     4  block size
//       16     8  element count
//       24     8  scale bytes
//       32     8  code bytes
//       40     4  CRC-32C of the whole payload with this field read as 0
//       44     4  reserved, 0
//       48  8*nd  dims (the last one is the row length)
//        .     .  scales, then zero padding to a multiple of 8, then codes
//
// The parser checks every field, the sizes against the layout the spec
// implies, the checksum, and the contents (no NaN/Inf scales or codes), and
// never reads outside the buffer it is given.
//
// Thread safety: the functions are reentrant. A ParsedPayload points into the
// caller's buffer, which must outlive it.
#ifndef GIFT_COMMON_CODEC_PAYLOAD_H_
#define GIFT_COMMON_CODEC_PAYLOAD_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/codec/encoded_tensor.h"

namespace gift::codec {

inline constexpr uint16_t kPayloadVersion = 1;
inline constexpr size_t kPayloadFixedHeaderBytes = 48;
inline constexpr size_t kPayloadMaxDims = 8;

struct PayloadLimits {
  // Payloads larger than this are refused before anything else is read.
  uint64_t max_bytes = uint64_t{1} << 34;  // 16 GiB
};

// Bytes the payload of `view` with this shape takes. Fails when the shape
// does not match the view (product of dims != rows * cols, last dim != cols
// for cols > 0) or the spec is invalid.
absl::StatusOr<uint64_t> PayloadSize(const EncodedView& view, absl::Span<const uint64_t> shape);

// Writes the payload into `out`, which must be exactly PayloadSize bytes.
absl::Status SerializePayload(const EncodedView& view, absl::Span<const uint64_t> shape,
                              absl::Span<uint8_t> out);

// In-place writing, so an encoder fills the send buffer directly (no copy):
//
//   auto size = PayloadSizeFor(spec, dims);                 // once, at setup
//   buffer.resize(*size);                                   // reused per step
//   auto view = StartPayload(spec, dims, buffer);           // header written
//   GIFT_RETURN_IF_ERROR(Encode(x, *view, key));            // scales + codes
//   FinishPayload(buffer);                                  // the checksum
//
// PayloadSizeFor: the bytes a `spec` tensor of this shape takes (errors as
// PayloadSize). StartPayload writes the header and the padding and returns a
// view whose scales and codes point into `out` (exactly PayloadSizeFor
// bytes, else InvalidArgument). FinishPayload computes and stores the
// CRC-32C over the finished bytes; it must run after the last write.
absl::StatusOr<uint64_t> PayloadSizeFor(const CodecSpec& spec, absl::Span<const uint64_t> shape);
absl::StatusOr<MutableEncodedView> StartPayload(const CodecSpec& spec,
                                                absl::Span<const uint64_t> shape,
                                                absl::Span<uint8_t> out);
void FinishPayload(absl::Span<uint8_t> out);

// Convenience: allocates and fills a buffer.
absl::StatusOr<std::vector<uint8_t>> SerializePayload(const EncodedView& view,
                                                      absl::Span<const uint64_t> shape);

struct ParsedPayload {
  std::vector<uint64_t> shape;
  EncodedView view;  // points into the parsed buffer
};

// Whether ParsePayload checks the stored CRC-32C: always, except where the
// caller has verified a MAC over exactly these bytes (data-plane
// authentication, common/dataplane/chunk_mac.h), which detects every change
// the CRC would; the pass over the payload is then saved.
enum class ChecksumCheck : uint8_t { kVerify, kCoveredByMac };

// Validates `bytes` and returns a view of the tensor inside them.
// InvalidArgument for malformed input (the message names the field),
// DataLoss for a checksum mismatch, OutOfRange for a payload over the limit,
// Unimplemented for a newer format version.
absl::StatusOr<ParsedPayload> ParsePayload(absl::Span<const uint8_t> bytes,
                                           const PayloadLimits& limits = {},
                                           ChecksumCheck checksum = ChecksumCheck::kVerify);

}  // namespace gift::codec

#endif  // GIFT_COMMON_CODEC_PAYLOAD_H_
