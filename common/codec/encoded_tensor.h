// Encoded tensors: views over codes and scales, and an owning container.
//
// A view does not own its memory; the caller keeps the buffers alive while
// the view is in use. Buffers may be host or device memory: the CPU codec
// takes host views, the CUDA codec device views. Sizes follow ComputeLayout.
// Scales are raw bytes (FP32 values are stored little-endian and read with
// memcpy, so a view needs no alignment).
//
// Views are plain values (thread-compatible). EncodedTensor is
// thread-compatible: concurrent reads are safe, writes need exclusion.
#ifndef GIFT_COMMON_CODEC_ENCODED_TENSOR_H_
#define GIFT_COMMON_CODEC_ENCODED_TENSOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/codec/codec_spec.h"

namespace gift::codec {

struct EncodedView {
  CodecSpec spec;
  uint64_t rows = 0;
  uint64_t cols = 0;
  const uint8_t* codes = nullptr;   // layout.code_bytes bytes
  const uint8_t* scales = nullptr;  // layout.scale_bytes bytes
};

struct MutableEncodedView {
  CodecSpec spec;
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint8_t* codes = nullptr;
  uint8_t* scales = nullptr;

  operator EncodedView() const { return EncodedView{spec, rows, cols, codes, scales}; }
};

// Owns host buffers for one encoded tensor.
class EncodedTensor {
 public:
  static absl::StatusOr<EncodedTensor> Create(const CodecSpec& spec, uint64_t rows, uint64_t cols);

  const CodecSpec& spec() const { return spec_; }
  const EncodedLayout& layout() const { return layout_; }
  EncodedView view() const;
  MutableEncodedView mutable_view();

  std::vector<uint8_t>& codes() { return codes_; }
  std::vector<uint8_t>& scales() { return scales_; }
  const std::vector<uint8_t>& codes() const { return codes_; }
  const std::vector<uint8_t>& scales() const { return scales_; }

 private:
  EncodedTensor(const CodecSpec& spec, const EncodedLayout& layout)
      : spec_(spec), layout_(layout), codes_(layout.code_bytes), scales_(layout.scale_bytes) {}

  CodecSpec spec_;
  EncodedLayout layout_;
  std::vector<uint8_t> codes_;
  std::vector<uint8_t> scales_;
};

}  // namespace gift::codec

#endif  // GIFT_COMMON_CODEC_ENCODED_TENSOR_H_
