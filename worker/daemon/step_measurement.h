// A measured step (PushPullRequest.measure_error): before the step itself,
// copies of this worker's gradients are averaged exactly (FP32, direct, the
// step's kExactMeasure key: step_key.h); after it, each tensor's average is
// compared with its exact one (relative L2 error, TensorResult.rel_l2_error),
// and the errors are summed up for metrics by whether the tensor went through
// a basis.
//
//   absl::StatusOr<StepMeasurement> m =
//       StepMeasurement::Exact(step, tensors, memory, &exchange, deadline);
//   ... the step's exchange writes the averages into `tensors` ...
//   m->Compare(tensors, memory, &response);   // rel_l2_error of each tensor
//
// Ownership: owns the exact averages and the host copies of the device
// averages it read. Thread safety: thread-compatible.
#ifndef GIFT_WORKER_DAEMON_STEP_MEASUREMENT_H_
#define GIFT_WORKER_DAEMON_STEP_MEASUREMENT_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gift/v1/worker.pb.h"
#include "worker/daemon/step_exchange.h"
#include "worker/intake/device_memory.h"
#include "worker/intake/local_tensor.h"

namespace gift::worker {

// ||got - want|| / ||want|| over n floats: 0 when both are zero, infinite
// when only `want` is.
double RelativeL2(const float* got, const float* want, uint64_t n);

class StepMeasurement {
 public:
  // Averages host copies of `tensors` (device ones read through `memory`)
  // exactly under `step`'s kExactMeasure key. Errors: a device read's, the
  // exchange's.
  static absl::StatusOr<StepMeasurement> Exact(uint64_t step,
                                               const std::vector<LocalTensor>& tensors,
                                               const DeviceMemory* memory, StepExchange* exchange,
                                               absl::Time deadline);

  // Averages given directly (tests, and callers that measured otherwise).
  StepMeasurement(std::vector<std::vector<float>> exact, StepReport report)
      : exact_(std::move(exact)), report_(report) {}

  // The exact exchange's bytes and seconds.
  const StepReport& report() const { return report_; }

  // After the step: sets the rel_l2_error of `response`'s tensors (one per
  // tensor of `tensors`, in order) from the averages `tensors` hold now;
  // device tensors are read through `memory` once (device_average keeps the
  // copy). Errors: a device read's.
  absl::Status Compare(const std::vector<LocalTensor>& tensors, const DeviceMemory* memory,
                       gift::v1::PushPullResponse* response);

  // Tensor i's average as Compare read it from the device; null for a host
  // tensor (read it in place) or before Compare.
  const std::vector<float>* device_average(size_t i) const;

  // The mean relative error of the transformed and of the direct tensors of
  // `response` (nullopt: none of that kind).
  struct Summary {
    std::optional<double> transformed;
    std::optional<double> direct;
  };
  static Summary Summarize(const gift::v1::PushPullResponse& response);

 private:
  std::vector<std::vector<float>> exact_;  // by tensor
  StepReport report_;
  std::vector<std::vector<float>> device_averages_;  // by tensor; empty for host ones
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_STEP_MEASUREMENT_H_
