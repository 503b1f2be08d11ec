// The fixture of the cluster state machine's tests: a state machine over a
// real SQLite file in a temp dir with a fake clock, and helpers that make
// the calls a member would.
#ifndef GIFT_TESTS_COORDINATOR_CLUSTER_STATE_FIXTURE_H_
#define GIFT_TESTS_COORDINATOR_CLUSTER_STATE_FIXTURE_H_

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/base/crc32c.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/state_store.h"
#include "tests/coordinator/test_util.h"
#include "tests/testing/temp_dir.h"

namespace gift::coordinator::testing {

class ClusterStateMachineTest : public ::testing::Test {
 protected:
  ClusterStateMachineTest() {
    options_.lease_ttl = absl::Seconds(10);
    options_.step_window = 8;
    options_.chunk_bytes = 4096;
    options_.max_basis_bytes = 1 << 20;
    Open();
  }

  void Open() {
    state_.reset();
    auto store = StateStore::Open(dir_.File("state.db"));
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = store->get();
    auto state = ClusterStateMachine::Create(options_, *std::move(store), &clock_);
    ASSERT_TRUE(state.ok()) << state.status();
    state_ = *std::move(state);
  }

  gift::v1::JoinResponse Join(const std::string& name,
                              gift::v1::MemberRole role = gift::v1::MEMBER_ROLE_WORKER) {
    gift::v1::JoinRequest request;
    request.set_name(name);
    request.set_role(role);
    auto response = state_->Join(request);
    EXPECT_TRUE(response.ok()) << response.status();
    return response.value_or(gift::v1::JoinResponse());
  }

  absl::Status Heartbeat(const std::string& id, uint64_t last_step) {
    gift::v1::HeartbeatRequest request;
    request.set_member_id(id);
    request.set_epoch(state_->Snapshot()->epoch());
    request.set_last_step(last_step);
    return state_->Heartbeat(request).status();
  }

  absl::Status Leave(const std::string& id) {
    gift::v1::LeaveRequest request;
    request.set_member_id(id);
    return state_->Leave(request).status();
  }

  std::vector<gift::v1::TensorInfo> Register(
      const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
    auto response = state_->RegisterTensors(testing::MakeRegisterRequest(tensors));
    EXPECT_TRUE(response.ok()) << response.status();
    if (!response.ok()) return {};
    return {response->tensors().begin(), response->tensors().end()};
  }

  gift::v1::TensorBasisState Basis(uint64_t tensor_id) {
    for (const auto& b : state_->Snapshot()->bases()) {
      if (b.tensor_id() == tensor_id) return b;
    }
    ADD_FAILURE() << "no basis state for tensor " << tensor_id;
    return {};
  }

  std::map<std::string, uint32_t> Ranks() {
    std::map<std::string, uint32_t> ranks;
    for (const auto& m : state_->Snapshot()->workers()) ranks[m.name()] = m.rank();
    return ranks;
  }

  absl::StatusOr<gift::v1::PublishBasisResponse> Publish(const std::string& member_id,
                                                         const gift::v1::TensorInfo& tensor,
                                                         uint64_t version, std::string bytes = "") {
    if (bytes.empty()) {
      bytes = MakeBasisBytes(tensor.tensor_id(), version, tensor.shape(0), tensor.shape(1));
    }
    gift::v1::BasisHeader header;
    header.set_member_id(member_id);
    header.set_tensor_id(tensor.tensor_id());
    header.set_version(version);
    header.set_rank(2);
    header.set_size_bytes(bytes.size());
    header.set_crc32c(crc32c::Value(bytes.data(), bytes.size()));
    return state_->PublishBasis(header, std::move(bytes));
  }

  absl::StatusOr<gift::v1::AckBasisResponse> Ack(const std::string& member_id, uint64_t tensor_id,
                                                 uint64_t version) {
    gift::v1::AckBasisRequest request;
    request.set_member_id(member_id);
    request.set_tensor_id(tensor_id);
    request.set_version(version);
    return state_->AckBasis(request);
  }

  gift::TempDir dir_ = test::NewTempDir("gift-coord");
  FakeClock clock_;
  ClusterOptions options_;
  StateStore* store_ = nullptr;  // owned by state_
  std::unique_ptr<ClusterStateMachine> state_;
};

}  // namespace gift::coordinator::testing

#endif  // GIFT_TESTS_COORDINATOR_CLUSTER_STATE_FIXTURE_H_
