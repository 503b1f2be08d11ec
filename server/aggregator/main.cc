// gift-server: one aggregator shard of the data plane.
//
//   gift-server --coordinator coord:7070 [--name host-1/shard] [--ucx-tls tcp]
//
// Joins the coordinator as a server (its shard id is its rank), follows the
// cluster state (epochs, workers, shard map) through the member session, and
// reduces the workers' chunk pushes over UCX (aggregator_shard.h).
// Logs one JSON object per line on stderr (common/base/logging.h); the
// `serving` event (shard id, epoch, workers, chunks) follows every change of
// the epoch or of this shard's chunks.
// Exit codes: 0 after SIGTERM/SIGINT, 64 for bad flags, 1 when UCX or the
// coordinator cannot be used at startup.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "common/base/thread_pool.h"
#include "common/codec/codec_spec.h"
#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "common/transport/ucx/ucx_transport.h"
#include "server/aggregator/aggregator_shard.h"
#include "server/aggregator/shard_epoch_from_state.h"

namespace gift::server {
namespace {

using gift::logging::Level;
using gift::logging::Log;

constexpr int kExitUsage = 64;
constexpr int kExitFailure = 1;

int Fail(absl::string_view event, absl::string_view message) {
  Log(Level::kError, event, {{"error", message}});
  std::fprintf(stderr, "gift-server: %.*s\n", static_cast<int>(message.size()), message.data());
  return kExitFailure;
}

std::string DefaultName() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return absl::StrCat(host, "/server-", getpid());
}

int Main(int argc, char** argv) {
  CLI::App app(
      "gift-server: a GIFT-PS aggregator shard (sums the workers' chunks in FP32, "
      "in the transformed basis, and returns the average).");
  std::string coordinator = "localhost:7070";
  std::string name = DefaultName();
  std::string ucx_tls;
  std::string pull_codec = "bf16";
  int threads = 0;
  app.add_option("--coordinator", coordinator, "the coordinator's HOST:PORT")
      ->capture_default_str();
  app.add_option("--name", name, "member name, unique among live members")->capture_default_str();
  app.add_option("--ucx-tls", ucx_tls,
                 "UCX transports, as UCX_TLS takes them (default: UCX's choice)");
  app.add_option("--pull-codec", pull_codec, "encoding of the reduced chunks sent to workers")
      ->capture_default_str();
  app.add_option("--threads", threads, "reduction threads (0: all hardware threads)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1024));
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "gift-server: %s\nRun with --help for usage.\n", e.what());
    return kExitUsage;
  }
  auto pull_spec = codec::ParseCodecSpec(pull_codec);
  if (!pull_spec.ok()) {
    std::fprintf(stderr, "gift-server: --pull-codec: %s\n",
                 std::string(pull_spec.status().message()).c_str());
    return kExitUsage;
  }

  logging::SetDaemonName("gift-server");
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  ThreadPool pool(static_cast<size_t>(threads));
  AggregatorShardOptions options;
  options.reducer.pull_spec = *pull_spec;
  options.reducer.codec_options.pool = &pool;
  options.on_reject = [](const absl::Status& why) {
    Log(Level::kWarning, "message_rejected",
        {{"code", absl::StatusCodeToString(why.code())}, {"reason", why.message()}});
  };
  transport::UcxTransportOptions ucx{.tls = ucx_tls};
  auto shard = AggregatorShard::Create(options, [&](transport::TransportHandlers h) {
    return transport::CreateUcxTransport(std::move(h), ucx);
  });
  if (!shard.ok()) return Fail("startup_failed", shard.status().ToString());

  control::MemberSessionOptions session_options;
  session_options.name = name;
  session_options.role = gift::v1::MEMBER_ROLE_SERVER;
  session_options.data_address = (*shard)->address();
  auto session = control::MemberSession::Start(control::CoordinatorClient::MakeChannel(coordinator),
                                               session_options);
  if (!session.ok()) {
    return Fail("startup_failed",
                absl::StrCat("joining ", coordinator, ": ", session.status().ToString()));
  }
  Log(Level::kInfo, "joined",
      {{"coordinator", coordinator},
       {"member_id", (*session)->member_id()},
       {"shard", static_cast<int64_t>((*session)->rank())}});

  // Follows the cluster state: every new revision may carry a new epoch or
  // new chunks for this shard.
  absl::Notification stop;
  std::thread follower([&] {
    uint64_t seen = 0;
    size_t chunks = 0;
    while (!stop.HasBeenNotified()) {
      auto state = (*session)->WaitForRevision(seen + 1, absl::Milliseconds(500));
      if (!state.ok()) continue;  // timeout (re-check stop) or closed
      seen = (*state)->revision();
      auto epoch = ShardEpochFromState(**state, (*session)->rank());
      if (!epoch.ok()) {
        if (epoch.status().code() != absl::StatusCode::kFailedPrecondition) {
          Log(Level::kError, "bad_cluster_state", {{"error", epoch.status().ToString()}});
        }
        continue;
      }
      const uint64_t before = (*shard)->epoch();
      const absl::Status s = (*shard)->Apply(*epoch);
      if (!s.ok()) {
        Log(Level::kWarning, "epoch_apply_failed",
            {{"epoch", static_cast<int64_t>(epoch->epoch)}, {"error", s.ToString()}});
      }
      if (s.ok() && (epoch->epoch != before || epoch->chunks.size() != chunks)) {
        chunks = epoch->chunks.size();
        Log(Level::kInfo, "serving",
            {{"epoch", static_cast<int64_t>(epoch->epoch)},
             {"shard", static_cast<int64_t>((*session)->rank())},
             {"workers", static_cast<int64_t>(epoch->workers.size())},
             {"chunks", static_cast<int64_t>(epoch->chunks.size())}});
      }
    }
  });

  int signal = 0;
  sigwait(&signals, &signal);
  Log(Level::kInfo, "shutting_down", {{"signal", signal == SIGTERM ? "SIGTERM" : "SIGINT"}});
  stop.Notify();
  follower.join();
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
