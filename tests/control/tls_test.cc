// Mutual TLS and roles on the control plane with real processes on loopback:
// a gift-coordinator daemon (GIFT_COORDINATOR_BIN) started with certificates
// made in the test by the openssl command (tools/gift-cluster/test_ca.h), clients in
// this process (CoordinatorClient, giftctl's Run), and the daemons' refusal
// of plaintext on non-loopback addresses (GIFT_SERVER_BIN, GIFT_WORKER_BIN).
// Skips when openssl is not installed.
#include <grpcpp/create_channel.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/credentials.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/control/coordinator_client.h"
#include "common/rpc/credentials.h"
#include "gmock/gmock.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"
#include "tools/gift-cluster/coordinator_process.h"
#include "tools/gift-cluster/subprocess.h"
#include "tools/gift-cluster/test_ca.h"
#include "tools/giftctl/giftctl.h"

namespace gift::control {
namespace {

using tools::CoordinatorProcess;
using tools::CoordinatorProcessOptions;
using tools::Subprocess;

namespace v1 = ::gift::v1;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kWait = absl::Seconds(10);

// The CA, certificates per role, and a certificate from another CA; made
// once for the whole suite (openssl takes a moment per key).
struct Certificates {
  std::optional<gift::TempDir> temp;  // removed with the certificates
  std::string dir;
  rpc::TlsFiles coordinator, worker, server, operator_, no_role, foreign;
};

Certificates* certs = nullptr;
std::string skip_reason;

class TlsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<gift::TempDir> temp = test::CreateTempDir("gift-tls-test");
    if (!temp.ok()) {
      skip_reason = "mkdtemp failed";
      return;
    }
    auto c = std::make_unique<Certificates>();
    c->dir = temp->path();
    c->temp = *std::move(temp);
    absl::StatusOr<tools::TestCa> ca = tools::TestCa::Create(c->dir, "ca");
    if (absl::IsUnavailable(ca.status())) {
      skip_reason = std::string(ca.status().message());
      return;
    }
    ASSERT_TRUE(ca.ok()) << ca.status();
    absl::StatusOr<tools::TestCa> other = tools::TestCa::Create(c->dir, "other-ca");
    ASSERT_TRUE(other.ok()) << other.status();
    auto issue = [](const tools::TestCa& by, const std::string& name,
                    std::vector<std::string> uris) {
      absl::StatusOr<rpc::TlsFiles> files = by.Issue(name, uris);
      EXPECT_TRUE(files.ok()) << files.status();
      return files.value_or(rpc::TlsFiles{});
    };
    c->coordinator = issue(*ca, "coordinator", {"spiffe://gift/coordinator"});
    c->worker = issue(*ca, "worker", {"spiffe://gift/worker/host-0"});
    c->server = issue(*ca, "server", {"spiffe://gift/server"});
    c->operator_ = issue(*ca, "operator", {"spiffe://gift/operator"});
    c->no_role = issue(*ca, "no-role", {});
    c->foreign = issue(*other, "foreign-operator", {"spiffe://gift/operator"});
    certs = c.release();
  }

  static void TearDownTestSuite() {
    delete certs;
    certs = nullptr;
  }

  void SetUp() override {
    if (certs == nullptr) GTEST_SKIP() << "no certificates: " << skip_reason;
  }

  // A coordinator on a loopback port with mutual TLS.
  void StartCoordinator() {
    CoordinatorProcessOptions options;
    options.binary = GIFT_COORDINATOR_BIN;
    options.state_file =
        absl::StrCat(certs->dir, "/state-",
                     ::testing::UnitTest::GetInstance()->current_test_info()->name(), ".db");
    options.extra_args = {"--metrics-listen", "",
                          "--tls-cert",       certs->coordinator.cert,
                          "--tls-key",        certs->coordinator.key,
                          "--tls-ca",         certs->coordinator.ca};
    auto coordinator = CoordinatorProcess::Start(options);
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    coordinator_ = *std::move(coordinator);
  }

  // A client presenting `files`.
  std::unique_ptr<CoordinatorClient> Client(const rpc::TlsFiles& files) {
    auto credentials = rpc::MakeChannelCredentials(files);
    EXPECT_TRUE(credentials.ok()) << credentials.status();
    return std::make_unique<CoordinatorClient>(
        CoordinatorClient::MakeChannel(coordinator_->address(), *credentials), absl::Seconds(3));
  }

  std::unique_ptr<CoordinatorProcess> coordinator_;
};

v1::JoinRequest JoinAs(v1::MemberRole role, const std::string& name) {
  v1::JoinRequest request;
  request.set_name(name);
  request.set_role(role);
  request.set_data_address("ucx-address");
  return request;
}

TEST_F(TlsTest, RolesFromCertificatesAreCheckedPerRpc) {
  StartCoordinator();
  auto op = Client(certs->operator_);
  auto worker = Client(certs->worker);
  auto server = Client(certs->server);

  // Reads: any authenticated role.
  for (auto* client : {op.get(), worker.get(), server.get()}) {
    absl::StatusOr<v1::StatusResponse> status = client->GetStatus();
    EXPECT_TRUE(status.ok()) << status.status();
  }

  // Only operators change the policy.
  absl::StatusOr<v1::Policy> policy = op->GetPolicy();
  ASSERT_TRUE(policy.ok()) << policy.status();
  absl::Status denied = worker->SetPolicy(*policy, policy->version()).status();
  EXPECT_EQ(denied.code(), absl::StatusCode::kPermissionDenied) << denied;
  EXPECT_THAT(denied.message(), HasSubstr("role worker"));
  EXPECT_THAT(denied.message(), HasSubstr("SetPolicy"));
  EXPECT_EQ(worker->RequestRefresh("*").status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(server->SetRank(4, "*").status().code(), absl::StatusCode::kPermissionDenied);
  absl::StatusOr<v1::Policy> set = op->SetPolicy(*policy, policy->version());
  EXPECT_TRUE(set.ok()) << set.status();

  // Workers join as workers, servers as servers, operators not at all.
  absl::Status wrong = worker->Join(JoinAs(v1::MEMBER_ROLE_SERVER, "w-as-s")).status();
  EXPECT_EQ(wrong.code(), absl::StatusCode::kPermissionDenied) << wrong;
  EXPECT_THAT(wrong.message(), HasSubstr("role worker may not call Join as a server"));
  EXPECT_EQ(op->Join(JoinAs(v1::MEMBER_ROLE_WORKER, "op")).status().code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<v1::JoinResponse> joined = worker->Join(JoinAs(v1::MEMBER_ROLE_WORKER, "w0"));
  EXPECT_TRUE(joined.ok()) << joined.status();
  absl::StatusOr<v1::JoinResponse> shard = server->Join(JoinAs(v1::MEMBER_ROLE_SERVER, "s0"));
  EXPECT_TRUE(shard.ok()) << shard.status();
  // Membership RPCs are the members' own.
  EXPECT_EQ(op->Leave(joined.ok() ? joined->member_id() : "m1").status().code(),
            absl::StatusCode::kPermissionDenied);

  // A certificate of the cluster CA without a role URI connects but may do
  // nothing.
  auto anonymous = Client(certs->no_role);
  absl::Status none = anonymous->GetStatus().status();
  EXPECT_EQ(none.code(), absl::StatusCode::kPermissionDenied) << none;
  EXPECT_THAT(none.message(), HasSubstr("without a spiffe://gift/<role> URI"));
  EXPECT_THAT(coordinator_->log(), HasSubstr("\"event\":\"rpc_denied\""));
}

// With TLS the coordinator hands out data-plane keys (docs/design.md section
// 8.2): each member its own at Join, and the peers' only to a certificate of
// the member's role.
TEST_F(TlsTest, DataPlaneKeysGoOnlyToTheMembersRole) {
  StartCoordinator();
  auto op = Client(certs->operator_);
  auto worker = Client(certs->worker);
  auto server = Client(certs->server);
  absl::StatusOr<v1::JoinResponse> w = worker->Join(JoinAs(v1::MEMBER_ROLE_WORKER, "w0"));
  ASSERT_TRUE(w.ok()) << w.status();
  absl::StatusOr<v1::JoinResponse> s = server->Join(JoinAs(v1::MEMBER_ROLE_SERVER, "s0"));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(w->dataplane_key().key().size(), 32u);
  EXPECT_EQ(s->dataplane_key().key().size(), 32u);
  // The server gets the worker's key, the worker the server's.
  absl::StatusOr<v1::DataPlaneKeys> for_server = server->GetDataPlaneKeys(s->member_id());
  ASSERT_TRUE(for_server.ok()) << for_server.status();
  ASSERT_EQ(for_server->peers_size(), 1);
  EXPECT_EQ(for_server->peers(0).key(), w->dataplane_key().key());
  absl::StatusOr<v1::DataPlaneKeys> for_worker = worker->GetDataPlaneKeys(w->member_id());
  ASSERT_TRUE(for_worker.ok()) << for_worker.status();
  ASSERT_EQ(for_worker->peers_size(), 1);
  EXPECT_EQ(for_worker->peers(0).key(), s->dataplane_key().key());
  // A worker certificate naming the server (to get the workers' keys), and
  // operators, get nothing.
  EXPECT_EQ(worker->GetDataPlaneKeys(s->member_id()).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(op->GetDataPlaneKeys(s->member_id()).status().code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(TlsTest, ClientsWithoutAValidCertificateAreRefused) {
  StartCoordinator();
  // No client certificate (server verified, nothing presented).
  grpc::SslCredentialsOptions server_only;
  std::ifstream ca(certs->operator_.ca);
  std::stringstream pem;
  pem << ca.rdbuf();
  server_only.pem_root_certs = pem.str();
  CoordinatorClient no_cert(
      CoordinatorClient::MakeChannel(coordinator_->address(), grpc::SslCredentials(server_only)),
      absl::Seconds(3));
  absl::Status refused = no_cert.GetStatus().status();
  EXPECT_EQ(refused.code(), absl::StatusCode::kUnavailable) << refused;

  // A certificate from another CA.
  EXPECT_EQ(Client(certs->foreign)->GetStatus().status().code(), absl::StatusCode::kUnavailable);

  // Plaintext to a TLS endpoint.
  CoordinatorClient plaintext(CoordinatorClient::MakeChannel(coordinator_->address()),
                              absl::Seconds(3));
  EXPECT_EQ(plaintext.GetStatus().status().code(), absl::StatusCode::kUnavailable);

  // The coordinator still serves a valid client afterwards.
  EXPECT_TRUE(Client(certs->operator_)->GetStatus().ok());
}

// giftctl over mutual TLS, run in-process: --cert/--key/--ca, durations.
TEST_F(TlsTest, GiftctlUsesTheOperatorCertificate) {
  StartCoordinator();
  auto run = [&](std::vector<std::string> args, std::string* out_text = nullptr,
                 std::string* err_text = nullptr) {
    args.insert(args.begin(), {"giftctl", "--coordinator", coordinator_->address()});
    std::ostringstream out, err;
    const int code = giftctl::Run(args, "localhost:7070", out, err);
    if (out_text != nullptr) *out_text = out.str();
    if (err_text != nullptr) *err_text = err.str();
    return code;
  };
  const rpc::TlsFiles& op = certs->operator_;
  std::string out, err;
  EXPECT_EQ(
      run({"--timeout", "2s", "--cert", op.cert, "--key", op.key, "--ca", op.ca, "policy", "get"},
          &out, &err),
      giftctl::kExitOk)
      << err;
  const rpc::TlsFiles& w = certs->worker;
  EXPECT_EQ(run({"--timeout", "1m30s", "--cert", w.cert, "--key", w.key, "--ca", w.ca, "refresh"},
                &out, &err),
            giftctl::kExitError);
  EXPECT_THAT(err, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(err, HasSubstr("role worker may not call RequestRefresh"));
  // Half a set of TLS flags is a usage error naming what is missing.
  EXPECT_EQ(run({"--cert", op.cert, "status"}, &out, &err), giftctl::kExitUsage);
  EXPECT_THAT(err, HasSubstr("missing --key, --ca"));
}

// The Worker TCP API's gate (rpc::MakeServerCredentials with allowed roles):
// an in-process server with grpc.health.v1 that admits workers only.
TEST_F(TlsTest, ServerCredentialsCanAdmitOnlySomeRoles) {
  auto credentials = rpc::MakeServerCredentials(certs->worker, {rpc::Role::kWorker});
  ASSERT_TRUE(credentials.ok()) << credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", *credentials, &port);
  // The health service needs a polled service next to it (as in gift-server).
  grpc::CallbackGenericService unimplemented;
  builder.RegisterCallbackGenericService(&unimplemented);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  ASSERT_NE(port, 0);
  auto check = [&](const rpc::TlsFiles& files) {
    auto channel_credentials = rpc::MakeChannelCredentials(files);
    EXPECT_TRUE(channel_credentials.ok());
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), *channel_credentials));
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kWait));
    grpc::health::v1::HealthCheckRequest request;
    grpc::health::v1::HealthCheckResponse response;
    return stub->Check(&context, request, &response);
  };
  EXPECT_TRUE(check(certs->worker).ok());
  const grpc::Status denied = check(certs->server);
  EXPECT_EQ(denied.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(denied.error_message(), HasSubstr("role server"));
  server->Shutdown();
}

// The plaintext rule, before any certificate is needed.
TEST(PlaintextTest, LoopbackOnlyUnlessInsecure) {
  for (const char* address :
       {"127.0.0.1:7070", "127.1.2.3:1", "localhost:7070", "[::1]:7070",
        "unix:/run/gift/worker.sock", "ipv4:127.0.0.1:80", "dns:///localhost:7070"}) {
    EXPECT_TRUE(rpc::IsLoopback(address)) << address;
  }
  for (const char* address :
       {"0.0.0.0:7070", "[::]:7070", "10.0.0.1:7070", "gift-coordinator:7070", "128.0.0.1:1"}) {
    EXPECT_FALSE(rpc::IsLoopback(address)) << address;
  }
  const absl::Status refused = rpc::CheckPlaintextAllowed("--listen", "0.0.0.0:7070", {}, false);
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(refused.message(), HasSubstr("--listen 0.0.0.0:7070 is not loopback"));
  EXPECT_THAT(refused.message(), HasSubstr("--insecure"));
  EXPECT_TRUE(rpc::CheckPlaintextAllowed("--listen", "0.0.0.0:7070", {}, true).ok());
  EXPECT_TRUE(rpc::CheckPlaintextAllowed("--listen", "0.0.0.0:7070",
                                         {.cert = "c", .key = "k", .ca = "a"}, false)
                  .ok());
}

// Runs a daemon to its exit; returns the exit code and its stderr.
std::pair<int, std::string> RunDaemon(std::vector<std::string> argv) {
  auto process = Subprocess::Start(argv);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return {-1, ""};
  absl::StatusOr<int> code = (*process)->WaitForExit(kWait);
  EXPECT_TRUE(code.ok()) << code.status();
  return {code.value_or(-1), (*process)->stderr_text()};
}

TEST(PlaintextTest, DaemonsRefusePlaintextOnNonLoopbackAddresses) {
  const gift::TempDir dir = test::NewTempDir("gift-plaintext-test");
  const std::string state = dir.File("plaintext-test.db");
  auto [code, err] = RunDaemon(
      {GIFT_COORDINATOR_BIN, "--listen", "0.0.0.0:0", "--state", state, "--metrics-listen", ""});
  EXPECT_EQ(code, 64);
  EXPECT_THAT(err, HasSubstr("--listen 0.0.0.0:0 is not loopback"));
  EXPECT_THAT(err, HasSubstr("--insecure"));
  std::tie(code, err) = RunDaemon({GIFT_SERVER_BIN, "--listen", "0.0.0.0:0"});
  EXPECT_EQ(code, 64);
  EXPECT_THAT(err, HasSubstr("--listen 0.0.0.0:0 is not loopback"));
  std::tie(code, err) = RunDaemon({GIFT_SERVER_BIN, "--coordinator", "coordinator.example:7070"});
  EXPECT_EQ(code, 64);
  EXPECT_THAT(err, HasSubstr("--coordinator coordinator.example:7070 is not loopback"));
  std::tie(code, err) = RunDaemon({GIFT_WORKER_BIN, "--listen", "0.0.0.0:7072"});
  EXPECT_EQ(code, 64);
  EXPECT_THAT(err, HasSubstr("--listen 0.0.0.0:7072 is not loopback"));
  // Half a set of TLS flags.
  std::tie(code, err) = RunDaemon({GIFT_COORDINATOR_BIN, "--state", state, "--tls-cert", "x.crt"});
  EXPECT_EQ(code, 64);
  EXPECT_THAT(err, HasSubstr("missing --tls-key, --tls-ca"));
}

TEST(PlaintextTest, InsecureAllowsPlaintextOnAnyAddress) {
  const gift::TempDir dir = test::NewTempDir("gift-insecure-test");
  CoordinatorProcessOptions options;
  options.binary = GIFT_COORDINATOR_BIN;
  options.state_file = dir.File("insecure-test.db");
  options.listen = "0.0.0.0:0";
  options.extra_args = {"--insecure", "--metrics-listen", ""};
  auto coordinator = CoordinatorProcess::Start(options);
  ASSERT_TRUE(coordinator.ok()) << coordinator.status();
  EXPECT_THAT((*coordinator)->address(), HasSubstr("0.0.0.0:"));
}

TEST(PlaintextTest, DefaultsBindToLoopback) {
  // --help prints every flag's default on stdout.
  auto process = Subprocess::Start({GIFT_COORDINATOR_BIN, "--help"});
  ASSERT_TRUE(process.ok());
  ASSERT_TRUE((*process)->WaitForExit(kWait).ok());
  EXPECT_THAT((*process)->stdout_text(), HasSubstr("127.0.0.1:7070"));
  EXPECT_THAT((*process)->stdout_text(), Not(HasSubstr("0.0.0.0")));
  process = Subprocess::Start({GIFT_SERVER_BIN, "--help"});
  ASSERT_TRUE(process.ok());
  ASSERT_TRUE((*process)->WaitForExit(kWait).ok());
  EXPECT_THAT((*process)->stdout_text(), HasSubstr("127.0.0.1:7071"));
  EXPECT_THAT((*process)->stdout_text(), Not(HasSubstr("0.0.0.0")));
  process = Subprocess::Start({GIFT_WORKER_BIN, "--help"});
  ASSERT_TRUE(process.ok());
  ASSERT_TRUE((*process)->WaitForExit(kWait).ok());
  EXPECT_THAT((*process)->stdout_text(), Not(HasSubstr("0.0.0.0")));
}

}  // namespace
}  // namespace gift::control
