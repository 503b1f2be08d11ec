// giftctl's library without a coordinator: policy edits, command-line
// errors, help, exit codes.
#include "tools/giftctl/giftctl.h"

#include <stdlib.h>

#include <sstream>

#include "common/codec/codec_spec.h"
#include "common/codec/codec_spec_proto.h"
#include "common/policy/policy.h"
#include "gtest/gtest.h"
#include "tools/giftctl/connection_flags.h"
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
  edit = {};
  edit.measure_period = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidatePolicyEdit(edit)));
  edit = {};
  edit.tensor_glob = "x";
  edit.statistics = gift::v1::STATISTICS_FORM_EXACT;
  EXPECT_NE(ValidatePolicyEdit(edit).message().find("--statistics"), absl::string_view::npos);
}

TEST(PolicyEditTest, GiftBudgetAutoOffOrAFraction) {
  EXPECT_EQ(*ParseGiftBudget("auto"), kAutoGiftBudget);
  EXPECT_EQ(*ParseGiftBudget("off"), 0.0);
  EXPECT_EQ(*ParseGiftBudget("0.1"), 0.1);
  for (const char* bad : {"-0.1", "101", "nan", "five", ""}) {
    EXPECT_TRUE(absl::IsInvalidArgument(ParseGiftBudget(bad).status())) << bad;
  }
  PolicyEdit edit;
  edit.gift_budget = 0.0;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  gift::v1::Policy policy;
  ApplyPolicyEdit(edit, &policy);
  ASSERT_TRUE(policy.selection().has_gift_budget()) << "0 (off) must stay set";
  EXPECT_EQ(GiftBudgetName(policy.selection().gift_budget()), "off");
  edit.gift_budget = kAutoGiftBudget;
  ApplyPolicyEdit(edit, &policy);
  EXPECT_FALSE(policy.selection().has_gift_budget());
  edit.tensor_glob = "x";
  EXPECT_NE(ValidatePolicyEdit(edit).message().find("--gift-budget"), absl::string_view::npos);
  edit.gift_budget.reset();
  edit.target = gift::v1::CodecSpec();  // off
  EXPECT_NE(ValidatePolicyEdit(edit).message().find("--target"), absl::string_view::npos);
}

TEST(PolicyEditTest, TargetSetsACodecOrTurnsTheTargetOff) {
  PolicyEdit edit;
  edit.target = codec::ToProto(codec::ParseCodecSpec("e5m2/block128").value());
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  gift::v1::Policy policy;
  policy.mutable_selection()->set_target_off(true);
  ApplyPolicyEdit(edit, &policy);
  EXPECT_FALSE(policy.selection().target_off());
  EXPECT_EQ(CodecName(policy.selection().target()), "e5m2/block128");
  edit.target = gift::v1::CodecSpec();  // off
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  ApplyPolicyEdit(edit, &policy);
  EXPECT_TRUE(policy.selection().target_off());
  EXPECT_FALSE(policy.selection().has_target());
  // Off survives the defaults; the coordinator accepts it.
  EXPECT_TRUE(policy::Validate(policy::WithDefaults(policy)).ok());
  EXPECT_TRUE(policy::WithDefaults(policy).selection().target_off());
}

TEST(PolicyEditTest, StatisticsAndPeriodsAreSetOnTheGlobalPolicy) {
  PolicyEdit edit;
  edit.statistics = gift::v1::STATISTICS_FORM_EXACT;
  edit.collect_period = 2;
  edit.measure_period = 8;
  edit.direct_collect_stride = 4;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  gift::v1::Policy policy;
  ApplyPolicyEdit(edit, &policy);
  EXPECT_EQ(policy.transform().statistics(), gift::v1::STATISTICS_FORM_EXACT);
  EXPECT_EQ(policy.transform().collect_period(), 2u);
  EXPECT_EQ(policy.refresh().measure_period(), 8u);
  EXPECT_EQ(policy.transform().direct_collect_stride(), 4u);
  edit.direct_collect_stride = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(ValidatePolicyEdit(edit)));
  edit.direct_collect_stride = 2;
  edit.tensor_glob = "x";
  EXPECT_NE(ValidatePolicyEdit(edit).message().find("--direct-collect-stride"),
            absl::string_view::npos);
}

TEST(PolicyEditTest, RotationBlockGlobalOrPerTensorAndItsText) {
  EXPECT_EQ(ParseRotationBlock("off").value(), 0u);
  EXPECT_EQ(ParseRotationBlock("16").value(), 16u);
  EXPECT_EQ(ParseRotationBlock("256").value(), 256u);
  for (const char* bad : {"24", "1", "512", "-16", "x", ""}) {
    const absl::Status s = ParseRotationBlock(bad).status();
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_NE(s.message().find("--rotation-block"), absl::string_view::npos) << bad;
  }
  EXPECT_EQ(RotationBlockName(0), "off");
  EXPECT_EQ(RotationBlockName(32), "32");

  PolicyEdit edit;
  edit.rotation_block = 32;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  gift::v1::Policy policy;
  ApplyPolicyEdit(edit, &policy);
  EXPECT_EQ(policy.transform().rotation_block(), 32u);
  edit.tensor_glob = "*.down";
  edit.rotation_block = 0;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  ApplyPolicyEdit(edit, &policy);
  ASSERT_EQ(policy.overrides_size(), 1);
  EXPECT_TRUE(policy.overrides(0).has_rotation_block());
  EXPECT_EQ(policy.overrides(0).rotation_block(), 0u);
  EXPECT_EQ(policy.transform().rotation_block(), 32u);
  edit.rotation_block = 24;  // not a power of two: the coordinator's rule, checked here
  EXPECT_TRUE(absl::IsInvalidArgument(ValidatePolicyEdit(edit)));
}

TEST(PolicyEditTest, StatisticsColumnsGlobalOrPerTensorWithinTheirBounds) {
  PolicyEdit edit;
  edit.statistics_columns = 96;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  gift::v1::Policy policy;
  ApplyPolicyEdit(edit, &policy);
  EXPECT_EQ(policy.transform().statistics_columns(), 96u);
  edit.tensor_glob = "*.attn.q";
  edit.statistics_columns = 64;
  ASSERT_TRUE(ValidatePolicyEdit(edit).ok());
  ApplyPolicyEdit(edit, &policy);
  ASSERT_EQ(policy.overrides_size(), 1);
  EXPECT_EQ(policy.overrides(0).statistics_columns(), 64u);
  EXPECT_EQ(policy.transform().statistics_columns(), 96u);
  PolicyEdit other;  // an override edit that leaves the columns alone
  other.tensor_glob = "*.attn.q";
  other.rank = 8;
  ApplyPolicyEdit(other, &policy);
  EXPECT_EQ(policy.overrides(0).statistics_columns(), 64u);
  for (uint32_t bad : {0u, 1025u}) {
    edit.statistics_columns = bad;
    const absl::Status s = ValidatePolicyEdit(edit);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_NE(s.message().find("--statistics-columns"), absl::string_view::npos) << s;
  }
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
  for (const char* name : {"gradients", "per-worker", "activations", "activations-per-worker"}) {
    EXPECT_EQ(SourceName(*ParseSource(name)), name);
  }
  EXPECT_EQ(ResidualName(*ParseResidual("diagonal")), "diagonal");
  EXPECT_EQ(SelectionName(*ParseSelection("list")), "list");
  for (const char* name : {"none", "node"}) EXPECT_EQ(HierarchyName(*ParseHierarchy(name)), name);
  EXPECT_EQ(HierarchyName(gift::v1::HIERARCHY_UNSPECIFIED), "none");
  for (const char* name : {"sketch", "exact"}) {
    EXPECT_EQ(StatisticsName(*ParseStatistics(name)), name);
  }
  EXPECT_EQ(StatisticsName(gift::v1::STATISTICS_FORM_UNSPECIFIED), "sketch");
  EXPECT_FALSE(ParseStatistics("dense").ok());
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

TEST(GiftctlTest, UnknownCommandsAreNamedWithTheCommandsCloseToThem) {
  Result r = RunArgs({"stauts"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("giftctl: unknown command 'stauts' (did you mean status?)"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("the commands are status, members, tensors"), std::string::npos) << r.err;
  // After global options, with and without an attached value.
  r = RunArgs({"--coordinator", "127.0.0.1:7070", "--timeout=2s", "--json", "membres"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("unknown command 'membres' (did you mean members?)"), std::string::npos)
      << r.err;
  // A subcommand's own commands.
  r = RunArgs({"policy", "gte"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("giftctl policy: unknown command 'gte' (did you mean get?)"),
            std::string::npos)
      << r.err;
  // Nothing close: the commands only.
  r = RunArgs({"frobnicate"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_EQ(r.err.find("did you mean"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("unknown command 'frobnicate'; the commands are"), std::string::npos)
      << r.err;
  // Arguments of known commands are not commands.
  EXPECT_EQ(RunArgs({"drain", "--help"}).code, kExitOk);
  EXPECT_EQ(RunArgs({"--timeout", "2s", "rank", "set", "--help"}).code, kExitOk);
}

TEST(GiftctlTest, AddressesToDialAreCheckedBeforeDialling) {
  EXPECT_TRUE(CheckDialTarget("localhost:7070").ok());
  EXPECT_TRUE(CheckDialTarget("[::1]:1").ok());
  EXPECT_TRUE(CheckDialTarget("127.0.0.1:65535").ok());
  EXPECT_TRUE(CheckDialTarget("unix:/run/gift/worker.sock").ok());
  for (const char* bad : {"127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:", "127.0.0.1",
                          "127.0.0.1:70a", "127.0.0.1:-1", ":7070", "unix:", "127.0.0.1:007070"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(CheckDialTarget(bad))) << bad;
  }
  Result r = RunArgs({"--coordinator", "127.0.0.1:99999", "status"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--coordinator '127.0.0.1:99999': the port '99999' is not a number in "
                       "1-65535"),
            std::string::npos)
      << r.err;
  r = RunArgs({"--coordinator", "127.0.0.1", "status"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("has no port"), std::string::npos) << r.err;
  r = RunArgs({"health", "127.0.0.1:0"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("health TARGET '127.0.0.1:0'"), std::string::npos) << r.err;
}

TEST(GiftctlTest, TheCoordinatorsBoundsAreUsageErrorsBeforeAnythingIsSent) {
  // 127.0.0.1:1 answers nothing: exit 64 means giftctl refused before dialling.
  Result r = RunArgs({"policy", "set", "--period", "4000000000"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--period must be in [1, 1048576]"), std::string::npos) << r.err;
  r = RunArgs({"policy", "set", "--rank", "70000"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--rank must be in [1, 65536]"), std::string::npos) << r.err;
  EXPECT_EQ(RunArgs({"rank", "set", "100000"}).code, kExitUsage);
  EXPECT_EQ(RunArgs({"rank", "set", "0"}).code, kExitUsage);
  // A rule giftctl has no flag check of its own for: the coordinator's, via
  // policy::Validate.
  r = RunArgs({"policy", "set", "--power", "2"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("the coordinator would refuse this policy: transform.powers[0] = 2: must "
                       "be in (0, 1]"),
            std::string::npos)
      << r.err;
  // Shell glob syntax the matcher does not have ('[' would match itself).
  r = RunArgs({"policy", "set", "--tensor", "[", "--enabled", "false"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("'[', ']' and '\\' are not supported"), std::string::npos) << r.err;
  r = RunArgs({"refresh", "--tensor", "layers.[0-3].w"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("giftctl refresh: --tensor = layers.[0-3].w"), std::string::npos) << r.err;
  EXPECT_EQ(RunArgs({"rank", "set", "8", "--tensor", "a\\b"}).code, kExitUsage);
  // Not UTF-8: protobuf could not carry it (a proto3 string).
  r = RunArgs({"policy", "set", "--tensor", "layer\xff.w", "--enabled", "false"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("a glob must be valid UTF-8"), std::string::npos) << r.err;
  // In range: giftctl dials (and finds nothing there).
  EXPECT_EQ(RunArgs({"--timeout", "1s", "policy", "set", "--period", "1048576"}).code,
            kExitUnavailable);
  EXPECT_EQ(RunArgs({"--timeout", "1s", "rank", "set", "65536"}).code, kExitUnavailable);
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
