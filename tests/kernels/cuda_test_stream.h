// A non-blocking CUDA stream for tests (a real device or the host
// emulation), destroyed with its owner; creation is checked with EXPECT.
#ifndef GIFT_TESTS_KERNELS_CUDA_TEST_STREAM_H_
#define GIFT_TESTS_KERNELS_CUDA_TEST_STREAM_H_

#include <cuda_runtime_api.h>

#include "common/base/unique_handle.h"
#include "gtest/gtest.h"

namespace gift::kernels::cuda_testing {

class CudaStream {
 public:
  CudaStream() {
    EXPECT_EQ(cudaStreamCreateWithFlags(s_.put(), cudaStreamNonBlocking), cudaSuccess);
  }
  cudaStream_t get() const { return s_.get(); }

 private:
  UniqueHandle<cudaStream_t, cudaStreamDestroy> s_;
};

}  // namespace gift::kernels::cuda_testing

#endif  // GIFT_TESTS_KERNELS_CUDA_TEST_STREAM_H_
