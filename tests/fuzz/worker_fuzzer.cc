// Fuzzes the gift.v1.Worker service (worker/daemon/worker_grpc_service.h over
// worker::WorkerCore) in-process: RegisterBuffers, PushPull,
// SubmitActivationStats and GetWorkerInfo called directly on the service
// with fuzzed requests, in the order a gift.fuzz.WorkerInput
// (fuzz_inputs.proto) gives. Behind it is a real, small cluster in this
// process: the coordinator (inproc_coordinator.h), one aggregator shard with
// its daemon and member session, and the worker's push-pull engine, all on
// the in-process transport; so a request that is valid runs a real step.
// Two sealed memfds (kShmBytes each) are handed to the worker's buffer
// socket at start; a request naming shm_name /gift-fuzz-worker-a or
// /gift-fuzz-worker-b is given the handle of the first or second instead
// (the seeds use those names), any other shm_name is left for the worker to
// refuse. Every call
// must return a status (never crash); GetWorkerInfo always succeeds.
//
// The daemon keeps its state across inputs (the buffers registered, the last
// step), as a long-running worker does: a crash may need the inputs before
// it (libFuzzer keeps them; see docs/fuzzing.md).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/control/member_session.h"
#include "common/transport/inproc/inproc_transport.h"
#include "server/aggregator/aggregator_daemon.h"
#include "server/aggregator/aggregator_shard.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_inputs.pb.h"
#include "tests/fuzz/inproc_coordinator.h"
#include "worker/client/buffer_handoff.h"
#include "worker/daemon/worker_core.h"
#include "worker/daemon/worker_grpc_service.h"
#include "worker/engine/push_pull_engine.h"

namespace {

using gift::fuzz::WorkerCall;

constexpr size_t kShmBytes = 64 << 10;
constexpr const char* kShmNames[] = {"/gift-fuzz-worker-a", "/gift-fuzz-worker-b"};
constexpr int kMaxCalls = 16;

// The worker's handles of the two sealed memfds, set once by Cluster().
std::string handles[2];

void MapShmName(gift::v1::SharedBuffer* b) {
  for (int i = 0; i < 2; ++i) {
    if (b->has_shm_name() && b->shm_name() == kShmNames[i]) b->set_handle(handles[i]);
  }
}

// The cluster, built once per process and never destroyed (libFuzzer exits
// without running destructors of its callers' statics reliably).
// The worker's buffer socket: one per fuzzer process.
const std::string& BufferSocketPath() {
  static const std::string* path =
      new std::string(absl::StrCat("/tmp/gift-fuzz-worker-", getpid(), ".buffers"));
  return *path;
}

struct Cluster {
  gift::transport::InprocHub hub;
  gift::fuzz::InprocCoordinator coordinator;
  std::unique_ptr<gift::server::AggregatorShard> shard;
  std::unique_ptr<gift::control::MemberSession> server_session;
  std::unique_ptr<gift::server::AggregatorDaemon> aggregator;
  std::unique_ptr<gift::control::MemberSession> worker_session;
  std::unique_ptr<gift::worker::WorkerCore> worker;
  std::unique_ptr<gift::worker::WorkerGrpcService> service;
  gift::client::SealedRegion regions[2];
  std::unique_ptr<gift::client::BufferChannel> channel;

  Cluster() {
    auto factory = [this](gift::transport::TransportHandlers h) {
      return gift::transport::CreateInprocTransport(&hub, std::move(h));
    };
    auto made_shard = gift::server::AggregatorShard::Create({}, factory);
    if (!made_shard.ok()) gift::fuzz::Fail("aggregator shard");
    shard = *std::move(made_shard);
    gift::control::MemberSessionOptions server_options;
    server_options.name = "fuzz-server";
    server_options.role = gift::v1::MEMBER_ROLE_SERVER;
    server_options.data_address = shard->address();
    auto s = gift::control::MemberSession::Start(coordinator.channel(), server_options);
    if (!s.ok()) gift::fuzz::Fail("server session");
    server_session = *std::move(s);
    aggregator =
        std::make_unique<gift::server::AggregatorDaemon>(shard.get(), server_session.get());

    auto engine = gift::worker::PushPullEngine::Create(factory, {.timeout = absl::Seconds(5)});
    if (!engine.ok()) gift::fuzz::Fail("push-pull engine");
    gift::control::MemberSessionOptions worker_options;
    worker_options.name = "fuzz-worker";
    worker_options.data_address = (*engine)->address();
    auto w = gift::control::MemberSession::Start(coordinator.channel(), worker_options);
    if (!w.ok()) gift::fuzz::Fail("worker session");
    worker_session = *std::move(w);
    worker = std::make_unique<gift::worker::WorkerCore>(
        *std::move(engine), worker_session.get(),
        gift::worker::WorkerCoreOptions{.step_timeout = absl::Seconds(5)});
    service = std::make_unique<gift::worker::WorkerGrpcService>(worker.get());

    const std::string& socket = BufferSocketPath();
    unlink(socket.c_str());
    std::atexit([] { unlink(BufferSocketPath().c_str()); });  // nothing left in /tmp
    if (!worker->ServeBuffers(socket).ok()) gift::fuzz::Fail("buffer socket");
    auto connected = gift::client::BufferChannel::Connect(socket);
    if (!connected.ok()) gift::fuzz::Fail("buffer channel");
    channel = *std::move(connected);
    for (int i = 0; i < 2; ++i) {
      auto region = gift::client::SealedRegion::Create(kShmBytes);
      if (!region.ok()) gift::fuzz::Fail("sealed region");
      regions[i] = *std::move(region);
      auto handle = channel->Hand(regions[i].fd());
      if (!handle.ok()) gift::fuzz::Fail("handing a region to the worker");
      handles[i] = *handle;
    }
  }
};

void Check(const grpc::Status& status, const char* rpc) {
  if (status.error_code() == grpc::StatusCode::UNKNOWN) {
    std::fprintf(stderr, "%s: %s\n", rpc, status.error_message().c_str());
    gift::fuzz::Fail("a worker RPC failed with UNKNOWN");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Cluster* cluster = new Cluster();
  gift::fuzz::WorkerInput input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (input.calls_size() > kMaxCalls) return 0;
  gift::worker::WorkerGrpcService* service = cluster->service.get();
  for (WorkerCall& call : *input.mutable_calls()) {
    grpc::ServerContext context;
    switch (call.call_case()) {
      case WorkerCall::kRegisterBuffers: {
        for (auto& b : *call.mutable_register_buffers()->mutable_buffers()) {
          MapShmName(b.mutable_buffer());
        }
        gift::v1::RegisterBuffersResponse response;
        Check(service->RegisterBuffers(&context, &call.register_buffers(), &response),
              "RegisterBuffers");
        break;
      }
      case WorkerCall::kPushPull: {
        gift::v1::PushPullResponse response;
        Check(service->PushPull(&context, &call.push_pull(), &response), "PushPull");
        break;
      }
      case WorkerCall::kSubmitActivationStats: {
        MapShmName(call.mutable_submit_activation_stats()->mutable_gram());
        gift::v1::SubmitActivationStatsResponse response;
        Check(service->SubmitActivationStats(&context, &call.submit_activation_stats(), &response),
              "SubmitActivationStats");
        break;
      }
      case WorkerCall::kGetWorkerInfo: {
        gift::v1::WorkerInfo response;
        if (!service->GetWorkerInfo(&context, &call.get_worker_info(), &response).ok()) {
          gift::fuzz::Fail("GetWorkerInfo failed");
        }
        break;
      }
      case WorkerCall::CALL_NOT_SET:
        break;
    }
  }
  return 0;
}
