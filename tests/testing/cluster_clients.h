// The training side of a local test cluster: one WorkerClient per worker,
// each with the same tensors registered. The registrations run
// concurrently, because a worker's Register returns only once every worker
// of the cluster has registered its tensors.
//
//   auto clients = test::ConnectAndRegister(*cluster, 4, Specs());
//   ASSERT_TRUE(clients.ok()) << clients.status();
//   clients->tensors[w][i].data();  // worker w's tensor i, shared memory
//
// Ownership: the result owns the clients and the shared tensors; a tensor's
// memory stays mapped while its SharedTensor lives. Thread safety: a plain
// function; it returns after every registration has ended.
#ifndef GIFT_TESTS_TESTING_CLUSTER_CLIENTS_H_
#define GIFT_TESTS_TESTING_CLUSTER_CLIENTS_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/gift-cluster/local_cluster.h"
#include "worker/client/worker_client.h"

namespace gift::test {

struct ClusterClients {
  std::vector<std::unique_ptr<client::WorkerClient>> clients;  // [worker]
  std::vector<std::vector<client::SharedTensor>> tensors;      // [worker][spec]
};

// Connects to the Worker API of workers 0..workers-1 of `cluster` and
// registers `specs` on each. The first failure (connect or register) is
// returned, with the worker's index in its message.
absl::StatusOr<ClusterClients> ConnectAndRegister(const tools::LocalCluster& cluster, int workers,
                                                  const std::vector<client::TensorSpec>& specs);

}  // namespace gift::test

#endif  // GIFT_TESTS_TESTING_CLUSTER_CLIENTS_H_
