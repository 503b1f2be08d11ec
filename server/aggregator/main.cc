// gift-server: one aggregator shard of the data plane.
//
//   gift-server --coordinator coord:7070 [--name host-1/shard] [--ucx-tls tcp]
//       --tls-cert server.crt --tls-key server.key --tls-ca ca.crt
//
// With the TLS flags (common/daemon/daemon_flags.h) the health endpoint
// requires mutual TLS and the coordinator channel presents the server's
// certificate (role `server`, common/rpc/credentials.h). Without them both
// are plaintext, on loopback addresses only unless --insecure.
// Joins the coordinator as a server (its shard id is its rank), follows the
// cluster state (epochs, workers, shard map) through the member session
// (aggregator_daemon.h), and reduces the workers' chunk pushes over UCX
// (aggregator_shard.h) on --threads reduction threads.
// Flags may also come from a TOML file (--config FILE; common/daemon/daemon_flags.h).
// Logs one JSON object per line on stderr (common/base/logging.h); the
// `serving` event (shard id, epoch, workers, chunks) follows every change of
// the epoch or of this shard's chunks; `health_listening` and
// `metrics_listening` carry the bound addresses (useful with port 0).
// grpc.health.v1 on --listen: SERVING once joined, NOT_SERVING from SIGTERM on.
// Prometheus metrics on --metrics-listen (/metrics). Under systemd
// (Type=notify): READY=1 once joined and serving, WATCHDOG=1 pings,
// STOPPING=1 on SIGTERM.
// Drain on SIGTERM/SIGINT: NOT_SERVING, ask the coordinator to drain this
// member, wait (at most --drain-timeout; a second signal cuts it short) until
// no chunk is in flight, then leave (the coordinator moves the chunks) and exit 0.
// Exit codes: 0 after SIGTERM/SIGINT, 64 for bad flags or config, 1 when UCX,
// a listen address or the coordinator cannot be used at startup.
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "common/control/peer_failure_reporter.h"
#include "common/daemon/daemon_flags.h"
#include "common/daemon/metrics_server.h"
#include "common/daemon/shutdown.h"
#include "common/daemon/systemd_notify.h"
#include "common/policy/policy.h"
#include "common/transport/ucx/ucx_transport.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "server/aggregator/aggregator_daemon.h"
#include "server/aggregator/aggregator_shard.h"

namespace gift::server {
namespace {

using gift::logging::Level;
using gift::logging::Log;

using daemon::kExitFailure;

constexpr char kName[] = "gift-server";

int Fail(absl::string_view event, absl::string_view message) {
  Log(Level::kError, event, {{"error", message}});
  std::fprintf(stderr, "gift-server: %.*s\n", static_cast<int>(message.size()), message.data());
  return kExitFailure;
}

// The shard's metrics, read from its counters on every scrape.
void AddShardMetrics(daemon::MetricsServer& metrics, const AggregatorShard* shard,
                     const AggregatorDaemon* daemon, uint32_t shard_id) {
  prometheus::Registry& r = *metrics.registry();
  auto gauge = [&](const std::string& name, const std::string& help) -> prometheus::Gauge& {
    return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
  };
  auto counter = [&](const std::string& name, const std::string& help) -> prometheus::Counter& {
    return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
  };
  prometheus::Counter& pushes = counter("gift_server_pushes_total", "Chunk pushes accepted");
  prometheus::Counter& completed =
      counter("gift_server_chunks_completed_total", "(step, chunk) reductions completed");
  prometheus::Counter& aborted = counter("gift_server_chunks_aborted_total",
                                         "(step, chunk) reductions aborted by an epoch change");
  prometheus::Counter& result_bytes =
      counter("gift_server_result_bytes_total", "Bytes of reduced chunks sent to workers");
  prometheus::Counter& send_failures =
      counter("gift_server_send_failures_total", "Result sends that failed");
  auto& rejected = prometheus::BuildCounter()
                       .Name("gift_server_rejected_messages_total")
                       .Help("Messages dropped, by reason (the status code name)")
                       .Register(r);
  // The reasons a shard's checks give (malformed or corrupt chunks, a stale
  // or unknown epoch or chunk, a rank counted twice, a full receive queue)
  // are on the page at 0 from the start; any other code appears when seen.
  for (const absl::StatusCode code :
       {absl::StatusCode::kInvalidArgument, absl::StatusCode::kDataLoss,
        absl::StatusCode::kFailedPrecondition, absl::StatusCode::kNotFound,
        absl::StatusCode::kAlreadyExists, absl::StatusCode::kOutOfRange,
        absl::StatusCode::kResourceExhausted, absl::StatusCode::kUnauthenticated}) {
    rejected.Add({{"reason", absl::StatusCodeToString(code)}});
  }
  // Pushes refused by data-plane authentication (docs/design.md section 8.2),
  // every reason at 0 from the start.
  auto& auth_failures = prometheus::BuildCounter()
                            .Name("gift_server_chunk_auth_failures_total")
                            .Help("Pushes dropped by data-plane authentication, by reason")
                            .Register(r);
  for (dataplane::AuthFailure f : dataplane::kAllAuthFailures) {
    auth_failures.Add({{"reason", std::string(dataplane::AuthFailureName(f))}});
  }
  prometheus::Gauge& epoch = gauge("gift_server_epoch", "Epoch the shard serves");
  prometheus::Gauge& shard_gauge = gauge("gift_server_shard_id", "This server's shard id");
  prometheus::Gauge& chunk_gauge =
      gauge("gift_server_chunks", "Chunks assigned to this shard in the current epoch");
  prometheus::Gauge& worker_gauge = gauge("gift_server_workers", "Workers of the current epoch");
  prometheus::Gauge& pending =
      gauge("gift_server_pending_chunks", "(step, chunk) reductions waiting for ranks");
  prometheus::Gauge& deferred =
      gauge("gift_server_deferred_pushes", "Pushes held for an epoch or chunk not known yet");
  prometheus::Counter& push_bytes =
      counter("gift_server_push_bytes_total", "Bytes of chunk pushes received");
  prometheus::Counter& reduce_seconds =
      counter("gift_server_reduce_seconds_total", "Time spent reducing and re-encoding chunks");
  prometheus::Counter& reduced_bytes = counter(
      "gift_server_reduced_bytes_total",
      "FP32 bytes of reduced chunks (reduce throughput = rate of this / rate of reduce seconds)");
  metrics.AddRefresher([=, &pushes, &completed, &aborted, &result_bytes, &send_failures, &rejected,
                        &auth_failures, &epoch, &shard_gauge, &chunk_gauge, &worker_gauge, &pending,
                        &deferred, &push_bytes, &reduce_seconds, &reduced_bytes] {
    const AggregatorShard::Counters c = shard->counters();
    daemon::AdvanceCounterTo(pushes, static_cast<double>(c.pushes_accepted));
    daemon::AdvanceCounterTo(completed, static_cast<double>(c.chunks_completed));
    daemon::AdvanceCounterTo(aborted, static_cast<double>(c.chunks_aborted));
    daemon::AdvanceCounterTo(result_bytes, static_cast<double>(c.result_bytes_sent));
    daemon::AdvanceCounterTo(send_failures, static_cast<double>(c.send_failures));
    for (const auto& [reason, count] : shard->rejections()) {
      daemon::AdvanceCounterTo(rejected.Add({{"reason", reason}}), static_cast<double>(count));
    }
    for (const auto& [reason, count] : shard->auth_failures()) {
      daemon::AdvanceCounterTo(auth_failures.Add({{"reason", reason}}), static_cast<double>(count));
    }
    epoch.Set(static_cast<double>(shard->epoch()));
    shard_gauge.Set(shard_id);
    chunk_gauge.Set(static_cast<double>(daemon->chunks()));
    worker_gauge.Set(static_cast<double>(daemon->workers()));
    pending.Set(static_cast<double>(shard->pending_chunks()));
    deferred.Set(static_cast<double>(shard->deferred_pushes()));
    daemon::AdvanceCounterTo(push_bytes, static_cast<double>(c.push_bytes_received));
    daemon::AdvanceCounterTo(reduce_seconds, c.reduce_seconds);
    daemon::AdvanceCounterTo(reduced_bytes, static_cast<double>(c.reduced_bytes));
  });
}

std::string DefaultName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "/server-", getpid());
}

int Main(int argc, char** argv) {
  // First, before anything can start a thread (gRPC starts its executor and
  // timer threads when the first credentials are made): threads inherit the
  // mask, and one that leaves SIGTERM unblocked lets it kill the process
  // (exit 143) instead of starting the drain.
  daemon::SignalWaiter signals;
  CLI::App app(
      "gift-server: a GIFT-PS aggregator shard (sums the workers' chunks in FP32, "
      "in the transformed basis, and returns the average).");
  std::string coordinator = "localhost:7070";
  std::string name = DefaultName();
  std::string ucx_tls;
  int threads = 2;
  std::string listen = "127.0.0.1:7071";
  std::string metrics_listen = "127.0.0.1:9471";
  absl::Duration drain_timeout = absl::Seconds(30);
  daemon::TlsFlags tls;
  app.add_option("--coordinator", coordinator, "the coordinator's HOST:PORT")
      ->capture_default_str();
  app.add_option("--name", name, "member name, unique among live members")->capture_default_str();
  app.add_option("--ucx-tls", ucx_tls,
                 "UCX transports, as UCX_TLS takes them (default: UCX's choice)");
  app.add_option("--threads", threads,
                 "threads reducing completed chunks, off the transport's progress thread (0: one "
                 "per hardware thread)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--listen", listen,
                 "HOST:PORT for grpc.health.v1 (SERVING once joined); port 0 picks one")
      ->capture_default_str();
  app.add_option("--metrics-listen", metrics_listen,
                 "HOST:PORT for Prometheus metrics at /metrics (\"\" disables; port 0 picks one)")
      ->capture_default_str();
  daemon::AddDurationOption(
      app, "--drain-timeout", &drain_timeout,
      "on SIGTERM, longest wait for in-flight chunks before leaving (e.g. 30s, 1m30s)",
      daemon::DurationRange::kNonNegative);
  daemon::AddTlsFlags(app, &tls);
  if (std::optional<int> exit = daemon::ParseDaemonFlags(app, argc, argv, kName)) return *exit;
  if (absl::Status s = daemon::CheckHostPort(listen); !s.ok()) {
    return daemon::UsageError(kName, absl::StrCat("--listen: ", s.message()));
  }
  absl::StatusOr<daemon::DaemonCredentials> credentials =
      daemon::MakeDaemonCredentials(tls, {{"--listen", listen}, {"--coordinator", coordinator}});
  if (!credentials.ok()) return daemon::UsageError(kName, credentials.status().message());
  if (!metrics_listen.empty()) {
    if (absl::Status s = daemon::CheckHostPort(metrics_listen); !s.ok()) {
      return daemon::UsageError(kName, absl::StrCat("--metrics-listen: ", s.message()));
    }
  }

  logging::SetDaemonName(kName);

  auto metrics =
      daemon::MetricsServer::StartForDaemon(metrics_listen, app.count("--metrics-listen") > 0);
  if (!metrics.ok()) return Fail("startup_failed", metrics.status().message());

  // grpc.health.v1 only: NOT_SERVING until joined. As for metrics, only an
  // address given by flag or config must work.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int health_port = 0;
  builder.AddListeningPort(listen, credentials->server, &health_port);
  // gRPC needs a service with a polled queue to serve the health service: a
  // generic one that answers UNIMPLEMENTED to everything else.
  grpc::CallbackGenericService unimplemented;
  builder.RegisterCallbackGenericService(&unimplemented);
  std::unique_ptr<grpc::Server> health_server = builder.BuildAndStart();
  if (health_server == nullptr || health_port == 0) {
    const std::string error = absl::StrCat("cannot listen on ", listen);
    if (app.count("--listen") > 0) return Fail("startup_failed", error);
    Log(Level::kWarning, "health_unavailable", {{"error", error}});
    health_server.reset();
  } else {
    Log(Level::kInfo, "health_listening",
        {{"address", absl::StrCat(listen.substr(0, listen.rfind(':')), ":", health_port)}});
  }
  auto set_serving = [&](bool serving) {
    if (health_server != nullptr) health_server->GetHealthCheckService()->SetServingStatus(serving);
  };
  set_serving(false);
  struct HealthStopper {
    grpc::Server* server;
    ~HealthStopper() {
      if (server == nullptr) return;
      server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
      server->Wait();
    }
  } health_stopper{health_server.get()};

  AggregatorShardOptions options;
  options.reduce_threads = threads > 0 ? static_cast<size_t>(threads)
                                       : std::max(1u, std::thread::hardware_concurrency());
  // The pull codec is the policy's (giftctl policy set --pull-codec); every
  // epoch the shard applies carries it. Until the first one, the policy
  // default.
  options.reducer.pull_spec =
      codec::FromProto(policy::WithDefaults(gift::v1::Policy()).transform().pull_codec()).value();
  options.on_reject = [](const absl::Status& why) {  // counted by the shard (metrics)
    Log(Level::kWarning, "message_rejected",
        {{"code", absl::StatusCodeToString(why.code())}, {"reason", why.message()}});
  };
  // Data-plane authentication as the coordinator says (its keys, or none, in
  // the first epoch); failures are logged at most once a second per reason.
  options.auth = ShardAuth::kFromFirstEpoch;
  options.on_auth_failure = [](const absl::Status& why, transport::PeerId from,
                               uint64_t unreported) {
    Log(Level::kWarning, "chunk_auth_failed",
        {{"reason", why.message()},
         {"peer", static_cast<int64_t>(from)},
         {"unreported", static_cast<int64_t>(unreported)}});
  };
  transport::UcxTransportOptions ucx{.tls = ucx_tls};
  // Declared before the shard: it outlives the shard's transport.
  control::PeerFailureReporter failure_reporter;
  auto shard =
      AggregatorShard::Create(options, failure_reporter.Wrap([&](transport::TransportHandlers h) {
        return transport::CreateUcxTransport(std::move(h), ucx);
      }));
  if (!shard.ok()) return Fail("startup_failed", shard.status().ToString());

  control::MemberSessionOptions session_options;
  session_options.name = name;
  session_options.role = gift::v1::MEMBER_ROLE_SERVER;
  session_options.data_address = (*shard)->address();
  auto session = control::MemberSession::Start(
      control::CoordinatorClient::MakeChannel(coordinator, credentials->channel), session_options);
  if (!session.ok()) {
    return Fail("startup_failed",
                absl::StrCat("joining ", coordinator, ": ", session.status().ToString()));
  }
  Log(Level::kInfo, "joined",
      {{"coordinator", coordinator},
       {"member_id", (*session)->member_id()},
       {"shard", static_cast<int64_t>((*session)->rank())}});
  failure_reporter.Attach(session->get());  // worker failures go to the coordinator

  const uint32_t shard_id = (*session)->rank();
  // Follows the cluster state into the shard; its loop is the watchdog's
  // heartbeat.
  AggregatorDaemon aggregator(shard->get(), session->get());
  AddShardMetrics(**metrics, shard->get(), &aggregator, shard_id);

  set_serving(true);
  daemon::NotifyReady(absl::StrCat("shard ", shard_id, " serving"));
  std::optional<daemon::Watchdog> watchdog;
  watchdog.emplace([&] { return absl::Now() - aggregator.last_tick() < absl::Seconds(10); });

  const int signal = signals.Wait();
  Log(Level::kInfo, "shutting_down", {{"signal", daemon::SignalName(signal)}});
  daemon::NotifyStopping("draining");
  set_serving(false);
  aggregator.Drain(drain_timeout, &signals);
  aggregator.Stop();
  watchdog.reset();
  failure_reporter.Detach();
  const absl::Status left = (*session)->Close();
  if (!left.ok()) Log(Level::kWarning, "leave_failed", {{"error", left.ToString()}});
  const AggregatorShard::Counters c = (*shard)->counters();
  Log(Level::kInfo, "stopped",
      {{"pushes_accepted", static_cast<int64_t>(c.pushes_accepted)},
       {"chunks_completed", static_cast<int64_t>(c.chunks_completed)},
       {"chunks_aborted", static_cast<int64_t>(c.chunks_aborted)}});
  return 0;
}

}  // namespace
}  // namespace gift::server

int main(int argc, char** argv) { return gift::server::Main(argc, argv); }
