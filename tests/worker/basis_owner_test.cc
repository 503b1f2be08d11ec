// BasisOwner against a coordinator on loopback (the real state machine and
// gRPC service in process): a refresh publishes a basis, one whose cancel
// flag is up (SIGTERM / shutdown) gives up between its pieces of work
// without publishing, and drift refreshes fire when the gradient's geometry
// changes mid-run and never while it stays the same.
#include "worker/owner/basis_owner.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "common/transform/refresh_schedule.h"
#include "server/coordinator/cluster_state.h"
#include "tests/testing/coordinator_server.h"
#include "tests/worker/nvfp4_grid.h"
#include "worker/owner/basis_store.h"
#include "worker/plan/step_planner.h"

namespace gift::worker {
namespace {

constexpr int64_t kRows = 256, kCols = 256;
constexpr uint32_t kPeriod = 20;

class BasisOwnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = test::CoordinatorServer::Start({.version = "test"});
    ASSERT_TRUE(server.ok()) << server.status();
    coordinator_ = *std::move(server);
    state_ = coordinator_->state();
    // Every transformable tensor transformed, whatever the measurement says.
    gift::v1::SetPolicyRequest set;
    gift::v1::TensorOverride* o = set.mutable_policy()->add_overrides();
    o->set_glob("*");
    o->set_enabled(true);
    set.mutable_policy()->mutable_refresh()->set_period_steps(kPeriod);
    // A drift measurement on every step, so the steps they act on are known.
    set.mutable_policy()->mutable_refresh()->set_measure_period(1);
    // NVFP4 (block 16): coarse enough that the basis clearly beats direct
    // quantization on the anisotropic gradients below (with e4m3 the
    // ratio stays near 1 and drift could not be told from noise).
    *set.mutable_policy()->mutable_transform()->mutable_push_codec() =
        codec::ToProto(codec::ParseCodecSpec("nvfp4").value());
    ASSERT_TRUE(state_->SetPolicy(set).ok());
    auto session = control::MemberSession::Start(
        control::CoordinatorClient::MakeChannel(coordinator_->address()), {.name = "owner"});
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
    gift::v1::RegisterTensorsRequest request;
    request.set_member_id(session_->member_id());
    gift::v1::TensorSpec* spec = request.add_tensors();
    spec->set_name("layers.0.w");
    spec->add_shape(kRows);
    spec->add_shape(kCols);
    spec->set_dtype(gift::v1::DTYPE_FLOAT32);
    auto registered = state_->RegisterTensors(request);
    ASSERT_TRUE(registered.ok()) << registered.status();
    tensor_id_ = registered->tensors(0).tensor_id();
    const std::string me = session_->member_id();
    auto owned = session_->WaitFor(
        [&](const gift::v1::ClusterState& s) {
          const gift::v1::TensorBasisState* b = FindBasisState(s, tensor_id_);
          return b != nullptr && b->owner_member_id() == me && s.policy().overrides_size() == 1;
        },
        absl::Seconds(10));
    ASSERT_TRUE(owned.ok()) << owned.status();
  }

  void TearDown() override {
    if (session_ != nullptr) session_->Close().IgnoreError();
    coordinator_.reset();
  }

  // A step whose statistics make the geometry ready and a first refresh due.
  OwnedTensorStep Step() const {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    OwnedTensorStep step{
        .step = 1, .tensor_id = tensor_id_, .name = "layers.0.w", .rows = kRows, .cols = kCols};
    for (int64_t i = 0; i < kRows * kCols; ++i) {
      step.average.push_back(normal(rng) * static_cast<float>(1 + i % kCols));
      step.own.push_back(step.average.back() + 0.1f * normal(rng));
    }
    return step;
  }

  // This worker's gradient of `step`: Gaussian, with one outlier column 30x
  // larger in every 16 (column 0 of each NVFP4 block); `flipped`: the
  // outliers moved to column 8 of each block (another set of directions).
  static std::vector<float> Anisotropic(uint64_t step, bool flipped) {
    std::mt19937 rng(static_cast<uint32_t>(1000 + step));
    std::normal_distribution<float> normal;
    std::vector<float> g(kRows * kCols);
    for (int64_t i = 0; i < kRows; ++i) {
      for (int64_t j = 0; j < kCols; ++j) {
        const bool outlier = j % 16 == (flipped ? 8 : 0);
        g[i * kCols + j] = normal(rng) * (outlier ? 30.0f : 1.0f);
      }
    }
    return g;
  }

  // Runs the owner's duties for steps 1..steps as the daemon would (the
  // gradient's geometry flips at `flip_at`, 0: never), reporting each step
  // to the coordinator; returns every refresh as (step, reason).
  std::vector<std::pair<uint64_t, transform::RefreshReason>> RunOwner(uint64_t steps,
                                                                      uint64_t flip_at,
                                                                      BasisOwner** out = nullptr) {
    std::vector<std::pair<uint64_t, transform::RefreshReason>> refreshes;
    uint64_t current_step = 0;
    BasisStore store(session_.get());
    BasisOwner owner(session_.get(), &store,
                     {.on_publish = [&](uint64_t, uint64_t, const std::string&,
                                        transform::RefreshReason reason, std::optional<double>) {
                       refreshes.emplace_back(current_step, reason);
                     }});
    if (out != nullptr) *out = &owner;
    for (uint64_t step = 1; step <= steps; ++step) {
      current_step = step;
      session_->SetLastStep(step - 1);
      EXPECT_TRUE(session_->HeartbeatNow().ok());
      auto state = session_->WaitForRevision(state_->revision(), absl::Seconds(5));
      EXPECT_TRUE(state.ok()) << state.status();
      if (!state.ok()) break;
      EXPECT_TRUE(store.Sync(**state).ok());
      const gift::v1::TensorInfo* info = nullptr;
      for (const gift::v1::TensorInfo& t : (*state)->tensors()) {
        if (t.tensor_id() == tensor_id_) info = &t;
      }
      bool needs_own = false;
      if (info == nullptr || !owner.WantsStep(**state, *info, step, &needs_own)) continue;
      OwnedTensorStep data{.step = step,
                           .tensor_id = tensor_id_,
                           .name = "layers.0.w",
                           .rows = kRows,
                           .cols = kCols};
      data.own = Anisotropic(step, flip_at != 0 && step >= flip_at);
      data.average = data.own;
      if (!needs_own) data.own.clear();
      const absl::Status s = owner.Observe(**state, data);
      EXPECT_TRUE(s.ok()) << "step " << step << ": " << s;
      last_ratios_ = owner.error_ratios();
    }
    return refreshes;
  }

  std::vector<gift::v1::TensorErrorRatio> last_ratios_;
  std::unique_ptr<test::CoordinatorServer> coordinator_;
  coordinator::ClusterStateMachine* state_ = nullptr;  // owned by coordinator_
  std::unique_ptr<control::MemberSession> session_;
  uint64_t tensor_id_ = 0;
};

TEST_F(BasisOwnerTest, RefreshPublishesAVersion) {
  BasisStore store(session_.get());
  BasisOwner owner(session_.get(), &store, {});
  const absl::Status s = owner.Observe(*session_->state(), Step());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(owner.publications(), 1u);
}

TEST_F(BasisOwnerTest, CancelledRefreshStopsWithoutPublishing) {
  BasisStore store(session_.get());
  int checks = 0;
  BasisOwner owner(session_.get(), &store, {.cancelled = [&] {
                     ++checks;
                     return true;
                   }});
  const absl::Status s = owner.Observe(*session_->state(), Step());
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_EQ(checks, 1);  // before the first candidate basis is built
  EXPECT_EQ(owner.publications(), 0u);
  const gift::v1::TensorBasisState* b = FindBasisState(*state_->Snapshot(), tensor_id_);
  ASSERT_NE(b, nullptr);
  EXPECT_FALSE(b->has_proposal());
  EXPECT_EQ(b->versions_size(), 1);  // only the direct version 0
}

int Count(const std::vector<std::pair<uint64_t, transform::RefreshReason>>& refreshes,
          transform::RefreshReason reason) {
  int n = 0;
  for (const auto& [step, why] : refreshes) n += why == reason;
  return n;
}

TEST_F(BasisOwnerTest, ConstantGeometryRefreshesOnlyOnSchedule) {
  const auto refreshes = RunOwner(60, /*flip_at=*/0);
  for (const auto& [step, why] : refreshes) {
    std::cout << "refresh at step " << step << ": " << transform::RefreshReasonName(why) << "\n";
  }
  EXPECT_EQ(Count(refreshes, transform::RefreshReason::kDrift), 0);
  EXPECT_EQ(Count(refreshes, transform::RefreshReason::kFirst), 1);
  EXPECT_EQ(Count(refreshes, transform::RefreshReason::kPeriod), 2);  // steps 21 and 41
  // The owner measured its basis between refreshes, and the coordinator has it.
  ASSERT_EQ(last_ratios_.size(), 1u);
  EXPECT_EQ(last_ratios_[0].step(), 60u);
  EXPECT_GT(last_ratios_[0].ratio(), 0.0);
  EXPECT_LT(last_ratios_[0].ratio(), 1.0);
  EXPECT_GT(last_ratios_[0].reference(), 0.0);
  // The heartbeat carries them to the coordinator (as the daemon's owner
  // thread hands them over), which keeps them for GetStatus.
  session_->SetErrorRatios(last_ratios_);
  ASSERT_TRUE(session_->HeartbeatNow().ok());
  auto status = state_->GetStatus();
  ASSERT_TRUE(status.ok());
  const gift::v1::TensorBasisState* b = FindBasisState(status->state(), tensor_id_);
  ASSERT_NE(b, nullptr);
  ASSERT_TRUE(b->has_error_ratio());
  EXPECT_EQ(b->error_ratio().step(), 60u);
  EXPECT_DOUBLE_EQ(b->error_ratio().ratio(), last_ratios_[0].ratio());
  // And what the last refresh chose, and why (a basis "p=.. r=..", with
  // " (budget)" when the step budget cut its rank, or "direct ...").
  const std::string& choice = b->error_ratio().choice();
  EXPECT_EQ(choice, last_ratios_[0].choice());
  EXPECT_TRUE(choice.rfind("p=", 0) == 0 || choice.rfind("direct", 0) == 0) << choice;
  EXPECT_TRUE(choice.rfind("direct", 0) == 0 || choice.find(" r=") != std::string::npos) << choice;
}

TEST_F(BasisOwnerTest, GeometrySwitchedMidRunFiresADriftRefresh) {
  constexpr uint64_t kFlipAt = 30;
  const auto refreshes = RunOwner(60, kFlipAt);
  for (const auto& [step, why] : refreshes) {
    std::cout << "refresh at step " << step << ": " << transform::RefreshReasonName(why) << "\n";
  }
  std::vector<uint64_t> drift_steps;
  for (const auto& [step, why] : refreshes) {
    if (why == transform::RefreshReason::kDrift) drift_steps.push_back(step);
  }
  ASSERT_FALSE(drift_steps.empty());
  // None before the switch; the first once the default patience's
  // measurements in a row (measure period 1: one per step from the switch
  // on) were above the bar.
  const int64_t patience = transform::RefreshScheduleOptions{}.drift_patience;
  EXPECT_EQ(drift_steps.front(), kFlipAt + patience - 1);
}

// Under the fidelity target (the default policy, measured selection): a
// gradient NVFP4 carries within E4M3's error is published to travel in NVFP4
// both ways (the version names its codecs); once a measure step finds the
// choice above the target, the owner publishes the target codecs at once.
TEST_F(BasisOwnerTest, FidelityTargetChoosesFourBitsAndFallsBackAboveTheTarget) {
  gift::v1::SetPolicyRequest set;
  set.mutable_policy()->mutable_refresh()->set_period_steps(kPeriod);
  set.mutable_policy()->mutable_refresh()->set_measure_period(1);
  ASSERT_TRUE(state_->SetPolicy(set).ok());
  ASSERT_TRUE(
      session_
          ->WaitFor(
              [](const gift::v1::ClusterState& s) { return s.policy().overrides_size() == 0; },
              absl::Seconds(10))
          .ok());
  BasisStore store(session_.get());
  std::vector<std::string> published;
  BasisOwner owner(
      session_.get(), &store,
      {.on_publish = [&](uint64_t, uint64_t, const std::string& chosen, transform::RefreshReason,
                         std::optional<double>) { published.push_back(chosen); }});
  auto observe = [&](uint64_t step, std::vector<float> own) {
    session_->SetLastStep(step - 1);
    ASSERT_TRUE(session_->HeartbeatNow().ok());
    auto state = session_->WaitForRevision(state_->revision(), absl::Seconds(5));
    ASSERT_TRUE(state.ok()) << state.status();
    ASSERT_TRUE(store.Sync(**state).ok());
    OwnedTensorStep data{
        .step = step, .tensor_id = tensor_id_, .name = "layers.0.w", .rows = kRows, .cols = kCols};
    data.average = own;
    data.own = std::move(own);
    const absl::Status s = owner.Observe(**state, data);
    ASSERT_TRUE(s.ok()) << s;
  };
  observe(1, test::Nvfp4Grid(kRows, kCols, 11));
  ASSERT_EQ(published.size(), 1u);
  EXPECT_NE(published[0].find("[nvfp4 / nvfp4]"), std::string::npos) << published[0];
  const gift::v1::TensorBasisState* b = FindBasisState(*state_->Snapshot(), tensor_id_);
  ASSERT_NE(b, nullptr);
  const gift::v1::BasisVersion& v = b->versions(b->versions_size() - 1);
  EXPECT_EQ(v.version(), 1u);
  EXPECT_EQ(codec::ToString(codec::FromProto(v.push_codec()).value()), "nvfp4");
  EXPECT_EQ(codec::ToString(codec::FromProto(v.pull_codec()).value()), "nvfp4");
  auto ratios = owner.error_ratios();
  ASSERT_EQ(ratios.size(), 1u);
  EXPECT_EQ(ratios[0].codecs(), "nvfp4 / nvfp4");
  EXPECT_LT(ratios[0].bytes_per_step(), 0.6 * ratios[0].target_bytes_per_step());
  EXPECT_LT(ratios[0].error(), ratios[0].target_error());

  // Another grid gradient stays within the target: nothing is published.
  observe(2, test::Nvfp4Grid(kRows, kCols, 12));
  EXPECT_EQ(published.size(), 1u);
  // A Gaussian one does not: back to the target codecs, direct, at once.
  std::mt19937 rng(5);
  std::normal_distribution<float> normal;
  std::vector<float> gaussian(kRows * kCols);
  for (float& x : gaussian) x = normal(rng);
  observe(3, gaussian);
  ASSERT_EQ(published.size(), 2u);
  EXPECT_EQ(published[1].rfind("direct (above target", 0), 0u) << published[1];
  b = FindBasisState(*state_->Snapshot(), tensor_id_);
  const gift::v1::BasisVersion& back = b->versions(b->versions_size() - 1);
  EXPECT_EQ(back.version(), 2u);
  EXPECT_TRUE(back.direct());
  EXPECT_FALSE(back.has_push_codec());
  EXPECT_FALSE(back.has_pull_codec());
}

// Under the target, a tensor no cheaper way comes near (Gaussian gradients:
// NVFP4 about 1.5x E4M3's error or more) refreshes ever less often: periods
// of 20 stretched 2x, 4x, 8x, so refreshes at steps 1, 41, 121 and 281.
TEST_F(BasisOwnerTest, FidelityTargetBacksOffWhereNothingCheaperComesNear) {
  gift::v1::SetPolicyRequest set;
  set.mutable_policy()->mutable_refresh()->set_period_steps(kPeriod);
  ASSERT_TRUE(state_->SetPolicy(set).ok());
  auto state = session_->WaitFor(
      [](const gift::v1::ClusterState& s) { return s.policy().overrides_size() == 0; },
      absl::Seconds(10));
  ASSERT_TRUE(state.ok()) << state.status();
  const gift::v1::TensorInfo* info = nullptr;
  for (const gift::v1::TensorInfo& t : (*state)->tensors()) {
    if (t.tensor_id() == tensor_id_) info = &t;
  }
  ASSERT_NE(info, nullptr);
  BasisStore store(session_.get());
  BasisOwner owner(session_.get(), &store, {});
  std::vector<uint64_t> refreshes;
  for (uint64_t step = 1; step <= 300; ++step) {
    bool needs_own = false;
    if (!owner.WantsStep(**state, *info, step, &needs_own)) continue;
    std::mt19937 rng(static_cast<uint32_t>(step));
    std::normal_distribution<float> normal;
    OwnedTensorStep data{
        .step = step, .tensor_id = tensor_id_, .name = "layers.0.w", .rows = kRows, .cols = kCols};
    for (int64_t i = 0; i < kRows * kCols; ++i) data.average.push_back(normal(rng));
    if (needs_own) data.own = data.average;
    ASSERT_TRUE(owner.Observe(**state, data).ok()) << step;
    const auto ratios = owner.error_ratios();
    if (!ratios.empty() && ratios[0].step() == step) refreshes.push_back(step);
  }
  EXPECT_EQ(refreshes, (std::vector<uint64_t>{1, 41, 121, 281}));
  const auto ratios = owner.error_ratios();
  ASSERT_EQ(ratios.size(), 1u);
  EXPECT_EQ(ratios[0].choice(), "direct [target: e4m3/block128 / e4m3/block128]");
  EXPECT_EQ(owner.publications(), 0u);  // direct in its own codecs all along
}

// The target off: the same gradient keeps the policy's codecs.
TEST_F(BasisOwnerTest, FidelityTargetOffKeepsThePolicysCodecs) {
  gift::v1::SetPolicyRequest set;
  set.mutable_policy()->mutable_refresh()->set_period_steps(kPeriod);
  set.mutable_policy()->mutable_selection()->set_target_off(true);
  ASSERT_TRUE(state_->SetPolicy(set).ok());
  auto state = session_->WaitFor(
      [](const gift::v1::ClusterState& s) { return s.policy().selection().target_off(); },
      absl::Seconds(10));
  ASSERT_TRUE(state.ok()) << state.status();
  BasisStore store(session_.get());
  BasisOwner owner(session_.get(), &store, {});
  OwnedTensorStep data{
      .step = 1, .tensor_id = tensor_id_, .name = "layers.0.w", .rows = kRows, .cols = kCols};
  data.own = test::Nvfp4Grid(kRows, kCols, 11);
  data.average = data.own;
  ASSERT_TRUE(owner.Observe(**state, data).ok());
  const gift::v1::TensorBasisState* b = FindBasisState(*state_->Snapshot(), tensor_id_);
  ASSERT_NE(b, nullptr);
  for (const gift::v1::BasisVersion& v : b->versions()) EXPECT_FALSE(v.has_push_codec());
  EXPECT_FALSE(b->proposal().has_push_codec());
  for (const auto& r : owner.error_ratios()) EXPECT_TRUE(r.codecs().empty());
}

}  // namespace
}  // namespace gift::worker
