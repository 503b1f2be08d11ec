// giftctl's library without a coordinator: policy edits, command-line
// errors, help, exit codes.
#include "tools/giftctl/giftctl.h"

#include <stdlib.h>

#include <sstream>

#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "gtest/gtest.h"
#include "tools/giftctl/policy_edit.h"

namespace gift::giftctl {
namespace {

namespace v1 = ::gift::v1;

struct Result {
  int code;
  std::string out, err;
};

Result RunArgs(std::vector<std::string> args) {
  args.insert(args.begin(), "giftctl");
  std::ostringstream out, err;
  const int code = Run(args, "127.0.0.1:1", out, err);
  return {code, out.str(), err.str()};
}

TEST(PolicyEditTest, ChangesOnlyTheGivenGlobalFields) {
  v1::Policy policy;
  policy.set_version(7);
  policy.mutable_transform()->set_rank(64);
  policy.mutable_transform()->set_ema_decay(0.9);
  policy.mutable_selection()->add_include("keep*");
  PolicyEdit edit;
  edit.period_steps = 20;
  edit.powers = std::vector<double>{0.125, 0.25};
  edit.sides = v1::SIDES_OUTPUT;
  edit.exclude = std::vector<std::string>{"emb*"};
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  ApplyPolicyEdit(edit, &policy);
  EXPECT_EQ(policy.version(), 7u);
  EXPECT_EQ(policy.refresh().period_steps(), 20u);
  EXPECT_EQ(policy.transform().powers_size(), 2);
  EXPECT_EQ(policy.transform().sides(), v1::SIDES_OUTPUT);
  EXPECT_EQ(policy.transform().rank(), 64u);
  EXPECT_EQ(policy.transform().ema_decay(), 0.9);
  EXPECT_EQ(policy.selection().include(0), "keep*");
  EXPECT_EQ(policy.selection().exclude(0), "emb*");
  EXPECT_TRUE(policy.overrides().empty());
}

TEST(PolicyEditTest, EditsTheOverrideOfItsGlob) {
  v1::Policy policy;
  policy.add_overrides()->set_glob("a*");
  policy.add_overrides()->set_glob("b*");
  PolicyEdit edit;
  edit.tensor_glob = "a*";
  edit.rank = 8;
  edit.enabled = false;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  ApplyPolicyEdit(edit, &policy);
  ASSERT_EQ(policy.overrides_size(), 2);
  EXPECT_EQ(policy.overrides(0).rank(), 8u);
  EXPECT_FALSE(policy.overrides(0).enabled());
  EXPECT_FALSE(policy.overrides(1).has_rank());
  EXPECT_FALSE(policy.transform().has_push_codec());

  edit.tensor_glob = "c*";
  ApplyPolicyEdit(edit, &policy);
  ASSERT_EQ(policy.overrides_size(), 3);
  EXPECT_EQ(policy.overrides(2).glob(), "c*");
}

TEST(PolicyEditTest, ErrorFeedbackGlobalOrPerTensor) {
  v1::Policy policy;
  PolicyEdit edit;
  edit.error_feedback = true;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  ApplyPolicyEdit(edit, &policy);
  EXPECT_TRUE(policy.transform().error_feedback());
  EXPECT_TRUE(policy.overrides().empty());
  edit.tensor_glob = "*.norm*";
  edit.error_feedback = false;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  ApplyPolicyEdit(edit, &policy);
  ASSERT_EQ(policy.overrides_size(), 1);
  EXPECT_TRUE(policy.overrides(0).has_error_feedback());
  EXPECT_FALSE(policy.overrides(0).error_feedback());
  EXPECT_TRUE(policy.transform().error_feedback());  // the global value is kept
}

TEST(PolicyEditTest, CodecsGoToTheOverrideOrTheGlobalPolicy) {
  v1::Policy policy;
  const v1::CodecSpec nvfp4 = codec::ToProto(codec::ParseCodecSpec("nvfp4").value());
  PolicyEdit edit;
  edit.tensor_glob = "*.norm";
  edit.pull_codec = nvfp4;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  ApplyPolicyEdit(edit, &policy);
  ASSERT_EQ(policy.overrides_size(), 1);
  EXPECT_FALSE(policy.overrides(0).has_push_codec());
  EXPECT_EQ(CodecName(policy.overrides(0).pull_codec()), "nvfp4");
  EXPECT_FALSE(policy.transform().has_pull_codec());

  edit.tensor_glob.clear();
  edit.pull_codec.reset();
  edit.push_codec = nvfp4;
  ApplyPolicyEdit(edit, &policy);
  EXPECT_EQ(CodecName(policy.transform().push_codec()), "nvfp4");
  EXPECT_FALSE(policy.overrides(0).has_push_codec());
}

TEST(PolicyEditTest, RejectsOutOfRangeValuesAndGlobalOnlyFieldsInOverrides) {
  PolicyEdit edit;
  edit.powers = std::vector<double>{0.25, -1};
  EXPECT_TRUE(absl::IsInvalidArgument(ValidatePolicyEdit(edit)));
  edit = {};
  edit.ema_decay = 1.0;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidatePolicyEdit(edit)));
  edit = {};
  edit.tensor_glob = "x";
  edit.margin = 0.1;
  const absl::Status status = ValidatePolicyEdit(edit);
  EXPECT_TRUE(absl::IsInvalidArgument(status));
  EXPECT_NE(status.message().find("--margin"), absl::string_view::npos);
  edit = {};
  edit.enabled = true;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidatePolicyEdit(edit)));
  edit = {};
  edit.tensor_glob = "x";
  edit.hierarchy = gift::v1::HIERARCHY_NODE;  // the policy's, not a tensor's
  EXPECT_NE(ValidatePolicyEdit(edit).message().find("--hierarchy"), absl::string_view::npos);
}

TEST(PolicyEditTest, HierarchyAndAZeroDriftAreSetOnTheGlobalPolicy) {
  PolicyEdit edit;
  edit.hierarchy = gift::v1::HIERARCHY_NODE;
  edit.drift_threshold = 0.0;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  gift::v1::Policy policy;
  ApplyPolicyEdit(edit, &policy);
  EXPECT_EQ(policy.hierarchy(), gift::v1::HIERARCHY_NODE);
  ASSERT_TRUE(policy.refresh().has_drift_threshold()) << "0 must stay set, not read as unset";
  EXPECT_EQ(policy.refresh().drift_threshold(), 0.0);
}

TEST(PolicyEditTest, EnumNamesRoundTrip) {
  for (const char* name : {"both", "in", "out"}) EXPECT_EQ(SidesName(*ParseSides(name)), name);
  for (const char* name : {"gradients", "per-worker", "activations"}) {
    EXPECT_EQ(SourceName(*ParseSource(name)), name);
  }
  EXPECT_EQ(ResidualName(*ParseResidual("diagonal")), "diagonal");
  EXPECT_EQ(SelectionName(*ParseSelection("list")), "list");
  for (const char* name : {"none", "node"}) EXPECT_EQ(HierarchyName(*ParseHierarchy(name)), name);
  EXPECT_EQ(HierarchyName(gift::v1::HIERARCHY_UNSPECIFIED), "none");
  EXPECT_FALSE(ParseSides("left").ok());
  EXPECT_FALSE(ParseHierarchy("rack").ok());
}

TEST(GiftctlTest, UsageErrorsExit64WithAMessage) {
  EXPECT_EQ(RunArgs({}).code, kExitUsage);
  Result unknown = RunArgs({"frobnicate"});
  EXPECT_EQ(unknown.code, kExitUsage);
  EXPECT_FALSE(unknown.err.empty());
  Result bad_sides = RunArgs({"policy", "set", "--sides", "sideways"});
  EXPECT_EQ(bad_sides.code, kExitUsage);
  EXPECT_NE(bad_sides.err.find("both|in|out"), std::string::npos) << bad_sides.err;
  Result bad_codec = RunArgs({"policy", "set", "--push-codec", "e9m9"});
  EXPECT_EQ(bad_codec.code, kExitUsage);
  EXPECT_NE(bad_codec.err.find("--push-codec"), std::string::npos) << bad_codec.err;
  EXPECT_EQ(RunArgs({"policy", "set", "--period", "x"}).code, kExitUsage);
  Result bad_feedback = RunArgs({"policy", "set", "--error-feedback", "yes"});
  EXPECT_EQ(bad_feedback.code, kExitUsage);
  EXPECT_NE(bad_feedback.err.find("on or off"), std::string::npos) << bad_feedback.err;
  EXPECT_EQ(RunArgs({"policy"}).code, kExitUsage);
  EXPECT_EQ(RunArgs({"rank", "set"}).code, kExitUsage);
  EXPECT_EQ(RunArgs({"drain"}).code, kExitUsage);
}

TEST(GiftctlTest, HelpOnEverySubcommandExitsZero) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"--help"},
                                             {"status", "--help"},
                                             {"members", "--help"},
                                             {"tensors", "--help"},
                                             {"policy", "--help"},
                                             {"policy", "get", "--help"},
                                             {"policy", "set", "--help"},
                                             {"refresh", "--help"},
                                             {"rank", "set", "--help"},
                                             {"drain", "--help"}}) {
    Result r = RunArgs(args);
    EXPECT_EQ(r.code, kExitOk) << args.front();
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  }
  EXPECT_NE(RunArgs({"rank", "set", "--help"}).out.find("--tensor"), std::string::npos);
}

TEST(GiftctlTest, UnreachableCoordinatorExits69) {
  Result r = RunArgs({"--timeout", "2", "status"});
  EXPECT_EQ(r.code, kExitUnavailable) << r.err;
  EXPECT_NE(r.err.find("UNAVAILABLE"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:1"), std::string::npos) << r.err;
}

TEST(GiftctlTest, TimeoutTakesTheDaemonsDurationSyntax) {
  for (const char* timeout : {"2s", "500ms", "1m30s", "1.5"}) {
    Result r = RunArgs({"--timeout", timeout, "status"});
    EXPECT_EQ(r.code, kExitUnavailable) << timeout << ": " << r.err;
  }
  Result r = RunArgs({"--timeout", "2x", "status"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--timeout: '2x' is not a duration (e.g. 2s, 500ms, 1m30s)"),
            std::string::npos)
      << r.err;
  EXPECT_LT(r.err.size(), 200u) << r.err;  // no 300-digit range
  r = RunArgs({"--timeout", "0s", "status"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--timeout: must be positive, got '0s'"), std::string::npos) << r.err;
  r = RunArgs({"--timeout", "1e300", "status"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("'1e300' is too long a duration"), std::string::npos) << r.err;
}

TEST(GiftctlTest, PlaintextOnlyToLoopbackUnlessInsecure) {
  Result r = RunArgs({"--coordinator", "10.255.255.1:7070", "status"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("10.255.255.1:7070 is not loopback: give --cert, --key and --ca"),
            std::string::npos)
      << r.err;
  r = RunArgs({"--cert", "/nonexistent/op.crt", "--key", "/nonexistent/op.key", "--ca",
               "/nonexistent/ca.crt", "status"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--cert /nonexistent/op.crt"), std::string::npos) << r.err;
}

TEST(GiftctlTest, HealthOfAnUnreachableEndpointExits69) {
  Result r = RunArgs({"--timeout", "1s", "health", "127.0.0.1:1"});
  EXPECT_EQ(r.code, kExitUnavailable) << r.err;
  r = RunArgs({"--timeout", "1s", "health", "unix:/nonexistent/worker.sock"});
  EXPECT_EQ(r.code, kExitUnavailable) << r.err;
}

TEST(GiftctlTest, ExitCodesFollowTheStatus) {
  EXPECT_EQ(ExitCodeFor(absl::OkStatus()), kExitOk);
  EXPECT_EQ(ExitCodeFor(absl::UnavailableError("")), kExitUnavailable);
  EXPECT_EQ(ExitCodeFor(absl::DeadlineExceededError("")), kExitTempFail);
  EXPECT_EQ(ExitCodeFor(absl::AbortedError("")), kExitTempFail);
  EXPECT_EQ(ExitCodeFor(absl::ResourceExhaustedError("")), kExitTempFail);
  EXPECT_EQ(ExitCodeFor(absl::NotFoundError("")), kExitError);
  EXPECT_EQ(ExitCodeFor(absl::InvalidArgumentError("")), kExitError);
}

TEST(GiftctlTest, DefaultCoordinatorComesFromTheEnvironment) {
  setenv("GIFT_COORDINATOR", "10.0.0.1:9000", 1);
  EXPECT_EQ(DefaultCoordinator(), "10.0.0.1:9000");
  setenv("GIFT_COORDINATOR", "", 1);
  EXPECT_EQ(DefaultCoordinator(), "localhost:7070");
  unsetenv("GIFT_COORDINATOR");
  EXPECT_EQ(DefaultCoordinator(), "localhost:7070");
}

}  // namespace
}  // namespace gift::giftctl
