// The real gift-coordinator and gift-server binaries under a fake service
// manager: READY=1 on a NOTIFY_SOCKET once they serve, grpc.health.v1 on
// their listen addresses, their /metrics pages, giftctl's view of the slowest
// step, and a clean drain (STOPPING=1, exit 0) on SIGTERM. Ports are 0; the
// bound addresses come from the daemons' log events.
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/control/coordinator_client.h"
#include "common/control/member_session.h"
#include "common/rpc/credentials.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/daemon/http_get.h"
#include "tests/testing/log_events.h"
#include "tests/testing/temp_dir.h"
#include "tools/gift-cluster/subprocess.h"
#include "tools/gift-cluster/test_ca.h"

namespace gift::daemon {
namespace {

using tools::Subprocess;

using test::EventField;
using testing::HttpGet;
using tools::Subprocess;

// A fake systemd notification socket (AF_UNIX datagrams).
class NotifySocket {
 public:
  explicit NotifySocket(std::string path) : path_(std::move(path)) {
    fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    unlink(path_.c_str());
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path_.c_str());
    bound_ = bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~NotifySocket() {
    close(fd_);
    unlink(path_.c_str());
  }
  bool ok() const { return fd_ >= 0 && bound_; }
  const std::string& path() const { return path_; }

  // Reads datagrams until one contains `line` (as a whole line); returns it.
  std::string WaitFor(const std::string& line, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    for (;;) {
      for (const std::string& m : messages_) {
        for (absl::string_view l : absl::StrSplit(m, '\n')) {
          if (l == line) return m;
        }
      }
      const absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) return "";
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) <= 0) continue;
      char buf[4096];
      const ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) messages_.emplace_back(buf, n);
    }
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool bound_ = false;
  std::vector<std::string> messages_;
};

// Starts `argv` with NOTIFY_SOCKET=`notify` (the test's environment is
// restored at once: Subprocess passes the caller's environment).
absl::StatusOr<std::unique_ptr<Subprocess>> StartNotified(const std::vector<std::string>& argv,
                                                          const std::string& notify) {
  setenv("NOTIFY_SOCKET", notify.c_str(), 1);
  auto p = Subprocess::Start(argv);
  unsetenv("NOTIFY_SOCKET");
  return p;
}

grpc::health::v1::HealthCheckResponse::ServingStatus Health(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return response.status();
}

// SIGTERM and SIGINT never take their default action in a running daemon
// (that kills it, exit 143, instead of starting the drain): the daemon
// catches them (SigCgt in /proc/PID/status), so a thread that runs with them
// unblocked (OpenBLAS starts its pool before main) forwards them to the
// thread that waits for them.
void ExpectShutdownSignalsCaught(pid_t pid) {
  const uint64_t wanted = (uint64_t{1} << (SIGTERM - 1)) | (uint64_t{1} << (SIGINT - 1));
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  bool found = false;
  while (std::getline(status, line)) {
    if (!absl::StartsWith(line, "SigCgt:")) continue;
    found = true;
    EXPECT_EQ(std::stoull(line.substr(7), nullptr, 16) & wanted, wanted)
        << "pid " << pid << " does not catch SIGTERM and SIGINT: " << line;
  }
  EXPECT_TRUE(found) << "no SigCgt in /proc/" << pid << "/status";
}

void ExpectSeries(const std::string& page, const std::vector<std::string>& series) {
  for (const std::string& s : series) {
    EXPECT_TRUE(absl::StrContains(page, absl::StrCat("\n", s, " ")) ||
                absl::StrContains(page, absl::StrCat("\n", s, "{")))
        << s << " missing from\n"
        << page;
  }
}

TEST(DaemonProcessTest, CoordinatorAndServerNotifyServeHealthMetricsAndDrain) {
  const gift::TempDir temp = test::NewTempDir("gift-daemon");
  const std::string dir = temp.path();
  NotifySocket coordinator_notify(dir + "/coordinator.notify");
  NotifySocket server_notify(dir + "/server.notify");
  ASSERT_TRUE(coordinator_notify.ok() && server_notify.ok());

  auto coordinator =
      StartNotified({GIFT_COORDINATOR_BIN, "--listen", "127.0.0.1:0", "--metrics-listen",
                     "127.0.0.1:0", "--state", dir + "/state.db", "--lease-ttl", "2s"},
                    coordinator_notify.path());
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  const std::string address = EventField(**coordinator, "listening", "address");
  const std::string coordinator_metrics = EventField(**coordinator, "metrics_listening", "address");
  ASSERT_FALSE(address.empty()) << (*coordinator)->stderr_text();
  ASSERT_FALSE(coordinator_metrics.empty()) << (*coordinator)->stderr_text();
  EXPECT_FALSE(coordinator_notify.WaitFor("READY=1", absl::Seconds(30)).empty());
  EXPECT_EQ(Health(address), grpc::health::v1::HealthCheckResponse::SERVING);
  ExpectShutdownSignalsCaught((*coordinator)->pid());

  auto server = StartNotified(
      {GIFT_SERVER_BIN, "--coordinator", address, "--name", "shard-a", "--threads", "1", "--listen",
       "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--drain-timeout", "20s"},
      server_notify.path());
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string health_address = EventField(**server, "health_listening", "address");
  const std::string server_metrics = EventField(**server, "metrics_listening", "address");
  ASSERT_FALSE(health_address.empty()) << (*server)->stderr_text();
  ASSERT_FALSE(server_metrics.empty()) << (*server)->stderr_text();
  // READY only once joined.
  ASSERT_FALSE(server_notify.WaitFor("READY=1", absl::Seconds(30)).empty())
      << (*server)->stderr_text();
  ExpectShutdownSignalsCaught((*server)->pid());
  // It logged `joined` before READY; the pipe may deliver the line later than
  // the datagram, so wait for it rather than read what arrived so far.
  EXPECT_FALSE(EventField(**server, "joined", "member_id").empty()) << (*server)->stderr_text();
  EXPECT_EQ(Health(health_address), grpc::health::v1::HealthCheckResponse::SERVING);

  // Two workers (sessions in this process), one ahead of the other: the
  // coordinator reports the laggard.
  std::vector<std::unique_ptr<control::MemberSession>> workers;
  for (int w = 0; w < 2; ++w) {
    control::MemberSessionOptions options;
    options.name = absl::StrCat("worker-", w);
    options.data_address = absl::StrCat("worker-", w);
    auto session =
        control::MemberSession::Start(control::CoordinatorClient::MakeChannel(address), options);
    ASSERT_TRUE(session.ok()) << session.status();
    workers.push_back(*std::move(session));
  }
  workers[0]->SetLastStep(5);
  workers[1]->SetLastStep(3);
  ASSERT_TRUE(workers[0]->HeartbeatNow().ok());
  ASSERT_TRUE(workers[1]->HeartbeatNow().ok());
  control::CoordinatorClient client(control::CoordinatorClient::MakeChannel(address),
                                    absl::Seconds(10));
  auto status = client.GetStatus();
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(status->slowest_step(), 4u);
  EXPECT_EQ(status->max_step(), 5u);
  ASSERT_EQ(status->slowest_ranks_size(), 1);
  EXPECT_EQ(status->slowest_ranks(0), workers[1]->rank());
  EXPECT_GE(status->slowest_wait_ms(), 0);

  const std::string cpage = HttpGet(coordinator_metrics, "/metrics");
  EXPECT_TRUE(absl::StrContains(cpage, "# TYPE gift_coordinator_epoch gauge")) << cpage;
  EXPECT_TRUE(absl::StrContains(cpage, "# TYPE gift_coordinator_rpc_total counter")) << cpage;
  ExpectSeries(
      cpage,
      {"gift_coordinator_epoch", "gift_coordinator_members", "gift_coordinator_state_revision",
       "gift_coordinator_basis_commits_total", "gift_coordinator_basis_postponements_total",
       "gift_coordinator_oldest_step_lag_steps",
       "gift_coordinator_oldest_incomplete_step_wait_seconds", "gift_coordinator_rpc_total"});
  EXPECT_TRUE(absl::StrContains(cpage, "gift_coordinator_members{role=\"worker\"} 2")) << cpage;
  EXPECT_TRUE(absl::StrContains(cpage, "gift_coordinator_members{role=\"server\"} 1")) << cpage;
  EXPECT_TRUE(absl::StrContains(cpage, "\ngift_coordinator_oldest_step_lag_steps 2")) << cpage;
  EXPECT_TRUE(absl::StrContains(cpage, "gift_coordinator_rpc_total{code=\"OK\",method=\"Join\"}") ||
              absl::StrContains(cpage, "gift_coordinator_rpc_total{method=\"Join\",code=\"OK\"}"))
      << cpage;

  const std::string spage = HttpGet(server_metrics, "/metrics");
  EXPECT_TRUE(absl::StrContains(spage, "# TYPE gift_server_pushes_total counter")) << spage;
  ExpectSeries(spage, {"gift_server_pushes_total", "gift_server_chunks_completed_total",
                       "gift_server_chunks_aborted_total", "gift_server_chunks_superseded_total",
                       "gift_server_result_bytes_total",
                       "gift_server_epoch", "gift_server_chunks", "gift_server_workers"});

  for (auto& w : workers) ASSERT_TRUE(w->Close().ok());

  // SIGTERM: STOPPING=1, drain, leave, exit 0.
  ASSERT_TRUE((*server)->Signal(SIGTERM).ok());
  EXPECT_FALSE(server_notify.WaitFor("STOPPING=1", absl::Seconds(30)).empty());
  auto server_exit = (*server)->WaitForExit(absl::Seconds(60));
  ASSERT_TRUE(server_exit.ok()) << server_exit.status();
  EXPECT_EQ(*server_exit, 0) << (*server)->stderr_text();
  EXPECT_TRUE(absl::StrContains((*server)->stderr_text(), "\"event\":\"drained\""));
  auto after = client.GetStatus();
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(after->state().servers_size(), 0);  // it left

  ASSERT_TRUE((*coordinator)->Signal(SIGTERM).ok());
  EXPECT_FALSE(coordinator_notify.WaitFor("STOPPING=1", absl::Seconds(30)).empty());
  auto coordinator_exit = (*coordinator)->WaitForExit(absl::Seconds(60));
  ASSERT_TRUE(coordinator_exit.ok()) << coordinator_exit.status();
  EXPECT_EQ(*coordinator_exit, 0) << (*coordinator)->stderr_text();
}

TEST(DaemonProcessTest, WorkerNotifiesServesHealthAndMetricsAndStopsCleanly) {
  const gift::TempDir temp = test::NewTempDir("gift-daemon");
  const std::string dir = temp.path();
  NotifySocket notify(dir + "/worker.notify");
  ASSERT_TRUE(notify.ok());
  auto coordinator = Subprocess::Start({GIFT_COORDINATOR_BIN, "--listen", "127.0.0.1:0",
                                        "--metrics-listen", "", "--state", dir + "/state.db"});
  ASSERT_TRUE(coordinator.ok());
  const std::string address = EventField(**coordinator, "listening", "address");
  ASSERT_FALSE(address.empty()) << (*coordinator)->stderr_text();

  const std::string socket = dir + "/worker.sock";
  auto worker = StartNotified(
      {GIFT_WORKER_BIN, "--coordinator", address, "--name", "w0", "--socket", socket, "--listen",
       "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--threads", "1"},
      notify.path());
  ASSERT_TRUE(worker.ok());
  const std::string tcp = EventField(**worker, "ready", "listen");
  const std::string metrics = EventField(**worker, "metrics_listening", "address");
  ASSERT_FALSE(tcp.empty()) << (*worker)->stderr_text();
  ASSERT_FALSE(metrics.empty()) << (*worker)->stderr_text();
  EXPECT_FALSE(notify.WaitFor("READY=1", absl::Seconds(30)).empty()) << (*worker)->stderr_text();
  EXPECT_EQ(Health(absl::StrCat("unix:", socket)), grpc::health::v1::HealthCheckResponse::SERVING);
  EXPECT_EQ(Health(tcp), grpc::health::v1::HealthCheckResponse::SERVING);
  ExpectShutdownSignalsCaught((*worker)->pid());

  const std::string page = HttpGet(metrics, "/metrics");
  EXPECT_TRUE(absl::StrContains(page, "# TYPE gift_worker_steps_completed_total counter")) << page;
  ExpectSeries(page, {"gift_worker_steps_completed_total", "gift_worker_step_retries_total",
                      "gift_worker_data_bytes_total", "gift_worker_epoch",
                      "gift_worker_last_step_seconds", "gift_worker_basis_publications_total"});

  ASSERT_TRUE((*worker)->Signal(SIGTERM).ok());
  EXPECT_FALSE(notify.WaitFor("STOPPING=1", absl::Seconds(30)).empty());
  auto code = (*worker)->WaitForExit(absl::Seconds(60));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << (*worker)->stderr_text();
  EXPECT_NE(access(socket.c_str(), F_OK), 0) << "the socket is removed";
  ASSERT_TRUE((*coordinator)->Signal(SIGTERM).ok());
  EXPECT_TRUE((*coordinator)->WaitForExit(absl::Seconds(30)).ok());
}

TEST(DaemonProcessTest, ConfigFileErrorsExit64) {
  const gift::TempDir temp = test::NewTempDir("gift-daemon");
  const std::string dir = temp.path();
  const std::string config = dir + "/bad.toml";
  FILE* f = fopen(config.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("listen = \"127.0.0.1:0\"\nno-such-flag = 1\n", f);
  fclose(f);
  for (const char* bin : {GIFT_COORDINATOR_BIN, GIFT_SERVER_BIN, GIFT_WORKER_BIN}) {
    auto p = Subprocess::Start({bin, "--config", config});
    ASSERT_TRUE(p.ok());
    auto code = (*p)->WaitForExit(absl::Seconds(30));
    ASSERT_TRUE(code.ok());
    EXPECT_EQ(*code, 64) << bin;
    EXPECT_TRUE(absl::StrContains((*p)->stderr_text(), "no-such-flag")) << (*p)->stderr_text();
  }
}

// Every duration flag takes "2s", "500ms", "1m30s"; a bad one is a usage
// error quoting the text. A valid duration next to a bad --listen shows the
// duration was accepted (the daemon gets as far as checking --listen).
TEST(DaemonProcessTest, DurationFlagsTakeOneSyntax) {
  const gift::TempDir temp = test::NewTempDir("gift-daemon");
  const std::string dir = temp.path();
  struct Case {
    std::vector<std::string> argv;
    std::string error;
  };
  const std::vector<Case> cases = {
      {{GIFT_COORDINATOR_BIN, "--state", dir + "/s.db", "--lease-ttl", "1m30s", "--listen", "x"},
       "--listen: 'x' is not HOST:PORT"},
      {{GIFT_COORDINATOR_BIN, "--state", dir + "/s.db", "--lease-ttl", "500ms", "--listen", "x"},
       "--listen: 'x' is not HOST:PORT"},
      {{GIFT_COORDINATOR_BIN, "--lease-ttl", "soon"},
       "--lease-ttl: 'soon' is not a duration (e.g. 2s, 500ms, 1m30s)"},
      {{GIFT_COORDINATOR_BIN, "--lease-ttl", "0s"}, "--lease-ttl: must be positive, got '0s'"},
      {{GIFT_SERVER_BIN, "--drain-timeout", "1m30s", "--listen", "x"},
       "--listen: 'x' is not HOST:PORT"},
      {{GIFT_SERVER_BIN, "--drain-timeout", "2x"},
       "--drain-timeout: '2x' is not a duration (e.g. 2s, 500ms, 1m30s)"},
      {{GIFT_WORKER_BIN, "--step-timeout", "1m30s", "--drain-timeout", "500ms", "--socket", ""},
       "give --socket, --listen or both"},
      {{GIFT_WORKER_BIN, "--step-timeout", "1e300"}, "--step-timeout: '1e300' is too long"},
      {{GIFT_WORKER_BIN, "--drain-timeout", "-1s"}, "--drain-timeout: must not be negative"},
      // Not a duration flag, but the same one-line usage error.
      {{GIFT_WORKER_BIN, "--cpus", "3-1"}, "--cpus: '3-1' is a reversed range"},
      {{GIFT_CLUSTER_BIN, "--lease-ttl", "1m30s", "--step-timeout", "2s", "--servers", "0"},
       "--servers"},
      {{GIFT_CLUSTER_BIN, "--step-timeout", "2x"},
       "--step-timeout: '2x' is not a duration (e.g. 2s, 500ms, 1m30s)"},
  };
  for (const Case& c : cases) {
    auto p = Subprocess::Start(c.argv);
    ASSERT_TRUE(p.ok());
    auto code = (*p)->WaitForExit(absl::Seconds(30));
    ASSERT_TRUE(code.ok());
    const std::string err = (*p)->stderr_text();
    EXPECT_EQ(*code, 64) << absl::StrJoin(c.argv, " ") << "\n" << err;
    EXPECT_TRUE(absl::StrContains(err, c.error)) << absl::StrJoin(c.argv, " ") << "\n" << err;
    EXPECT_LT(err.size(), 300u) << err;  // one clear line, no 300-digit numbers
  }
}

// The worker checks its --socket before it joins the cluster (the
// coordinator here is a port nobody serves: joining would wait and fail
// otherwise): a missing directory, and a regular file where the socket or
// its ".buffers" twin would go, are usage errors that leave the file alone.
TEST(DaemonProcessTest, WorkerChecksItsSocketPathBeforeJoining) {
  const gift::TempDir temp = test::NewTempDir("gift-daemon");
  const std::string dir = temp.path();
  { std::ofstream(dir + "/w.sock.buffers") << "keep"; }
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir + "/missing/w.sock", "--socket: the directory of socket"},
      {dir + "/w.sock", "w.sock.buffers exists and is a regular file, not a socket"},
  };
  for (const auto& [socket, error] : cases) {
    const absl::Time start = absl::Now();
    auto p =
        Subprocess::Start({GIFT_WORKER_BIN, "--coordinator", "127.0.0.1:1", "--socket", socket});
    ASSERT_TRUE(p.ok());
    auto code = (*p)->WaitForExit(absl::Seconds(30));
    ASSERT_TRUE(code.ok());
    const std::string err = (*p)->stderr_text();
    EXPECT_EQ(*code, 64) << socket << "\n" << err;
    EXPECT_TRUE(absl::StrContains(err, error)) << err;
    EXPECT_FALSE(absl::StrContains(err, "coordinator")) << err;  // it never tried to join
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  }
  std::ifstream kept(dir + "/w.sock.buffers");
  std::string text;
  kept >> text;
  EXPECT_EQ(text, "keep");
}

// A cluster with mutual TLS: a coordinator, a server and a worker, each with
// its role's certificate (made by openssl, tools/gift-cluster/test_ca.h), the
// worker's TCP Worker API admitting workers only, and a server certificate
// refused as a worker.
TEST(DaemonProcessTest, MembersJoinWithTheirRoleCertificates) {
  const gift::TempDir temp = test::NewTempDir("gift-daemon");
  const std::string dir = temp.path();
  auto ca = tools::TestCa::Create(dir, "ca");
  if (absl::IsUnavailable(ca.status())) GTEST_SKIP() << ca.status();
  ASSERT_TRUE(ca.ok()) << ca.status();
  auto coordinator_tls = ca->Issue("coordinator", {});
  auto server_tls = ca->Issue("server", {"spiffe://gift/server"});
  auto worker_tls = ca->Issue("worker", {"spiffe://gift/worker/host-0"});
  ASSERT_TRUE(coordinator_tls.ok() && server_tls.ok() && worker_tls.ok());
  auto tls_args = [](const rpc::TlsFiles& f) {
    return std::vector<std::string>{"--tls-cert", f.cert, "--tls-key", f.key, "--tls-ca", f.ca};
  };
  auto with = [](std::vector<std::string> argv, const std::vector<std::string>& more) {
    argv.insert(argv.end(), more.begin(), more.end());
    return argv;
  };
  auto coordinator = Subprocess::Start(with({GIFT_COORDINATOR_BIN, "--listen", "127.0.0.1:0",
                                             "--metrics-listen", "", "--state", dir + "/state.db"},
                                            tls_args(*coordinator_tls)));
  ASSERT_TRUE(coordinator.ok());
  const std::string address = EventField(**coordinator, "listening", "address");
  ASSERT_FALSE(address.empty()) << (*coordinator)->stderr_text();

  auto server = Subprocess::Start(with({GIFT_SERVER_BIN, "--coordinator", address, "--name", "s0",
                                        "--listen", "127.0.0.1:0", "--metrics-listen", ""},
                                       tls_args(*server_tls)));
  ASSERT_TRUE(server.ok());
  EXPECT_FALSE(EventField(**server, "joined", "member_id").empty()) << (*server)->stderr_text();
  const std::string socket = dir + "/worker.sock";
  auto worker = Subprocess::Start(
      with({GIFT_WORKER_BIN, "--coordinator", address, "--name", "w0", "--socket", socket,
            "--listen", "127.0.0.1:0", "--metrics-listen", "", "--threads", "1"},
           tls_args(*worker_tls)));
  ASSERT_TRUE(worker.ok());
  const std::string tcp = EventField(**worker, "ready", "listen");
  ASSERT_FALSE(tcp.empty()) << (*worker)->stderr_text();

  // The worker's TCP endpoint: mutual TLS, workers only; the socket stays
  // plaintext (file mode 0660).
  auto health = [&](const rpc::TlsFiles& files) {
    auto credentials = rpc::MakeChannelCredentials(files);
    EXPECT_TRUE(credentials.ok());
    auto stub = grpc::health::v1::Health::NewStub(grpc::CreateChannel(tcp, *credentials));
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    grpc::health::v1::HealthCheckResponse response;
    return stub->Check(&context, grpc::health::v1::HealthCheckRequest(), &response).error_code();
  };
  EXPECT_EQ(health(*worker_tls), grpc::StatusCode::OK);
  EXPECT_EQ(health(*server_tls), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(health(rpc::TlsFiles{}), grpc::StatusCode::UNAVAILABLE);  // plaintext
  EXPECT_EQ(Health(absl::StrCat("unix:", socket)), grpc::health::v1::HealthCheckResponse::SERVING);
  struct stat st {};
  ASSERT_EQ(stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);

  // A server certificate cannot join as a worker: the worker exits 1 naming
  // the refusal.
  auto impostor =
      Subprocess::Start(with({GIFT_WORKER_BIN, "--coordinator", address, "--name", "w1", "--socket",
                              dir + "/w1.sock", "--metrics-listen", "", "--threads", "1"},
                             tls_args(*server_tls)));
  ASSERT_TRUE(impostor.ok());
  auto impostor_exit = (*impostor)->WaitForExit(absl::Seconds(60));
  ASSERT_TRUE(impostor_exit.ok());
  EXPECT_EQ(*impostor_exit, 1);
  EXPECT_TRUE(
      absl::StrContains((*impostor)->stderr_text(), "role server may not call Join as a worker"))
      << (*impostor)->stderr_text();

  for (auto* p : {&*worker, &*server, &*coordinator}) {
    ASSERT_TRUE((*p)->Signal(SIGTERM).ok());
    auto code = (*p)->WaitForExit(absl::Seconds(60));
    ASSERT_TRUE(code.ok());
    EXPECT_EQ(*code, 0) << (*p)->stderr_text();
  }
}

}  // namespace
}  // namespace gift::daemon
