// What the CUDA codec's tests (codec_cuda_test.cc) use besides the tests:
// device buffers, uploads and downloads, byte- and bit-exact comparisons
// with a readable first difference, gradient-like test data, and a stream.
// Test-only; included by codec_cuda_test.cc alone, in both of its builds
// (on a GPU and over the host emulation).
//
// Thread safety: none needed (one test thread).
#ifndef GIFT_TESTS_KERNELS_CODEC_CUDA_TEST_UTIL_H_
#define GIFT_TESTS_KERNELS_CODEC_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/codec/codec.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"
#include "tests/kernels/cuda_test_stream.h"

namespace gift::kernels::codec_cuda_testing {

using codec::CodecSpec;
using codec::MutableEncodedView;
using codec::testing::Bits;
using codec::testing::FromBits;

// Device memory: `bytes` usable bytes starting `offset` bytes into the
// allocation (an odd offset gives a misaligned buffer). Exactly
// offset + bytes are allocated, so that a memory checker (the emulated build
// under AddressSanitizer) sees any access past the end.
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes, size_t offset = 0) : offset_(offset) {
    EXPECT_EQ(cudaMalloc(&ptr_, offset + bytes), cudaSuccess);
  }
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  uint8_t* get() const { return static_cast<uint8_t*>(ptr_) + offset_; }
  float* floats() const { return reinterpret_cast<float*>(get()); }

 private:
  void* ptr_ = nullptr;
  size_t offset_;
};

inline void Upload(void* device, const void* host, size_t bytes) {
  if (bytes > 0) {
    ASSERT_EQ(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
  }
}

template <typename T>
std::vector<T> Download(const void* device, size_t count) {
  std::vector<T> host(count);
  if (count > 0) {
    EXPECT_EQ(cudaMemcpy(host.data(), device, count * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return host;
}

inline ::testing::AssertionResult SameBytes(const std::vector<uint8_t>& want,
                                            const std::vector<uint8_t>& got) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << "sizes " << want.size() << " vs " << got.size();
  }
  if (want.empty() || std::memcmp(want.data(), got.data(), want.size()) == 0) {
    return ::testing::AssertionSuccess();
  }
  size_t first = 0, count = 0;
  for (size_t i = want.size(); i-- > 0;) {
    if (want[i] != got[i]) {
      first = i;
      ++count;
    }
  }
  return ::testing::AssertionFailure()
         << count << " of " << want.size() << " bytes differ; first at " << first << ": cpu 0x"
         << std::hex << int{want[first]} << ", gpu 0x" << int{got[first]};
}

inline ::testing::AssertionResult SameFloatBits(const std::vector<float>& want,
                                                const std::vector<float>& got) {
  if (want.size() != got.size()) {
    return ::testing::AssertionFailure() << "sizes " << want.size() << " vs " << got.size();
  }
  if (want.empty() || std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0) {
    return ::testing::AssertionSuccess();
  }
  size_t first = 0, count = 0;
  for (size_t i = want.size(); i-- > 0;) {
    if (Bits(want[i]) != Bits(got[i])) {
      first = i;
      ++count;
    }
  }
  return ::testing::AssertionFailure()
         << count << " of " << want.size() << " floats differ; first at " << first << ": cpu "
         << want[first] << " (0x" << std::hex << Bits(want[first]) << "), gpu " << std::dec
         << got[first] << " (0x" << std::hex << Bits(got[first]) << ")";
}

// Gradient-like data over ~7 decades with zeros, -0.0 and denormals
// (codec::testing::GradientLike), plus: an all-zero row, a block of
// denormals only, values at and near every format's max and an E4M3 tie.
// With `huge`, tensors of more than 1000 elements also get 1e30 and -3e38,
// which saturate the unscaled formats (kept out of small tensors, where they
// would flush everything else to zero under per-tensor scaling).
inline std::vector<float> TestData(uint64_t rows, uint64_t cols, uint32_t seed, bool huge = true) {
  std::vector<float> x = codec::testing::GradientLike(rows, cols, seed);
  const uint64_t n = rows * cols;
  if (n == 0) return x;
  if (rows >= 3) {
    for (uint64_t c = 0; c < cols; ++c) x[1 * cols + c] = 0.0f;
    for (uint64_t c = 16; c < std::min<uint64_t>(cols, 48); ++c) {
      x[2 * cols + c] =
          FromBits(static_cast<uint32_t>(1 + 9973 * c) & 0x7FFFFFu) * (c % 2 ? -1.0f : 1.0f);
    }
  }
  const float specials[] = {448.0f, -447.5f, 464.0f,   -57344.0f, 57000.0f, 6.0f,    -5.5f,
                            0.0f,   -0.0f,   1.5e-45f, -1.0e-38f, 240.0f,   65504.0f};
  uint64_t at = (static_cast<uint64_t>(seed) * 7919u + 3) % n;
  for (const float v : specials) {
    x[at] = v;
    at = (at + 104729u) % n;
  }
  if (huge && n > 1000) {
    x[n / 3] = 1e30f;
    x[n / 2 + 1] = -3e38f;
  }
  return x;
}

struct Shape {
  uint64_t rows;
  uint64_t cols;
};

inline std::string ShapeName(const Shape& s) { return absl::StrCat(s.rows, "x", s.cols); }

inline void PrintTo(const Shape& s, std::ostream* os) { *os << ShapeName(s); }

inline std::string SpecParamName(const std::string& spec) {
  return absl::StrReplaceAll(spec, {{"/", "_"}});
}

// Encoded buffers on the device, optionally at odd offsets from the
// allocation (to exercise the unaligned paths).
struct DeviceEncoded {
  DeviceEncoded(const codec::EncodedLayout& layout, size_t code_offset, size_t scale_offset)
      : codes_buf(layout.code_bytes, code_offset),
        scales_buf(layout.scale_bytes, scale_offset),
        layout(layout),
        codes(codes_buf.get()),
        scales(scales_buf.get()) {}

  MutableEncodedView view(const CodecSpec& spec) const {
    return MutableEncodedView{spec, layout.rows, layout.cols, codes, scales};
  }

  DeviceBuffer codes_buf;
  DeviceBuffer scales_buf;
  codec::EncodedLayout layout;
  uint8_t* codes;
  uint8_t* scales;
};

using cuda_testing::CudaStream;

}  // namespace gift::kernels::codec_cuda_testing

#endif  // GIFT_TESTS_KERNELS_CODEC_CUDA_TEST_UTIL_H_
