// The process-wide settings of the BLAS library that the FP32 transform
// (tensor_basis_fp32.h) runs on: OpenBLAS, called through CBLAS.
//
// OpenBLAS keeps one thread count for the whole process, and every SGEMM
// the transform issues uses that many threads (the caller's thread plus
// threads - 1 of OpenBLAS's own). Its default is OPENBLAS_NUM_THREADS, else
// one per core. A process that runs several transforms side by side (e.g. 4
// workers on 2 cores) sets it once at startup.
//
// Thread safety: BlasThreads and BlasLibrary may be called from any thread.
// SetBlasThreads must not run while another thread is inside a BLAS call
// (set it at startup, or between transforms).
#ifndef GIFT_COMMON_TRANSFORM_BLAS_RUNTIME_H_
#define GIFT_COMMON_TRANSFORM_BLAS_RUNTIME_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace gift::transform {

// Sets the threads of every later BLAS call of the process; threads in
// [1, 1024], else InvalidArgument (and nothing changes). OpenBLAS may run
// fewer when it was built for fewer (its MAX_THREADS).
absl::Status SetBlasThreads(int threads);

// The thread count BLAS calls use now.
int BlasThreads();

// The library and its build, e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY
// Zen MAX_THREADS=64" (openblas_get_config() plus the core it chose).
std::string BlasLibrary();

// A dimension or stride as CBLAS takes it (int). The callers' matrices are
// far below 2^31 elements a side.
inline int BlasInt(int64_t v) { return static_cast<int>(v); }

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_BLAS_RUNTIME_H_
