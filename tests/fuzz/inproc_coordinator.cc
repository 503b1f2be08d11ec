#include "tests/fuzz/inproc_coordinator.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/coordinator/state_store.h"

namespace gift::fuzz {
namespace {

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "inproc coordinator: %s\n", what.c_str());
  std::abort();
}

}  // namespace

absl::Time ManualClock::Now() {
  absl::MutexLock lock(&mu_);
  return now_;
}

void ManualClock::Advance(absl::Duration d) {
  absl::MutexLock lock(&mu_);
  now_ += d;
}

// Routes every call of the one server to the coordinator of the moment. An
// RPC added to the service and not here answers UNIMPLEMENTED, which the
// coordinator fuzzer's status check lets pass: add it here too.
class InprocCoordinator::ForwardingService final : public gift::v1::Coordinator::CallbackService {
 public:
  void set_target(coordinator::CoordinatorService* target) { target_.store(target); }

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext* context,
                                 const gift::v1::JoinRequest* request,
                                 gift::v1::JoinResponse* response) override {
    return target_.load()->Join(context, request, response);
  }
  grpc::ServerUnaryReactor* Leave(grpc::CallbackServerContext* context,
                                  const gift::v1::LeaveRequest* request,
                                  gift::v1::LeaveResponse* response) override {
    return target_.load()->Leave(context, request, response);
  }
  grpc::ServerUnaryReactor* Heartbeat(grpc::CallbackServerContext* context,
                                      const gift::v1::HeartbeatRequest* request,
                                      gift::v1::HeartbeatResponse* response) override {
    return target_.load()->Heartbeat(context, request, response);
  }
  grpc::ServerWriteReactor<gift::v1::ClusterState>* Watch(
      grpc::CallbackServerContext* context, const gift::v1::WatchRequest* request) override {
    return target_.load()->Watch(context, request);
  }
  grpc::ServerUnaryReactor* ReportPeerFailure(
      grpc::CallbackServerContext* context, const gift::v1::ReportPeerFailureRequest* request,
      gift::v1::ReportPeerFailureResponse* response) override {
    return target_.load()->ReportPeerFailure(context, request, response);
  }
  grpc::ServerUnaryReactor* RegisterTensors(grpc::CallbackServerContext* context,
                                            const gift::v1::RegisterTensorsRequest* request,
                                            gift::v1::RegisterTensorsResponse* response) override {
    return target_.load()->RegisterTensors(context, request, response);
  }
  grpc::ServerReadReactor<gift::v1::PublishBasisRequest>* PublishBasis(
      grpc::CallbackServerContext* context, gift::v1::PublishBasisResponse* response) override {
    return target_.load()->PublishBasis(context, response);
  }
  grpc::ServerWriteReactor<gift::v1::BasisChunk>* FetchBasis(
      grpc::CallbackServerContext* context, const gift::v1::FetchBasisRequest* request) override {
    return target_.load()->FetchBasis(context, request);
  }
  grpc::ServerUnaryReactor* AckBasis(grpc::CallbackServerContext* context,
                                     const gift::v1::AckBasisRequest* request,
                                     gift::v1::AckBasisResponse* response) override {
    return target_.load()->AckBasis(context, request, response);
  }
  grpc::ServerUnaryReactor* GetPolicy(grpc::CallbackServerContext* context,
                                      const gift::v1::GetPolicyRequest* request,
                                      gift::v1::Policy* response) override {
    return target_.load()->GetPolicy(context, request, response);
  }
  grpc::ServerUnaryReactor* SetPolicy(grpc::CallbackServerContext* context,
                                      const gift::v1::SetPolicyRequest* request,
                                      gift::v1::Policy* response) override {
    return target_.load()->SetPolicy(context, request, response);
  }
  grpc::ServerUnaryReactor* RequestRefresh(grpc::CallbackServerContext* context,
                                           const gift::v1::RequestRefreshRequest* request,
                                           gift::v1::RequestRefreshResponse* response) override {
    return target_.load()->RequestRefresh(context, request, response);
  }
  grpc::ServerUnaryReactor* SetRank(grpc::CallbackServerContext* context,
                                    const gift::v1::SetRankRequest* request,
                                    gift::v1::SetRankResponse* response) override {
    return target_.load()->SetRank(context, request, response);
  }
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const gift::v1::GetStatusRequest* request,
                                      gift::v1::StatusResponse* response) override {
    return target_.load()->GetStatus(context, request, response);
  }
  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const gift::v1::DrainRequest* request,
                                  gift::v1::DrainResponse* response) override {
    return target_.load()->Drain(context, request, response);
  }
  grpc::ServerUnaryReactor* StartRun(grpc::CallbackServerContext* context,
                                     const gift::v1::StartRunRequest* request,
                                     gift::v1::StartRunResponse* response) override {
    return target_.load()->StartRun(context, request, response);
  }
  grpc::ServerUnaryReactor* GetDataPlaneKeys(grpc::CallbackServerContext* context,
                                             const gift::v1::GetDataPlaneKeysRequest* request,
                                             gift::v1::DataPlaneKeys* response) override {
    return target_.load()->GetDataPlaneKeys(context, request, response);
  }

 private:
  std::atomic<coordinator::CoordinatorService*> target_{nullptr};
};

namespace {

// Directories of coordinators still alive, removed at exit: the fuzzers keep
// theirs for the whole run and never destroy it.
std::vector<std::string>& DirsToRemoveAtExit() {
  static auto* dirs = new std::vector<std::string>;
  return *dirs;
}

void RemoveDirsAtExit() {
  for (const std::string& dir : DirsToRemoveAtExit()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir, ignored);
  }
}

}  // namespace

InprocCoordinator::InprocCoordinator(const InprocCoordinatorOptions& options)
    : options_(options), forwarder_(std::make_unique<ForwardingService>()) {
  // tmpfs when there is one: the store syncs every commit.
  const char* base = std::getenv("GIFT_FUZZ_TMPDIR");
  if (base == nullptr) base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
  std::string pattern = absl::StrCat(base, "/gift-fuzz-coord-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) Die(absl::StrCat("mkdtemp ", pattern));
  dir_ = pattern;
  if (DirsToRemoveAtExit().empty()) std::atexit(RemoveDirsAtExit);
  DirsToRemoveAtExit().push_back(dir_);
  Start();
  grpc::ServerBuilder builder;
  if (options.listen_on_unix_socket) {
    address_ = absl::StrCat("unix:", dir_, "/coordinator.sock");
    builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
  }
  builder.RegisterService(forwarder_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) Die("the gRPC server did not start");
  channel_ = server_->InProcessChannel(grpc::ChannelArguments());
  stub_ = gift::v1::Coordinator::NewStub(channel_);
}

void InprocCoordinator::Start() {
  clock_ = std::make_unique<ManualClock>();
  auto store = coordinator::StateStore::Open(dir_ + "/state.db");
  if (!store.ok()) Die(store.status().ToString());
  auto state =
      coordinator::ClusterStateMachine::Create(options_.cluster, *std::move(store), clock_.get());
  if (!state.ok()) Die(state.status().ToString());
  state_ = *std::move(state);
  service_ = std::make_unique<coordinator::CoordinatorService>(state_.get(), "fuzz");
  forwarder_->set_target(service_.get());
}

void InprocCoordinator::Stop() {
  service_->Shutdown();
  if (!service_->AwaitWatchersEnded(absl::Seconds(5))) Die("a Watch stream did not end");
  service_.reset();
  state_.reset();
  for (const char* suffix : {"", "-wal", "-shm"}) {
    std::error_code ignored;
    std::filesystem::remove(absl::StrCat(dir_, "/state.db", suffix), ignored);
  }
}

void InprocCoordinator::Reset() {
  Stop();
  Start();
}

InprocCoordinator::~InprocCoordinator() {
  service_->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  stub_.reset();
  channel_.reset();
  server_.reset();
  service_.reset();
  state_.reset();
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
  std::erase(DirsToRemoveAtExit(), dir_);
}

}  // namespace gift::fuzz
