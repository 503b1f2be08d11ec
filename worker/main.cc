// gift-worker: the GIFT-PS worker daemon, one per GPU.
//
//   gift-worker --coordinator coord:7070 --socket /run/gift/worker-0.sock
//
// Serves the local Worker API (worker.proto) to the training process on a
// Unix domain socket, mode 0660 (its group, e.g. `gift`, decides who may
// connect), and on TCP only with --listen (off by default): the training process
// registers its gradient buffers once as shared memory, then calls
// PushPull(step) after every backward pass; the daemon transforms,
// quantizes, pushes the chunks to the aggregator servers over UCX, and
// writes the average back into the buffers (worker_core.h).
// Logs one JSON object per line on stderr; the `ready` event {socket,
// listen, member_id, rank} says it serves. Exit codes: 0 after
// SIGTERM/SIGINT (after the step in flight), 64 for bad flags or config, 1
// when UCX, the socket or the coordinator cannot be used at startup.
// Device tensors (--cuda, default auto): a build with CUDA on a machine with
// a device opens the training process's CUDA IPC buffers and runs their
// transform and codec on the GPU (docs/gpu.md, Worker); otherwise such
// buffers are refused (FailedPrecondition "no CUDA device" in a CUDA build,
// Unimplemented without CUDA) and host buffers work as ever. The
// `device_tensors` event says which path is on.
// With --tls-cert/--tls-key/--tls-ca the TCP listener requires mutual TLS from
// a `worker` or `operator` certificate (common/rpc/credentials.h) and the
// coordinator channel presents the worker's certificate; without them both
// are plaintext, on loopback addresses only unless --insecure.
#include <grpcpp/security/server_credentials.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/thread_pool.h"
#include "common/base/unix_socket_path.h"
#include "common/control/member_session.h"
#include "common/control/peer_failure_reporter.h"
#include "common/daemon/cpu_affinity.h"
#include "common/daemon/daemon_flags.h"
#include "common/daemon/daemon_main.h"
#include "common/daemon/grpc_endpoint.h"
#include "common/daemon/member_join.h"
#include "common/daemon/metrics_server.h"
#include "common/daemon/polled_metrics.h"
#include "common/daemon/rpc_metrics.h"
#include "common/daemon/systemd_notify.h"
#include "common/rpc/credentials.h"
#include "common/transform/blas_runtime.h"
#include "common/transport/ucx/ucx_transport.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "worker/daemon/worker_core.h"
#include "worker/daemon/worker_grpc_service.h"
#include "worker/intake/device_memory.h"
#ifdef GIFT_HAVE_CUDA
#include "worker/cuda/cuda_device_memory.h"
#include "worker/cuda/device_codec_stage.h"
#endif

namespace gift::worker {
namespace {

using logging::Level;
using logging::Log;

using daemon::kCounter;
using daemon::kGauge;

// The per-step histograms, fed by the daemon after every step.
class StepMetrics {
 public:
  explicit StepMetrics(prometheus::Registry& registry) {
    const prometheus::Histogram::BucketBoundaries seconds_buckets = {
        0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30};
    step_ = &prometheus::BuildHistogram()
                 .Name("gift_worker_step_seconds")
                 .Help("PushPull latency, from the call to the averaged buffers")
                 .Register(registry)
                 .Add({}, seconds_buckets);
    auto& phases = prometheus::BuildHistogram()
                       .Name("gift_worker_phase_seconds")
                       .Help(
                           "Time per step in each phase: encode (transform + quantize + push), "
                           "wait (last push to last result), decode (decode + inverse transform)")
                       .Register(registry);
    encode_ = &phases.Add({{"phase", "encode"}}, seconds_buckets);
    wait_ = &phases.Add({{"phase", "wait"}}, seconds_buckets);
    decode_ = &phases.Add({{"phase", "decode"}}, seconds_buckets);
    auto& fidelity = prometheus::BuildGauge()
                         .Name("gift_worker_measured_relative_error")
                         .Help(
                             "Mean relative L2 error of the averaged gradient against the exact "
                             "average on the last measured step, by how tensors were sent")
                         .Register(registry);
    error_gift_ = &fidelity.Add({{"transform", "gift"}});
    error_direct_ = &fidelity.Add({{"transform", "direct"}});
    attempts_ = &prometheus::BuildHistogram()
                     .Name("gift_worker_step_attempts")
                     .Help("Plans run per completed step (more than 1: a new epoch)")
                     .Register(registry)
                     .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 3, 5});
  }

  void Observe(const StepStats& s) {
    step_->Observe(s.seconds);
    encode_->Observe(s.encode_seconds);
    wait_->Observe(s.wait_seconds);
    decode_->Observe(s.decode_seconds);
    attempts_->Observe(s.attempts);
    if (s.error_transformed) error_gift_->Set(*s.error_transformed);
    if (s.error_direct) error_direct_->Set(*s.error_direct);
  }

 private:
  prometheus::Histogram* step_;
  prometheus::Histogram* encode_;
  prometheus::Histogram* wait_;
  prometheus::Histogram* decode_;
  prometheus::Histogram* attempts_;
  prometheus::Gauge* error_gift_;
  prometheus::Gauge* error_direct_;
};

// What one scrape reads from the daemon and the session.
struct WorkerSnapshot {
  WorkerCore::Counters counters;
  uint64_t epoch = 0;
};

// The daemon's counters, copied on every scrape, and the owner's drift
// measurement per owned tensor.
void AddWorkerMetrics(daemon::MetricsServer& metrics, const WorkerCore* worker,
                      const control::MemberSession* session) {
  using S = WorkerSnapshot;
  using C = WorkerCore::Counters;
  auto field = [](auto C::*member) {
    return [member](const S& s) { return static_cast<double>(s.counters.*member); };
  };
  daemon::AddPolledMetrics<S>(
      metrics,
      [worker, session] {
        return S{worker->counters(), session->epoch()};
      },
      {
          {kCounter, "gift_worker_steps_completed_total", "PushPull steps completed",
           field(&C::steps_completed)},
          {kCounter, "gift_worker_step_retries_total",
           "Step plans run again under a new epoch (a member left or joined)",
           field(&C::step_retries)},
          {kCounter,
           "gift_worker_data_bytes_total",
           "Encoded payload bytes moved over the data plane",
           field(&C::bytes_pushed),
           {{"direction", "push"}}},
          {kCounter,
           "gift_worker_data_bytes_total",
           "Encoded payload bytes moved over the data plane",
           field(&C::bytes_pulled),
           {{"direction", "pull"}}},
          {kCounter, "gift_worker_basis_publications_total", "Bases this worker published as owner",
           field(&C::basis_publications)},
          {kCounter, "gift_worker_owner_jobs_dropped_total",
           "Owner statistics jobs dropped because the owner thread fell behind",
           field(&C::owner_jobs_dropped)},
          {kGauge, "gift_worker_last_step_seconds", "Duration of the last completed PushPull",
           field(&C::last_step_seconds)},
          {kGauge, "gift_worker_epoch", "The membership epoch this worker is in",
           daemon::Field(&S::epoch)},
          {kGauge, "gift_worker_error_feedback_bytes",
           "Memory held by error feedback residuals (FP32, current and pending, every tensor "
           "with error feedback on)",
           field(&C::error_feedback_bytes)},
          {kCounter,
           "gift_worker_sketch_bytes_total",
           "Payload bytes of per-worker statistics (sketch) exchanges",
           field(&C::sketch_bytes_pushed),
           {{"direction", "push"}}},
          {kCounter,
           "gift_worker_sketch_bytes_total",
           "Payload bytes of per-worker statistics (sketch) exchanges",
           field(&C::sketch_bytes_pulled),
           {{"direction", "pull"}}},
          {kCounter, "gift_worker_sketch_seconds_total",
           "Seconds computing and exchanging per-worker sketches", field(&C::sketch_seconds)},
          {kCounter,
           "gift_worker_sketch_exchanges_total",
           "Steps' sketch exchanges, by result",
           field(&C::sketch_exchanges),
           {{"result", "ok"}}},
          {kCounter,
           "gift_worker_sketch_exchanges_total",
           "Steps' sketch exchanges, by result",
           field(&C::sketch_failures),
           {{"result", "failed"}}},
      });
  auto& error_ratio = prometheus::BuildGauge()
                          .Name("gift_worker_basis_error_ratio")
                          .Help(
                              "Owner's last GIFT / direct quantization error ratio of its own "
                              "gradient, per owned tensor (the drift measurement)")
                          .Register(*metrics.registry());
  metrics.AddRefresher([worker, session, &error_ratio] {
    const std::shared_ptr<const gift::v1::ClusterState> state = session->state();
    for (const gift::v1::TensorErrorRatio& r : worker->error_ratios()) {
      std::string name = absl::StrCat(r.tensor_id());
      for (const gift::v1::TensorInfo& t : state->tensors()) {
        if (t.tensor_id() == r.tensor_id()) name = t.name();
      }
      error_ratio.Add({{"tensor", name}}).Set(r.ratio());
    }
  });
}

// The path of device tensors under --cuda `mode` (auto, on, off): the
// device memory and the engine's device stage when on, else why not
// (DeviceAccess::unavailable). Logs the `device_tensors` event.
struct DevicePath {
  std::unique_ptr<DeviceMemory> memory;
  DeviceStageFactory stages = nullptr;
  absl::Status unavailable = DeviceAccess{}.unavailable;
};

DevicePath ChooseDevicePath(const std::string& mode) {
  DevicePath path;
  if (mode == "off") {
    path.unavailable = absl::FailedPreconditionError(
        "this gift-worker runs with --cuda off: CUDA IPC buffers are refused; register host "
        "buffers");
  } else {
#ifdef GIFT_HAVE_CUDA
    auto memory = CudaDeviceMemory::Create();
    if (memory.ok()) {
      path.memory = *std::move(memory);
      path.stages = DeviceCodecStage::Factory();
    } else {
      path.unavailable = memory.status();
    }
#endif
  }
  const int devices = path.memory == nullptr ? 0 : path.memory->device_count();
  Log(Level::kInfo, "device_tensors",
      {{"enabled", path.memory != nullptr},
       {"cuda_devices", static_cast<int64_t>(devices)},
       {"reason", path.memory != nullptr ? "" : std::string(path.unavailable.message())}});
  return path;
}

int Main(int argc, char** argv) {
  daemon::DaemonMain daemon("gift-worker");  // first: see common/daemon/daemon_main.h
  CLI::App app(
      "gift-worker: the GIFT-PS worker daemon of one GPU (transforms, quantizes and averages the "
      "training process's gradients through the aggregator servers).");
  daemon::MemberFlags member{.name = daemon::DefaultMemberName("worker")};
  std::string socket_path = "/run/gift/worker.sock";
  std::string listen;
  std::string node = daemon::HostName();  // workers on one host share it
  std::string metrics_listen = "127.0.0.1:9472";
  absl::Duration step_timeout = absl::Seconds(120);
  absl::Duration drain_timeout = absl::Seconds(30);
  daemon::TlsFlags tls;
  int threads = 0;
  std::string cpus;
  uint32_t min_workers = 1;
  std::string cuda = "auto";
  daemon::AddMemberFlags(app, &member);
  app.add_option("--socket", socket_path,
                 "Unix domain socket of the Worker API for the training process (\"\" disables)")
      ->capture_default_str();
  app.add_option("--listen", listen,
                 "optional TCP HOST:PORT for the Worker API and health (off by default; mutual "
                 "TLS with the --tls-* flags)");
  daemon::AddMetricsListenFlag(app, &metrics_listen);
  app.add_option("--node", node,
                 "the host this worker runs on: workers with the same node aggregate locally "
                 "first under the policy's hierarchy NODE")
      ->capture_default_str();
  daemon::AddDurationOption(app, "--step-timeout", &step_timeout,
                            "longest PushPull, retries under new epochs included (e.g. 120s, 2m)");
  daemon::AddDurationOption(app, "--drain-timeout", &drain_timeout,
                            "on SIGTERM, how long the step in flight may take to finish",
                            daemon::DurationRange::kNonNegative);
  daemon::AddTlsFlags(app, &tls);
  app.add_option("--threads", threads,
                 "codec and transform (BLAS) threads (0: one per --cpus CPU, else all hardware "
                 "threads)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--cpus", cpus,
                 "run every thread of the worker (codec, BLAS, UCX, gRPC) on these CPUs only, "
                 "e.g. 8-11 or 0,2,4: keep it off the cores the training process computes on "
                 "(\"\": wherever the scheduler puts it)");
  app.add_option("--min-workers", min_workers,
                 "the first step waits until this many workers have joined")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  app.add_option("--cuda", cuda,
                 "CUDA IPC buffers (device tensors): auto (when built with CUDA and a device is "
                 "present), on (fail to start without a device), off (refuse them)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "on", "off"}));
  if (std::optional<int> exit = daemon.ParseFlags(app, argc, argv)) return *exit;
  if (socket_path.empty() && listen.empty()) {
    return daemon.UsageError("give --socket, --listen or both");
  }
  if (!cpus.empty()) {  // before the pools start their threads
    absl::StatusOr<std::vector<int>> list = daemon::ParseCpuList(cpus);
    if (!list.ok()) return daemon.UsageError(absl::StrCat("--cpus: ", list.status().message()));
    if (absl::Status s = daemon::PinProcessToCpus(*list); !s.ok()) {
      return daemon.Fail(absl::StrCat("--cpus ", cpus, ": ", s.message()));
    }
    if (threads == 0) threads = static_cast<int>(list->size());
  }
  // The TCP Worker API writes this node's shared memory: workers' own
  // certificates (the training process on the node) and operators only.
  absl::StatusOr<daemon::DaemonCredentials> credentials = daemon::MakeDaemonCredentials(
      tls, {{"--listen", listen}, {"--coordinator", member.coordinator}},
      {rpc::Role::kWorker, rpc::Role::kOperator});
  if (!credentials.ok()) return daemon.UsageError(credentials.status().message());
  if (!socket_path.empty()) {  // before joining: a bad path must not cost the cluster an epoch
    if (absl::Status s = CheckSocketPathToServe(socket_path, ".buffers"); !s.ok()) {
      return daemon.UsageError(absl::StrCat("--socket: ", s.message()));
    }
  }

  auto metrics =
      daemon::MetricsServer::StartForDaemon(metrics_listen, app.count("--metrics-listen") > 0);
  if (!metrics.ok()) {
    return daemon.Fail(absl::StrCat("--metrics-listen: ", metrics.status().ToString()));
  }

  ThreadPool pool(static_cast<size_t>(threads));
  const codec::CodecOptions codec_options{.pool = &pool};
  // The transform's GEMMs use as many threads as the codec: several workers
  // share a host's cores, and OpenBLAS would otherwise take one per core.
  if (auto s = transform::SetBlasThreads(static_cast<int>(std::max<size_t>(1, pool.size())));
      !s.ok()) {
    return daemon.Fail(absl::StrCat("--threads: ", s.message()));
  }
  DevicePath device = ChooseDevicePath(cuda);
  if (cuda == "on" && device.memory == nullptr) {
    return daemon.Fail(absl::StrCat("--cuda on: ", device.unavailable.message()));
  }
  transport::UcxTransportOptions ucx{.tls = member.ucx_tls};
  // Declared before the engine: it outlives the engine's transport.
  control::PeerFailureReporter failure_reporter;
  auto engine = PushPullEngine::Create(
      failure_reporter.Wrap([&](transport::TransportHandlers h) {
        auto t = transport::CreateUcxTransport(std::move(h), ucx);
        if (t.ok() && device.memory != nullptr) {
          // Device data always goes through page-locked host buffers; say
          // whether this UCX could take device memory itself (not built).
          Log(Level::kInfo, "device_data_path",
              {{"path", "staged through page-locked host buffers"},
               {"transport", (*t)->name()},
               {"transport_carries_cuda_memory", (*t)->carries_cuda_memory()}});
        }
        return t;
      }),
      {.codec_options = codec_options, .timeout = step_timeout, .device_stages = device.stages});
  if (!engine.ok()) return daemon.Fail(absl::StrCat("UCX: ", engine.status().ToString()));

  control::MemberSessionOptions session_options;
  session_options.role = gift::v1::MEMBER_ROLE_WORKER;
  session_options.data_address = (*engine)->address();
  session_options.node = node;
  session_options.control_address =
      socket_path.empty() ? listen : absl::StrCat("unix:", socket_path);
  auto session =
      daemon::JoinCluster(member, credentials->channel, std::move(session_options), "rank");
  if (!session.ok()) return daemon.Fail(session.status().message());
  failure_reporter.Attach(session->get());  // aggregator failures go to the coordinator

  StepMetrics step_metrics(*(*metrics)->registry());
  auto worker = std::make_unique<WorkerCore>(
      *std::move(engine), session->get(),
      WorkerCoreOptions{.step_timeout = step_timeout,
                        .min_workers = min_workers,
                        .codec_options = codec_options,
                        .on_step = [&](const StepStats& s) { step_metrics.Observe(s); },
                        .device = {.memory = device.memory.get(),
                                   .engine_device_stage = device.stages != nullptr,
                                   .unavailable = device.unavailable}});
  AddWorkerMetrics(**metrics, worker.get(), session->get());

  if (!socket_path.empty()) {  // where clients hand over their buffers
    absl::Status s = worker->ServeBuffers(absl::StrCat(socket_path, ".buffers"));
    if (!s.ok()) return daemon.Fail(absl::StrCat("buffer socket: ", s.ToString()));
  }
  WorkerGrpcService service(worker.get());
  daemon::GrpcEndpointOptions endpoint_options;
  if (!socket_path.empty()) {
    unlink(socket_path.c_str());  // a stale socket of an earlier run
    endpoint_options.ports.push_back(
        {absl::StrCat("unix:", socket_path), grpc::InsecureServerCredentials()});
  }
  const size_t tcp_port = endpoint_options.ports.size();  // index of --listen, when given
  if (!listen.empty()) endpoint_options.ports.push_back({listen, credentials->server});
  endpoint_options.service = &service;
  endpoint_options.max_receive_message_bytes = 16 << 20;
  endpoint_options.rpc_counter = daemon::MakeRpcCounterInterceptor(
      *(*metrics)->registry(), "gift_worker_rpc_total", {"gift.v1.Worker"});
  absl::StatusOr<std::unique_ptr<daemon::GrpcEndpoint>> endpoint =
      daemon::GrpcEndpoint::Start(std::move(endpoint_options));
  if (!endpoint.ok()) return daemon.Fail(endpoint.status().message());
  if (!socket_path.empty()) chmod(socket_path.c_str(), 0660);
  const std::string bound = listen.empty() ? "" : (*endpoint)->bound_address(tcp_port);
  (*endpoint)->SetServing(true);
  Log(Level::kInfo, "ready",
      {{"socket", socket_path},
       {"listen", bound},
       {"member_id", (*session)->member_id()},
       {"rank", static_cast<int64_t>((*session)->rank())}});
  daemon::NotifyReady(absl::StrCat("serving on ", socket_path.empty() ? bound : socket_path));
  daemon::Watchdog watchdog;  // pings while the main loop below runs

  // Runs until a signal, or until the coordinator asks this member to drain.
  int signal = 0;
  while (true) {
    if (std::optional<int> s = daemon.signals().WaitFor(absl::Milliseconds(200))) {
      signal = *s;
      break;
    }
    if (worker->drain_requested()) break;
  }
  daemon.AnnounceShutdown(signal, "draining");
  (*endpoint)->SetServing(false);
  if (!worker->Drain(drain_timeout)) {
    Log(Level::kWarning, "drain_timeout", {{"timeout", absl::FormatDuration(drain_timeout)}});
  }
  (*endpoint)->Shutdown(absl::Seconds(1));
  failure_reporter.Detach();
  const absl::Status left = (*session)->Close();
  if (!left.ok()) Log(Level::kWarning, "leave_failed", {{"error", left.ToString()}});
  const WorkerCore::Counters c = worker->counters();
  worker.reset();
  if (!socket_path.empty()) unlink(socket_path.c_str());
  Log(Level::kInfo, "stopped",
      {{"steps_completed", static_cast<int64_t>(c.steps_completed)},
       {"step_retries", static_cast<int64_t>(c.step_retries)}});
  return daemon::kExitOk;
}

}  // namespace
}  // namespace gift::worker

int main(int argc, char** argv) { return gift::worker::Main(argc, argv); }
