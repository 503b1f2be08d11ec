// Fuzzes the refresh policy (common/policy/policy.h) as the coordinator
// receives it: WithDefaults and Validate of any gift.v1.Policy, and, for a
// policy that validates, ResolveTensorSettings and GlobMatch over fuzzed
// tensor names, shapes and globs. Input: a gift.fuzz.PolicyInput
// (fuzz_inputs.proto). WithDefaults must be idempotent.
#include <string>

#include "common/policy/policy.h"
#include "tests/fuzz/fuzz_input.h"
#include "tests/fuzz/fuzz_inputs.pb.h"

namespace {
constexpr int kMaxQueries = 32;
constexpr size_t kMaxGlobMatchWork = 1 << 20;  // |glob| * |name|, the stated worst case
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  gift::fuzz::PolicyInput input;
  if (!input.ParseFromArray(data, static_cast<int>(size))) return 0;
  const gift::v1::Policy policy = gift::policy::WithDefaults(input.policy());
  const gift::v1::Policy twice = gift::policy::WithDefaults(policy);
  if (twice.SerializeAsString() != policy.SerializeAsString()) {
    gift::fuzz::Fail("WithDefaults is not idempotent");
  }
  const bool valid = gift::policy::Validate(policy).ok();
  int n = 0;
  for (const gift::fuzz::PolicyQuery& q : input.queries()) {
    if (++n > kMaxQueries) break;
    if (q.glob().size() * q.name().size() <= kMaxGlobMatchWork) {
      (void)gift::policy::GlobMatch(q.glob(), q.name());
      if (q.name().find_first_of("*?") == std::string::npos &&
          !gift::policy::GlobMatch(q.name(), q.name())) {
        gift::fuzz::Fail("a name without wildcards does not match itself");
      }
    }
    if (!valid) continue;
    const std::vector<int64_t> shape(q.shape().begin(), q.shape().end());
    (void)gift::policy::IsTransformable(shape);
    (void)gift::policy::ResolveTensorSettings(policy, q.name(), shape);
  }
  return 0;
}
