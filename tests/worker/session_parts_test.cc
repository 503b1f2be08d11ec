// The worker daemon's parts that need a real member session, StepAdmission
// (worker/daemon/step_admission.h) and OwnerDuties (owner_duties.h), with a
// gift-coordinator (child process) and two in-process workers.
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/control/coordinator_client.h"
#include "gtest/gtest.h"
#include "tests/testing/state_plans.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/ucx_member.h"
#include "tools/gift-cluster/coordinator_process.h"
#include "worker/daemon/owner_duties.h"
#include "worker/daemon/step_admission.h"
#include "worker/daemon/step_key.h"

namespace gift::worker {
namespace {

class SessionPartsTest : public ::testing::Test {
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

  void SetPolicy(const std::function<void(gift::v1::Policy*)>& change) {
    control::CoordinatorClient client(
        control::CoordinatorClient::MakeChannel(coordinator_->address()), absl::Seconds(30));
    auto policy = client.GetPolicy();
    ASSERT_TRUE(policy.ok()) << policy.status();
    gift::v1::Policy p = *policy;
    change(&p);
    ASSERT_TRUE(client.SetPolicy(p, policy->version()).ok());
  }

  void TearDown() override {
    for (auto& w : workers_) {
      (void)w.session->Close();
      w.session.reset();
      w.engine.reset();
    }
    if (coordinator_ != nullptr) (void)coordinator_->Stop();
  }

  control::MemberSession* session() const { return workers_[0].session.get(); }

  gift::TempDir dir_ = test::NewTempDir("gift-step-admission");
  std::unique_ptr<tools::CoordinatorProcess> coordinator_;
  std::vector<test::UcxWorker> workers_;
};

TEST_F(SessionPartsTest,
       StepAdmissionAStepIsAdmittedAboveTheLastOneInTheRunsNumberingUntilTheDrain) {
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

TEST_F(SessionPartsTest, StepAdmissionTheDrainWaitsForAStepInFlightAndAnOpenStep) {
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

TEST_F(SessionPartsTest, StepAdmissionTheFirstStepWaitsForMinWorkersAndNoLaterOneDoes) {
  StepAdmission two(session(), 2);
  EXPECT_TRUE(two.AwaitStartBarrier(0, absl::Now() + absl::Seconds(5)).ok());
  StepAdmission three(session(), 3);
  const absl::Time start = absl::Now();
  const absl::Status waited = three.AwaitStartBarrier(0, start + absl::Milliseconds(300));
  EXPECT_EQ(waited.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(waited.message(),
            "the first step waits for 3 workers; 2 joined within the step timeout");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  three.Completed(0);  // past its first step: no barrier
  EXPECT_TRUE(three.AwaitStartBarrier(1, absl::Now()).ok());
}

TEST_F(SessionPartsTest, OwnerDutiesWantWhatTheOwnerCollectsAndCountWhatAFullQueueDrops) {
  // One tensor through a basis; its owner is one of the two workers.
  SetPolicy([](gift::v1::Policy* p) {
    p->mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
    p->mutable_selection()->add_include("*");
  });
  ASSERT_TRUE(session()->RegisterTensors(test::Float32Specs({{64, 96}})).ok());
  auto state = session()->WaitFor(
      [](const gift::v1::ClusterState& s) { return s.tensors_size() == 1 && s.bases_size() == 1; },
      absl::Seconds(20));
  ASSERT_TRUE(state.ok()) << state.status();
  const std::string owner_id = (*state)->bases(0).owner_member_id();
  control::MemberSession* owner = nullptr;
  control::MemberSession* other = nullptr;
  for (auto& w : workers_) {
    (w.session->member_id() == owner_id ? owner : other) = w.session.get();
  }
  ASSERT_NE(owner, nullptr) << "owner " << owner_id;
  ASSERT_NE(other, nullptr);
  std::vector<float> gradient(64 * 96);
  for (size_t k = 0; k < gradient.size(); ++k) gradient[k] = std::sin(0.01f * k);
  const std::vector<LocalTensor> tensors = {{.tensor_id = (*state)->tensors(0).tensor_id(),
                                             .name = (*state)->tensors(0).name(),
                                             .rows = 64,
                                             .cols = 96,
                                             .data = gradient.data()}};
  BasisStore owner_store(owner), other_store(other);
  // The owner wants step 0 of its tensor, with a copy of its own gradient
  // (its statistics start there); the other worker wants nothing.
  OwnerDuties duties(owner, &owner_store, {.max_jobs = 0});  // every job dropped
  std::vector<OwnedTensorStep> wanted;
  duties.AddWanted(**state, 0, tensors, &wanted);
  ASSERT_EQ(wanted.size(), 1u);
  EXPECT_EQ(wanted[0].tensor_id, tensors[0].tensor_id);
  EXPECT_EQ(wanted[0].own, gradient);
  OwnerDuties not_owner(other, &other_store, {});
  std::vector<OwnedTensorStep> none;
  not_owner.AddWanted(**state, 0, tensors, &none);
  EXPECT_TRUE(none.empty());
  // A queue of 0 drops the step's hand-over and the activation statistics,
  // and counts them; nothing is published, no ratio is known.
  duties.HandOver(
      std::move(wanted), tensors, 0.1, [](size_t) { return nullptr; },
      [](uint64_t) { return absl::Span<const float>(); });
  duties.AddActivationFactor(tensors[0].tensor_id, std::vector<float>(96 * 96, 1.0f), 8);
  EXPECT_EQ(duties.jobs_dropped(), 2u);
  EXPECT_EQ(duties.publications(), 0u);
  EXPECT_TRUE(duties.error_ratios().empty());
  duties.Stop();
  duties.Stop();  // idempotent
}

}  // namespace
}  // namespace gift::worker
