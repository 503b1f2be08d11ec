// The operations `gift-bench codec` measures, and the byte accounting behind
// its bandwidth numbers. Shared by the CPU and GPU parts so that both count
// the same way.
//
// For a rows x cols tensor of n elements whose encoding takes E bytes (codes
// plus scales):
//   encode             reads 4n,              writes E
//   decode             reads E,               writes 4n
//   decode-accumulate  reads E + 4n,          writes 4n
//   reduce (N inputs)  reads N * E,           writes 4n (the sum) + E (re-encoded)
// The "input rate" of an operation is 4n / time for all of them (the FP32
// tensor it stands for), so it compares directly with memcpy's 4n / time.
#ifndef GIFT_BENCH_CODEC_OPS_H_
#define GIFT_BENCH_CODEC_OPS_H_

#include <array>

#include "common/codec/codec_spec.h"

namespace gift::bench {

enum class CodecOp { kEncode, kDecode, kDecodeAccumulate, kReduce };

inline constexpr std::array<CodecOp, 4> kAllCodecOps = {
    CodecOp::kEncode, CodecOp::kDecode, CodecOp::kDecodeAccumulate, CodecOp::kReduce};

inline const char* CodecOpName(CodecOp op) {
  switch (op) {
    case CodecOp::kEncode:
      return "encode";
    case CodecOp::kDecode:
      return "decode";
    case CodecOp::kDecodeAccumulate:
      return "decode-acc";
    case CodecOp::kReduce:
      return "reduce";
  }
  return "?";
}

struct Traffic {
  double read = 0;     // bytes
  double written = 0;  // bytes
};

inline Traffic TrafficOf(CodecOp op, const codec::EncodedLayout& layout, int reduce_inputs) {
  const double fp32 = 4.0 * static_cast<double>(layout.num_elements);
  const double enc = static_cast<double>(layout.code_bytes + layout.scale_bytes);
  switch (op) {
    case CodecOp::kEncode:
      return {fp32, enc};
    case CodecOp::kDecode:
      return {enc, fp32};
    case CodecOp::kDecodeAccumulate:
      return {enc + fp32, fp32};
    case CodecOp::kReduce:
      return {reduce_inputs * enc, fp32 + enc};
  }
  return {};
}

// Rates of one measured operation (median time) against a copy of the same
// FP32 input (median time of the baseline).
struct Rates {
  double median_s = 0;
  double input_gbps = 0;       // 4n / median_s
  double effective_gbps = 0;   // (read + written) / median_s
  double input_ratio = 0;      // op input rate / copy input rate = t_copy / t_op
  double effective_ratio = 0;  // op effective bandwidth / copy effective bandwidth
};

inline Rates ComputeRates(double median_s, double fp32_bytes, const Traffic& traffic,
                          double copy_median_s) {
  Rates r;
  r.median_s = median_s;
  if (median_s <= 0 || copy_median_s <= 0) return r;
  r.input_gbps = fp32_bytes / median_s * 1e-9;
  r.effective_gbps = (traffic.read + traffic.written) / median_s * 1e-9;
  r.input_ratio = copy_median_s / median_s;
  // A copy of the input reads and writes 4n bytes.
  const double copy_effective = 2.0 * fp32_bytes / copy_median_s * 1e-9;
  r.effective_ratio = r.effective_gbps / copy_effective;
  return r;
}

}  // namespace gift::bench

#endif  // GIFT_BENCH_CODEC_OPS_H_
