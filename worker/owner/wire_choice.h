// A basis owner's choice of how one tensor travels under the policy's
// fidelity target (selection.target, docs/design.md section 3.7): which
// codecs both ways, direct or through one of the refresh's bases.
//
// The pairs measured (TargetPairs): the target pair first, (target, the
// tensor's resolved pull codec); then for every other codec c of
// selection.target_codecs, (c, that pull codec) and, when c differs from
// it, (c, c). Each pair is measured on this worker's own gradient of the
// refresh step, direct and through every candidate basis
// (transform_selector.h MeasureCodecPairs, push and pull), and costed in
// wire bytes per step (fidelity_target.h WireBytesPerStep): push and pull
// payloads; the tensor's per-worker statistics (pushed and pulled in the
// policy's statistics codec on collect steps, policy::StatisticsWireBytes;
// a direct option's at the direct collect stride); the basis
// bytes every worker fetches per refresh. A basis costs its forward and
// inverse transform (TransformBudget::TransformFlops at the measured rate).
// ChooseWireOption picks; the target pair direct is always eligible.
//
// Thread safety: a pure function of its inputs (the candidates' transforms
// are immutable).
#ifndef GIFT_WORKER_OWNER_WIRE_CHOICE_H_
#define GIFT_WORKER_OWNER_WIRE_CHOICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/policy/policy.h"
#include "common/transform/tensor_basis_transform.h"
#include "common/transform/transform_selector.h"
#include "gift/v1/policy.pb.h"

namespace gift::worker {

// The pairs above, target first. InvalidArgument on a codec that does not
// parse. The policy must have passed policy::WithDefaults with the target on.
absl::StatusOr<std::vector<transform::CodecPair>> TargetPairs(
    const gift::v1::Policy& policy, const policy::TensorSettings& settings);

// "push/pull" in codec spec syntax, e.g. "nvfp4 / e4m3/block128/rne".
std::string PairLabel(const transform::CodecPair& pair);

struct WireCandidate {
  std::shared_ptr<const transform::TensorBasisTransform> basis;  // non-null
  std::string label;                                             // e.g. "p=0.25 r=64"
  uint64_t basis_bytes = 0;                                      // serialized size
  double compute_seconds = 0.0;                                  // per step, >= 0
};

struct WireInputs {
  const float* own = nullptr;  // rows x cols, this worker's gradient
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t tensor_id = 0;
  uint64_t step = 0;
  // Per-worker statistics bytes per collect step, both ways (0 when the
  // source sends none), the collect period and the direct collect stride.
  uint64_t statistics_bytes = 0;
  uint32_t collect_period = 1;
  uint32_t direct_collect_stride = 1;
  uint32_t refresh_period = 1;
  double compute_budget = 0.0;  // seconds per step a basis may cost (+inf: any)
  codec::CodecOptions codec_options = {};
};

struct WireChoice {
  int pair = 0;        // index into the pairs; 0: the target pair
  int candidate = -1;  // index into the candidates; -1: direct
  transform::CodecPair codecs;
  double error = 0.0;           // the chosen option's measured error
  double bytes_per_step = 0.0;  // and its wire bytes per step
  double target_error = 0.0;    // the target pair direct
  double target_bytes_per_step = 0.0;
  // How far the options that travel in fewer bytes than the target's are
  // from its error: the least of their error / target_error (+inf when
  // there are none or the target error is 0).
  double cheaper_gap = 0.0;
};

// The errors of `pairs` on in.own (P = 1), direct and through each of
// `paths` (transform_selector.h MeasureCodecPairs, keyed by in.tensor_id and
// in.step).
absl::StatusOr<transform::CodecPairErrors> MeasureOwnGradient(
    const WireInputs& in, absl::Span<const transform::SelectionCandidate> paths,
    absl::Span<const transform::CodecPair> pairs);

absl::StatusOr<WireChoice> ChooseWire(absl::Span<const transform::CodecPair> pairs,
                                      absl::Span<const WireCandidate> candidates,
                                      const WireInputs& in);

}  // namespace gift::worker

#endif  // GIFT_WORKER_OWNER_WIRE_CHOICE_H_
