// A step's per-worker sketches for the basis owners' statistics, around
// SketchExchange (worker/owner/sketch_exchange.h): computed from this
// worker's gradients before the step's exchange (Prepare), exchanged after it
// under their own step key and bounded by a timeout (Exchange), their average
// kept for the owner (Average). A sketch that could not be computed or
// exchanged (e.g. workers disagreed on the policy for one step) costs the
// owner that step's statistics only: it is counted and logged
// (`sketch_exchange_failed`), never the step's failure.
//
//   sketches.Prepare(*before, step, gradients);        // before the exchange
//   ... the step's gradients' exchange ...
//   StepSketches::Cost cost = sketches.Exchange(step, step_deadline);
//   absl::Span<const float> average = sketches.Average(tensor_id);
//
// Ownership: owns the statistics buffers; shares the session, the exchange
// and the device memory, which must outlive it. Thread safety: Prepare,
// Exchange and Average from one thread at a time (the worker's step lock);
// counters() from any.
#ifndef GIFT_WORKER_DAEMON_STEP_SKETCHES_H_
#define GIFT_WORKER_DAEMON_STEP_SKETCHES_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/control/member_session.h"
#include "gift/v1/cluster.pb.h"
#include "worker/daemon/step_exchange.h"
#include "worker/intake/device_memory.h"
#include "worker/intake/local_tensor.h"
#include "worker/owner/sketch_exchange.h"

namespace gift::worker {

class StepSketches {
 public:
  // What a step's sketches cost this worker (none: zeros).
  struct Cost {
    StepReport exchange;         // the exchange's bytes and seconds
    double compute_seconds = 0;  // computing this worker's sketches
    double exchange_seconds() const {
      return exchange.encode_seconds + exchange.wait_seconds + exchange.decode_seconds;
    }
  };
  struct Counters {
    uint64_t exchanges = 0;  // completed
    uint64_t failures = 0;   // sketches not computed or not exchanged
    uint64_t bytes_pushed = 0;
    uint64_t bytes_pulled = 0;
    double seconds = 0;  // computing and exchanging
  };

  // `memory` (may be null) reads device gradients; an exchange takes at most
  // `timeout`.
  StepSketches(const control::MemberSession* session, StepExchange* exchange,
               const DeviceMemory* memory, absl::Duration timeout);

  // This worker's sketches of `step` for `gradients` (the tensors that
  // collect at `step` under `before`, the state the step was decided on);
  // none when none does or they cannot be computed (counted).
  void Prepare(const gift::v1::ClusterState& before, uint64_t step,
               const std::vector<LocalTensor>& gradients);

  // Exchanges the prepared sketches, by `step_deadline` and within the
  // timeout; what it cost (zeros when there were none or it failed).
  Cost Exchange(uint64_t step, absl::Time step_deadline);

  // After Exchange: the average of a tensor's sketches (empty when there is
  // none for it this step).
  absl::Span<const float> Average(uint64_t tensor_id) const { return sketches_.Average(tensor_id); }

  Counters counters() const;

 private:
  void CountFailure(uint64_t step, const absl::Status& why);

  StepExchange* const exchange_;
  const DeviceMemory* const memory_;
  const absl::Duration timeout_;
  SketchExchange sketches_;
  std::vector<LocalTensor> prepared_;  // into sketches_'s buffers
  double compute_seconds_ = 0;
  mutable absl::Mutex mu_;
  Counters counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_STEP_SKETCHES_H_
