// gift-coordinator: the control-plane daemon (one per cluster).
//
//   gift-coordinator --listen 0.0.0.0:7070 --state /var/lib/gift/coordinator.db
//
// Logs one JSON object per line on stderr (common/base/logging.h); the
// `listening` event carries the bound address (useful with port 0).
// Exit codes: 0 after SIGTERM/SIGINT, 64 for bad flags, 1 when the state file
// or the listen address cannot be used.
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "server/coordinator/cluster_state.h"
#include "server/coordinator/coordinator_service.h"
#include "server/coordinator/state_store.h"

namespace gift::coordinator {
namespace {

using gift::logging::Level;
using gift::logging::Log;

constexpr int kExitUsage = 64;
constexpr int kExitFailure = 1;

// "10s", "500ms", "1m", or a plain number of seconds.
bool ParseTtl(const std::string& text, absl::Duration* out) {
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    *out = absl::Seconds(seconds);
    return true;
  }
  return absl::ParseDuration(text, out);
}

int Fail(int code, absl::string_view event, absl::string_view message) {
  Log(Level::kError, event, {{"error", message}});
  std::fprintf(stderr, "gift-coordinator: %.*s\n", static_cast<int>(message.size()),
               message.data());
  return code;
}

int Main(int argc, char** argv) {
  CLI::App app(
      "gift-coordinator: the GIFT-PS control plane (membership, shard map, basis "
      "refresh negotiation, refresh policy).");
  std::string listen = "0.0.0.0:7070";
  std::string state_file = "./gift-coordinator.db";
  std::string lease_ttl_text = "10s";
  uint64_t step_window = 8;
  uint64_t chunk_bytes = uint64_t{4} << 20;
  uint64_t max_basis_bytes = uint64_t{256} << 20;
  app.add_option("--listen", listen, "HOST:PORT to serve on; port 0 picks a free port")
      ->capture_default_str();
  app.add_option("--state", state_file, "SQLite state file (created when missing)")
      ->capture_default_str();
  app.add_option("--lease-ttl", lease_ttl_text,
                 "member lease TTL, e.g. 10s or 500ms (a plain number is seconds)")
      ->capture_default_str();
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
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "gift-coordinator: %s\nRun with --help for usage.\n", e.what());
    return kExitUsage;
  }
  ClusterOptions options;
  options.step_window = step_window;
  options.chunk_bytes = chunk_bytes;
  options.max_basis_bytes = max_basis_bytes;
  if (!ParseTtl(lease_ttl_text, &options.lease_ttl) || options.lease_ttl <= absl::ZeroDuration()) {
    std::fprintf(stderr, "gift-coordinator: --lease-ttl '%s' is not a positive duration\n",
                 lease_ttl_text.c_str());
    return kExitUsage;
  }
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == listen.size()) {
    std::fprintf(stderr, "gift-coordinator: --listen '%s' is not HOST:PORT\n", listen.c_str());
    return kExitUsage;
  }

  logging::SetDaemonName("gift-coordinator");
  // SIGTERM and SIGINT are taken by sigwait below; block them before any
  // thread starts so that every thread inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<StateStore>> store = StateStore::Open(state_file);
  if (!store.ok()) return Fail(kExitFailure, "startup_failed", store.status().message());
  absl::StatusOr<std::unique_ptr<ClusterState>> state =
      ClusterState::Create(options, *std::move(store), RealClock());
  if (!state.ok()) return Fail(kExitFailure, "startup_failed", state.status().ToString());

  CoordinatorService service(state->get(), GIFT_VERSION);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
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
       {"lease_ttl_ms", absl::ToInt64Milliseconds(options.lease_ttl)}});

  absl::Notification stop;
  std::thread expiry([&] {
    const absl::Duration period =
        std::clamp(options.lease_ttl / 4, absl::Milliseconds(10), absl::Seconds(1));
    while (!stop.WaitForNotificationWithTimeout(period)) {
      absl::Status s = (*state)->ExpireLeases();
      if (!s.ok()) Log(Level::kError, "lease_check_failed", {{"error", s.ToString()}});
    }
  });

  int signal = 0;
  sigwait(&signals, &signal);
  Log(Level::kInfo, "shutting_down", {{"signal", signal == SIGTERM ? "SIGTERM" : "SIGINT"}});
  health->SetServingStatus(false);
  service.Shutdown();
  // Calls still running after the grace period are cancelled (clients retry);
  // gRPC otherwise waits for the whole deadline while clients stay connected.
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
  server->Wait();
  stop.Notify();
  expiry.join();
  state->reset();  // closes the state file
  Log(Level::kInfo, "stopped");
  return 0;
}

}  // namespace
}  // namespace gift::coordinator

int main(int argc, char** argv) { return gift::coordinator::Main(argc, argv); }
