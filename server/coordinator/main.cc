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
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "common/daemon/daemon_flags.h"
#include "common/daemon/daemon_main.h"
#include "common/daemon/grpc_endpoint.h"
#include "common/daemon/metrics_server.h"
#include "common/daemon/polled_metrics.h"
#include "common/daemon/rpc_metrics.h"
#include "common/daemon/systemd_notify.h"
#include "common/dataplane/chunk_header.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/dataplane_key_issuer.h"
#include "server/coordinator/state_store.h"

namespace gift::coordinator {
namespace {

using gift::logging::Level;
using gift::logging::Log;

using daemon::kCounter;
using daemon::kGauge;

// What one scrape reads from the state.
struct ClusterSnapshot {
  ClusterStateMachine::Counters counters;
  absl::StatusOr<gift::v1::StatusResponse> status;
};

// The cluster's metrics, read from the state on every scrape.
void AddClusterMetrics(daemon::MetricsServer& metrics, ClusterStateMachine* state) {
  using S = ClusterSnapshot;
  // A gauge of the cluster state (0 while the state cannot be read).
  auto from_status = [](std::function<double(const gift::v1::StatusResponse&)> value) {
    return [value = std::move(value)](const S& s) { return s.status.ok() ? value(*s.status) : 0.0; };
  };
  // Set only while a worker has begun or completed a step another has not
  // completed: lag, wait and the ranks that have not begun it.
  auto when_behind = [](std::function<double(const gift::v1::StatusResponse&)> value) {
    return [value = std::move(value)](const S& s) {
      if (!s.status.ok()) return 0.0;
      const bool behind = s.status->state().workers_size() > 0 &&
                          s.status->max_begun_step() >= s.status->slowest_step();
      return behind ? value(*s.status) : 0.0;
    };
  };
  using Status = gift::v1::StatusResponse;
  daemon::AddPolledMetrics<S>(
      metrics, [state] { return S{.counters = state->counters(), .status = state->GetStatus()}; },
      {
          {kGauge, "gift_coordinator_epoch", "Current membership epoch",
           from_status([](const Status& s) { return static_cast<double>(s.state().epoch()); })},
          {kGauge, "gift_coordinator_state_revision", "Revision of the cluster state",
           from_status([](const Status& s) { return static_cast<double>(s.state().revision()); })},
          {kGauge, "gift_coordinator_members", "Live members by role",
           from_status([](const Status& s) { return s.state().workers_size(); }),
           {{"role", "worker"}}},
          {kGauge, "gift_coordinator_members", "Live members by role",
           from_status([](const Status& s) { return s.state().servers_size(); }),
           {{"role", "server"}}},
          {kGauge, "gift_coordinator_draining_members", "Live members asked to drain",
           from_status([](const Status& s) {
             int draining = 0;
             for (const auto* list : {&s.state().workers(), &s.state().servers()}) {
               for (const gift::v1::Member& m : *list) {
                 draining += m.state() == gift::v1::MEMBER_STATE_DRAINING;
               }
             }
             return draining;
           })},
          {kGauge, "gift_coordinator_tensors", "Registered tensors",
           from_status([](const Status& s) { return s.state().tensors_size(); })},
          {kGauge, "gift_coordinator_pending_refreshes",
           "Basis proposals waiting for acknowledgements", from_status([](const Status& s) {
             int pending = 0;
             for (const gift::v1::TensorBasisState& b : s.state().bases()) {
               pending += b.has_proposal();
             }
             return pending;
           })},
          {kGauge, "gift_coordinator_frozen_through_step", "Last step whose bases are frozen",
           from_status([](const Status& s) {
             return static_cast<double>(s.state().frozen_through_step());
           })},
          {kGauge, "gift_coordinator_oldest_step_lag_steps",
           "Highest minus lowest last completed step among workers",
           when_behind([](const Status& s) {
             return static_cast<double>(s.max_step() + 1 - s.slowest_step());
           })},
          {kGauge, "gift_coordinator_oldest_incomplete_step_wait_seconds",
           "How long the oldest incomplete step has waited for its slowest ranks (giftctl "
           "status)",
           when_behind([](const Status& s) {
             return static_cast<double>(s.slowest_wait_ms()) / 1000.0;
           })},
          {kGauge, "gift_coordinator_oldest_incomplete_step_waiting_ranks",
           "Ranks that have not begun the oldest incomplete step while another has (0 when none)",
           when_behind([](const Status& s) { return s.slowest_ranks_size(); })},
          {kGauge, "gift_coordinator_uptime_seconds", "Seconds since start",
           from_status([](const Status& s) {
             return static_cast<double>(s.now_unix_ms() - s.started_unix_ms()) / 1000.0;
           })},
          {kCounter, "gift_coordinator_basis_commits_total",
           "Basis versions committed (refreshes applied)",
           [](const S& s) { return static_cast<double>(s.counters.basis_commits); }},
          {kCounter, "gift_coordinator_basis_postponements_total",
           "Times a pending basis activation step was moved later (refresh lag)",
           [](const S& s) { return static_cast<double>(s.counters.basis_postponements); }},
      });
}

int Main(int argc, char** argv) {
  daemon::DaemonMain daemon("gift-coordinator");  // first: see common/daemon/daemon_main.h
  CLI::App app(
      "gift-coordinator: the GIFT-PS control plane (membership, shard map, basis "
      "refresh negotiation, refresh policy).");
  std::string listen = "127.0.0.1:7070";
  std::string state_file = "./gift-coordinator.db";
  absl::Duration lease_ttl = absl::Seconds(10);
  absl::Duration keepalive = absl::Milliseconds(500);
  absl::Duration keepalive_timeout = absl::Milliseconds(500);
  uint64_t step_window = 8;
  uint64_t chunk_bytes = uint64_t{4} << 20;
  uint64_t max_basis_bytes = uint64_t{256} << 20;
  std::string metrics_listen = "127.0.0.1:9470";
  daemon::TlsFlags tls;
  bool dataplane_auth = false;
  std::string dataplane_mac =
      dataplane::MacAlgorithmName(dataplane::MacAlgorithm::kChaCha20Poly1305);
  std::string dataplane_secret_file;
  app.add_option("--listen", listen, "HOST:PORT to serve on; port 0 picks a free port")
      ->capture_default_str();
  app.add_option("--state", state_file, "SQLite state file (created when missing)")
      ->capture_default_str();
  daemon::AddDurationOption(app, "--lease-ttl", &lease_ttl,
                            "member lease TTL, e.g. 10s, 500ms or 1m30s");
  daemon::AddDurationOption(
      app, "--keepalive", &keepalive,
      "ping every member connection this often (0s: off); a member whose connection "
      "dies (no answer within --keepalive-timeout: a stopped or cut-off process) while "
      "a step waits for it is evicted at once instead of at its lease's end",
      daemon::DurationRange::kNonNegative);
  daemon::AddDurationOption(app, "--keepalive-timeout", &keepalive_timeout,
                            "how long a ping may go unanswered before the connection is closed");
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
  daemon::AddMetricsListenFlag(app, &metrics_listen);
  daemon::AddTlsFlags(app, &tls);
  app.add_flag("--dataplane-auth", dataplane_auth,
               "MACs on every data-plane chunk without TLS too (always on with TLS; "
               "docs/design.md section 8.2)");
  app.add_option("--dataplane-mac", dataplane_mac,
                 "the MAC of every data-plane chunk when authentication is on, for every "
                 "epoch whose members all have it (members of builds before MAC "
                 "negotiation have aes-256-gmac only, which the epochs they are in then use)")
      ->capture_default_str()
      ->check(CLI::IsMember(dataplane::MacAlgorithmNames()));
  app.add_option("--dataplane-secret-file", dataplane_secret_file,
                 "file of at least 32 secret bytes the members' data-plane keys derive from "
                 "(default: drawn once and kept in STATE.dataplane-secret next to --state, "
                 "so a restart keeps every key)");
  if (std::optional<int> exit = daemon.ParseFlags(app, argc, argv)) return *exit;
  ClusterOptions options;
  options.step_window = step_window;
  options.chunk_bytes = chunk_bytes;
  options.max_basis_bytes = max_basis_bytes;
  options.lease_ttl = lease_ttl;
  // Data-plane authentication: always with TLS, on request without.
  const bool authenticate_dataplane = dataplane_auth || tls.files.enabled();
  if (authenticate_dataplane) {
    // --dataplane-mac's check admits only the names ParseMacAlgorithm knows;
    // the proto's values are the wire's (static_assert in coordinator_service.cc).
    options.dataplane_mac =
        static_cast<gift::v1::MacAlgorithm>(*dataplane::ParseMacAlgorithm(dataplane_mac));
  }
  if (std::optional<int> exit = daemon.CheckAddressFlag("--listen", listen)) return *exit;
  absl::StatusOr<daemon::DaemonCredentials> credentials =
      daemon::MakeDaemonCredentials(tls, {{"--listen", listen}});
  if (!credentials.ok()) return daemon.UsageError(credentials.status().message());
  if (std::optional<int> exit =
          daemon.CheckAddressFlag("--metrics-listen", metrics_listen, /*empty_disables=*/true)) {
    return *exit;
  }

  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(state_file);
  if (!store.ok()) return daemon.Fail(store.status().message());
  absl::StatusOr<std::unique_ptr<ClusterStateMachine>> state =
      ClusterStateMachine::Create(options, *std::move(store), RealClock());
  if (!state.ok()) return daemon.Fail(state.status().ToString());

  auto metrics =
      daemon::MetricsServer::StartForDaemon(metrics_listen, app.count("--metrics-listen") > 0);
  if (!metrics.ok()) return daemon.Fail(metrics.status().message());
  AddClusterMetrics(**metrics, state->get());

  std::unique_ptr<DataPlaneKeyIssuer> dataplane_keys;
  if (authenticate_dataplane) {
    auto issuer = dataplane_secret_file.empty()
                      ? DataPlaneKeyIssuer::KeptAt(state_file + ".dataplane-secret")
                      : DataPlaneKeyIssuer::FromFile(dataplane_secret_file);
    if (!issuer.ok()) return daemon.Fail(issuer.status().ToString());
    dataplane_keys = *std::move(issuer);
  }
  CoordinatorService service(state->get(), GIFT_VERSION, dataplane_keys.get());
  daemon::GrpcEndpointOptions endpoint_options;
  endpoint_options.ports = {{listen, credentials->server}};
  endpoint_options.service = &service;
  endpoint_options.keepalive_interval = keepalive;
  endpoint_options.keepalive_timeout = keepalive_timeout;
  endpoint_options.rpc_counter = daemon::MakeRpcCounterInterceptor(
      *(*metrics)->registry(), "gift_coordinator_rpc_total", {"gift.v1.Coordinator"});
  absl::StatusOr<std::unique_ptr<daemon::GrpcEndpoint>> endpoint =
      daemon::GrpcEndpoint::Start(std::move(endpoint_options));
  if (!endpoint.ok()) return daemon.Fail(endpoint.status().message());
  (*endpoint)->SetServing(true);
  const std::string& address = (*endpoint)->bound_address(0);
  Log(Level::kInfo, "listening",
      {{"address", address},
       {"state", state_file},
       {"tls", tls.files.enabled()},
       {"dataplane_auth", dataplane_keys != nullptr},
       {"dataplane_mac", dataplane_keys != nullptr ? dataplane_mac : "off"},
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

  daemon.AnnounceShutdown(daemon.signals().Wait(), "shutting down");
  (*endpoint)->SetServing(false);
  service.Shutdown();
  // Calls still running after the grace period are cancelled (clients retry);
  // gRPC otherwise waits for the whole deadline while clients stay connected.
  (*endpoint)->Shutdown(absl::Milliseconds(500));
  stop.Notify();
  expiry.join();
  metrics->reset();  // its refreshers read the state
  state->reset();    // closes the state file
  Log(Level::kInfo, "stopped");
  return daemon::kExitOk;
}

}  // namespace
}  // namespace gift::coordinator

int main(int argc, char** argv) { return gift::coordinator::Main(argc, argv); }
