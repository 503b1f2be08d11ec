// Per-tensor selection of a transform by measurement: the basis owner of a
// tensor compares, on sample gradients of that tensor, the error of the
// quantized average with direct quantization against the error through each
// candidate transform, and enables the best candidate only where it beats
// direct by a margin.
//
// The measured quantity, for direct quantization and for each candidate T,
// given P worker gradients G_0 .. G_{P-1} (d_out x d_in, row-major FP32):
//
//   avg_q = T^{-1}(ReduceEncoded({Q_w(T(G_w))}, post_scale = 1/P))
//   error = ||avg_q - avg|| / ||avg||,   avg = (1/P) sum_w G_w  (exact, FP64)
//
// with Q_w the codec of `spec` keyed RngKey{tensor_id, step, rank = w}
// (direct quantization is T = identity). The error is the relative L2
// (Frobenius) error; it is 0 when avg_q equals avg, and +inf when avg is all
// zero but avg_q is not.
//
// Decision: tensors with d_out == 1 or d_in == 1, or with fewer than
// `min_elements` elements, go direct without measuring. Otherwise the
// candidate with the lowest error (the first one on ties) is chosen when
//   error < direct_error  and  error <= (1 - margin) * direct_error,
// else direct.
//
//   auto selection = SelectTransform(grads, d_out, d_in,
//                                    {{"tb(both,p=0.25)", basis_transform}},
//                                    {.spec = spec});
//   if (selection->chosen_index >= 0) use candidates[chosen_index].transform;
//
// Thread safety: SelectTransform is a stateless, reentrant function; the
// candidates' transforms are immutable (gradient_transform.h), so one
// candidate list may be shared by concurrent calls.
#ifndef GIFT_COMMON_TRANSFORM_TRANSFORM_SELECTOR_H_
#define GIFT_COMMON_TRANSFORM_TRANSFORM_SELECTOR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/codec/codec.h"
#include "common/codec/codec_spec.h"
#include "common/transform/gradient_transform.h"

namespace gift::transform {

// The label of direct quantization in a Selection; no candidate may use it.
inline constexpr absl::string_view kDirectLabel = "direct";

struct SelectionCandidate {
  std::string label;  // non-empty, unique in the list, not kDirectLabel
  std::shared_ptr<const GradientTransform> transform;  // non-null, the tensor's shape
};

struct SelectorOptions {
  codec::CodecSpec spec;  // the codec the tensor will be sent with
  // A candidate must lower the error by at least this fraction of direct's
  // error; in [0, 1).
  double margin = 0.1;
  // Tensors with fewer elements go direct without measuring; >= 0.
  int64_t min_elements = 4096;
  // The stochastic-rounding key of the measurement: RngKey{tensor_id, step,
  // rank = worker index}.
  uint64_t tensor_id = 0;
  uint64_t step = 0;
  codec::CodecOptions codec_options = {};  // the pool is not owned
};

// Why a Selection chose what it chose. Values may be logged; never renumber.
enum class SelectionReason : uint8_t {
  kMeasured = 0,               // a candidate beat direct by the margin
  kTooSmall = 1,               // fewer than min_elements elements; not measured
  kOneDimensional = 2,         // d_out == 1 or d_in == 1; not measured
  kNoCandidateBeatMargin = 3,  // measured; direct kept (also with no candidates)
};

// "measured", "too_small", "one_dimensional", "no_candidate_beat_margin".
absl::string_view SelectionReasonName(SelectionReason reason);

struct MeasuredError {
  std::string label;  // kDirectLabel or a candidate's label
  double rel_l2 = 0.0;
};

struct Selection {
  std::string chosen = std::string(kDirectLabel);  // kDirectLabel or a candidate's label
  int chosen_index = -1;                           // index into the candidates; -1 for direct
  SelectionReason reason = SelectionReason::kNoCandidateBeatMargin;
  // Empty when not measured; else direct first, then the candidates in the
  // order given.
  std::vector<MeasuredError> errors;

  bool measured() const { return !errors.empty(); }
};

// Measures and decides as described above. `grads` holds P >= 1 pointers to
// d_out x d_in floats each. Fails with InvalidArgument on: d_out or d_in < 1;
// no gradients or a null one; a non-finite gradient element; an invalid spec,
// margin or min_elements; a candidate with a null transform, a shape other
// than d_out x d_in, or an empty, duplicate or reserved label. These are
// checked whether or not the tensor is measured. Errors of a candidate's
// Forward / Inverse (e.g. OutOfRange on an FP32 overflow) are returned with
// the candidate's label prepended.
absl::StatusOr<Selection> SelectTransform(absl::Span<const float* const> grads, int64_t d_out,
                                          int64_t d_in,
                                          absl::Span<const SelectionCandidate> candidates,
                                          const SelectorOptions& options);

// A way to encode the measured tensor: the workers' push codec and, when
// set, the servers' pull codec; unset: the average in FP32. The pull's
// error is modelled, not replayed: the pushed average lies on the push
// codec's grid when few workers are measured (the owner measures its own
// gradient alone), where a pull in the same codec would round nothing,
// while a server's average of many workers lies on no grid. So the pull
// codec's error on the exact average of the (transformed) gradients is
// added to the pushed average before the inverse.
struct CodecPair {
  codec::CodecSpec push;
  std::optional<codec::CodecSpec> pull;
};

// errors[t][c]: the relative L2 error of pair c through path t, t = 0 direct,
// then the candidates in the order given.
using CodecPairErrors = std::vector<std::vector<double>>;

// Measures every (path, codec pair) as above, whatever the shape or
// min_elements (options.spec, .margin and .min_elements are checked but not
// used). Each candidate's forward runs once for all pairs. The result's
// stochastic rounding draws RngKey{tensor_id, step, rank = w} for worker w's
// push and RngKey{tensor_id, step, 0} for the pull. Errors as
// SelectTransform, and InvalidArgument for no pairs or an invalid codec of
// one.
absl::StatusOr<CodecPairErrors> MeasureCodecPairs(absl::Span<const float* const> grads,
                                                  int64_t d_out, int64_t d_in,
                                                  absl::Span<const SelectionCandidate> candidates,
                                                  absl::Span<const CodecPair> pairs,
                                                  const SelectorOptions& options);

}  // namespace gift::transform

#endif  // GIFT_COMMON_TRANSFORM_TRANSFORM_SELECTOR_H_
