// StepAdmission (worker/daemon/step_admission.h) with real member sessions:
// a gift-coordinator (child process) and two in-process workers.
#include "worker/daemon/step_admission.h"

#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/ucx_member.h"
#include "tools/gift-cluster/coordinator_process.h"
#include "worker/daemon/step_key.h"

namespace gift::worker {
namespace {

class StepAdmissionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto coordinator = tools::CoordinatorProcess::Start(
        {.binary = GIFT_COORDINATOR_BIN, .state_file = dir_.File("state.db")});
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
    for (int w = 0; w < 2; ++w) {
      auto worker = test::StartUcxWorker(coordinator_->address(), absl::StrCat("worker-", w));
      ASSERT_TRUE(worker.ok()) << worker.status();
      workers_.push_back(*std::move(worker));
    }
    auto both = workers_[0].session->WaitFor(
        [](const gift::v1::ClusterState& s) { return s.workers_size() == 2; }, absl::Seconds(20));
    ASSERT_TRUE(both.ok()) << both.status();
  }

  void TearDown() override {
    for (auto& w : workers_) {
      (void)w.session->Close();
      w.session.reset();
      w.engine.reset();
    }
    if (coordinator_ != nullptr) (void)coordinator_->Stop();
  }

  const control::MemberSession* session() const { return workers_[0].session.get(); }

  gift::TempDir dir_ = test::NewTempDir("gift-step-admission");
  std::unique_ptr<tools::CoordinatorProcess> coordinator_;
  std::vector<test::UcxWorker> workers_;
};

TEST_F(StepAdmissionTest, AStepIsAdmittedAboveTheLastOneInTheRunsNumberingUntilTheDrain) {
  StepAdmission admission(session(), 1);
  EXPECT_EQ(admission.Admit(0).value(), 0u);
  EXPECT_FALSE(admission.last_step().has_value());
  admission.Completed(3);
  EXPECT_EQ(admission.last_step(), std::optional<uint64_t>(3));
  absl::StatusOr<uint64_t> again = admission.Admit(3);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(again.status().message(), "step 3 is not above the last step 3"))
      << again.status();
  EXPECT_EQ(admission.Admit(4).value(), 4u);
  // A run whose step 0 is cluster step 10: its steps in the cluster's
  // numbering, and the largest that fits.
  gift::v1::RunState run;
  run.set_run_id("second");
  run.set_generation(2);
  run.set_base_step(10);
  admission.SetRun(RunSteps(run));
  EXPECT_EQ(admission.run().run().run_id(), "second");
  EXPECT_EQ(admission.Admit(0).value(), 10u);
  EXPECT_EQ(admission.Admit(kMaxTrainingStep - 10).value(), kMaxTrainingStep);
  EXPECT_EQ(admission.Admit(kMaxTrainingStep - 9).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(admission.Drain(absl::ZeroDuration()));
  EXPECT_EQ(admission.Admit(20).status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(StepAdmissionTest, TheDrainWaitsForAStepInFlightAndAnOpenStep) {
  StepAdmission admission(session(), 1);
  {
    const StepAdmission::InFlight in_flight = admission.BeginStep();
    EXPECT_FALSE(admission.Drain(absl::Milliseconds(50)));
  }
  EXPECT_TRUE(admission.Drain(absl::Milliseconds(50)));
  admission.SetOpen(true);
  std::thread finish([&] {
    absl::SleepFor(absl::Milliseconds(100));
    admission.SetOpen(false);
  });
  EXPECT_TRUE(admission.Drain(absl::Seconds(10)));  // once the open step ends
  finish.join();
}

TEST_F(StepAdmissionTest, TheFirstStepWaitsForMinWorkersAndNoLaterOneDoes) {
  StepAdmission two(session(), 2);
  EXPECT_TRUE(two.AwaitStartBarrier(0, absl::Now() + absl::Seconds(5)).ok());
  StepAdmission three(session(), 3);
  const absl::Time start = absl::Now();
  const absl::Status waited = three.AwaitStartBarrier(0, start + absl::Milliseconds(300));
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(waited.message(), "the first step waits for 3 workers; 2 joined within the step timeout");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  three.Completed(0);  // past its first step: no barrier
  EXPECT_TRUE(three.AwaitStartBarrier(1, absl::Now()).ok());
}

}  // namespace
}  // namespace gift::worker
