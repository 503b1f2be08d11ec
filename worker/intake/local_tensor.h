// A tensor the local training process registered, as the worker's step
// planner (worker/plan/step_planner.h) and statistics read it: its id and
// name, its 2-D view and where its data lives. Plain data.
#ifndef GIFT_WORKER_INTAKE_LOCAL_TENSOR_H_
#define GIFT_WORKER_INTAKE_LOCAL_TENSOR_H_

#include <cstdint>
#include <string>

namespace gift::worker {

// A tensor registered by the local training process.
struct LocalTensor {
  uint64_t tensor_id = 0;
  std::string name;
  uint64_t rows = 0;      // product of all dimensions but the last
  uint64_t cols = 0;      // the last dimension
  float* data = nullptr;  // not owned
  // `data` is CUDA device memory (registered_tensor.h): the host never
  // dereferences it (ReadTensor copies it); TensorStep::device.
  bool device = false;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_INTAKE_LOCAL_TENSOR_H_
