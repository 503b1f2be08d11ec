// A spoofing non-member for `gift-bench faults` (fault kind "spoof"): a
// process that is not a member of the cluster, reads the public cluster state
// (GetStatus) and sends every server forged FP32 pushes of the current epoch
// that claim to come from rank `forged_rank`, for every chunk of `tensor_id`
// at `step`, each element `value`. Whether a server counts them shows in the
// step's average; until data-plane pushes are authenticated they are
// accepted whenever they arrive before the real rank's push.
//
// Thread safety: one call at a time per object. Ownership: owns its UCX
// transport (its own progress thread), closed when destroyed.
#ifndef GIFT_BENCH_FAULT_SPOOFER_H_
#define GIFT_BENCH_FAULT_SPOOFER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/transport/transport.h"

namespace gift::bench {

class FaultSpoofer {
 public:
  static absl::StatusOr<std::unique_ptr<FaultSpoofer>> Create();

  // Sends the forged pushes and waits for their send callbacks. Returns how
  // many chunks were sent.
  absl::StatusOr<int> SendForgedPushes(const std::string& coordinator_address, uint64_t tensor_id,
                                       uint64_t step, uint32_t forged_rank, float value);

 private:
  explicit FaultSpoofer(std::unique_ptr<transport::Transport> t) : transport_(std::move(t)) {}
  std::unique_ptr<transport::Transport> transport_;
};

}  // namespace gift::bench

#endif  // GIFT_BENCH_FAULT_SPOOFER_H_
