// What a compressed tensor looks like: element format, scaling, rounding, and
// the byte layout that follows from them.
//
// A tensor of shape (d0, ..., dk) is treated as `rows` x `cols` with
// cols = dk (the last dimension) and rows = d0 * ... * d(k-1). Scaling blocks
// run along the last dimension and never cross a row; the last block of a row
// may be short.
//
// All types here are plain values; thread-compatible.
#ifndef GIFT_COMMON_CODEC_CODEC_SPEC_H_
#define GIFT_COMMON_CODEC_CODEC_SPEC_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace gift::codec {

// Element formats. Values are part of the wire format: never renumber.
enum class Format : uint8_t {
  kE4M3 = 1,   // OCP FP8 E4M3 (FN): max 448, no infinities, 0x7F/0xFF NaN.
  kE5M2 = 2,   // OCP FP8 E5M2: max 57344, IEEE-style Inf/NaN.
  kNvfp4 = 3,  // E2M1 values (max 6), blocks of 16 with an E4M3 scale each,
               // and one FP32 scale per tensor. Two codes per byte.
  kBf16 = 4,   // bfloat16, no scaling.
  kF32 = 5,    // FP32 passthrough ("fp32"): each code is the input's FP32 bit
               // pattern (4 little-endian bytes), so encode and decode are
               // exact bit copies (denormals and -0 included). Only with
               // Scaling::kNone and Rounding::kNearestEven (there is nothing
               // to round; "fp32/sr" is refused, not ignored). Like every
               // format it refuses NaN/Inf input on encode, and the payload
               // parser refuses NaN/Inf codes.
};

// How scales are chosen. Values are part of the wire format.
enum class Scaling : uint8_t {
  kNone = 0,          // Values are encoded as they are (saturating).
  kPerTensor = 1,     // One FP32 scale: amax / format max.
  kPerBlockFp32 = 2,  // One FP32 scale per block of `block_size` elements.
  kPerBlockE8M0 = 3,  // One power-of-two scale per block (MX style), chosen
                      // as the smallest 2^k with amax <= format max * 2^k,
                      // so nothing saturates.
  kNvfp4 = 4,         // The two-level NVFP4 scheme; only with Format::kNvfp4.
};

// Rounding of elements (scales are always rounded to nearest even).
enum class Rounding : uint8_t {
  kNearestEven = 0,  // Round to nearest, ties to even, saturate at max.
  kStochastic = 1,   // Unbiased: rounds up with probability equal to the
                     // fraction of the spacing; random bits from a
                     // counter-based generator keyed by RngKey.
};

// How an encoder picks each block's scale. An encoder-only choice: the
// decoder reads the stored scales whatever picked them, so it is not part of
// the payload (a parsed payload says kAmax) and changes no wire format.
enum class BlockScaleFit : uint8_t {
  kAmax = 0,          // From the block's amax alone (see Scaling).
  kLeastSquares = 1,  // NVFP4 only: the amax code or one of the few E4M3
                      // codes below it, whichever gives the block the least
                      // squared error (clipping its largest elements when
                      // that pays); common/codec/scalar.h, Nvfp4FitBlockScaleCode.
};

// The key of the stochastic-rounding stream. The same key and element index
// give the same random bits on every host and device, so runs reproduce.
struct RngKey {
  uint64_t tensor = 0;
  uint64_t step = 0;
  uint32_t rank = 0;
};

struct CodecSpec {
  Format format = Format::kE4M3;
  Scaling scaling = Scaling::kPerTensor;
  // Elements per scaling block for kPerBlockFp32 / kPerBlockE8M0 (32 or 128);
  // 16 for kNvfp4; ignored (0) otherwise.
  uint32_t block_size = 0;
  Rounding rounding = Rounding::kNearestEven;
  BlockScaleFit block_scale_fit = BlockScaleFit::kAmax;

  friend bool operator==(const CodecSpec&, const CodecSpec&) = default;
};

// Checks that the combination is supported and says why when it is not.
absl::Status Validate(const CodecSpec& spec);

// Human-readable and parseable names, e.g. "e4m3/block128/rne",
// "e5m2/tensor/sr", "nvfp4", "nvfp4/mse" (least-squares block scales), "bf16",
// "e4m3/mx32/rne", "fp32".
std::string ToString(const CodecSpec& spec);
absl::StatusOr<CodecSpec> ParseCodecSpec(absl::string_view text);

absl::string_view FormatName(Format format);

// Largest finite magnitude of an element format (448, 57344, 6, bf16 max,
// FLT_MAX).
float FormatMax(Format format);

// Bits per element of the codes (8, 8, 4, 16, 32).
int BitsPerElement(Format format);

// Byte layout of an encoded rows x cols tensor. Codes are contiguous in
// element order; for NVFP4 each row starts on a byte boundary (low nibble
// first). Scales are per block in row-major block order: FP32 values for
// kPerTensor / kPerBlockFp32, one byte each (E8M0 exponent) for
// kPerBlockE8M0, and for kNvfp4 one E4M3 byte per block followed by the
// FP32 tensor scale.
struct EncodedLayout {
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t num_elements = 0;
  uint64_t blocks_per_row = 0;  // 0 when not block-scaled
  uint64_t num_blocks = 0;      // 0 when not block-scaled
  uint64_t code_bytes = 0;
  uint64_t row_code_bytes = 0;  // bytes of codes per row
  uint64_t scale_bytes = 0;
};

// Fails (InvalidArgument) for an invalid spec, and (OutOfRange) when the
// sizes overflow 64 bits.
absl::StatusOr<EncodedLayout> ComputeLayout(const CodecSpec& spec, uint64_t rows, uint64_t cols);

// Rounding error bound for one element: |decode(encode(x)) - x| <= bound for
// an element x whose effective scale (the factor its code is multiplied by
// on decode) is `scale` (1 for unscaled formats). Where |x| / scale exceeds
// the format's range (never with amax-derived scales; the largest elements
// of a block under BlockScaleFit::kLeastSquares may) the element saturates
// and the bound adds the excess. Stochastic rounding has twice the
// nearest-rounding bound. 0 for kF32 (exact).
double ElementErrorBound(Format format, Rounding rounding, double scale, double x);

}  // namespace gift::codec

#endif  // GIFT_COMMON_CODEC_CODEC_SPEC_H_
