// The step key a worker puts in its chunks' headers: the training step, and
// in its two top bits which exchange of that step the chunks belong to, so
// that the servers keep the exchanges of one step apart (they key chunks by
// epoch, step and tensor, and know nothing of these bits).
//
//   bit 63  the exact FP32 exchange a measured step adds (the reference its
//           codec error is measured against);
//   bit 62  the step's sketch exchange (per-worker statistics, after the
//           step's gradients);
//   neither the step's gradients themselves.
//
// Training steps are therefore at most kMaxTrainingStep; the Worker API
// refuses larger ones.
#ifndef GIFT_WORKER_DAEMON_STEP_KEY_H_
#define GIFT_WORKER_DAEMON_STEP_KEY_H_

#include <cstdint>

namespace gift::worker {

enum class ExchangeKind : uint64_t {
  kGradients = 0,
  kExactMeasure = uint64_t{1} << 63,
  kSketches = uint64_t{1} << 62,
};

inline constexpr uint64_t kMaxTrainingStep = (uint64_t{1} << 62) - 1;

// The key of `exchange` of training `step` (step <= kMaxTrainingStep).
constexpr uint64_t StepKey(uint64_t step, ExchangeKind exchange) {
  return step | static_cast<uint64_t>(exchange);
}

// "the gradients", "the exact measurement", "the sketches": for messages,
// whose data-path parts name the step by its key.
constexpr const char* ExchangeName(ExchangeKind exchange) {
  switch (exchange) {
    case ExchangeKind::kGradients:
      return "the gradients";
    case ExchangeKind::kExactMeasure:
      return "the exact measurement";
    case ExchangeKind::kSketches:
      return "the sketches";
  }
  return "an exchange";
}

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_STEP_KEY_H_
