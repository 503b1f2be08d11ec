// gift-coordinator: the control-plane daemon (one per cluster).
//
//   gift-coordinator --listen 0.0.0.0:7070 --state /var/lib/gift/coordinator.db
//       --tls-cert coordinator.crt --tls-key coordinator.key --tls-ca ca.crt
//
// With the TLS flags the Coordinator service requires mutual TLS and checks
// the caller's role (from its certificate, common/rpc/credentials.h) per RPC
// (common/rpc/role_check.h; the table is in coordinator_service.cc). Without
// them it serves plaintext, on loopback addresses only unless --insecure.
// With TLS (or --dataplane-auth) it hands out data-plane keys derived from
// --dataplane-secret-file (or a secret drawn at start): docs/design.md
// section 8.2.
// Flags may also come from a TOML file (--config FILE; common/daemon/daemon_flags.h).
// Logs one JSON object per line on stderr (common/base/logging.h); the
// `listening` and `metrics_listening` events carry the bound addresses (useful
// with port 0). Prometheus metrics on --metrics-listen (/metrics). Under
// systemd (Type=notify): READY=1 once serving, WATCHDOG=1 pings, STOPPING=1 on
// SIGTERM. On SIGTERM/SIGINT: health NOT_SERVING, then the service stops.
// Exit codes: 0 after SIGTERM/SIGINT, 64 for bad flags or config, 1 when the
// state file or a listen address cannot be used.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "common/daemon/daemon_flags.h"
#include "common/daemon/metrics_server.h"
#include "common/daemon/rpc_metrics.h"
#include "common/daemon/shutdown.h"
#include "common/daemon/systemd_notify.h"
#include "prometheus/counter.h"
#include "prometheus/gauge.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/state_store.h"

namespace gift::coordinator {
namespace {

using gift::logging::Level;
using gift::logging::Log;

using daemon::kExitFailure;
using daemon::kExitUsage;

constexpr char kName[] = "gift-coordinator";

int Fail(int code, absl::string_view event, absl::string_view message) {
  Log(Level::kError, event, {{"error", message}});
  std::fprintf(stderr, "gift-coordinator: %.*s\n", static_cast<int>(message.size()),
               message.data());
  return code;
}

// The cluster's metrics, read from the state on every scrape.
void AddClusterMetrics(daemon::MetricsServer& metrics, ClusterStateMachine* state) {
  prometheus::Registry& r = *metrics.registry();
  auto gauge = [&](const std::string& name, const std::string& help) -> prometheus::Gauge& {
    return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add({});
  };
  auto counter = [&](const std::string& name, const std::string& help) -> prometheus::Counter& {
    return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add({});
  };
  prometheus::Gauge& epoch = gauge("gift_coordinator_epoch", "Current membership epoch");
  prometheus::Gauge& revision =
      gauge("gift_coordinator_state_revision", "Revision of the cluster state");
  auto& members = prometheus::BuildGauge()
                      .Name("gift_coordinator_members")
                      .Help("Live members by role")
                      .Register(r);
  prometheus::Gauge& workers = members.Add({{"role", "worker"}});
  prometheus::Gauge& servers = members.Add({{"role", "server"}});
  prometheus::Gauge& draining =
      gauge("gift_coordinator_draining_members", "Live members asked to drain");
  prometheus::Gauge& tensors = gauge("gift_coordinator_tensors", "Registered tensors");
  prometheus::Gauge& pending =
      gauge("gift_coordinator_pending_refreshes", "Basis proposals waiting for acknowledgements");
  prometheus::Gauge& frozen =
      gauge("gift_coordinator_frozen_through_step", "Last step whose bases are frozen");
  prometheus::Gauge& lag = gauge("gift_coordinator_oldest_step_lag_steps",
                                 "Highest minus lowest last completed step among workers");
  prometheus::Gauge& wait = gauge(
      "gift_coordinator_oldest_incomplete_step_wait_seconds",
      "How long the oldest incomplete step has waited for its slowest ranks (giftctl status)");
  prometheus::Gauge& waiting_ranks =
      gauge("gift_coordinator_oldest_incomplete_step_waiting_ranks",
            "Ranks the oldest incomplete step still waits for (0 when no worker is ahead)");
  prometheus::Gauge& uptime = gauge("gift_coordinator_uptime_seconds", "Seconds since start");
  prometheus::Counter& commits = counter("gift_coordinator_basis_commits_total",
                                         "Basis versions committed (refreshes applied)");
  prometheus::Counter& postponements =
      counter("gift_coordinator_basis_postponements_total",
              "Times a pending basis activation step was moved later (refresh lag)");
  metrics.AddRefresher([=, &epoch, &revision, &workers, &servers, &draining, &tensors, &pending,
                        &frozen, &lag, &wait, &waiting_ranks, &uptime, &commits, &postponements] {
    const ClusterStateMachine::Counters c = state->counters();
    daemon::AdvanceCounterTo(commits, static_cast<double>(c.basis_commits));
    daemon::AdvanceCounterTo(postponements, static_cast<double>(c.basis_postponements));
    absl::StatusOr<gift::v1::StatusResponse> status = state->GetStatus();
    if (!status.ok()) return;
    const gift::v1::ClusterState& s = status->state();
    epoch.Set(static_cast<double>(s.epoch()));
    revision.Set(static_cast<double>(s.revision()));
    workers.Set(s.workers_size());
    servers.Set(s.servers_size());
    int n_draining = 0;
    for (const auto* list : {&s.workers(), &s.servers()}) {
      for (const gift::v1::Member& m : *list) {
        n_draining += m.state() == gift::v1::MEMBER_STATE_DRAINING;
      }
    }
    draining.Set(n_draining);
    tensors.Set(s.tensors_size());
    int n_pending = 0;
    for (const gift::v1::TensorBasisState& b : s.bases()) n_pending += b.has_proposal();
    pending.Set(n_pending);
    frozen.Set(static_cast<double>(s.frozen_through_step()));
    const bool behind = s.workers_size() > 0 && status->max_step() >= status->slowest_step();
    lag.Set(behind ? static_cast<double>(status->max_step() + 1 - status->slowest_step()) : 0.0);
    wait.Set(behind ? static_cast<double>(status->slowest_wait_ms()) / 1000.0 : 0.0);
    waiting_ranks.Set(behind ? status->slowest_ranks_size() : 0);
    uptime.Set(static_cast<double>(status->now_unix_ms() - status->started_unix_ms()) / 1000.0);
  });
}

int Main(int argc, char** argv) {
  // First, before anything can start a thread (gRPC starts its executor and
  // timer threads when the first credentials are made): threads inherit the
  // mask, and one that leaves SIGTERM unblocked lets it kill the process
  // (exit 143) instead of starting the drain.
  daemon::SignalWaiter signals;
  CLI::App app(
      "gift-coordinator: the GIFT-PS control plane (membership, shard map, basis "
      "refresh negotiation, refresh policy).");
  std::string listen = "127.0.0.1:7070";
  std::string state_file = "./gift-coordinator.db";
  absl::Duration lease_ttl = absl::Seconds(10);
  uint64_t step_window = 8;
  uint64_t chunk_bytes = uint64_t{4} << 20;
  uint64_t max_basis_bytes = uint64_t{256} << 20;
  std::string metrics_listen = "127.0.0.1:9470";
  daemon::TlsFlags tls;
  bool dataplane_auth = false;
  std::string dataplane_secret_file;
  app.add_option("--listen", listen, "HOST:PORT to serve on; port 0 picks a free port")
      ->capture_default_str();
  app.add_option("--state", state_file, "SQLite state file (created when missing)")
      ->capture_default_str();
  daemon::AddDurationOption(app, "--lease-ttl", &lease_ttl,
                            "member lease TTL, e.g. 10s, 500ms or 1m30s");
  app.add_option("--step-window", step_window,
                 "steps the fastest worker may run ahead of the frozen schedule")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32));
  app.add_option("--chunk-bytes", chunk_bytes, "target shard-map chunk size in FP32 bytes")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{512}, uint64_t{1} << 40));
  app.add_option("--max-basis-bytes", max_basis_bytes, "largest basis accepted, in bytes")
      ->capture_default_str()
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 40));
  app.add_option("--metrics-listen", metrics_listen,
                 "HOST:PORT for Prometheus metrics at /metrics (\"\" disables; port 0 picks one)")
      ->capture_default_str();
  daemon::AddTlsFlags(app, &tls);
  app.add_flag("--dataplane-auth", dataplane_auth,
               "MACs on every data-plane chunk without TLS too (always on with TLS; "
               "docs/design.md section 8.2)");
  app.add_option("--dataplane-secret-file", dataplane_secret_file,
                 "file of at least 32 secret bytes the members' data-plane keys derive from "
                 "(default: drawn at start, so a restart changes every key)");
  if (std::optional<int> exit = daemon::ParseDaemonFlags(app, argc, argv, kName)) return *exit;
  ClusterOptions options;
  options.step_window = step_window;
  options.chunk_bytes = chunk_bytes;
  options.max_basis_bytes = max_basis_bytes;
  options.lease_ttl = lease_ttl;
  if (absl::Status s = daemon::CheckHostPort(listen); !s.ok()) {
    return daemon::UsageError(kName, absl::StrCat("--listen: ", s.message()));
  }
  absl::StatusOr<daemon::DaemonCredentials> credentials =
      daemon::MakeDaemonCredentials(tls, {{"--listen", listen}});
  if (!credentials.ok()) return daemon::UsageError(kName, credentials.status().message());
  if (!metrics_listen.empty()) {
    if (absl::Status s = daemon::CheckHostPort(metrics_listen); !s.ok()) {
      return daemon::UsageError(kName, absl::StrCat("--metrics-listen: ", s.message()));
    }
  }
  const size_t colon = listen.rfind(':');

  logging::SetDaemonName("gift-coordinator");
  // SIGTERM and SIGINT are taken by the waiter; it blocks them before any
  // thread starts so that every thread inherits the mask.

  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(state_file);
  if (!store.ok()) return Fail(kExitFailure, "startup_failed", store.status().message());
  absl::StatusOr<std::unique_ptr<ClusterStateMachine>> state =
      ClusterStateMachine::Create(options, *std::move(store), RealClock());
  if (!state.ok()) return Fail(kExitFailure, "startup_failed", state.status().ToString());

  auto metrics =
      daemon::MetricsServer::StartForDaemon(metrics_listen, app.count("--metrics-listen") > 0);
  if (!metrics.ok()) return Fail(kExitFailure, "startup_failed", metrics.status().message());
  AddClusterMetrics(**metrics, state->get());

  // Data-plane authentication: always with TLS, on request without.
  std::unique_ptr<DataPlaneKeyIssuer> dataplane_keys;
  if (dataplane_auth || tls.files.enabled()) {
    auto issuer = dataplane_secret_file.empty()
                      ? DataPlaneKeyIssuer::Random()
                      : DataPlaneKeyIssuer::FromFile(dataplane_secret_file);
    if (!issuer.ok()) return Fail(kExitFailure, "startup_failed", issuer.status().ToString());
    dataplane_keys = *std::move(issuer);
  }
  CoordinatorService service(state->get(), GIFT_VERSION, dataplane_keys.get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, credentials->server, &port);
  builder.RegisterService(&service);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(daemon::MakeRpcCounterInterceptor(
      *(*metrics)->registry(), "gift_coordinator_rpc_total", {"gift.v1.Coordinator"}));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    return Fail(kExitFailure, "startup_failed", absl::StrCat("cannot listen on ", listen));
  }
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  health->SetServingStatus(true);
  const std::string address = absl::StrCat(listen.substr(0, colon), ":", port);
  Log(Level::kInfo, "listening",
      {{"address", address},
       {"state", state_file},
       {"tls", tls.files.enabled()},
       {"dataplane_auth", dataplane_keys != nullptr},
       {"lease_ttl_ms", absl::ToInt64Milliseconds(options.lease_ttl)}});

  // The lease thread doubles as the main loop's heartbeat for the watchdog.
  absl::Notification stop;
  std::atomic<int64_t> last_tick_ns{absl::GetCurrentTimeNanos()};
  std::thread expiry([&] {
    const absl::Duration period =
        std::clamp(options.lease_ttl / 4, absl::Milliseconds(10), absl::Seconds(1));
    while (!stop.WaitForNotificationWithTimeout(period)) {
      absl::Status s = (*state)->ExpireLeases();
      if (!s.ok()) Log(Level::kError, "lease_check_failed", {{"error", s.ToString()}});
      last_tick_ns.store(absl::GetCurrentTimeNanos());
    }
  });
  daemon::NotifyReady(absl::StrCat("serving on ", address));
  daemon::Watchdog watchdog([&] {
    const absl::Duration since = absl::Nanoseconds(absl::GetCurrentTimeNanos() - last_tick_ns);
    return since < std::max(options.lease_ttl, absl::Seconds(10));
  });

  const int signal = signals.Wait();
  Log(Level::kInfo, "shutting_down", {{"signal", daemon::SignalName(signal)}});
  daemon::NotifyStopping("shutting down");
  health->SetServingStatus(false);
  service.Shutdown();
  // Calls still running after the grace period are cancelled (clients retry);
  // gRPC otherwise waits for the whole deadline while clients stay connected.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  server->Wait();
  stop.Notify();
  expiry.join();
  metrics->reset();  // its refreshers read the state
  state->reset();    // closes the state file
  Log(Level::kInfo, "stopped");
  return 0;
}

}  // namespace
}  // namespace gift::coordinator

int main(int argc, char** argv) { return gift::coordinator::Main(argc, argv); }
