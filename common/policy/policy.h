// The refresh policy (gift.v1.Policy, proto/gift/v1/policy.proto): its
// defaults, its validation, tensor-name globs, and the settings that apply to
// one tensor once the per-tensor overrides are resolved. Shared by the
// coordinator (which validates and stores the policy) and the worker daemons
// (which apply it).
//
// Thread safety: stateless functions.
#ifndef GIFT_COMMON_POLICY_POLICY_H_
#define GIFT_COMMON_POLICY_POLICY_H_

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "gift/v1/policy.pb.h"

namespace gift::policy {

// The policy with every field left zero / UNSPECIFIED replaced by its default
// (the defaults stated in policy.proto). `version` and the overrides are kept
// as they are (an override's unset fields mean "keep the global value").
gift::v1::Policy WithDefaults(const gift::v1::Policy& policy);

// Bounds that need no knowledge of the tensors.
inline constexpr uint32_t kMaxRank = 65536;
inline constexpr uint32_t kMaxSteps = uint32_t{1} << 20;  // periods and leads
inline constexpr double kMaxGiftBudget = 100.0;           // selection.gift_budget
inline constexpr uint32_t kMaxRotationBlock = 256;        // transform.rotation_block
// transform.statistics_columns: the default and the largest.
inline constexpr uint32_t kDefaultStatisticsColumns = 128;
inline constexpr uint32_t kMaxStatisticsColumns = 1024;

// Whether `block` may be a transform.rotation_block other than 0 (off): a
// power of two in [2, kMaxRotationBlock].
inline bool IsRotationBlock(uint32_t block) {
  return block >= 2 && block <= kMaxRotationBlock && (block & (block - 1)) == 0;
}

// A step budget as an operator writes it (giftctl policy set --gift-budget,
// gift-bench cluster --gift-budget): "auto" (nullopt: leave
// selection.gift_budget unset, its default), "off" (0) or a fraction in [0,
// kMaxGiftBudget]. InvalidArgument quoting the text otherwise.
absl::StatusOr<std::optional<double>> ParseGiftBudget(absl::string_view text);

// Checks a policy after WithDefaults, without knowing the tensors: every
// number finite and in range (ranks in [1, kMaxRank], powers in (0, 1],
// periods and leads in [1, kMaxSteps]), enums known, codecs valid, globs
// non-empty, at most 1024 characters, no control characters. Fails with
// InvalidArgument naming the first offending field and its value, e.g.
// "transform.ema_decay = 1.5: must be in [0, 1)".
absl::Status Validate(const gift::v1::Policy& policy);

// A known tensor, for ValidateRanksForTensors.
struct NamedShape {
  absl::string_view name;
  absl::Span<const int64_t> shape;
};

// Checks the policy's explicit ranks against known tensors (after
// WithDefaults and Validate): a rank is clamped to the dimension of the sides
// it transforms, so one above that dimension for every transformable tensor
// it applies to (the global rank: all of them; an override's: those its glob
// matches) never takes effect and is a mistake. The default global rank and
// ranks that apply to no known tensor pass. InvalidArgument naming the field,
// its value and the largest rank that would take effect.
absl::Status ValidateRanksForTensors(const gift::v1::Policy& policy,
                                     absl::Span<const NamedShape> tensors);

// Whether `name` matches `glob`: '*' matches any run of characters (also
// empty, also across '.' and '/'), '?' exactly one; everything else matches
// itself. Linear in practice; worst case O(|glob| * |name|).
bool GlobMatch(absl::string_view glob, absl::string_view name);
// A glob a user gave (`field` names it in the message): not empty, at most
// 1,024 characters, valid UTF-8, no control characters, and none of '[', ']',
// '\\' (shell syntax GlobMatch does not have). InvalidArgument otherwise.
absl::Status ValidateGlob(absl::string_view field, const std::string& glob);

// How a tensor is chosen to be transformed.
enum class Selection {
  kDirect,     // never transformed: direct quantization
  kMeasure,    // transformed when the measurement says it pays (SELECTION_MODE_MEASURED)
  kTransform,  // always transformed
};

// The settings for one tensor: the global transform and refresh settings with
// the matching overrides applied in order (the last match wins field by
// field), and the selection. transform.push_codec / pull_codec are the
// tensor's codecs both ways: a worker encodes its pushes with push_codec and
// a server its results with pull_codec, each resolving them here.
struct TensorSettings {
  gift::v1::TransformPolicy transform;
  uint32_t period_steps = 0;
  Selection selection = Selection::kDirect;
  // A matching override named the push codec: the fidelity target
  // (selection.target) leaves the tensor's codecs as they are.
  bool push_codec_overridden = false;
};

// Whether a tensor of this shape can carry a basis at all: exactly two
// dimensions, both >= 2.
bool IsTransformable(absl::Span<const int64_t> shape);

// Resolves the settings of tensor `name` with `shape` under `policy` (which
// should have passed WithDefaults and Validate). Selection, in order: a tensor
// that is not transformable is direct; a matching override's `enabled`
// decides; a matching exclude glob makes it direct; SELECTION_MODE_LIST: an
// include match transforms it, anything else is direct;
// SELECTION_MODE_MEASURED: a non-empty include list it does not match, or
// fewer than selection.min_elements elements, make it direct; else measured.
// Codecs: the global ones for a transformable tensor, bf16 (or fp32 where the
// global codec is fp32) for one that is not; then a matching override's
// push_codec / pull_codec, the last match winning. A statistics tensor
// (statistics_tensor.h IsStatisticsTensorName) takes transform.
// statistics_codec both ways and no override. The per-worker sketches'
// columns (transform.statistics_columns): the global value, then a matching
// override's. The rotation block: the
// global one, then a matching override's; 0 when the shape's last dimension
// is not a multiple of it (that tensor is sent unrotated).
TensorSettings ResolveTensorSettings(const gift::v1::Policy& policy, absl::string_view name,
                                     absl::Span<const int64_t> shape);

}  // namespace gift::policy

#endif  // GIFT_COMMON_POLICY_POLICY_H_
