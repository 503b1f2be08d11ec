#include "worker/owner/wire_choice.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/codec/codec_spec_proto.h"
#include "common/codec/payload.h"
#include "common/transform/fidelity_target.h"

namespace gift::worker {

absl::StatusOr<std::vector<transform::CodecPair>> TargetPairs(
    const gift::v1::Policy& policy, const policy::TensorSettings& settings) {
  GIFT_ASSIGN_OR_RETURN(codec::CodecSpec target, codec::FromProto(policy.selection().target()));
  GIFT_ASSIGN_OR_RETURN(codec::CodecSpec pull, codec::FromProto(settings.transform.pull_codec()));
  std::vector<transform::CodecPair> pairs = {{.push = target, .pull = pull}};
  for (const gift::v1::CodecSpec& proto : policy.selection().target_codecs()) {
    GIFT_ASSIGN_OR_RETURN(codec::CodecSpec c, codec::FromProto(proto));
    if (c == target) continue;
    pairs.push_back({.push = c, .pull = pull});
    if (!(c == pull)) pairs.push_back({.push = c, .pull = c});
  }
  return pairs;
}

std::string PairLabel(const transform::CodecPair& pair) {
  return absl::StrCat(codec::ToString(pair.push), " / ",
                      pair.pull.has_value() ? codec::ToString(*pair.pull) : "f32");
}

absl::StatusOr<transform::CodecPairErrors> MeasureOwnGradient(
    const WireInputs& in, absl::Span<const transform::SelectionCandidate> paths,
    absl::Span<const transform::CodecPair> pairs) {
  if (pairs.empty()) return absl::InvalidArgumentError("no codec pairs to measure");
  const float* grads[] = {in.own};
  return transform::MeasureCodecPairs(grads, static_cast<int64_t>(in.rows),
                                      static_cast<int64_t>(in.cols), paths, pairs,
                                      {.spec = pairs[0].push,
                                       .margin = 0.0,
                                       .min_elements = 0,
                                       .tensor_id = in.tensor_id,
                                       .step = in.step,
                                       .codec_options = in.codec_options});
}

absl::StatusOr<WireChoice> ChooseWire(absl::Span<const transform::CodecPair> pairs,
                                      absl::Span<const WireCandidate> candidates,
                                      const WireInputs& in) {
  if (pairs.empty()) return absl::InvalidArgumentError("ChooseWire: no codec pairs");
  std::vector<transform::SelectionCandidate> paths;
  for (const WireCandidate& c : candidates) {
    paths.push_back({.label = c.label, .transform = c.basis});
  }
  GIFT_ASSIGN_OR_RETURN(transform::CodecPairErrors errors, MeasureOwnGradient(in, paths, pairs));
  const uint64_t dims[] = {in.rows, in.cols};
  std::vector<transform::WireOption> options;
  std::vector<std::pair<int, int>> index;  // (pair, candidate) of each option
  for (size_t p = 0; p < pairs.size(); ++p) {
    GIFT_ASSIGN_OR_RETURN(const uint64_t push, codec::PayloadSizeFor(pairs[p].push, dims));
    uint64_t pull = 4 * in.rows * in.cols;
    if (pairs[p].pull.has_value()) {
      GIFT_ASSIGN_OR_RETURN(pull, codec::PayloadSizeFor(*pairs[p].pull, dims));
    }
    for (int c = -1; c < static_cast<int>(candidates.size()); ++c) {
      const bool direct = c < 0;
      const uint32_t stats_period =
          in.collect_period * (direct ? std::max<uint32_t>(in.direct_collect_stride, 1) : 1);
      options.push_back({.error = errors[c + 1][p],
                         .bytes_per_step = transform::WireBytesPerStep(
                             push, pull, in.statistics_bytes, stats_period,
                             direct ? 0 : candidates[c].basis_bytes, in.refresh_period),
                         .compute_seconds = direct ? 0.0 : candidates[c].compute_seconds});
      index.emplace_back(static_cast<int>(p), c);
    }
  }
  // An error that is not finite (an all-zero gradient) cannot be compared:
  // such a tensor stays at the target.
  WireChoice out{.codecs = pairs[0],
                 .error = options[0].error,
                 .bytes_per_step = options[0].bytes_per_step,
                 .target_error = options[0].error,
                 .target_bytes_per_step = options[0].bytes_per_step};
  for (transform::WireOption& o : options) {
    if (!std::isfinite(o.error)) o.error = std::numeric_limits<double>::max();
  }
  out.cheaper_gap = std::numeric_limits<double>::infinity();
  if (!std::isfinite(out.target_error)) return out;
  for (const transform::WireOption& o : options) {
    if (o.bytes_per_step < out.target_bytes_per_step && out.target_error > 0) {
      out.cheaper_gap = std::min(out.cheaper_gap, o.error / out.target_error);
    }
  }
  GIFT_ASSIGN_OR_RETURN(const int chosen,
                        transform::ChooseWireOption(options, out.target_error, in.compute_budget));
  if (chosen < 0) return out;
  out.pair = index[chosen].first;
  out.candidate = index[chosen].second;
  out.codecs = pairs[out.pair];
  out.error = options[chosen].error;
  out.bytes_per_step = options[chosen].bytes_per_step;
  return out;
}

}  // namespace gift::worker
