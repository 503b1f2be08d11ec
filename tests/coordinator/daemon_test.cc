// The gift-coordinator executable: flags and exit codes, the `listening` log
// event with port 0, SIGTERM, and a restart that resumes the cluster.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_split.h"
#include "gift/v1/coordinator.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/coordinator/test_util.h"
#include "tests/testing/temp_dir.h"

extern char** environ;

namespace gift::coordinator {
namespace {

using ::testing::HasSubstr;

// A child process with stdout and stderr sent to files.
class Daemon {
 public:
  Daemon(const std::vector<std::string>& args, const std::string& log) : log_(log) {
    std::vector<std::string> argv = {GIFT_COORDINATOR_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> cargv;
    for (std::string& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    EXPECT_EQ(posix_spawn(&pid_, cargv[0], &actions, nullptr, cargv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
  }
  ~Daemon() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // The exit status, or -1 after `timeout`.
  int Wait(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

  void Signal(int sig) { kill(pid_, sig); }

  std::string Log() const {
    std::ifstream in(log_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  // The value of `field` of the first log event named `event`, waiting for it.
  std::string WaitForEvent(const std::string& event, const std::string& field) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < end) {
      for (absl::string_view line : absl::StrSplit(Log(), '\n', absl::SkipEmpty())) {
        nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
        if (j.is_object() && j.value("event", "") == event) return j.value(field, "");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return "";
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
};

TEST(DaemonTest, HelpAndBadFlags) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  Daemon help({"--help"}, dir.File("help.log"));
  EXPECT_EQ(help.Wait(), 0);
  EXPECT_THAT(help.Log(), HasSubstr("--lease-ttl"));
  Daemon bogus({"--bogus"}, dir.File("bogus.log"));
  EXPECT_EQ(bogus.Wait(), 64);
  Daemon ttl({"--lease-ttl", "soon"}, dir.File("ttl.log"));
  EXPECT_EQ(ttl.Wait(), 64);
  EXPECT_THAT(ttl.Log(), HasSubstr("--lease-ttl"));
  Daemon window({"--step-window", "0"}, dir.File("window.log"));
  EXPECT_EQ(window.Wait(), 64);
}

TEST(DaemonTest, UnusableStateFileExitsOne) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  std::ofstream(dir.File("bad.db")) << std::string(4096, 'z');
  Daemon daemon({"--listen", "127.0.0.1:0", "--state", dir.File("bad.db")}, dir.File("d.log"));
  EXPECT_EQ(daemon.Wait(), 1);
  EXPECT_THAT(daemon.Log(), HasSubstr("not a usable SQLite database"));
}

TEST(DaemonTest, ServesStopsOnSigtermAndResumesAfterRestart) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  const std::vector<std::string> args = {"--listen",           "127.0.0.1:0", "--state",
                                         dir.File("state.db"), "--lease-ttl", "30s"};
  std::string cluster_id;
  for (int run = 0; run < 2; ++run) {
    Daemon daemon(args, dir.File("run" + std::to_string(run) + ".log"));
    const std::string address = daemon.WaitForEvent("listening", "address");
    ASSERT_THAT(address, HasSubstr("127.0.0.1:")) << daemon.Log();
    auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    auto stub = gift::v1::Coordinator::NewStub(channel);
    auto health = grpc::health::v1::Health::NewStub(channel);
    grpc::ClientContext hc;
    hc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::health::v1::HealthCheckResponse health_response;
    ASSERT_TRUE(health->Check(&hc, grpc::health::v1::HealthCheckRequest(), &health_response).ok());
    EXPECT_EQ(health_response.status(), grpc::health::v1::HealthCheckResponse::SERVING);

    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    gift::v1::StatusResponse status;
    ASSERT_TRUE(stub->GetStatus(&context, gift::v1::GetStatusRequest(), &status).ok());
    if (run == 0) {
      cluster_id = status.state().cluster_id();
      grpc::ClientContext join_context;
      gift::v1::JoinRequest join;
      join.set_name("w0");
      join.set_role(gift::v1::MEMBER_ROLE_WORKER);
      gift::v1::JoinResponse joined;
      ASSERT_TRUE(stub->Join(&join_context, join, &joined).ok());
    } else {
      EXPECT_EQ(status.state().cluster_id(), cluster_id);
      EXPECT_EQ(status.state().epoch(), 1u);
      EXPECT_EQ(status.state().workers_size(), 1);  // kept with a grace lease
    }
    daemon.Signal(SIGTERM);
    EXPECT_EQ(daemon.Wait(), 0) << daemon.Log();
    EXPECT_THAT(daemon.Log(), HasSubstr("\"event\":\"stopped\""));
  }
}

}  // namespace
}  // namespace gift::coordinator
