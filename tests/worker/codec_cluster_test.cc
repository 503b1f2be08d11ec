// Per-tensor codecs and the features that combine with them, end to end, as
// real processes on loopback (gift-coordinator, two gift-server shards, two
// gift-worker daemons; tools/gift-cluster LocalCluster): NVFP4 both ways and
// FP8 (e4m3/block128) both ways, each with and without a GIFT basis on every
// 2-D tensor, error feedback, data-plane MACs and node-local aggregation, in
// every combination, against the FP32 average computed here; or, for a
// combination that cannot run, refused by the coordinator when the policy
// is set, with a message naming the conflict. The 1-D tensor travels in bf16 both ways
// whatever the policy's global codecs (policy.proto), and an override's
// codec reaches exactly the tensors it matches.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/codec/payload.h"
#include "common/control/coordinator_client.h"
#include "common/dataplane/chunk_shape.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"
#include "tests/testing/cluster_fixture.h"
#include "tests/testing/warmup_bound.h"
#include "tools/gift-cluster/local_cluster.h"
#include "worker/client/worker_client.h"

namespace gift::worker {
namespace {

constexpr int kWorkers = 2;
constexpr int kServers = 2;

const std::vector<client::TensorSpec>& Specs() {
  static const auto* specs =
      new std::vector<client::TensorSpec>{{"layers.0.attn.q.weight", {96, 64}},
                                          {"layers.0.mlp.up.weight", {160, 64}},
                                          {"layers.0.norm.weight", {512}}};
  return *specs;
}
constexpr size_t kNorm = 2;  // the 1-D tensor

// Anisotropic gradients: columns scaled over three orders of magnitude.
void FillGradient(float* g, const client::TensorSpec& t, size_t n, uint64_t step, int worker) {
  std::mt19937 rng(static_cast<uint32_t>(step * 1000 + worker * 31 + n));
  std::normal_distribution<float> normal;
  const int64_t cols = t.shape.back();
  for (size_t i = 0; i < n; ++i) {
    const double scale = std::pow(10.0, -3.0 * static_cast<double>(i % cols) / cols);
    g[i] = static_cast<float>(normal(rng) * scale);
  }
}

using codec::testing::Spec;

// The worker reports its step's pushed bytes split over the tensors by size;
// their sum is the step's total (each share rounded).
uint64_t BytesSent(const client::PushPullResult& r) {
  uint64_t total = 0;
  for (const client::TensorResult& t : r.tensors) total += t.bytes_sent;
  return total;
}

// The bound on the relative L2 error of push + pull: the sum of the two
// codecs' per-element relative rounding bounds (half an ulp at 1).
double Bound(const codec::CodecSpec& push, const codec::CodecSpec& pull) {
  return codec::ElementErrorBound(push.format, push.rounding, 1.0, 1.0) +
         codec::ElementErrorBound(pull.format, pull.rounding, 1.0, 1.0);
}

// One combination of the features a policy and the coordinator turn on.
struct Case {
  std::string push, pull;
  bool gift;
  bool error_feedback = false;
  bool auth = false;  // data-plane MACs (gift-coordinator --dataplane-auth)
  bool node = false;  // hierarchy NODE, both workers on one node

  // The coordinator's refusal of this combination, when it is one
  // (policy.cc Validate); empty: it runs.
  std::string Refusal() const {
    if (node && error_feedback) return "error feedback is not supported with hierarchy NODE";
    return "";
  }
  std::string Name() const {
    std::string name =
        absl::StrCat(push, "_", pull, gift ? "_gift" : "_direct", error_feedback ? "_ef" : "",
                     auth ? "_auth" : "", node ? "_node" : "");
    for (char& ch : name) {
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    }
    return name;
  }
};

// Every combination of GIFT, error feedback, MACs and node-local
// aggregation, in NVFP4 and in FP8 both ways, and NVFP4 pushed with FP8
// results.
std::vector<Case> Combinations() {
  std::vector<Case> cases;
  for (const char* codec : {"nvfp4", "e4m3/block128"}) {
    for (bool gift : {true, false}) {
      for (bool ef : {false, true}) {
        for (bool auth : {false, true}) {
          for (bool node : {false, true}) cases.push_back({codec, codec, gift, ef, auth, node});
        }
      }
    }
  }
  cases.push_back({"nvfp4", "e4m3/block128", true});
  return cases;
}

class CodecClusterTest : public test::ClusterFixture<::testing::TestWithParam<Case>> {
 protected:
  tools::LocalClusterOptions Options() override {
    tools::LocalClusterOptions options = test::ShortLeaseOptions(kServers, kWorkers);
    if (GetParam().auth) options.coordinator_args.push_back("--dataplane-auth");
    if (GetParam().node) options.worker_nodes.assign(kWorkers, "node-a");
    return options;
  }

  // One step on every worker; `exact` gets the FP32 average (in double).
  std::vector<client::PushPullResult> Step(uint64_t step, std::vector<std::vector<double>>& exact) {
    exact.assign(Specs().size(), {});
    for (size_t i = 0; i < Specs().size(); ++i) {
      exact[i].assign(tensors_[0][i].size(), 0.0);
      for (int w = 0; w < kWorkers; ++w) {
        float* g = tensors_[w][i].data();
        FillGradient(g, Specs()[i], tensors_[w][i].size(), step, w);
        for (size_t k = 0; k < exact[i].size(); ++k) exact[i][k] += double(g[k]) / kWorkers;
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

  // The payload bytes of one push of Specs(), tensor i in codecs[i], over
  // the chunks of the coordinator's shard map.
  uint64_t PushedBytes(const std::vector<std::string>& codecs) const {
    auto status = coordinator_->GetStatus();
    EXPECT_TRUE(status.ok()) << status.status();
    if (!status.ok()) return 0;
    uint64_t total = 0;
    for (size_t i = 0; i < Specs().size(); ++i) {
      const uint64_t id = tensors_[0][i].tensor_id();
      const uint64_t n = tensors_[0][i].size(), cols = uint64_t(Specs()[i].shape.back());
      for (const gift::v1::Chunk& c : status->state().shard_map().chunks()) {
        if (c.tensor_id() != id) continue;
        auto shape = dataplane::ChunkShapeOf(n, cols, c.offset(), c.num_elements());
        EXPECT_TRUE(shape.ok()) << shape.status();
        const uint64_t dims[] = {shape->rows, shape->cols};
        total += codec::PayloadSizeFor(Spec(codecs[i]), dims).value();
      }
    }
    return total;
  }

  double RelError(size_t i, const std::vector<double>& exact) const {
    const float* got = tensors_[0][i].data();
    double err = 0, norm = 0;
    for (size_t k = 0; k < exact.size(); ++k) {
      err += (got[k] - exact[k]) * (got[k] - exact[k]);
      norm += exact[k] * exact[k];
    }
    return std::sqrt(err / norm);
  }
};

TEST_P(CodecClusterTest, AveragesWithinTheBoundOfPushPlusPullOrTheCombinationIsRefused) {
  const Case& c = GetParam();
  gift::v1::Policy policy;
  *policy.mutable_transform()->mutable_push_codec() = codec::ToProto(Spec(c.push));
  *policy.mutable_transform()->mutable_pull_codec() = codec::ToProto(Spec(c.pull));
  policy.mutable_transform()->set_error_feedback(c.error_feedback);
  policy.set_hierarchy(c.node ? gift::v1::HIERARCHY_NODE : gift::v1::HIERARCHY_NONE);
  policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
  if (c.gift) {
    policy.mutable_selection()->add_include("*");  // every 2-D tensor, always
  } else {
    policy.mutable_selection()->add_exclude("*");
  }
  if (!c.Refusal().empty()) {
    // Refused when set, naming the conflict, never mid-training.
    auto set = coordinator_->SetPolicy(policy, 0);
    ASSERT_FALSE(set.ok()) << c.Name() << " was accepted";
    EXPECT_NE(set.status().message().find(c.Refusal()), std::string::npos) << set.status();
    std::printf("combination %-44s refused: %s\n", c.Name().c_str(),
                std::string(set.status().message().substr(0, 100)).c_str());
    return;
  }
  SetPolicy(policy);
  Register(Specs());

  // GIFT: step until every 2-D tensor runs in its basis.
  constexpr int kChecked = 3;
  const test::WarmupBound warmup;
  std::vector<std::vector<double>> exact;
  uint64_t step = 0;
  for (bool ready = !c.gift; !ready; ++step) {
    ASSERT_FALSE(warmup.Exhausted(step)) << "no basis activated by step " << step << "\n" << Logs();
    auto results = Step(step, exact);
    ASSERT_EQ(results.size(), size_t{kWorkers});
    ready = true;
    for (const client::TensorResult& t : results[0].tensors) {
      if (t.name != Specs()[kNorm].name) ready = ready && t.transformed;
    }
  }

  // With error feedback a step's error also carries the change of the
  // residual, itself within the push codec's error: twice the bound.
  const double slack = c.error_feedback ? 2.0 : 1.0;
  const double bound_2d = slack * Bound(Spec(c.push), Spec(c.pull));
  const double bound_1d = slack * Bound(Spec("bf16"), Spec("bf16"));
  double worst = 0;  // of err / bound
  for (int k = 0; k < kChecked; ++k, ++step) {
    auto results = Step(step, exact);
    ASSERT_EQ(results.size(), size_t{kWorkers});
    // Each tensor's chunks in its own push codec: the bytes pushed (in a
    // node group, each chunk once, by its leader).
    const uint64_t pushed =
        c.node ? BytesSent(results[0]) + BytesSent(results[1]) : BytesSent(results[0]);
    EXPECT_NEAR(double(pushed), double(PushedBytes({c.push, c.push, "bf16"})),
                double(kWorkers * Specs().size()));
    for (size_t i = 0; i < Specs().size(); ++i) {
      // Every worker holds the same bits.
      ASSERT_EQ(std::memcmp(tensors_[1][i].data(), tensors_[0][i].data(),
                            tensors_[0][i].size() * sizeof(float)),
                0)
          << "step " << step << " tensor " << i;
      const bool is_norm = i == kNorm;
      const client::TensorResult& r = results[0].tensors[i];
      EXPECT_EQ(r.transformed, c.gift && !is_norm) << r.name;
      const double err = RelError(i, exact[i]);
      const double bound = is_norm ? bound_1d : bound_2d;
      EXPECT_LT(err, bound) << r.name << " step " << step;
      worst = std::max(worst, err / bound);
    }
  }
  std::printf("combination %-44s runs: worst rel. L2 error %.2f of its bound\n", c.Name().c_str(),
              worst);
}

INSTANTIATE_TEST_SUITE_P(Combinations, CodecClusterTest, ::testing::ValuesIn(Combinations()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.Name();
                         });

// An override's codecs reach the tensors it matches, both ways: the 1-D
// tensor pushed in e4m3/block32 (not its bf16 default), one 2-D tensor
// pulled in nvfp4, the other in the global bf16.
// (A parameterized fixture's test: one plain combination, no feature on.)
class CodecOverrideClusterTest : public CodecClusterTest {};
INSTANTIATE_TEST_SUITE_P(Plain, CodecOverrideClusterTest,
                         ::testing::Values(Case{"e4m3/block128", "bf16", false}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.Name();
                         });

TEST_P(CodecOverrideClusterTest, OverrideCodecsReachTheirTensorsOnly) {
  gift::v1::Policy policy;
  *policy.mutable_transform()->mutable_push_codec() = codec::ToProto(Spec("e4m3/block128"));
  *policy.mutable_transform()->mutable_pull_codec() = codec::ToProto(Spec("bf16"));
  policy.mutable_selection()->set_mode(gift::v1::SELECTION_MODE_LIST);
  policy.mutable_selection()->add_exclude("*");
  gift::v1::TensorOverride* o = policy.add_overrides();
  o->set_glob("*.norm.*");
  *o->mutable_push_codec() = codec::ToProto(Spec("e4m3/block32"));
  o = policy.add_overrides();
  o->set_glob("*.mlp.*");
  *o->mutable_pull_codec() = codec::ToProto(Spec("nvfp4"));
  SetPolicy(policy);
  Register(Specs());
  std::vector<std::vector<double>> exact;
  for (uint64_t step = 0; step < 2; ++step) {
    auto results = Step(step, exact);
    ASSERT_EQ(results.size(), size_t{kWorkers});
    EXPECT_NEAR(double(BytesSent(results[0])),
                double(PushedBytes({"e4m3/block128", "e4m3/block128", "e4m3/block32"})),
                double(Specs().size()));
    // Both 2-D tensors are pushed alike; the nvfp4 pull of the mlp tensor
    // shows in its error, well above the bf16-pulled one's.
    const double q = RelError(0, exact[0]), up = RelError(1, exact[1]);
    EXPECT_LT(q, Bound(Spec("e4m3/block128"), Spec("bf16")));
    EXPECT_LT(up, Bound(Spec("e4m3/block128"), Spec("nvfp4")));
    EXPECT_GT(up, 2 * q) << "q " << q << ", up " << up;
    EXPECT_LT(RelError(kNorm, exact[kNorm]), Bound(Spec("e4m3/block32"), Spec("bf16")));
  }
}

}  // namespace
}  // namespace gift::worker
