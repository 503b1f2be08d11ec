// Conversions between codec::CodecSpec and gift.v1.CodecSpec.
// Stateless; thread-safe.
#ifndef GIFT_COMMON_CODEC_CODEC_SPEC_PROTO_H_
#define GIFT_COMMON_CODEC_CODEC_SPEC_PROTO_H_

#include "absl/status/statusor.h"
#include "common/codec/codec_spec.h"
#include "gift/v1/codec.pb.h"

namespace gift::codec {

// Fails with InvalidArgument for unspecified or unknown enum values and for
// combinations Validate() refuses.
absl::StatusOr<CodecSpec> FromProto(const gift::v1::CodecSpec& proto);

gift::v1::CodecSpec ToProto(const CodecSpec& spec);

}  // namespace gift::codec

#endif  // GIFT_COMMON_CODEC_CODEC_SPEC_PROTO_H_
