#include "tests/fuzz/inproc_coordinator.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

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

InprocCoordinator::InprocCoordinator(const InprocCoordinatorOptions& options) {
  // tmpfs when there is one: the store syncs every commit.
  const char* base = std::getenv("GIFT_FUZZ_TMPDIR");
  if (base == nullptr) base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
  std::string pattern = absl::StrCat(base, "/gift-fuzz-coord-XXXXXX");
  if (mkdtemp(pattern.data()) == nullptr) Die(absl::StrCat("mkdtemp ", pattern));
  dir_ = pattern;
  auto store = coordinator::StateStore::Open(dir_ + "/state.db");
  if (!store.ok()) Die(store.status().ToString());
  auto state = coordinator::ClusterStateMachine::Create(options.cluster, *std::move(store), &clock_);
  if (!state.ok()) Die(state.status().ToString());
  state_ = *std::move(state);
  service_ = std::make_unique<coordinator::CoordinatorService>(state_.get(), "fuzz");
  grpc::ServerBuilder builder;
  if (options.listen_on_unix_socket) {
    address_ = absl::StrCat("unix:", dir_, "/coordinator.sock");
    builder.AddListeningPort(address_, grpc::InsecureServerCredentials());
  }
  builder.RegisterService(service_.get());
  server_ = builder.BuildAndStart();
  if (server_ == nullptr) Die("the gRPC server did not start");
  channel_ = server_->InProcessChannel(grpc::ChannelArguments());
  stub_ = gift::v1::Coordinator::NewStub(channel_);
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
}

}  // namespace gift::fuzz
