#include "common/codec/codec_spec_proto.h"

#include "absl/strings/str_cat.h"

namespace gift::codec {

absl::StatusOr<CodecSpec> FromProto(const gift::v1::CodecSpec& proto) {
  CodecSpec spec;
  switch (proto.format()) {
    case gift::v1::ELEMENT_FORMAT_E4M3:
      spec.format = Format::kE4M3;
      break;
    case gift::v1::ELEMENT_FORMAT_E5M2:
      spec.format = Format::kE5M2;
      break;
    case gift::v1::ELEMENT_FORMAT_NVFP4:
      spec.format = Format::kNvfp4;
      break;
    case gift::v1::ELEMENT_FORMAT_BF16:
      spec.format = Format::kBf16;
      break;
    case gift::v1::ELEMENT_FORMAT_F32:
      spec.format = Format::kF32;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("codec spec: element format ", proto.format(),
                                                     " is unspecified or unknown"));
  }
  switch (proto.scaling()) {
    case gift::v1::SCALING_NONE:
      spec.scaling = Scaling::kNone;
      break;
    case gift::v1::SCALING_PER_TENSOR:
      spec.scaling = Scaling::kPerTensor;
      break;
    case gift::v1::SCALING_PER_BLOCK_FP32:
      spec.scaling = Scaling::kPerBlockFp32;
      break;
    case gift::v1::SCALING_PER_BLOCK_E8M0:
      spec.scaling = Scaling::kPerBlockE8M0;
      break;
    case gift::v1::SCALING_NVFP4:
      spec.scaling = Scaling::kNvfp4;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("codec spec: scaling ", proto.scaling(), " is unspecified or unknown"));
  }
  switch (proto.rounding()) {
    case gift::v1::ROUNDING_NEAREST_EVEN:
      spec.rounding = Rounding::kNearestEven;
      break;
    case gift::v1::ROUNDING_STOCHASTIC:
      spec.rounding = Rounding::kStochastic;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("codec spec: rounding ", proto.rounding(), " is unspecified or unknown"));
  }
  switch (proto.block_scale_fit()) {
    case gift::v1::BLOCK_SCALE_FIT_AMAX:
      spec.block_scale_fit = BlockScaleFit::kAmax;
      break;
    case gift::v1::BLOCK_SCALE_FIT_LEAST_SQUARES:
      spec.block_scale_fit = BlockScaleFit::kLeastSquares;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("codec spec: block scale fit ", proto.block_scale_fit(), " is unknown"));
  }
  spec.block_size = proto.block_size();
  if (absl::Status s = Validate(spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("codec spec: ", s.message()));
  }
  return spec;
}

gift::v1::CodecSpec ToProto(const CodecSpec& spec) {
  gift::v1::CodecSpec p;
  switch (spec.format) {
    case Format::kE4M3:
      p.set_format(gift::v1::ELEMENT_FORMAT_E4M3);
      break;
    case Format::kE5M2:
      p.set_format(gift::v1::ELEMENT_FORMAT_E5M2);
      break;
    case Format::kNvfp4:
      p.set_format(gift::v1::ELEMENT_FORMAT_NVFP4);
      break;
    case Format::kBf16:
      p.set_format(gift::v1::ELEMENT_FORMAT_BF16);
      break;
    case Format::kF32:
      p.set_format(gift::v1::ELEMENT_FORMAT_F32);
      break;
  }
  switch (spec.scaling) {
    case Scaling::kNone:
      p.set_scaling(gift::v1::SCALING_NONE);
      break;
    case Scaling::kPerTensor:
      p.set_scaling(gift::v1::SCALING_PER_TENSOR);
      break;
    case Scaling::kPerBlockFp32:
      p.set_scaling(gift::v1::SCALING_PER_BLOCK_FP32);
      break;
    case Scaling::kPerBlockE8M0:
      p.set_scaling(gift::v1::SCALING_PER_BLOCK_E8M0);
      break;
    case Scaling::kNvfp4:
      p.set_scaling(gift::v1::SCALING_NVFP4);
      break;
  }
  p.set_rounding(spec.rounding == Rounding::kStochastic ? gift::v1::ROUNDING_STOCHASTIC
                                                        : gift::v1::ROUNDING_NEAREST_EVEN);
  p.set_block_scale_fit(spec.block_scale_fit == BlockScaleFit::kLeastSquares
                            ? gift::v1::BLOCK_SCALE_FIT_LEAST_SQUARES
                            : gift::v1::BLOCK_SCALE_FIT_AMAX);
  p.set_block_size(spec.block_size);
  return p;
}

}  // namespace gift::codec
