// The integration tests' fixture over a whole local cluster (TestCluster:
// a gift-coordinator, gift-servers and gift-workers on loopback): started in
// SetUp from Options() (or by the test itself: StartCluster), the
// coordinator's client, the training side's clients with their tensors
// registered (Register), the daemons' logs for failure messages (Logs), and
// the cluster's end in TearDown (a clean stop by default: at_tear_down_).
//
//   class MyClusterTest : public test::ClusterFixture<> {
//     tools::LocalClusterOptions Options() override {
//       return test::ShortLeaseOptions(2, 4);
//     }
//   };
//   TEST_F(MyClusterTest, Steps) {
//     SetPolicy(policy);
//     Register(Specs());
//     clients_[w]->PushPull(step) ... tensors_[w][i].data() ...
//   }
//
// Base: ::testing::Test, or ::testing::TestWithParam<T> for parameterized
// tests. Ownership: the fixture owns the cluster (its processes end in
// TearDown, or in TestCluster's destructor if a test ends otherwise) and
// the clients, which end before the cluster stops. Thread safety: the test
// thread's, but Logs (any thread).
#ifndef GIFT_TESTS_TESTING_CLUSTER_FIXTURE_H_
#define GIFT_TESTS_TESTING_CLUSTER_FIXTURE_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/control/coordinator_client.h"
#include "gift/v1/policy.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster_clients.h"
#include "tests/testing/test_cluster.h"
#include "tools/gift-cluster/local_cluster.h"
#include "worker/client/worker_client.h"

namespace gift::test {

template <typename Base = ::testing::Test>
class ClusterFixture : public Base {
 protected:
  // What SetUp starts (the binaries of the build tree in a temp dir of its
  // own); ShortLeaseOptions(2, 2) unless a test says otherwise.
  virtual tools::LocalClusterOptions Options() { return ShortLeaseOptions(2, 2); }
  // The CMake binary dir the daemons are taken from: the test's
  // GIFT_BUILD_DIR compile definition.
  virtual std::string BuildDir() const { return GIFT_BUILD_DIR; }

  void SetUp() override {
    if (starts_in_set_up_) StartCluster(Options());
  }

  // Starts the cluster (SetUp does, unless starts_in_set_up_ is cleared in
  // the test's constructor: a test that picks its options itself).
  void StartCluster(const tools::LocalClusterOptions& options) {
    auto cluster = TestCluster::Start(options, BuildDir());
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    test_cluster_ = *std::move(cluster);
    cluster_ = test_cluster_->cluster();
    coordinator_ = std::make_unique<control::CoordinatorClient>(
        control::CoordinatorClient::MakeChannel(cluster_->coordinator_address()),
        absl::Seconds(30));
  }

  // The clients end first, then the cluster stops as at_tear_down_ says.
  void TearDown() override {
    clients_.clear();
    tensors_.clear();
    if (cluster_ == nullptr || at_tear_down_ == AtTearDown::kKill) return;
    const absl::Status stopped = cluster_->Stop();
    if (at_tear_down_ == AtTearDown::kStopCleanly) {
      EXPECT_TRUE(stopped.ok()) << stopped << "\n" << Logs();
    }
  }

  // Connects a client to each of workers 0..workers-1 (-1: every worker)
  // and registers `specs` on each (test::ConnectAndRegister).
  void Register(const std::vector<client::TensorSpec>& specs, int workers = -1) {
    auto registered =
        ConnectAndRegister(*cluster_, workers < 0 ? cluster_->options().workers : workers, specs);
    ASSERT_TRUE(registered.ok()) << registered.status();
    clients_ = std::move(registered->clients);
    tensors_ = std::move(registered->tensors);
  }

  // Replaces the cluster's policy (a new epoch); a failure fails the test.
  void SetPolicy(const gift::v1::Policy& policy) {
    auto set = coordinator_->SetPolicy(policy, 0);
    ASSERT_TRUE(set.ok()) << set.status();
  }

  std::string Logs() const { return test_cluster_ == nullptr ? "" : test_cluster_->Logs(); }

  std::unique_ptr<TestCluster> test_cluster_;
  tools::LocalCluster* cluster_ = nullptr;  // owned by test_cluster_
  std::unique_ptr<control::CoordinatorClient> coordinator_;
  std::vector<std::unique_ptr<client::WorkerClient>> clients_;  // [worker]
  std::vector<std::vector<client::SharedTensor>> tensors_;      // [worker][spec]
  enum class AtTearDown {
    kStopCleanly,  // SIGTERM; a stop that fails fails the test, quoting the logs
    kStopAnyhow,   // SIGTERM, whatever it returns (a test that killed a daemon)
    kKill,         // nothing here: TestCluster's destructor kills them
  };
  AtTearDown at_tear_down_ = AtTearDown::kStopCleanly;
  bool starts_in_set_up_ = true;
};

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_CLUSTER_FIXTURE_H_
