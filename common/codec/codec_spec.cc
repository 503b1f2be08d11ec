#include "common/codec/codec_spec.h"

#include <cmath>
#include <limits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/codec/element_loops.h"
#include "common/codec/scalar.h"

namespace gift::codec {
namespace {

bool IsKnownFormat(Format f) {
  switch (f) {
    case Format::kE4M3:
    case Format::kE5M2:
    case Format::kNvfp4:
    case Format::kBf16:
    case Format::kF32:
      return true;
  }
  return false;
}

bool IsBlockScaled(Scaling s) {
  return s == Scaling::kPerBlockFp32 || s == Scaling::kPerBlockE8M0 || s == Scaling::kNvfp4;
}

// a * b, or false on 64-bit overflow.
bool MulOk(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

}  // namespace

absl::string_view FormatName(Format format) {
  switch (format) {
    case Format::kE4M3:
      return "e4m3";
    case Format::kE5M2:
      return "e5m2";
    case Format::kNvfp4:
      return "nvfp4";
    case Format::kBf16:
      return "bf16";
    case Format::kF32:
      return "fp32";
  }
  return "unknown";
}

float FormatMax(Format format) {
  switch (format) {
    case Format::kE4M3:
      return 448.0f;
    case Format::kE5M2:
      return 57344.0f;
    case Format::kNvfp4:
      return 6.0f;
    case Format::kBf16:
      return scalar::Dequantize(scalar::kBf16, scalar::kBf16.max_code);
    case Format::kF32:
      return std::numeric_limits<float>::max();
  }
  return 0.0f;
}

int BitsPerElement(Format format) {
  switch (format) {
    case Format::kE4M3:
    case Format::kE5M2:
      return 8;
    case Format::kNvfp4:
      return 4;
    case Format::kBf16:
      return 16;
    case Format::kF32:
      return 32;
  }
  return 0;
}

absl::Status Validate(const CodecSpec& spec) {
  if (!IsKnownFormat(spec.format)) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown element format ", static_cast<int>(spec.format)));
  }
  if (spec.rounding != Rounding::kNearestEven && spec.rounding != Rounding::kStochastic) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown rounding mode ", static_cast<int>(spec.rounding)));
  }
  const std::string name(FormatName(spec.format));
  switch (spec.block_scale_fit) {
    case BlockScaleFit::kAmax:
      break;
    case BlockScaleFit::kLeastSquares:
      if (spec.scaling != Scaling::kNvfp4) {
        return absl::InvalidArgumentError(
            absl::StrCat("least-squares block scales (\"mse\") apply to nvfp4 only, not ", name));
      }
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown block scale fit ", static_cast<int>(spec.block_scale_fit)));
  }
  if (spec.format == Format::kF32) {
    // Exact passthrough: no scaling, no blocks, nothing to round.
    if (spec.scaling != Scaling::kNone) {
      return absl::InvalidArgumentError(
          "fp32 is an exact passthrough and takes no scaling (use \"fp32\")");
    }
    if (spec.block_size != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("block_size ", spec.block_size, " given for fp32, which has no blocks"));
    }
    if (spec.rounding != Rounding::kNearestEven) {
      return absl::InvalidArgumentError(
          "fp32 is an exact passthrough; stochastic rounding does not apply (use \"fp32\")");
    }
    return absl::OkStatus();
  }
  switch (spec.scaling) {
    case Scaling::kNone:
    case Scaling::kPerTensor:
      if (spec.format == Format::kNvfp4) {
        return absl::InvalidArgumentError(
            "nvfp4 needs its own two-level scaling (Scaling::kNvfp4)");
      }
      if (spec.format == Format::kBf16 && spec.scaling != Scaling::kNone) {
        return absl::InvalidArgumentError("bf16 has FP32's range and takes no scaling");
      }
      if (spec.block_size != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("block_size ", spec.block_size, " given for a scaling without blocks"));
      }
      return absl::OkStatus();
    case Scaling::kPerBlockFp32:
    case Scaling::kPerBlockE8M0:
      if (spec.format != Format::kE4M3 && spec.format != Format::kE5M2) {
        return absl::InvalidArgumentError(
            absl::StrCat("block scaling applies to e4m3 and e5m2, not ", name));
      }
      if (spec.block_size != 32 && spec.block_size != 128) {
        return absl::InvalidArgumentError(
            absl::StrCat("block_size must be 32 or 128, got ", spec.block_size));
      }
      return absl::OkStatus();
    case Scaling::kNvfp4:
      if (spec.format != Format::kNvfp4) {
        return absl::InvalidArgumentError(
            absl::StrCat("nvfp4 scaling applies to the nvfp4 format only, not ", name));
      }
      if (spec.block_size != 16) {
        return absl::InvalidArgumentError(
            absl::StrCat("nvfp4 blocks hold 16 elements, got block_size ", spec.block_size));
      }
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown scaling mode ", static_cast<int>(spec.scaling)));
}

std::string ToString(const CodecSpec& spec) {
  std::string out(FormatName(spec.format));
  switch (spec.scaling) {
    case Scaling::kNone:
      if (spec.format != Format::kBf16 && spec.format != Format::kF32) {
        absl::StrAppend(&out, "/none");
      }
      break;
    case Scaling::kPerTensor:
      absl::StrAppend(&out, "/tensor");
      break;
    case Scaling::kPerBlockFp32:
      absl::StrAppend(&out, "/block", spec.block_size);
      break;
    case Scaling::kPerBlockE8M0:
      absl::StrAppend(&out, "/mx", spec.block_size);
      break;
    case Scaling::kNvfp4:
      break;
  }
  if (spec.block_scale_fit == BlockScaleFit::kLeastSquares) absl::StrAppend(&out, "/mse");
  if (spec.rounding == Rounding::kStochastic) absl::StrAppend(&out, "/sr");
  return out;
}

absl::StatusOr<CodecSpec> ParseCodecSpec(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '/');
  CodecSpec spec;
  const absl::string_view fmt = parts[0];
  if (fmt == "e4m3") {
    spec.format = Format::kE4M3;
  } else if (fmt == "e5m2") {
    spec.format = Format::kE5M2;
  } else if (fmt == "nvfp4") {
    spec = CodecSpec{Format::kNvfp4, Scaling::kNvfp4, 16, Rounding::kNearestEven};
  } else if (fmt == "bf16") {
    spec = CodecSpec{Format::kBf16, Scaling::kNone, 0, Rounding::kNearestEven};
  } else if (fmt == "fp32") {
    spec = CodecSpec{Format::kF32, Scaling::kNone, 0, Rounding::kNearestEven};
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown format '", fmt, "' in codec spec '",
                                                   text,
                                                   "' (want e4m3, e5m2, nvfp4, bf16 or fp32)"));
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    const absl::string_view p = parts[i];
    uint32_t n = 0;
    if (p == "rne") {
      spec.rounding = Rounding::kNearestEven;
    } else if (p == "sr") {
      spec.rounding = Rounding::kStochastic;
    } else if (p == "mse") {
      spec.block_scale_fit = BlockScaleFit::kLeastSquares;
    } else if (p == "none") {
      spec.scaling = Scaling::kNone;
      spec.block_size = 0;
    } else if (p == "tensor") {
      spec.scaling = Scaling::kPerTensor;
      spec.block_size = 0;
    } else if (absl::StartsWith(p, "block") && absl::SimpleAtoi(p.substr(5), &n)) {
      spec.scaling = Scaling::kPerBlockFp32;
      spec.block_size = n;
    } else if (absl::StartsWith(p, "mx") && absl::SimpleAtoi(p.substr(2), &n)) {
      spec.scaling = Scaling::kPerBlockE8M0;
      spec.block_size = n;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown part '", p, "' in codec spec '", text,
                       "' (want none, tensor, blockN, mxN, mse, rne or sr)"));
    }
  }
  if (absl::Status s = Validate(spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("codec spec '", text, "': ", s.message()));
  }
  return spec;
}

absl::StatusOr<EncodedLayout> ComputeLayout(const CodecSpec& spec, uint64_t rows, uint64_t cols) {
  if (absl::Status s = Validate(spec); !s.ok()) return s;
  EncodedLayout l;
  l.rows = rows;
  l.cols = cols;
  if (!MulOk(rows, cols, &l.num_elements)) {
    return absl::OutOfRangeError(absl::StrCat("tensor of ", rows, " x ", cols, " is too large"));
  }
  const int bits = BitsPerElement(spec.format);
  l.row_code_bytes = bits == 4 ? cols / 2 + cols % 2 : cols * (bits / 8);
  if (cols > (uint64_t{1} << 60) || !MulOk(rows, l.row_code_bytes, &l.code_bytes)) {
    return absl::OutOfRangeError(absl::StrCat("tensor of ", rows, " x ", cols, " is too large"));
  }
  if (IsBlockScaled(spec.scaling)) {
    l.blocks_per_row = cols / spec.block_size + (cols % spec.block_size != 0 ? 1 : 0);
    if (!MulOk(rows, l.blocks_per_row, &l.num_blocks)) {
      return absl::OutOfRangeError("too many scaling blocks");
    }
  }
  switch (spec.scaling) {
    case Scaling::kNone:
      l.scale_bytes = 0;
      break;
    case Scaling::kPerTensor:
      l.scale_bytes = 4;
      break;
    case Scaling::kPerBlockFp32:
      l.scale_bytes = 4 * l.num_blocks;
      break;
    case Scaling::kPerBlockE8M0:
      l.scale_bytes = l.num_blocks;
      break;
    case Scaling::kNvfp4:
      l.scale_bytes = l.num_blocks + 4;
      break;
  }
  return l;
}

double ElementErrorBound(Format format, Rounding rounding, double scale, double x) {
  if (format == Format::kF32) return 0.0;  // a bit copy
  const scalar::MiniFloat& f = internal::MiniFloatOf(format);
  const int emin = 1 - f.bias;
  // An element beyond the format's range at this scale saturates: its error
  // is the excess plus the rounding error of the largest value.
  const double top = static_cast<double>(FormatMax(format)) * scale;
  double excess = 0.0;
  double ax = std::fabs(x);
  if (scale > 0 && ax > top) {
    excess = ax - top;
    ax = top;
  }
  // Spacing of the target format at |x| / scale (subnormal spacing below emin).
  int e = emin;
  if (scale > 0 && ax > 0) e = std::max(emin, static_cast<int>(std::floor(std::log2(ax / scale))));
  const double spacing = std::ldexp(1.0, e - f.mbits) * scale;
  const double rounding_err = rounding == Rounding::kStochastic ? spacing : 0.5 * spacing;
  // FP32 roundings around the quantizer: the reciprocal of the scale, the
  // scaled value, and the decoded product (each <= 2^-24 relative).
  const double fp32_slop = 8.0 * std::ldexp(ax + excess + rounding_err, -24);
  return excess + rounding_err + fp32_slop;
}

}  // namespace gift::codec
