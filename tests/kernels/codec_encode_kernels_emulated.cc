// The codec's encode kernels compiled as C++ for the host emulation of CUDA
// (cuda_host_emulation.h); see tests/kernels/CMakeLists.txt.
// clang-format off
#include "tests/kernels/cuda_host_emulation.h"  // must come first
#include "kernels/codec/codec_encode_kernels.cu"
// clang-format on
