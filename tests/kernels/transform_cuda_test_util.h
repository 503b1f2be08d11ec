// Helpers shared by the CUDA transform tests (transform_cuda_test.cc,
// forward_encode_cuda_test.cc), on a GPU and over the host emulation: device
// detection, owned device buffers and streams, a synthetic TensorBasis and
// its conditioning. Test-only; header-only.
//
// Thread safety: none needed (one test thread).
#ifndef GIFT_TESTS_KERNELS_TRANSFORM_CUDA_TEST_UTIL_H_
#define GIFT_TESTS_KERNELS_TRANSFORM_CUDA_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "gtest/gtest.h"
#include "tests/kernels/cuda_test_stream.h"
#include "tests/transform/test_util.h"

namespace gift::kernels::cuda_test {

using transform::ResidualModel;
using transform::SideBasis;
using transform::SideBasisOptions;
using transform::Sides;

inline bool HaveDevice() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

// ---- helpers ----------------------------------------------------------------------

// `count` floats of device memory starting `offset` floats into the
// allocation (an offset of 1 gives a buffer that is not 16-byte aligned).
class DeviceFloats {
 public:
  explicit DeviceFloats(size_t count, size_t offset = 0) : offset_(offset) {
    EXPECT_EQ(cudaMalloc(&ptr_, (offset + count) * sizeof(float)), cudaSuccess);
  }
  ~DeviceFloats() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;

  float* get() const { return static_cast<float*>(ptr_) + offset_; }
  void Upload(const std::vector<float>& host) const {
    ASSERT_EQ(cudaMemcpy(get(), host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  std::vector<float> Download(size_t count) const {
    std::vector<float> host(count);
    EXPECT_EQ(cudaMemcpy(host.data(), get(), count * sizeof(float), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  void* ptr_ = nullptr;
  size_t offset_;
};

using cuda_testing::CudaStream;

inline transform::TensorBasis MakeBasis(int64_t d_out, int64_t d_in, int64_t rank, ResidualModel residual,
                      Sides sides, double p) {
  const transform::testing::Factors f = transform::testing::SampleFactors(d_out, d_in, 7, 4);
  std::optional<SideBasis> out_side, in_side;
  SideBasisOptions options;
  options.residual = residual;
  if (sides != Sides::kInput) {
    out_side.emplace(SideBasis::FromFactor(f.out, std::min(rank, d_out), options).value());
  }
  if (sides != Sides::kOutput) {
    in_side.emplace(SideBasis::FromFactor(f.in, std::min(rank, d_in), options).value());
  }
  transform::TensorBasisHeader header;
  header.tensor_id = 1;
  header.version = 1;
  header.d_out = d_out;
  header.d_in = d_in;
  header.config.sides = sides;
  header.config.power = p;
  return transform::TensorBasis::Create(header, std::move(out_side), std::move(in_side)).value();
}

// prod over the basis's sides of max_j (1 + Sig_j)^p; see the file comment.
inline double Conditioning(const transform::TensorBasis& basis) {
  const double p = basis.header().config.power;
  double kappa = 1.0;
  for (const std::optional<SideBasis>* side : {&basis.input_side(), &basis.output_side()}) {
    if (side->has_value()) kappa *= std::pow((*side)->parts().one_plus_sig.maxCoeff(), p);
  }
  return kappa;
}

}  // namespace gift::kernels::cuda_test

#endif  // GIFT_TESTS_KERNELS_TRANSFORM_CUDA_TEST_UTIL_H_
