// Basis activation end to end, as real processes on loopback
// (gift-coordinator, two gift-server shards, four gift-worker daemons;
// tools/gift-cluster LocalCluster), with the demo's codecs (e4m3/block128
// push, bf16 pull), every 2-D tensor in a basis and the default refresh
// schedule (period 10, drift 0.2, lead 4). After every step the test reads the coordinator's
// committed basis versions, so it knows the schedule (design.md 6.5: step s uses the committed
// version with the largest activation step <= s) and checks each worker's PushPull response against
// it: every worker reports, for every tensor, the version the schedule names for the step,
// transformed exactly when that version is not direct; once a basis is active, every later step of
// every 2-D tensor runs in a basis until a direct version replaces it.
#include <cmath>
#include <cstdint>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/control/coordinator_client.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/warmup_bound.h"
#include "tools/gift-cluster/local_cluster.h"
#include "worker/client/worker_client.h"

namespace gift::worker {
namespace {

constexpr int kWorkers = 4;
constexpr int kServers = 2;

const std::vector<client::TensorSpec>& Specs() {
  static const auto* specs =
      new std::vector<client::TensorSpec>{{"layers.0.attn.q.weight", {96, 64}},
                                          {"layers.0.mlp.up.weight", {160, 64}},
                                          {"layers.0.mlp.down.weight", {64, 160}},
                                          {"layers.0.norm.weight", {512}}};
  return *specs;
}
constexpr size_t kMatrices = 3;  // Specs()[0..2] are 2-D, [3] is not

// Anisotropic gradients whose geometry moves slowly (the column scales
// shift by one column every 4 steps), as a training run's do: bases age,
// so the owners refresh them on schedule and on drift.
void FillGradient(float* g, const client::TensorSpec& t, size_t n, uint64_t step, int worker) {
  std::mt19937 rng(static_cast<uint32_t>(step * 1000 + worker * 31 + n));
  std::normal_distribution<float> normal;
  const int64_t cols = t.shape.back();
  const uint64_t shift = step / 4;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t c = (i % cols + shift) % cols;
    const double scale = std::pow(10.0, -3.0 * static_cast<double>(c) / cols);
    g[i] = static_cast<float>(normal(rng) * scale);
  }
}

// The committed version of a tensor active at `step` among `versions`
// (by version number), as design.md 6.5 defines it; version 0, direct,
// when none is.
gift::v1::BasisVersion ActiveAt(const std::map<uint64_t, gift::v1::BasisVersion>& versions,
                                uint64_t step) {
  gift::v1::BasisVersion active;
  active.set_direct(true);
  for (const auto& [number, v] : versions) {
    if (v.activation_step() > step) continue;
    if (v.activation_step() > active.activation_step() ||
        (v.activation_step() == active.activation_step() && v.version() > active.version())) {
      active = v;
    }
  }
  return active;
}

class BasisActivationClusterTest : public test::ClusterFixture<> {
 protected:
  tools::LocalClusterOptions Options() override {
    return test::ShortLeaseOptions(kServers, kWorkers);
  }

  std::vector<client::PushPullResult> Step(uint64_t step) {
    for (int w = 0; w < kWorkers; ++w) {
      for (size_t i = 0; i < Specs().size(); ++i) {
        FillGradient(tensors_[w][i].data(), Specs()[i], tensors_[w][i].size(), step, w);
      }
    }
    std::vector<std::future<absl::StatusOr<client::PushPullResult>>> calls;
    for (int w = 0; w < kWorkers; ++w) calls.push_back(clients_[w]->PushPullAsync(step));
    std::vector<client::PushPullResult> out;
    for (auto& c : calls) {
      auto r = c.get();
      EXPECT_TRUE(r.ok()) << r.status() << Logs();
      if (r.ok()) out.push_back(*std::move(r));
    }
    return out;
  }

  // Adds the coordinator's committed versions to `committed_` (a version
  // is pruned once no worker can use it, so the test keeps its own copy).
  void RecordCommitted() {
    auto status = coordinator_->GetStatus();
    ASSERT_TRUE(status.ok()) << status.status();
    for (const gift::v1::TensorBasisState& b : status->state().bases()) {
      for (const gift::v1::BasisVersion& v : b.versions()) {
        auto [it, added] = committed_[b.tensor_id()].try_emplace(v.version(), v);
        if (!added) {
          EXPECT_EQ(it->second.activation_step(), v.activation_step())
              << "tensor " << b.tensor_id() << " version " << v.version()
              << ": a committed activation step changed";
        }
      }
    }
  }

  // tensor id -> version -> the committed version as first seen
  std::map<uint64_t, std::map<uint64_t, gift::v1::BasisVersion>> committed_;
};

TEST_F(BasisActivationClusterTest, EveryStepAfterTheFirstCommitRunsInTheCommittedBasis) {
  // The demo's gift configuration (python/gift_ps/demo/configs.py).
  gift::v1::Policy policy;
  *policy.mutable_transform()->mutable_push_codec() =
      codec::ToProto(codec::ParseCodecSpec("e4m3/block128").value());
  *policy.mutable_transform()->mutable_pull_codec() =
      codec::ToProto(codec::ParseCodecSpec("bf16").value());
  // Every 2-D tensor in a basis whatever the measurement says: on these
  // synthetic gradients FP8 with a scale per 128 values is about as exact
  // directly (measured: the owners choose direct under selection measured).
  policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
  policy.mutable_selection()->add_include("*");
  SetPolicy(policy);
  Register(Specs());

  // Steps until every 2-D tensor ran in a basis on kInBasis steps and in two
  // versions of it (the first refresh and the one period_steps later), so
  // the run covers an activation and a switch whatever the owners' speed.
  constexpr uint64_t kInBasis = 30;
  const test::WarmupBound bound;
  // Per step, per tensor (in Specs() order): the version and the flag worker
  // 0 reported.
  std::vector<std::vector<std::pair<uint64_t, bool>>> reported;
  std::vector<uint64_t> in_basis(kMatrices, 0);
  std::vector<std::set<uint64_t>> versions_used(kMatrices);
  auto done = [&] {
    for (size_t i = 0; i < kMatrices; ++i) {
      if (in_basis[i] < kInBasis || versions_used[i].size() < 2) return false;
    }
    return true;
  };
  for (uint64_t step = 0; !done(); ++step) {
    ASSERT_FALSE(bound.Exhausted(step))
        << "the bases were not active long enough by step " << step << "\n"
        << Logs();
    std::vector<client::PushPullResult> results = Step(step);
    ASSERT_EQ(results.size(), size_t{kWorkers}) << "step " << step;
    RecordCommitted();
    for (int w = 0; w < kWorkers; ++w) {
      ASSERT_EQ(results[w].tensors.size(), Specs().size());
      for (size_t i = 0; i < Specs().size(); ++i) {
        const client::TensorResult& t = results[w].tensors[i];
        ASSERT_EQ(t.tensor_id, tensors_[0][i].tensor_id());
        EXPECT_EQ(t.basis_version, results[0].tensors[i].basis_version)
            << "step " << step << " tensor " << Specs()[i].name << ": worker " << w
            << " used another version than worker 0";
        EXPECT_EQ(t.transformed, results[0].tensors[i].transformed)
            << "step " << step << " tensor " << Specs()[i].name << " worker " << w;
      }
    }
    reported.emplace_back();
    for (size_t i = 0; i < Specs().size(); ++i) {
      const client::TensorResult& t = results[0].tensors[i];
      reported.back().emplace_back(t.basis_version, t.transformed);
      if (i < kMatrices && t.transformed) {
        ++in_basis[i];
        versions_used[i].insert(t.basis_version);
      }
    }
  }
  const uint64_t steps = reported.size();

  // Every response against the committed schedule.
  std::string timeline;
  // Per 2-D tensor: the first step a basis of it was active.
  std::vector<std::optional<uint64_t>> first_active(kMatrices);
  uint64_t transformed_steps = 0, direct_steps_after_first = 0;
  for (uint64_t step = 0; step < steps; ++step) {
    absl::StrAppend(&timeline, "step ", step, ":");
    for (size_t i = 0; i < Specs().size(); ++i) {
      const uint64_t id = tensors_[0][i].tensor_id();
      const gift::v1::BasisVersion want = ActiveAt(committed_[id], step);
      const auto [version, transformed] = reported[step][i];
      absl::StrAppend(&timeline, " ", version, transformed ? "T" : "d", "/", want.version());
      EXPECT_EQ(version, want.version()) << "step " << step << " tensor " << Specs()[i].name;
      EXPECT_EQ(transformed, !want.direct())
          << "step " << step << " tensor " << Specs()[i].name << " version " << version;
      if (i >= kMatrices) {
        EXPECT_FALSE(transformed) << "a 1-D tensor never has a basis";
        continue;
      }
      if (!want.direct() && !first_active[i].has_value()) first_active[i] = step;
      if (first_active[i].has_value()) {
        if (transformed) {
          ++transformed_steps;
        } else {
          ++direct_steps_after_first;
        }
      }
    }
    absl::StrAppend(&timeline, "\n");
  }
  for (size_t i = 0; i < kMatrices; ++i) {
    ASSERT_TRUE(first_active[i].has_value()) << Specs()[i].name << ": no basis was ever active\n"
                                             << timeline << Logs();
  }
  // The policy puts every 2-D tensor in a basis, so no owner publishes a
  // direct version: each one runs in a basis on every step from its first
  // activation on.
  EXPECT_EQ(direct_steps_after_first, 0u) << timeline << Logs();
  EXPECT_GE(transformed_steps, kMatrices * kInBasis);
  std::cout << timeline;
}

}  // namespace
}  // namespace gift::worker
