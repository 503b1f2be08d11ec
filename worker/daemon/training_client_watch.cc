#include "worker/daemon/training_client_watch.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/rpc/run_clients.h"

namespace gift::worker {

uint64_t TrainingClientWatch::NextRegistration() {
  absl::MutexLock lock(&mu_);
  return next_registration_++;
}

void TrainingClientWatch::Registered(
    uint64_t registration, uint64_t run_generation,
    const google::protobuf::RepeatedPtrField<gift::v1::BufferSpec>& buffers,
    const BufferSocket* socket) {
  absl::MutexLock lock(&mu_);
  // A registration that returned after a later one began is not the client.
  if (registration < client_.registration()) return;
  // Another registration in the same run (a second process, or the same one
  // registering again) adds its connections: the run's clients on this
  // worker are gone only when all of them are.
  if (client_.registration() == 0 || run_generation != client_.run_generation()) {
    watchable_ = true;
    open_connections_.clear();
  }
  client_.set_registration(registration);
  client_.set_run_generation(run_generation);
  for (const gift::v1::BufferSpec& b : buffers) {
    if (b.buffer().location_case() != gift::v1::SharedBuffer::kHandle || socket == nullptr) {
      watchable_ = false;  // a device buffer: nothing to watch
      continue;
    }
    // Under mu_: a close after this lookup waits in ConnectionClosed; one
    // before it has dropped the handle (NotFound), so the connection is gone.
    absl::StatusOr<uint64_t> connection = socket->ConnectionOf(b.buffer().handle());
    if (connection.ok()) open_connections_.insert(*connection);
  }
  client_.set_connected(!watchable_ || !open_connections_.empty());
  report_(client_);
}

void TrainingClientWatch::ConnectionClosed(uint64_t connection) {
  absl::MutexLock lock(&mu_);
  if (open_connections_.erase(connection) == 0 || !open_connections_.empty() || !watchable_) {
    return;
  }
  client_.set_connected(false);
  report_(client_);
}

bool TrainingClientWatch::left() const {
  absl::MutexLock lock(&mu_);
  return client_.registration() > 0 && !client_.connected();
}

std::string ConnectedRunClients(const gift::v1::ClusterState& state) {
  std::vector<std::string> connected;
  for (const gift::v1::Member& w : state.workers()) {
    if (rpc::ReportsClientOfRun(w, state.run().generation()) && w.client().connected()) {
      connected.push_back(absl::StrCat("rank ", w.rank(), " (", w.name(), ")"));
    }
  }
  return absl::StrJoin(connected, ", ");
}

}  // namespace gift::worker
