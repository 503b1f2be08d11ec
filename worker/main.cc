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
// writes the average back into the buffers (worker_daemon.h).
// Logs one JSON object per line on stderr; the `ready` event {socket,
// listen, member_id, rank} says it serves. Exit codes: 0 after
// SIGTERM/SIGINT (after the step in flight), 64 for bad flags or config, 1
// when UCX, the socket or the coordinator cannot be used at startup.
// With --tls-cert/--tls-key/--tls-ca the TCP listener requires mutual TLS from
// a `worker` or `operator` certificate (common/rpc/credentials.h) and the
// coordinator channel presents the worker's certificate; without them both
// are plaintext, on loopback addresses only unless --insecure.
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/base/logging.h"
#include "common/base/thread_pool.h"
#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "common/control/peer_failure_reporter.h"
#include "common/daemon/daemon_flags.h"
#include "common/daemon/metrics_server.h"
#include "common/daemon/rpc_metrics.h"
#include "common/daemon/shutdown.h"
#include "common/daemon/systemd_notify.h"
#include "common/rpc/credentials.h"
#include "common/transform/blas_runtime.h"
#include "common/transport/ucx/ucx_transport.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "worker/worker_daemon.h"
#include "worker/worker_grpc_service.h"

namespace gift::worker {
namespace {

using logging::Level;
using logging::Log;

int Fail(absl::string_view message) {
  Log(Level::kError, "startup_failed", {{"error", message}});
  std::fprintf(stderr, "gift-worker: %.*s\n", static_cast<int>(message.size()), message.data());
  return daemon::kExitFailure;
}

std::string HostName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

std::string DefaultName() { return absl::StrCat(HostName(), "/worker-", getpid()); }

int Main(int argc, char** argv) {
  // First, before anything can start a thread (gRPC starts its executor and
  // timer threads when the first credentials are made): threads inherit the
  // mask, and one that leaves SIGTERM unblocked lets it kill the process
  // (exit 143) instead of starting the drain.
  daemon::SignalWaiter signals;
  CLI::App app(
      "gift-worker: the GIFT-PS worker daemon of one GPU (transforms, quantizes and averages the "
      "training process's gradients through the aggregator servers).");
  std::string coordinator = "localhost:7070";
  std::string socket_path = "/run/gift/worker.sock";
  std::string listen;
  std::string name = DefaultName();
  std::string node = HostName();
  std::string ucx_tls;
  std::string metrics_listen = "127.0.0.1:9472";
  absl::Duration step_timeout = absl::Seconds(120);
  absl::Duration drain_timeout = absl::Seconds(30);
  daemon::TlsFlags tls;
  int threads = 0;
  uint32_t min_workers = 1;
  app.add_option("--coordinator", coordinator, "the coordinator's HOST:PORT")
      ->capture_default_str();
  app.add_option("--socket", socket_path,
                 "Unix domain socket of the Worker API for the training process (\"\" disables)")
      ->capture_default_str();
  app.add_option("--listen", listen,
                 "optional TCP HOST:PORT for the Worker API and health (off by default; mutual "
                 "TLS with the --tls-* flags)");
  app.add_option("--name", name, "member name, unique among live members")->capture_default_str();
  app.add_option("--node", node,
                 "the host this worker runs on: workers with the same node aggregate locally "
                 "first under the policy's hierarchy NODE")
      ->capture_default_str();
  app.add_option("--ucx-tls", ucx_tls,
                 "UCX transports, as UCX_TLS takes them (default: UCX's choice)");
  app.add_option("--metrics-listen", metrics_listen,
                 "HOST:PORT of the Prometheus /metrics page (\"\" disables)")
      ->capture_default_str();
  daemon::AddDurationOption(app, "--step-timeout", &step_timeout,
                            "longest PushPull, retries under new epochs included (e.g. 120s, 2m)");
  daemon::AddDurationOption(app, "--drain-timeout", &drain_timeout,
                            "on SIGTERM, how long the step in flight may take to finish",
                            daemon::DurationRange::kNonNegative);
  daemon::AddTlsFlags(app, &tls);
  app.add_option("--threads", threads,
                 "codec and transform (BLAS) threads (0: all hardware threads)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--min-workers", min_workers,
                 "the first step waits until this many workers have joined")
      ->capture_default_str()
      ->check(CLI::Range(1u, 1u << 20));
  if (std::optional<int> exit = daemon::ParseDaemonFlags(app, argc, argv, "gift-worker")) {
    return *exit;
  }
  if (socket_path.empty() && listen.empty()) {
    return daemon::UsageError("gift-worker", "give --socket, --listen or both");
  }
  // The TCP Worker API writes this node's shared memory: workers' own
  // certificates (the training process on the node) and operators only.
  absl::StatusOr<daemon::DaemonCredentials> credentials =
      daemon::MakeDaemonCredentials(tls, {{"--listen", listen}, {"--coordinator", coordinator}},
                                    {rpc::Role::kWorker, rpc::Role::kOperator});
  if (!credentials.ok()) return daemon::UsageError("gift-worker", credentials.status().message());

  logging::SetDaemonName("gift-worker");

  auto metrics =
      daemon::MetricsServer::StartForDaemon(metrics_listen, app.count("--metrics-listen") > 0);
  if (!metrics.ok()) return Fail(absl::StrCat("--metrics-listen: ", metrics.status().ToString()));

  ThreadPool pool(static_cast<size_t>(threads));
  const codec::CodecOptions codec_options{.pool = &pool};
  // The transform's GEMMs use as many threads as the codec: several workers
  // share a host's cores, and OpenBLAS would otherwise take one per core.
  if (auto s = transform::SetBlasThreads(static_cast<int>(std::max<size_t>(1, pool.size())));
      !s.ok()) {
    return Fail(absl::StrCat("--threads: ", s.message()));
  }
  transport::UcxTransportOptions ucx{.tls = ucx_tls};
  // Declared before the engine: it outlives the engine's transport.
  control::PeerFailureReporter failure_reporter;
  auto engine = PushPullEngine::Create(
      failure_reporter.Wrap([&](transport::TransportHandlers h) {
        return transport::CreateUcxTransport(std::move(h), ucx);
      }),
      {.codec_options = codec_options, .timeout = step_timeout});
  if (!engine.ok()) return Fail(absl::StrCat("UCX: ", engine.status().ToString()));

  control::MemberSessionOptions session_options;
  session_options.name = name;
  session_options.role = gift::v1::MEMBER_ROLE_WORKER;
  session_options.data_address = (*engine)->address();
  session_options.node = node;
  session_options.control_address =
      socket_path.empty() ? listen : absl::StrCat("unix:", socket_path);
  auto session = control::MemberSession::Start(
      control::CoordinatorClient::MakeChannel(coordinator, credentials->channel), session_options);
  if (!session.ok()) {
    return Fail(absl::StrCat("joining ", coordinator, ": ", session.status().ToString()));
  }
  Log(Level::kInfo, "joined",
      {{"coordinator", coordinator},
       {"member_id", (*session)->member_id()},
       {"rank", static_cast<int64_t>((*session)->rank())}});
  failure_reporter.Attach(session->get());  // aggregator failures go to the coordinator

  // Metrics: per-step histograms fed by the daemon, and its counters copied
  // on every scrape.
  auto& registry = *(*metrics)->registry();
  const prometheus::Histogram::BucketBoundaries seconds_buckets = {
      0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30};
  auto& step_hist = prometheus::BuildHistogram()
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
  auto& encode_hist = phases.Add({{"phase", "encode"}}, seconds_buckets);
  auto& wait_hist = phases.Add({{"phase", "wait"}}, seconds_buckets);
  auto& decode_hist = phases.Add({{"phase", "decode"}}, seconds_buckets);
  auto& fidelity = prometheus::BuildGauge()
                       .Name("gift_worker_measured_relative_error")
                       .Help(
                           "Mean relative L2 error of the averaged gradient against the exact "
                           "average on the last measured step, by how tensors were sent")
                       .Register(registry);
  auto& error_gift = fidelity.Add({{"transform", "gift"}});
  auto& error_direct = fidelity.Add({{"transform", "direct"}});
  auto& attempts_hist = prometheus::BuildHistogram()
                            .Name("gift_worker_step_attempts")
                            .Help("Plans run per completed step (more than 1: a new epoch)")
                            .Register(registry)
                            .Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 3, 5});

  auto worker =
      std::make_unique<WorkerDaemon>(*std::move(engine), session->get(),
                                     WorkerDaemonOptions{.step_timeout = step_timeout,
                                                         .min_workers = min_workers,
                                                         .codec_options = codec_options,
                                                         .on_step = [&](const StepStats& s) {
                                                           step_hist.Observe(s.seconds);
                                                           encode_hist.Observe(s.encode_seconds);
                                                           wait_hist.Observe(s.wait_seconds);
                                                           decode_hist.Observe(s.decode_seconds);
                                                           attempts_hist.Observe(s.attempts);
                                                           if (s.error_transformed)
                                                             error_gift.Set(*s.error_transformed);
                                                           if (s.error_direct)
                                                             error_direct.Set(*s.error_direct);
                                                         }});
  auto& steps = prometheus::BuildCounter()
                    .Name("gift_worker_steps_completed_total")
                    .Help("PushPull steps completed")
                    .Register(registry)
                    .Add({});
  auto& retries = prometheus::BuildCounter()
                      .Name("gift_worker_step_retries_total")
                      .Help("Step plans run again under a new epoch (a member left or joined)")
                      .Register(registry)
                      .Add({});
  auto& bytes = prometheus::BuildCounter()
                    .Name("gift_worker_data_bytes_total")
                    .Help("Encoded payload bytes moved over the data plane")
                    .Register(registry);
  auto& pushed = bytes.Add({{"direction", "push"}});
  auto& pulled = bytes.Add({{"direction", "pull"}});
  auto& publications = prometheus::BuildCounter()
                           .Name("gift_worker_basis_publications_total")
                           .Help("Bases this worker published as owner")
                           .Register(registry)
                           .Add({});
  auto& dropped = prometheus::BuildCounter()
                      .Name("gift_worker_owner_jobs_dropped_total")
                      .Help("Owner statistics jobs dropped because the owner thread fell behind")
                      .Register(registry)
                      .Add({});
  auto& step_seconds = prometheus::BuildGauge()
                           .Name("gift_worker_last_step_seconds")
                           .Help("Duration of the last completed PushPull")
                           .Register(registry)
                           .Add({});
  auto& epoch_gauge = prometheus::BuildGauge()
                          .Name("gift_worker_epoch")
                          .Help("The membership epoch this worker is in")
                          .Register(registry)
                          .Add({});
  auto& feedback_bytes = prometheus::BuildGauge()
                             .Name("gift_worker_error_feedback_bytes")
                             .Help(
                                 "Memory held by error feedback residuals (FP32, current and "
                                 "pending, every tensor with error feedback on)")
                             .Register(registry)
                             .Add({});
  auto& sketch_bytes = prometheus::BuildCounter()
                           .Name("gift_worker_sketch_bytes_total")
                           .Help("Payload bytes of per-worker statistics (sketch) exchanges")
                           .Register(registry);
  auto& sketch_pushed = sketch_bytes.Add({{"direction", "push"}});
  auto& sketch_pulled = sketch_bytes.Add({{"direction", "pull"}});
  auto& sketch_seconds = prometheus::BuildCounter()
                             .Name("gift_worker_sketch_seconds_total")
                             .Help("Seconds computing and exchanging per-worker sketches")
                             .Register(registry)
                             .Add({});
  auto& sketch_exchanges = prometheus::BuildCounter()
                               .Name("gift_worker_sketch_exchanges_total")
                               .Help("Steps' sketch exchanges, by result")
                               .Register(registry);
  auto& sketch_ok = sketch_exchanges.Add({{"result", "ok"}});
  auto& sketch_failed = sketch_exchanges.Add({{"result", "failed"}});
  auto& error_ratio = prometheus::BuildGauge()
                          .Name("gift_worker_basis_error_ratio")
                          .Help(
                              "Owner's last GIFT / direct quantization error ratio of its own "
                              "gradient, per owned tensor (the drift measurement)")
                          .Register(registry);
  (*metrics)->AddRefresher([&] {
    const WorkerDaemon::Counters c = worker->counters();
    daemon::AdvanceCounterTo(sketch_pushed, static_cast<double>(c.sketch_bytes_pushed));
    daemon::AdvanceCounterTo(sketch_pulled, static_cast<double>(c.sketch_bytes_pulled));
    daemon::AdvanceCounterTo(sketch_seconds, c.sketch_seconds);
    daemon::AdvanceCounterTo(sketch_ok, static_cast<double>(c.sketch_exchanges));
    daemon::AdvanceCounterTo(sketch_failed, static_cast<double>(c.sketch_failures));
    const std::shared_ptr<const gift::v1::ClusterState> state = (*session)->state();
    for (const gift::v1::TensorErrorRatio& r : worker->error_ratios()) {
      std::string name = absl::StrCat(r.tensor_id());
      for (const gift::v1::TensorInfo& t : state->tensors()) {
        if (t.tensor_id() == r.tensor_id()) name = t.name();
      }
      error_ratio.Add({{"tensor", name}}).Set(r.ratio());
    }
    daemon::AdvanceCounterTo(steps, static_cast<double>(c.steps_completed));
    daemon::AdvanceCounterTo(retries, static_cast<double>(c.step_retries));
    daemon::AdvanceCounterTo(pushed, static_cast<double>(c.bytes_pushed));
    daemon::AdvanceCounterTo(pulled, static_cast<double>(c.bytes_pulled));
    daemon::AdvanceCounterTo(publications, static_cast<double>(c.basis_publications));
    daemon::AdvanceCounterTo(dropped, static_cast<double>(c.owner_jobs_dropped));
    step_seconds.Set(c.last_step_seconds);
    feedback_bytes.Set(static_cast<double>(c.error_feedback_bytes));
    epoch_gauge.Set(static_cast<double>((*session)->epoch()));
  });

  if (!socket_path.empty()) {  // where clients hand over their buffers
    absl::Status s = worker->ServeBuffers(absl::StrCat(socket_path, ".buffers"));
    if (!s.ok()) return Fail(absl::StrCat("buffer socket: ", s.ToString()));
  }
  WorkerGrpcService service(worker.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  if (!socket_path.empty()) {
    unlink(socket_path.c_str());  // a stale socket of an earlier run
    builder.AddListeningPort(absl::StrCat("unix:", socket_path), grpc::InsecureServerCredentials());
  }
  int tcp_port = 0;
  if (!listen.empty()) {
    builder.AddListeningPort(listen, credentials->server, &tcp_port);
  }
  builder.RegisterService(&service);
  builder.SetMaxReceiveMessageSize(16 << 20);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(
      daemon::MakeRpcCounterInterceptor(registry, "gift_worker_rpc_total", {"gift.v1.Worker"}));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || (!listen.empty() && tcp_port == 0)) {
    return Fail(absl::StrCat("cannot serve on ", socket_path.empty() ? "" : socket_path,
                             socket_path.empty() || listen.empty() ? "" : " and ", listen));
  }
  if (!socket_path.empty()) chmod(socket_path.c_str(), 0660);
  std::string bound = listen;
  if (!listen.empty()) {
    bound = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", tcp_port);
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(true);
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
    if (std::optional<int> s = signals.WaitFor(absl::Milliseconds(200))) {
      signal = *s;
      break;
    }
    if (worker->drain_requested()) break;
  }
  Log(Level::kInfo, "shutting_down",
      {{"reason", signal != 0 ? std::string(daemon::SignalName(signal)) : "drain requested"}});
  daemon::NotifyStopping("draining");
  health->SetServingStatus(false);
  if (!worker->Drain(drain_timeout)) {
    Log(Level::kWarning, "drain_timeout", {{"timeout", absl::FormatDuration(drain_timeout)}});
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  failure_reporter.Detach();
  const absl::Status left = (*session)->Close();
  if (!left.ok()) Log(Level::kWarning, "leave_failed", {{"error", left.ToString()}});
  const WorkerDaemon::Counters c = worker->counters();
  worker.reset();
  if (!socket_path.empty()) unlink(socket_path.c_str());
  Log(Level::kInfo, "stopped",
      {{"steps_completed", static_cast<int64_t>(c.steps_completed)},
       {"step_retries", static_cast<int64_t>(c.step_retries)}});
  return 0;
}

}  // namespace
}  // namespace gift::worker

int main(int argc, char** argv) { return gift::worker::Main(argc, argv); }
