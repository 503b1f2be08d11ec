#include "worker/daemon/step_wait_reporter.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/logging.h"
#include "common/control/member_text.h"

namespace gift::worker {

using logging::Level;
using logging::Log;

std::string DescribeStepWait(const gift::v1::StepWait& wait) {
  if (wait.missing().empty()) {
    return absl::StrCat("every rank began step ", wait.step(),
                        " (the servers' results are missing)");
  }
  std::vector<std::string> who;
  for (const gift::v1::Member& m : wait.missing()) {
    who.push_back(control::DescribeMember(
        m, absl::StrCat(
               ", last step ", m.last_step(),
               m.registration_error().empty()
                   ? ""
                   : absl::StrCat(", its registration was refused: ", m.registration_error()))));
  }
  return absl::StrCat("waiting for ", absl::StrJoin(who, ", "), " that ",
                      who.size() == 1 ? "has" : "have", " not begun step ", wait.step());
}

StepWaitReporter::StepWaitReporter(control::MemberSession* session, StepWaitReporterOptions options)
    : session_(session), options_(options), thread_([this] { Loop(); }) {}

StepWaitReporter::~StepWaitReporter() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  thread_.join();
}

void StepWaitReporter::Begin(uint64_t step) {
  session_->SetWaitingStep(step);
  absl::MutexLock lock(&mu_);
  step_ = step;
  began_ = absl::Now();
}

void StepWaitReporter::End() {
  session_->SetWaitingStep(0);
  absl::MutexLock lock(&mu_);
  step_ = 0;
}

uint64_t StepWaitReporter::step() const {
  absl::MutexLock lock(&mu_);
  return step_;
}

std::string StepWaitReporter::Describe(uint64_t step) {
  (void)session_->HeartbeatNow();
  const gift::v1::StepWait wait = session_->step_wait();
  if (step == 0 || wait.step() != step) return "";
  return DescribeStepWait(wait);
}

void StepWaitReporter::Loop() {
  uint64_t step = 0;  // the step the loop is following
  bool beat = false;
  absl::Time next_log = absl::InfiniteFuture();
  while (true) {
    absl::Time began;
    {
      absl::MutexLock lock(&mu_);
      // Wake on a new step, on stopping, or at the next thing to do.
      const uint64_t seen = step;
      auto changed = [this, seen]()
                         ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || step_ != seen; };
      absl::Time wake = absl::InfiniteFuture();
      if (step != 0) wake = beat ? next_log : began_ + options_.beat_after;
      mu_.AwaitWithDeadline(absl::Condition(&changed), wake);
      if (stopping_) return;
      if (step_ != step) {
        step = step_;
        beat = false;
        next_log = step_ == 0 ? absl::InfiniteFuture() : began_ + options_.log_after;
        continue;
      }
      if (step == 0) continue;
      began = began_;
    }
    const absl::Time now = absl::Now();
    if (!beat) {
      if (now < began + options_.beat_after) continue;
      (void)session_->HeartbeatNow();  // the coordinator learns the step began
      beat = true;
      continue;
    }
    if (now < next_log) continue;
    const std::string text = Describe(step);
    next_log = now + options_.log_every;
    if (text.empty()) continue;  // no answer for this step (yet)
    Log(Level::kWarning, "step_waiting",
        {{"step", step}, {"waited_s", absl::ToDoubleSeconds(now - began)}, {"waiting_for", text}});
  }
}

}  // namespace gift::worker
