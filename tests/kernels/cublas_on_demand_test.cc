// cuBLAS loaded on first use (kernels/transform/cublas_on_demand.cc): a
// binary with the device transform starts without libcublas in its address
// space and maps it at its first cuBLAS call; the calls then reach the
// library's own functions.
#include <cublas_v2.h>

#include <fstream>
#include <sstream>
#include <string>

#include "gtest/gtest.h"

namespace {

bool CublasMapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("libcublas") != std::string::npos;
}

// One process per test (gtest_discover_tests), so this one starts fresh.
TEST(CublasOnDemandTest, LoadsTheLibraryAtTheFirstCallNotAtStart) {
  EXPECT_FALSE(CublasMapped()) << "libcublas was loaded before any cuBLAS call";
  // Only the library's own table names a status CUBLAS_STATUS_SUCCESS; the
  // stand-in of a library that did not load says NOT_INITIALIZED.
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_SUCCESS), "CUBLAS_STATUS_SUCCESS");
  EXPECT_TRUE(CublasMapped());
  EXPECT_STRNE(cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED), "");
}

TEST(CublasOnDemandTest, ACallWithoutADeviceFailsWithAStatus) {
  cublasHandle_t handle = nullptr;
  const cublasStatus_t status = cublasCreate_v2(&handle);
  if (status == CUBLAS_STATUS_SUCCESS) {  // a machine with a GPU
    EXPECT_EQ(cublasDestroy_v2(handle), CUBLAS_STATUS_SUCCESS);
    return;
  }
  EXPECT_NE(std::string(cublasGetStatusName(status)), "");
}

}  // namespace
