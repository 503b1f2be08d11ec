#include "tests/testing/cluster_clients.h"

#include <future>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace gift::test {

absl::StatusOr<ClusterClients> ConnectAndRegister(const tools::LocalCluster& cluster, int workers,
                                                  const std::vector<client::TensorSpec>& specs) {
  ClusterClients out;
  out.clients.resize(workers);
  out.tensors.resize(workers);
  for (int w = 0; w < workers; ++w) {
    auto c = client::WorkerClient::Connect(cluster.worker_socket(w));
    if (!c.ok()) {
      return absl::Status(c.status().code(),
                          absl::StrCat("worker ", w, ": ", c.status().message()));
    }
    out.clients[w] = *std::move(c);
  }
  std::vector<std::future<absl::Status>> calls;
  for (int w = 0; w < workers; ++w) {
    calls.push_back(std::async(std::launch::async, [&out, &specs, w]() -> absl::Status {
      auto t = out.clients[w]->Register(specs);
      if (!t.ok()) return t.status();
      out.tensors[w] = *std::move(t);
      return absl::OkStatus();
    }));
  }
  absl::Status first;
  for (int w = 0; w < workers; ++w) {
    const absl::Status s = calls[w].get();  // every call ends before `out` moves
    if (!s.ok() && first.ok()) {
      first = absl::Status(s.code(), absl::StrCat("worker ", w, ": ", s.message()));
    }
  }
  if (!first.ok()) return first;
  return out;
}

}  // namespace gift::test
