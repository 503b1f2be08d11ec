// The control plane with real processes on loopback: a gift-coordinator
// daemon (GIFT_COORDINATOR_BIN) with a temporary SQLite file, MemberSessions
// in this process, and the giftctl binary (GIFTCTL_BIN).
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/support/channel_arguments.h>
#include <signal.h>
#include <stdlib.h>

#include <Eigen/Dense>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "common/transform/basis_serialization.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "gift/v1/cluster.pb.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/testing/temp_dir.h"
#include "tools/gift-cluster/coordinator_process.h"
#include "tools/gift-cluster/subprocess.h"

namespace gift::control {
namespace {

using tools::CoordinatorProcess;
using tools::CoordinatorProcessOptions;
using tools::Subprocess;

namespace v1 = ::gift::v1;

constexpr absl::Duration kWait = absl::Seconds(10);

// A serialized two-sided basis of a random d_out x d_in gradient.
std::string MakeBasisBytes(uint64_t tensor_id, uint64_t version, int64_t d_out, int64_t d_in,
                           int64_t rank) {
  std::srand(static_cast<unsigned>(tensor_id * 1000 + version));
  const Eigen::MatrixXd g = Eigen::MatrixXd::Random(d_out, d_in);
  const Eigen::MatrixXd a_out = g * g.transpose() / static_cast<double>(d_in);
  const Eigen::MatrixXd a_in = g.transpose() * g / static_cast<double>(d_out);
  auto out = transform::SideBasis::FromFactor(a_out, rank);
  auto in = transform::SideBasis::FromFactor(a_in, rank);
  EXPECT_TRUE(out.ok() && in.ok());
  auto basis = transform::TensorBasis::Create({.tensor_id = tensor_id,
                                               .version = version,
                                               .d_out = d_out,
                                               .d_in = d_in,
                                               .config = {transform::Sides::kBoth, 0.25}},
                                              *std::move(out), *std::move(in));
  EXPECT_TRUE(basis.ok()) << basis.status();
  return transform::SerializeTensorBasis(*basis);
}

v1::TensorSpec Spec(const std::string& name, int64_t d_out, int64_t d_in) {
  v1::TensorSpec spec;
  spec.set_name(name);
  spec.add_shape(d_out);
  spec.add_shape(d_in);
  spec.set_dtype(v1::DTYPE_FLOAT32);
  return spec;
}

const v1::TensorBasisState* FindBasis(const v1::ClusterState& state, uint64_t tensor_id) {
  for (const v1::TensorBasisState& b : state.bases()) {
    if (b.tensor_id() == tensor_id) return &b;
  }
  return nullptr;
}

bool HasVersion(const v1::ClusterState& state, uint64_t tensor_id, uint64_t version) {
  const v1::TensorBasisState* b = FindBasis(state, tensor_id);
  if (b == nullptr) return false;
  return std::any_of(b->versions().begin(), b->versions().end(),
                     [&](const v1::BasisVersion& v) { return v.version() == version; });
}

std::set<std::string> LiveIds(const v1::ClusterState& state) {
  std::set<std::string> ids;
  for (const v1::Member& m : state.workers()) ids.insert(m.member_id());
  for (const v1::Member& m : state.servers()) ids.insert(m.member_id());
  return ids;
}

// Records every state a Watch stream delivers, in order.
class StateRecorder {
 public:
  explicit StateRecorder(const std::string& address)
      : client_(CoordinatorClient::MakeChannel(address), kWait) {
    thread_ = std::thread([this] {
      std::unique_ptr<grpc::ClientReader<v1::ClusterState>> reader =
          client_.Watch(&context_, v1::WatchRequest());
      v1::ClusterState state;
      while (reader->Read(&state)) {
        absl::MutexLock lock(&mu_);
        states_.push_back(state);
      }
      reader->Finish().IgnoreError();
    });
  }
  ~StateRecorder() {
    context_.TryCancel();
    thread_.join();
  }
  std::vector<v1::ClusterState> states() const {
    absl::MutexLock lock(&mu_);
    return states_;
  }
  // Waits until some recorded state satisfies `predicate`.
  bool WaitFor(const std::function<bool(const v1::ClusterState&)>& predicate) const {
    absl::MutexLock lock(&mu_);
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::any_of(states_.begin(), states_.end(), predicate);
    };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), kWait);
  }

 private:
  CoordinatorClient client_;
  grpc::ClientContext context_;
  mutable absl::Mutex mu_;
  std::vector<v1::ClusterState> states_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

struct CommandResult {
  int code = -1;
  std::string out;
  std::string err;
};

class ControlIntegrationTest : public ::testing::Test {
 protected:
  void SetUp() override { StartCoordinator("127.0.0.1:0"); }

  void TearDown() override {
    sessions_.clear();
    if (coordinator_ != nullptr) {
      EXPECT_TRUE(coordinator_->Stop().ok()) << coordinator_->log();
      coordinator_.reset();
    }
  }

  void StartCoordinator(const std::string& listen, const std::vector<std::string>& more_args = {}) {
    CoordinatorProcessOptions options;
    options.binary = GIFT_COORDINATOR_BIN;
    options.state_file = dir_ + "/coordinator.db";
    options.listen = listen;
    options.extra_args = {"--lease-ttl", "1s", "--step-window", "2", "--chunk-bytes", "4096"};
    options.extra_args.insert(options.extra_args.end(), more_args.begin(), more_args.end());
    auto started = CoordinatorProcess::Start(options);
    ASSERT_TRUE(started.ok()) << started.status();
    coordinator_ = *std::move(started);
    // A connection of its own: channels to one address share gRPC's
    // subchannels, and right after a restart the sessions' one may still be
    // backing off from the refused connections of the downtime.
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    client_ = std::make_unique<CoordinatorClient>(
        grpc::CreateCustomChannel(coordinator_->address(), grpc::InsecureChannelCredentials(),
                                  args),
        kWait);
  }

  MemberSession& Join(const std::string& name, v1::MemberRole role = v1::MEMBER_ROLE_WORKER) {
    MemberSessionOptions options;
    options.name = name;
    options.role = role;
    options.rpc_timeout = kWait;
    options.min_backoff = absl::Milliseconds(20);
    options.max_backoff = absl::Milliseconds(200);
    auto session =
        MemberSession::Start(CoordinatorClient::MakeChannel(coordinator_->address()), options);
    EXPECT_TRUE(session.ok()) << session.status();
    if (!session.ok()) std::abort();
    sessions_.push_back(*std::move(session));
    return *sessions_.back();
  }

  CommandResult Giftctl(std::vector<std::string> args) {
    args.insert(args.begin(), GIFTCTL_BIN);
    auto child = Subprocess::Start(args);
    EXPECT_TRUE(child.ok()) << child.status();
    CommandResult result;
    absl::StatusOr<int> code = (*child)->WaitForExit(absl::Seconds(30));
    EXPECT_TRUE(code.ok()) << code.status();
    result.code = code.value_or(-1);
    result.out = (*child)->stdout_text();
    result.err = (*child)->stderr_text();
    return result;
  }

  const gift::TempDir temp_ = test::NewTempDir("gift-control-test");
  const std::string dir_ = temp_.path();
  std::unique_ptr<CoordinatorProcess> coordinator_;
  std::unique_ptr<CoordinatorClient> client_;
  std::vector<std::unique_ptr<MemberSession>> sessions_;
};

TEST_F(ControlIntegrationTest, MembersJoinWithDenseRanksAndEpochs) {
  const uint64_t epoch0 = client_->GetStatus()->state().epoch();
  MemberSession& a = Join("host-0/gpu0");
  MemberSession& b = Join("host-0/gpu1");
  MemberSession& c = Join("host-1/gpu0");
  auto state = c.WaitFor([](const v1::ClusterState& s) { return s.workers_size() == 3; }, kWait);
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ((*state)->epoch(), epoch0 + 3);
  std::set<uint32_t> ranks;
  for (const v1::Member& m : (*state)->workers()) ranks.insert(m.rank());
  EXPECT_EQ(ranks, (std::set<uint32_t>{0, 1, 2}));
  for (MemberSession* s : {&a, &b, &c}) {
    ASSERT_TRUE(
        s->WaitFor([&](const v1::ClusterState& st) { return st.epoch() == epoch0 + 3; }, kWait)
            .ok());
    EXPECT_EQ(s->epoch(), epoch0 + 3);
  }
  EXPECT_EQ(std::set<uint32_t>({a.rank(), b.rank(), c.rank()}), ranks);

  // A second live member with the same name is refused.
  v1::JoinRequest duplicate;
  duplicate.set_name("host-0/gpu0");
  duplicate.set_role(v1::MEMBER_ROLE_WORKER);
  EXPECT_TRUE(absl::IsAlreadyExists(client_->Join(duplicate).status()));

  // Leaving (Close) bumps the epoch and keeps the ranks dense.
  ASSERT_TRUE(b.Close().ok());
  auto after = a.WaitFor([](const v1::ClusterState& s) { return s.workers_size() == 2; }, kWait);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ((*after)->epoch(), epoch0 + 4);
  std::set<uint32_t> left_ranks;
  for (const v1::Member& m : (*after)->workers()) left_ranks.insert(m.rank());
  EXPECT_EQ(left_ranks, (std::set<uint32_t>{0, 1}));
}

TEST_F(ControlIntegrationTest, LeaseExpiryReassignsRanksChunksAndOwners) {
  MemberSession& w0 = Join("w0");
  MemberSession& w1 = Join("w1");
  Join("s0", v1::MEMBER_ROLE_SERVER);
  // A worker and a server that never renew their leases.
  v1::JoinRequest silent;
  silent.set_name("w-silent");
  silent.set_role(v1::MEMBER_ROLE_WORKER);
  auto silent_worker = client_->Join(silent);
  ASSERT_TRUE(silent_worker.ok()) << silent_worker.status();
  silent.set_name("s-silent");
  silent.set_role(v1::MEMBER_ROLE_SERVER);
  auto silent_server = client_->Join(silent);
  ASSERT_TRUE(silent_server.ok()) << silent_server.status();

  std::vector<v1::TensorSpec> specs;
  for (int i = 0; i < 6; ++i) specs.push_back(Spec(absl::StrCat("layer", i, ".weight"), 64, 32));
  auto registered = w0.RegisterTensors(specs);
  ASSERT_TRUE(registered.ok()) << registered.status();

  auto full = w0.WaitFor(
      [](const v1::ClusterState& s) {
        return s.workers_size() == 3 && s.servers_size() == 2 && s.tensors_size() == 6;
      },
      kWait);
  ASSERT_TRUE(full.ok()) << full.status();
  const uint64_t epoch_before = (*full)->epoch();
  std::set<uint32_t> server_ranks_before;
  for (const v1::Chunk& c : (*full)->shard_map().chunks())
    server_ranks_before.insert(c.server_rank());
  EXPECT_EQ(server_ranks_before, (std::set<uint32_t>{0, 1})) << "chunks spread over both servers";
  std::set<std::string> owners_before;
  for (const v1::TensorBasisState& b : (*full)->bases()) owners_before.insert(b.owner_member_id());
  EXPECT_TRUE(owners_before.contains(silent_worker->member_id())) << "owners spread evenly";

  // Both silent members expire (TTL 1 s); the epoch moves on without them.
  auto expired = w1.WaitFor(
      [](const v1::ClusterState& s) { return s.workers_size() == 2 && s.servers_size() == 1; },
      kWait);
  ASSERT_TRUE(expired.ok()) << expired.status();
  const v1::ClusterState& s = **expired;
  EXPECT_GT(s.epoch(), epoch_before);
  EXPECT_EQ(s.shard_map().epoch(), s.epoch());
  std::set<uint32_t> ranks;
  for (const v1::Member& m : s.workers()) ranks.insert(m.rank());
  EXPECT_EQ(ranks, (std::set<uint32_t>{0, 1}));
  EXPECT_EQ(s.servers(0).rank(), 0u);
  ASSERT_FALSE(s.shard_map().chunks().empty());
  for (const v1::Chunk& c : s.shard_map().chunks()) EXPECT_EQ(c.server_rank(), 0u);
  const std::set<std::string> live = LiveIds(s);
  ASSERT_EQ(s.bases_size(), 6);
  for (const v1::TensorBasisState& b : s.bases()) {
    EXPECT_TRUE(live.contains(b.owner_member_id())) << b.owner_member_id();
    EXPECT_NE(b.owner_member_id(), silent_worker->member_id());
  }
  // The sessions follow the new epoch; the expired member is told to join again.
  const uint64_t epoch = s.epoch();
  EXPECT_TRUE(
      w0.WaitFor([&](const v1::ClusterState& st) { return st.epoch() == epoch; }, kWait).ok());
  EXPECT_EQ(w0.epoch(), epoch);
  v1::HeartbeatRequest beat;
  beat.set_member_id(silent_worker->member_id());
  EXPECT_TRUE(absl::IsFailedPrecondition(client_->Heartbeat(beat).status()));
}

TEST_F(ControlIntegrationTest, WorkerJoiningMidRunGetsTheNextRankAndTheState) {
  MemberSession& w0 = Join("w0");
  MemberSession& w1 = Join("w1");
  std::vector<v1::TensorSpec> specs;
  for (int i = 0; i < 4; ++i) specs.push_back(Spec(absl::StrCat("t", i), 32, 32));
  ASSERT_TRUE(w0.RegisterTensors(specs).ok());
  // The run goes on for a few steps.
  for (uint64_t step = 1; step <= 3; ++step) {
    for (MemberSession* w : {&w0, &w1}) {
      w->SetLastStep(step);
      ASSERT_TRUE(w->HeartbeatNow().ok());
    }
  }
  const uint32_t rank0 = w0.rank(), rank1 = w1.rank();
  const v1::ClusterState owners_before = client_->GetStatus()->state();
  const uint64_t epoch = owners_before.epoch();

  // A refresh is in flight when the newcomer arrives: its owner has published
  // and acknowledged it.
  const uint64_t tensor = owners_before.tensors(0).tensor_id();
  MemberSession& owner =
      FindBasis(owners_before, tensor)->owner_member_id() == w0.member_id() ? w0 : w1;
  MemberSession& other = &owner == &w0 ? w1 : w0;
  const std::string bytes = MakeBasisBytes(tensor, 1, 32, 32, 4);
  ASSERT_TRUE(owner.PublishBasis(tensor, 1, 4, bytes).ok());
  ASSERT_FALSE(owner.AckBasis(tensor, 1)->committed());

  // The run has stepped: the newcomer is admitted above the frozen horizon,
  // outside the world (no new epoch) until w0 and w1 have completed the steps
  // below its admit step.
  const uint64_t frozen = owners_before.frozen_through_step();
  MemberSession& w2 = Join("w2");
  EXPECT_EQ(w2.identity().admit_step, frozen + 1);
  EXPECT_EQ(w2.state()->tensors_size(), 4);
  EXPECT_EQ(w2.state()->epoch(), epoch);
  EXPECT_EQ(w2.state()->workers_size(), 2);
  for (MemberSession* w : {&w0, &w1}) {
    w->SetLastStep(frozen);
    ASSERT_TRUE(w->HeartbeatNow().ok());
  }
  auto in = w2.WaitFor([&](const v1::ClusterState& s) { return s.workers_size() == 3; }, kWait);
  ASSERT_TRUE(in.ok()) << in.status();
  EXPECT_EQ(w2.rank(), 2u);
  EXPECT_EQ(w2.epoch(), epoch + 1);
  EXPECT_GT((*in)->frozen_through_step(), frozen);
  // Ranks of the members already there are stable; everyone sees the new epoch.
  auto seen = w0.WaitFor([&](const v1::ClusterState& s) { return s.epoch() == epoch + 1; }, kWait);
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(w0.rank(), rank0);
  EXPECT_EQ(w1.rank(), rank1);
  // The pending version now needs the newcomer's acknowledgement too.
  auto acked = other.AckBasis(tensor, 1);
  ASSERT_TRUE(acked.ok()) << acked.status();
  EXPECT_FALSE(acked->committed());
  auto fetched = w2.FetchBasis(tensor, 1);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(fetched->bytes, bytes);
  acked = w2.AckBasis(tensor, 1);
  ASSERT_TRUE(acked.ok()) << acked.status();
  EXPECT_TRUE(acked->committed());
  EXPECT_GT(acked->activation_step(), w2.state()->frozen_through_step());
  // Every tensor keeps a live owner; owners are not moved by a join (an owner
  // holds the statistics its next basis is built from).
  const std::set<std::string> live = LiveIds(**seen);
  ASSERT_EQ((*seen)->bases_size(), 4);
  for (const v1::TensorBasisState& b : (*seen)->bases()) {
    EXPECT_TRUE(live.contains(b.owner_member_id())) << b.owner_member_id();
    const v1::TensorBasisState* before = FindBasis(owners_before, b.tensor_id());
    ASSERT_NE(before, nullptr);
    EXPECT_EQ(b.owner_member_id(), before->owner_member_id());
  }
}

TEST_F(ControlIntegrationTest, RefreshWaitsForTheLateAckAndNeverMixesVersions) {
  StateRecorder recorder(coordinator_->address());
  std::vector<MemberSession*> workers = {&Join("w0"), &Join("w1"), &Join("w2")};
  auto registered = workers[0]->RegisterTensors({Spec("attn.qkv", 48, 32)});
  ASSERT_TRUE(registered.ok()) << registered.status();
  const uint64_t tensor = registered->tensors(0).tensor_id();
  auto with_owner = workers[0]->WaitFor(
      [&](const v1::ClusterState& s) {
        const v1::TensorBasisState* b = FindBasis(s, tensor);
        return b != nullptr && !b->owner_member_id().empty() && s.workers_size() == 3;
      },
      kWait);
  ASSERT_TRUE(with_owner.ok()) << with_owner.status();
  const std::string owner_id = FindBasis(**with_owner, tensor)->owner_member_id();
  MemberSession* owner = nullptr;
  MemberSession* late = nullptr;
  for (MemberSession* w : workers) (w->member_id() == owner_id ? owner : late) = w;
  ASSERT_NE(owner, nullptr);
  ASSERT_NE(late, nullptr);

  // A publisher that does not own the tensor is refused.
  const std::string bytes = MakeBasisBytes(tensor, 1, 48, 32, 4);
  EXPECT_TRUE(absl::IsFailedPrecondition(late->PublishBasis(tensor, 1, 4, bytes).status()));
  auto published = owner->PublishBasis(tensor, 1, 4, bytes);
  ASSERT_TRUE(published.ok()) << published.status();
  const uint64_t tentative = published->tentative_activation_step();

  for (MemberSession* w : workers) {
    auto fetched = w->FetchBasis(tensor, 1);
    ASSERT_TRUE(fetched.ok()) << fetched.status();
    EXPECT_EQ(fetched->bytes, bytes);
    ASSERT_TRUE(transform::ParseTensorBasis(fetched->bytes).ok());
    if (w == late) continue;
    auto acked = w->AckBasis(tensor, 1);
    ASSERT_TRUE(acked.ok()) << acked.status();
    EXPECT_FALSE(acked->committed());
  }

  // The workers run up to the frozen schedule, step after step, while one ack
  // is missing: the activation is postponed, the frozen step passes the
  // tentative activation step, and nothing is committed.
  uint64_t frozen = workers[0]->state()->frozen_through_step();
  while (frozen <= tentative + 2) {
    for (MemberSession* w : workers) {
      w->SetLastStep(frozen);
      ASSERT_TRUE(w->HeartbeatNow().ok());
    }
    auto next = workers[0]->WaitFor(
        [&](const v1::ClusterState& s) { return s.frozen_through_step() > frozen; }, kWait);
    ASSERT_TRUE(next.ok()) << next.status();
    frozen = (*next)->frozen_through_step();
    ASSERT_FALSE(HasVersion(**next, tensor, 1));
  }
  const v1::TensorBasisState* pending = FindBasis(*workers[0]->state(), tensor);
  ASSERT_NE(pending, nullptr);
  ASSERT_TRUE(pending->has_proposal());
  EXPECT_GE(pending->proposal().postponements(), 1u);
  EXPECT_GT(pending->proposal().tentative_activation_step(), frozen);
  EXPECT_EQ(pending->proposal().acked_member_ids_size(), 2);

  // The last ack commits it, above everything frozen so far.
  auto acked = late->AckBasis(tensor, 1);
  ASSERT_TRUE(acked.ok()) << acked.status();
  EXPECT_TRUE(acked->committed());
  EXPECT_GT(acked->activation_step(), frozen);
  EXPECT_GT(acked->activation_step(), tentative);
  auto committed =
      late->WaitFor([&](const v1::ClusterState& s) { return HasVersion(s, tensor, 1); }, kWait);
  ASSERT_TRUE(committed.ok()) << committed.status();

  ASSERT_TRUE(
      recorder.WaitFor([&](const v1::ClusterState& s) { return HasVersion(s, tensor, 1); }));

  // Over every state the watch delivered: no activation at or below a frozen
  // step seen before it, and never two versions active at one step.
  uint64_t max_frozen_before_commit = 0;
  bool saw_commit = false;
  for (const v1::ClusterState& s : recorder.states()) {
    const v1::TensorBasisState* b = FindBasis(s, tensor);
    if (b == nullptr) continue;
    for (int i = 1; i < b->versions_size(); ++i) {
      EXPECT_LT(b->versions(i - 1).activation_step(), b->versions(i).activation_step());
      EXPECT_LT(b->versions(i - 1).version(), b->versions(i).version());
    }
    if (HasVersion(s, tensor, 1)) {
      saw_commit = true;
    } else {
      max_frozen_before_commit = std::max(max_frozen_before_commit, s.frozen_through_step());
    }
  }
  EXPECT_TRUE(saw_commit);
  EXPECT_GT(acked->activation_step(), max_frozen_before_commit);
}

// Per-tensor codecs through the giftctl binary: set on an override, stored
// and validated by the coordinator, shown by `policy get` in both forms.
TEST_F(ControlIntegrationTest, PerTensorCodecsThroughGiftctl) {
  CommandResult set =
      Giftctl({"--coordinator", coordinator_->address(), "policy", "set", "--tensor", "*.norm",
               "--push-codec", "nvfp4", "--pull-codec", "e4m3/block128"});
  ASSERT_EQ(set.code, 0) << set.err;
  CommandResult global = Giftctl(
      {"--coordinator", coordinator_->address(), "policy", "set", "--pull-codec", "e4m3/block32"});
  ASSERT_EQ(global.code, 0) << global.err;
  CommandResult table = Giftctl({"--coordinator", coordinator_->address(), "policy", "get"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_NE(table.out.find("PUSH"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("nvfp4"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("e4m3/block128"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("e4m3/block32"), std::string::npos) << table.out;
  CommandResult get =
      Giftctl({"--coordinator", coordinator_->address(), "--json", "policy", "get"});
  ASSERT_EQ(get.code, 0) << get.err;
  const nlohmann::json j = nlohmann::json::parse(get.out);
  ASSERT_EQ(j["overrides"].size(), 1u);
  EXPECT_EQ(j["overrides"][0]["push_codec"]["format"], "ELEMENT_FORMAT_NVFP4");
  EXPECT_EQ(j["overrides"][0]["pull_codec"]["block_size"], 128);
  // The coordinator refuses an override codec that does not validate.
  v1::Policy bad = *client_->GetPolicy();
  bad.mutable_overrides(0)->mutable_push_codec()->set_block_size(7);
  EXPECT_EQ(client_->SetPolicy(bad, bad.version()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The per-worker sketches' codec: global only, shown by `policy get`.
TEST_F(ControlIntegrationTest, StatisticsCodecThroughGiftctl) {
  CommandResult set = Giftctl({"--coordinator", coordinator_->address(), "policy", "set",
                               "--statistics-codec", "e4m3/block128"});
  ASSERT_EQ(set.code, 0) << set.err;
  const v1::CodecSpec stored = client_->GetPolicy()->transform().statistics_codec();
  EXPECT_EQ(stored.format(), v1::ELEMENT_FORMAT_E4M3);
  EXPECT_EQ(stored.scaling(), v1::SCALING_PER_BLOCK_FP32);
  EXPECT_EQ(stored.block_size(), 128u);
  CommandResult get = Giftctl({"--coordinator", coordinator_->address(), "policy", "get"});
  ASSERT_EQ(get.code, 0) << get.err;
  EXPECT_NE(get.out.find("statistics_codec"), std::string::npos) << get.out;
  CommandResult per_tensor =
      Giftctl({"--coordinator", coordinator_->address(), "policy", "set", "--tensor", "w*",
               "--statistics-codec", "bf16"});
  EXPECT_NE(per_tensor.code, 0);
  EXPECT_NE(per_tensor.err.find("--statistics-codec apply to the global policy only"),
            std::string::npos)
      << per_tensor.err;
  CommandResult bad = Giftctl({"--coordinator", coordinator_->address(), "policy", "set",
                               "--statistics-codec", "e4m3/block7"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("--statistics-codec"), std::string::npos) << bad.err;

  // The sketches' columns: global, and per tensor through an override.
  CommandResult columns = Giftctl({"--coordinator", coordinator_->address(), "policy", "set",
                                   "--tensor", "w*", "--statistics-columns", "64"});
  ASSERT_EQ(columns.code, 0) << columns.err;
  const v1::Policy stored_columns = *client_->GetPolicy();
  ASSERT_EQ(stored_columns.overrides_size(), 1);
  EXPECT_EQ(stored_columns.overrides(0).statistics_columns(), 64u);
  EXPECT_NE(columns.out.find("SKETCH_COLUMNS"), std::string::npos) << columns.out;
  CommandResult too_many = Giftctl(
      {"--coordinator", coordinator_->address(), "policy", "set", "--statistics-columns", "4096"});
  EXPECT_NE(too_many.code, 0);
  EXPECT_NE(too_many.err.find("--statistics-columns"), std::string::npos) << too_many.err;
}

TEST_F(ControlIntegrationTest, HierarchyAndAZeroDriftThroughGiftctl) {
  MemberSession& watcher = Join("w0");
  CommandResult set = Giftctl({"--coordinator", coordinator_->address(), "policy", "set",
                               "--hierarchy", "node", "--drift", "0"});
  ASSERT_EQ(set.code, 0) << set.err;
  EXPECT_NE(set.out.find("hierarchy"), std::string::npos) << set.out;
  auto seen = watcher.WaitFor(
      [](const v1::ClusterState& s) { return s.policy().hierarchy() == v1::HIERARCHY_NODE; },
      kWait);
  ASSERT_TRUE(seen.ok()) << seen.status();
  ASSERT_TRUE((*seen)->policy().refresh().has_drift_threshold());
  EXPECT_EQ((*seen)->policy().refresh().drift_threshold(), 0.0);
  EXPECT_EQ(Giftctl({"--coordinator", coordinator_->address(), "policy", "set", "--hierarchy",
                     "rack"})
                .code,
            64);
}

TEST_F(ControlIntegrationTest, PolicyChangeThroughGiftctlReachesAWatcher) {
  MemberSession& watcher = Join("w0");
  const uint64_t version = client_->GetPolicy()->version();
  CommandResult set = Giftctl({"--coordinator", coordinator_->address(), "policy", "set",
                               "--period", "25", "--rank", "16", "--power", "0.125,0.5", "--sides",
                               "in", "--push-codec", "e5m2/block32"});
  ASSERT_EQ(set.code, 0) << set.err;
  auto seen = watcher.WaitFor(
      [](const v1::ClusterState& s) { return s.policy().refresh().period_steps() == 25; }, kWait);
  ASSERT_TRUE(seen.ok()) << seen.status();
  const v1::Policy& p = (*seen)->policy();
  EXPECT_EQ(p.version(), version + 1);
  EXPECT_EQ(p.transform().rank(), 16u);
  EXPECT_EQ(p.transform().sides(), v1::SIDES_INPUT);
  ASSERT_EQ(p.transform().powers_size(), 2);
  EXPECT_EQ(p.transform().powers(1), 0.5);
  EXPECT_EQ(p.transform().push_codec().block_size(), 32u);

  // A per-tensor override, then the whole policy back as JSON.
  CommandResult over = Giftctl({"--coordinator", coordinator_->address(), "policy", "set",
                                "--tensor", "attn.*", "--rank", "8", "--enabled", "true"});
  ASSERT_EQ(over.code, 0) << over.err;
  CommandResult get =
      Giftctl({"--coordinator", coordinator_->address(), "--json", "policy", "get"});
  ASSERT_EQ(get.code, 0) << get.err;
  const nlohmann::json j = nlohmann::json::parse(get.out);
  EXPECT_EQ(j["refresh"]["period_steps"], 25);
  ASSERT_EQ(j["overrides"].size(), 1u);
  EXPECT_EQ(j["overrides"][0]["glob"], "attn.*");
  EXPECT_EQ(j["overrides"][0]["rank"], 8);
  EXPECT_EQ(j["transform"]["rank"], 16) << "the override leaves the global policy alone";
  EXPECT_TRUE(
      watcher
          .WaitFor([](const v1::ClusterState& s) { return s.policy().overrides_size() == 1; },
                   kWait)
          .ok());
}

TEST_F(ControlIntegrationTest, AStoredNodePolicyServesAfterARestartWithAuthentication) {
  // Node-local aggregation set while authentication was off; the coordinator
  // restarted with --dataplane-auth serves it (the node's workers share a
  // node key: docs/design.md section 8.2).
  v1::Policy node;
  node.set_hierarchy(v1::HIERARCHY_NODE);
  ASSERT_TRUE(client_->SetPolicy(node, 0).ok());
  ASSERT_TRUE(coordinator_->Stop().ok());
  coordinator_.reset();
  StartCoordinator("127.0.0.1:0", {"--dataplane-auth"});
  auto policy = client_->GetPolicy();
  ASSERT_TRUE(policy.ok()) << policy.status();
  EXPECT_EQ(policy->hierarchy(), v1::HIERARCHY_NODE);
}

TEST_F(ControlIntegrationTest, RestartAfterSigkillKeepsPolicyTensorsBasesAndEpoch) {
  MemberSession& w0 = Join("w0");
  ASSERT_TRUE(client_
                  ->SetPolicy(
                      [] {
                        v1::Policy p;
                        p.mutable_refresh()->set_period_steps(33);
                        return p;
                      }(),
                      0)
                  .ok());
  auto registered = w0.RegisterTensors({Spec("mlp.up", 40, 24), Spec("mlp.down", 24, 40)});
  ASSERT_TRUE(registered.ok()) << registered.status();
  const uint64_t tensor = registered->tensors(0).tensor_id();
  const std::string bytes = MakeBasisBytes(tensor, 1, 40, 24, 3);
  ASSERT_TRUE(w0.PublishBasis(tensor, 1, 3, bytes).ok());
  auto acked = w0.AckBasis(tensor, 1);
  ASSERT_TRUE(acked.ok()) << acked.status();
  ASSERT_TRUE(acked->committed());
  const v1::StatusResponse before = *client_->GetStatus();

  const std::string address = coordinator_->address();
  ASSERT_TRUE(coordinator_->Kill().ok());
  coordinator_.reset();
  StartCoordinator(address);  // same port, so that the session reconnects

  absl::StatusOr<v1::StatusResponse> restarted = client_->GetStatus();
  ASSERT_TRUE(restarted.ok()) << restarted.status() << "\n" << coordinator_->log();
  const v1::StatusResponse& after = *restarted;
  EXPECT_EQ(after.state().cluster_id(), before.state().cluster_id());
  EXPECT_GE(after.state().epoch(), before.state().epoch());
  EXPECT_EQ(after.state().policy().version(), before.state().policy().version());
  EXPECT_EQ(after.state().policy().refresh().period_steps(), 33u);
  ASSERT_EQ(after.state().tensors_size(), 2);
  EXPECT_EQ(after.state().tensors(0).SerializeAsString(),
            before.state().tensors(0).SerializeAsString());
  EXPECT_TRUE(HasVersion(after.state(), tensor, 1));
  auto fetched = client_->FetchBasis(w0.member_id(), tensor, 1);
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  EXPECT_EQ(fetched->bytes, bytes);

  // The session's watch reconnects and its lease still (or again) holds.
  auto seen = w0.WaitFor(
      [&](const v1::ClusterState& s) {
        return s.revision() > before.state().revision() || s.epoch() > before.state().epoch();
      },
      kWait);
  ASSERT_TRUE(seen.ok()) << seen.status();
  // Its lease holds, or it has joined again (when the restart outlived the
  // 1 s TTL): heartbeats succeed again and the state lists it.
  absl::Status beat = w0.HeartbeatNow();
  for (const absl::Time deadline = absl::Now() + kWait; !beat.ok() && absl::Now() < deadline;
       beat = w0.HeartbeatNow()) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(beat.ok()) << beat;
  const std::string id = w0.member_id();
  // (A predicate must not call the session: it runs under the session's lock.)
  auto present =
      w0.WaitFor([&id](const v1::ClusterState& s) { return LiveIds(s).contains(id); }, kWait);
  EXPECT_TRUE(present.ok()) << present.status();
}

TEST_F(ControlIntegrationTest, GiftctlCommandsAndExitCodes) {
  MemberSession& w0 = Join("host-0/gpu0");
  ASSERT_TRUE(w0.RegisterTensors({Spec("emb", 64, 16)}).ok());
  const std::string addr = coordinator_->address();

  CommandResult status = Giftctl({"--coordinator", addr, "status", "--json"});
  ASSERT_EQ(status.code, 0) << status.err;
  const nlohmann::json s = nlohmann::json::parse(status.out);
  EXPECT_EQ(s["workers"], 1);
  EXPECT_EQ(s["tensors"], 1);
  EXPECT_EQ(s["dataplane_mac"], "off");  // no data-plane authentication here

  CommandResult members = Giftctl({"--coordinator", addr, "members"});
  ASSERT_EQ(members.code, 0) << members.err;
  EXPECT_NE(members.out.find("host-0/gpu0"), std::string::npos) << members.out;
  CommandResult members_json = Giftctl({"--coordinator", addr, "--json", "members"});
  ASSERT_EQ(members_json.code, 0);
  EXPECT_EQ(nlohmann::json::parse(members_json.out)["workers"][0]["name"], "host-0/gpu0");

  CommandResult tensors = Giftctl({"--coordinator", addr, "tensors"});
  ASSERT_EQ(tensors.code, 0) << tensors.err;
  EXPECT_NE(tensors.out.find("64x16"), std::string::npos) << tensors.out;
  CommandResult tensors_json = Giftctl({"--coordinator", addr, "tensors", "--json"});
  ASSERT_EQ(tensors_json.code, 0);
  EXPECT_EQ(nlohmann::json::parse(tensors_json.out)[0]["name"], "emb");

  CommandResult refresh = Giftctl({"--coordinator", addr, "refresh", "--tensor", "e*"});
  ASSERT_EQ(refresh.code, 0) << refresh.err;
  EXPECT_NE(refresh.out.find("emb"), std::string::npos);
  CommandResult rank = Giftctl({"--coordinator", addr, "--json", "rank", "set", "12"});
  ASSERT_EQ(rank.code, 0) << rank.err;
  EXPECT_EQ(nlohmann::json::parse(rank.out)["policy"]["transform"]["rank"], 12);

  // Drain by name; the member sees itself draining.
  CommandResult drain = Giftctl({"--coordinator", addr, "drain", "host-0/gpu0"});
  ASSERT_EQ(drain.code, 0) << drain.err;
  EXPECT_TRUE(w0.WaitFor(
                    [](const v1::ClusterState& st) {
                      return st.workers_size() == 1 &&
                             st.workers(0).state() == v1::MEMBER_STATE_DRAINING;
                    },
                    kWait)
                  .ok());

  // The coordinator's refusals: code 1 with its status code and message.
  CommandResult unknown = Giftctl({"--coordinator", addr, "drain", "nobody"});
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.err.find("NOT_FOUND"), std::string::npos) << unknown.err;

  // Usage errors: 64, whatever the coordinator.
  EXPECT_EQ(Giftctl({}).code, 64);
  EXPECT_EQ(Giftctl({"frobnicate"}).code, 64);
  EXPECT_EQ(Giftctl({"policy", "set", "--sides", "sideways"}).code, 64);
  EXPECT_EQ(Giftctl({"policy", "set"}).code, 64);
  EXPECT_EQ(Giftctl({"policy", "set", "--tensor", "x*", "--margin", "0.2"}).code, 64);
  EXPECT_EQ(Giftctl({"rank", "set", "zero"}).code, 64);
  EXPECT_EQ(Giftctl({"--timeout", "-1", "status"}).code, 64);
  CommandResult help = Giftctl({"policy", "set", "--help"});
  EXPECT_EQ(help.code, 0);
  EXPECT_NE(help.out.find("--push-codec"), std::string::npos) << help.out;

  // No coordinator: 69.
  ASSERT_TRUE(coordinator_->Stop().ok());
  coordinator_.reset();
  sessions_.clear();
  CommandResult down = Giftctl({"--coordinator", addr, "--timeout", "2", "status"});
  EXPECT_EQ(down.code, 69) << down.err;
  EXPECT_NE(down.err.find("UNAVAILABLE"), std::string::npos) << down.err;
}

}  // namespace
}  // namespace gift::control
