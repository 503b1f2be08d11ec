// WorkerCore's registration side (worker_core.h): the buffer socket, the
// training process's buffers registered as the cluster's tensors, and the
// run they belong to (run_steps.h).
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "worker/daemon/worker_core.h"

namespace gift::worker {

using logging::Level;
using logging::Log;

absl::Status WorkerCore::ServeBuffers(const std::string& path) {
  if (buffer_socket_ != nullptr) return absl::FailedPreconditionError("already serving buffers");
  auto socket = BufferSocket::Start(
      path, [this](uint64_t connection) { client_watch_.ConnectionClosed(connection); });
  if (!socket.ok()) return socket.status();
  buffer_socket_ = *std::move(socket);
  return absl::OkStatus();
}

absl::StatusOr<gift::v1::RegisterBuffersResponse> WorkerCore::RegisterBuffers(
    const gift::v1::RegisterBuffersRequest& request) {
  if (request.buffers_size() == 0) return absl::InvalidArgumentError("no buffers");
  std::vector<RegisteredTensor> mapped;
  std::vector<gift::v1::TensorSpec> specs;
  for (int i = 0; i < request.buffers_size(); ++i) {
    const gift::v1::BufferSpec& b = request.buffers(i);
    auto r = RegisteredTensor::View(b, buffer_socket_.get(), options_.device,
                                    absl::StrCat("buffers[", i, "] '", b.name(), "'"));
    if (!r.ok()) return r.status();
    mapped.push_back(*std::move(r));
    gift::v1::TensorSpec spec;
    spec.set_name(b.name());
    *spec.mutable_shape() = b.shape();
    // The exchange is FP32 whatever the buffer holds, so workers whose
    // buffers differ in dtype still agree on the tensor.
    spec.set_dtype(gift::v1::DTYPE_FLOAT32);
    specs.push_back(std::move(spec));
  }
  absl::MutexLock step_lock(&step_mu_);
  if (open_.has_value()) AbandonOpenStep("the client registered new buffers");
  if (!request.run_id().empty()) {
    // A run of another id starts now (the old run's tensors are dropped).
    auto started = session_->StartRun(request.run_id());
    if (!started.ok()) return started.status();
  } else if (client_watch_.left()) {
    // Without a run id the coordinator starts a new run when every client of
    // the current one has left: it must know that this worker's has, which
    // the lease thread is sending (a client started again at once may be
    // faster).
    (void)session_->HeartbeatNow();
  }
  const uint64_t registration = client_watch_.NextRegistration();
  auto registered = session_->RegisterTensors(
      specs, {.registration = registration, .new_run_when_clients_left = request.run_id().empty()});
  if (!registered.ok()) return registered.status();
  if (registered->tensors_size() != static_cast<int>(mapped.size())) {
    return absl::InternalError("the coordinator answered for another number of tensors");
  }
  const RunSteps run(registered->run());
  client_watch_.Registered(registration, run.run().generation(), request.buffers(),
                           buffer_socket_.get());
  gift::v1::RegisterBuffersResponse response;
  for (size_t i = 0; i < mapped.size(); ++i) {
    mapped[i].local.tensor_id = registered->tensors(static_cast<int>(i)).tensor_id();
    gift::v1::RegisteredBuffer* out = response.add_buffers();
    out->set_name(mapped[i].local.name);
    out->set_tensor_id(mapped[i].local.tensor_id);
  }
  registered_ = std::move(mapped);
  membership_.Reset();  // a new run: no worker is lost before its first step
  *response.mutable_run() = run.run();
  admission_.SetRun(run);
  {
    absl::MutexLock lock(&mu_);
    d_in_by_tensor_.clear();
    for (const RegisteredTensor& r : registered_) d_in_by_tensor_[r.local.tensor_id] = r.local.cols;
  }
  response.set_rank(session_->rank());
  response.set_world_size(static_cast<uint32_t>(session_->state()->workers_size()));
  Log(Level::kInfo, "buffers_registered",
      {{"tensors", static_cast<int64_t>(registered_.size())},
       {"run_started", registered->run_started()},
       {"run_id", run.run().run_id()},
       {"run_generation", run.run().generation()},
       {"run_base_step", run.run().base_step()}});
  return response;
}

}  // namespace gift::worker
