// Facts of the Worker API's buffer contract (proto/gift/v1/worker.proto,
// SharedBuffer and BufferSpec) that the worker checks and the clients
// respect: the one definition of each for worker/intake/registered_tensor.cc,
// worker/intake/device_memory.h and worker/client/. Header only, no CUDA.
#ifndef GIFT_COMMON_RPC_BUFFER_CONTRACT_H_
#define GIFT_COMMON_RPC_BUFFER_CONTRACT_H_

#include <cstddef>

#include "gift/v1/cluster.pb.h"

namespace gift::rpc {

// Bytes of SharedBuffer.cuda_ipc_handle: sizeof(cudaIpcMemHandle_t)
// (CUDA_IPC_HANDLE_SIZE in the CUDA headers, which this one does not include).
inline constexpr size_t kCudaIpcHandleBytes = 64;

// Bytes per element of a dtype a buffer may hold (DTYPE_FLOAT32,
// DTYPE_BFLOAT16, DTYPE_FLOAT16); 0 for any other, which the worker refuses.
inline size_t DTypeBytes(gift::v1::DType dtype) {
  switch (dtype) {
    case gift::v1::DTYPE_FLOAT32:
      return 4;
    case gift::v1::DTYPE_BFLOAT16:
    case gift::v1::DTYPE_FLOAT16:
      return 2;
    default:
      return 0;
  }
}

}  // namespace gift::rpc

#endif  // GIFT_COMMON_RPC_BUFFER_CONTRACT_H_
