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
// no chunk is in flight, or the only ones waiting have had no push for
// --drain-quiet (their ranks stopped pushing), then leave (the coordinator
// moves the chunks) and exit 0. Logs `step_aborted` for each step an epoch
// change aborted, naming the ranks it still waited for.
// Exit codes: 0 after SIGTERM/SIGINT, 64 for bad flags or config, 1 when UCX,
// a listen address or the coordinator cannot be used at startup.
#include <algorithm>
#include <cstdint>
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
#include "common/control/member_session.h"
#include "common/control/peer_failure_reporter.h"
#include "common/daemon/daemon_flags.h"
#include "common/daemon/daemon_main.h"
#include "common/daemon/grpc_endpoint.h"
#include "common/daemon/member_join.h"
#include "common/daemon/metrics_server.h"
#include "common/daemon/polled_metrics.h"
#include "common/daemon/shutdown.h"
#include "common/daemon/systemd_notify.h"
#include "common/dataplane/chunk_header.h"
#include "common/policy/policy.h"
#include "common/transport/ucx/ucx_transport.h"
#include "prometheus/counter.h"
#include "server/aggregator/aggregator_daemon.h"
#include "server/aggregator/aggregator_shard.h"

namespace gift::server {
namespace {

using gift::logging::Level;
using gift::logging::Log;
using daemon::kCounter;
using daemon::kGauge;

// What one scrape reads from the shard and the daemon.
struct ShardSnapshot {
  AggregatorShard::Counters counters;
  uint64_t epoch = 0, pending = 0, deferred = 0;  // the shard's
  uint64_t chunks = 0, workers = 0;               // the daemon's
};

// The shard's metrics, read from its counters on every scrape.
void AddShardMetrics(daemon::MetricsServer& metrics, const AggregatorShard* shard,
                     const AggregatorDaemon* daemon, uint32_t shard_id) {
  using S = ShardSnapshot;
  auto counter = [](uint64_t AggregatorShard::Counters::*field) {
    return [field](const S& s) { return static_cast<double>(s.counters.*field); };
  };
  daemon::AddPolledMetrics<S>(
      metrics,
      [shard, daemon] {
        return S{.counters = shard->counters(),
                 .epoch = shard->epoch(),
                 .pending = shard->pending_chunks(),
                 .deferred = shard->deferred_pushes(),
                 .chunks = daemon->chunks(),
                 .workers = daemon->workers()};
      },
      {
          {kCounter, "gift_server_pushes_total", "Chunk pushes accepted",
           counter(&AggregatorShard::Counters::pushes_accepted)},
          {kCounter, "gift_server_chunks_completed_total", "(step, chunk) reductions completed",
           counter(&AggregatorShard::Counters::chunks_completed)},
          {kCounter, "gift_server_chunks_aborted_total",
           "(step, chunk) reductions aborted by an epoch change",
           counter(&AggregatorShard::Counters::chunks_aborted)},
          {kCounter, "gift_server_chunks_superseded_total",
           "(step, chunk) reductions some rank abandoned, dropped once a later step of the chunk "
           "completed",
           counter(&AggregatorShard::Counters::chunks_superseded)},
          {kCounter, "gift_server_result_bytes_total", "Bytes of reduced chunks sent to workers",
           counter(&AggregatorShard::Counters::result_bytes_sent)},
          {kCounter, "gift_server_send_failures_total", "Result sends that failed",
           counter(&AggregatorShard::Counters::send_failures)},
          {kGauge, "gift_server_epoch", "Epoch the shard serves", daemon::Field(&S::epoch)},
          {kGauge, "gift_server_shard_id", "This server's shard id",
           [shard_id](const S&) { return static_cast<double>(shard_id); }},
          {kGauge, "gift_server_chunks", "Chunks assigned to this shard in the current epoch",
           daemon::Field(&S::chunks)},
          {kGauge, "gift_server_workers", "Workers of the current epoch",
           daemon::Field(&S::workers)},
          {kGauge, "gift_server_pending_chunks", "(step, chunk) reductions waiting for ranks",
           daemon::Field(&S::pending)},
          {kGauge, "gift_server_deferred_pushes",
           "Pushes held for an epoch or chunk not known yet", daemon::Field(&S::deferred)},
          {kCounter, "gift_server_push_bytes_total", "Bytes of chunk pushes received",
           counter(&AggregatorShard::Counters::push_bytes_received)},
          {kCounter, "gift_server_reduce_seconds_total",
           "Time spent reducing and re-encoding chunks",
           [](const S& s) { return s.counters.reduce_seconds; }},
          {kCounter, "gift_server_reduced_bytes_total",
           "FP32 bytes of reduced chunks (reduce throughput = rate of this / rate of reduce "
           "seconds)",
           counter(&AggregatorShard::Counters::reduced_bytes)},
      });
  prometheus::Registry& r = *metrics.registry();
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
  metrics.AddRefresher([shard, &rejected, &auth_failures] {
    for (const auto& [reason, count] : shard->rejections()) {
      daemon::AdvanceCounterTo(rejected.Add({{"reason", reason}}), static_cast<double>(count));
    }
    for (const auto& [reason, count] : shard->auth_failures()) {
      daemon::AdvanceCounterTo(auth_failures.Add({{"reason", reason}}), static_cast<double>(count));
    }
  });
}

int Main(int argc, char** argv) {
  daemon::DaemonMain daemon("gift-server");  // first: see common/daemon/daemon_main.h
  CLI::App app(
      "gift-server: a GIFT-PS aggregator shard (sums the workers' chunks in FP32, "
      "in the transformed basis, and returns the average).");
  daemon::MemberFlags member{.name = daemon::DefaultMemberName("server")};
  int threads = 2;
  std::string listen = "127.0.0.1:7071";
  std::string metrics_listen = "127.0.0.1:9471";
  AggregatorDaemon::DrainOptions drain;
  daemon::TlsFlags tls;
  daemon::AddMemberFlags(app, &member);
  app.add_option("--threads", threads,
                 "threads reducing completed chunks, off the transport's progress thread (0: one "
                 "per hardware thread)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  app.add_option("--listen", listen,
                 "HOST:PORT for grpc.health.v1 (SERVING once joined); port 0 picks one")
      ->capture_default_str();
  daemon::AddMetricsListenFlag(app, &metrics_listen);
  daemon::AddDurationOption(
      app, "--drain-timeout", &drain.timeout,
      "on SIGTERM, longest wait for in-flight chunks before leaving (e.g. 30s, 1m30s)",
      daemon::DurationRange::kNonNegative);
  daemon::AddDurationOption(
      app, "--drain-quiet", &drain.quiet,
      "on SIGTERM, leave once the chunks still waiting have had no push for this long (their "
      "missing ranks stopped pushing: an abandoned step); 0s waits for them until "
      "--drain-timeout",
      daemon::DurationRange::kNonNegative);
  daemon::AddTlsFlags(app, &tls);
  if (std::optional<int> exit = daemon.ParseFlags(app, argc, argv)) return *exit;
  if (std::optional<int> exit = daemon.CheckAddressFlag("--listen", listen)) return *exit;
  absl::StatusOr<daemon::DaemonCredentials> credentials = daemon::MakeDaemonCredentials(
      tls, {{"--listen", listen}, {"--coordinator", member.coordinator}});
  if (!credentials.ok()) return daemon.UsageError(credentials.status().message());
  if (std::optional<int> exit =
          daemon.CheckAddressFlag("--metrics-listen", metrics_listen, /*empty_disables=*/true)) {
    return *exit;
  }

  auto metrics =
      daemon::MetricsServer::StartForDaemon(metrics_listen, app.count("--metrics-listen") > 0);
  if (!metrics.ok()) return daemon.Fail(metrics.status().message());

  // grpc.health.v1 only: NOT_SERVING until joined. As for metrics, only an
  // address given by flag or config must work.
  daemon::GrpcEndpointOptions health_options;
  health_options.ports = {{listen, credentials->server}};
  absl::StatusOr<std::unique_ptr<daemon::GrpcEndpoint>> health =
      daemon::GrpcEndpoint::Start(std::move(health_options));
  if (!health.ok()) {
    if (app.count("--listen") > 0) return daemon.Fail(health.status().message());
    Log(Level::kWarning, "health_unavailable", {{"error", health.status().message()}});
    health = std::unique_ptr<daemon::GrpcEndpoint>();
  } else {
    Log(Level::kInfo, "health_listening", {{"address", (*health)->bound_address(0)}});
  }
  auto set_serving = [&](bool serving) {
    if (*health != nullptr) (*health)->SetServing(serving);
  };

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
  options.on_send_failure = [](uint32_t rank, const dataplane::ChunkHeader& chunk,
                               const absl::Status& why, uint64_t unreported) {
    Log(Level::kWarning, "result_send_failed",
        {{"rank", static_cast<int64_t>(rank)},
         {"chunk", dataplane::ToString(chunk)},
         {"error", why.ToString()},
         {"unreported", static_cast<int64_t>(unreported)}});
  };
  options.on_step_aborted = [](uint64_t epoch, uint64_t by, const IncompleteStep& step) {
    Log(Level::kWarning, "step_aborted",
        {{"epoch", static_cast<int64_t>(epoch)},
         {"by_epoch", static_cast<int64_t>(by)},
         {"step", static_cast<int64_t>(step.step)},
         {"chunks", static_cast<int64_t>(step.chunks)},
         {"missing", DescribeRanks(step.missing_ranks)}});
  };
  transport::UcxTransportOptions ucx{.tls = member.ucx_tls};
  // Declared before the shard: it outlives the shard's transport.
  control::PeerFailureReporter failure_reporter;
  auto shard =
      AggregatorShard::Create(options, failure_reporter.Wrap([&](transport::TransportHandlers h) {
        return transport::CreateUcxTransport(std::move(h), ucx);
      }));
  if (!shard.ok()) return daemon.Fail(shard.status().ToString());

  control::MemberSessionOptions session_options;
  session_options.role = gift::v1::MEMBER_ROLE_SERVER;
  session_options.data_address = (*shard)->address();
  auto session =
      daemon::JoinCluster(member, credentials->channel, std::move(session_options), "shard");
  if (!session.ok()) return daemon.Fail(session.status().message());
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

  daemon.AnnounceShutdown(daemon.signals().Wait(), "draining");
  set_serving(false);
  drain.signals = &daemon.signals();
  aggregator.Drain(drain);
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
  return daemon::kExitOk;
}

}  // namespace
}  // namespace gift::server

int main(int argc, char** argv) { return gift::server::Main(argc, argv); }
