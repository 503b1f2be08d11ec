#include "common/transform/transform_selector.h"

#include <cmath>
#include <cstddef>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/base/finite.h"
#include "common/base/status_macros.h"
#include "common/codec/encoded_tensor.h"
#include "common/codec/reduce.h"

namespace gift::transform {
namespace {

absl::Status CheckInputs(absl::Span<const float* const> grads, int64_t d_out, int64_t d_in,
                         absl::Span<const SelectionCandidate> candidates,
                         const SelectorOptions& options) {
  if (d_out < 1 || d_in < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("SelectTransform: bad shape ", d_out, " x ", d_in));
  }
  if (!(options.margin >= 0.0 && options.margin < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("SelectTransform: margin ", options.margin, " is not in [0, 1)"));
  }
  if (options.min_elements < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SelectTransform: negative min_elements ", options.min_elements));
  }
  if (absl::Status s = codec::Validate(options.spec); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("SelectTransform: ", s.message()));
  }
  if (grads.empty()) return absl::InvalidArgumentError("SelectTransform: no gradients");
  if (grads.size() > std::numeric_limits<uint32_t>::max()) {
    return absl::InvalidArgumentError("SelectTransform: too many gradients");
  }
  const int64_t size = d_out * d_in;
  for (size_t w = 0; w < grads.size(); ++w) {
    const float* g = grads[w];
    if (g == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("SelectTransform: gradient ", w, " is null"));
    }
    if (const int64_t i = FirstNonFinite(g, size); i >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("SelectTransform: gradient ", w, " has a non-finite element at ", i));
    }
  }
  std::set<std::string> labels;
  for (size_t c = 0; c < candidates.size(); ++c) {
    const SelectionCandidate& candidate = candidates[c];
    if (candidate.label.empty() || candidate.label == kDirectLabel) {
      return absl::InvalidArgumentError(absl::StrCat("SelectTransform: candidate ", c,
                                                     " has an empty or reserved label '",
                                                     candidate.label, "'"));
    }
    if (!labels.insert(candidate.label).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("SelectTransform: duplicate candidate label '", candidate.label, "'"));
    }
    if (candidate.transform == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("SelectTransform: candidate '", candidate.label, "' has no transform"));
    }
    if (candidate.transform->d_out() != d_out || candidate.transform->d_in() != d_in) {
      return absl::InvalidArgumentError(
          absl::StrCat("SelectTransform: candidate '", candidate.label, "' has shape ",
                       candidate.transform->d_out(), " x ", candidate.transform->d_in(),
                       ", the tensor ", d_out, " x ", d_in));
    }
  }
  return absl::OkStatus();
}

absl::Status WithLabel(const absl::Status& status, absl::string_view label) {
  if (status.ok()) return status;
  return absl::Status(status.code(),
                      absl::StrCat("SelectTransform: candidate '", label, "': ", status.message()));
}

// The measurement of paths: each gradient through a transform (null:
// direct), encoded with a push spec, reduced with 1/P (and, with a pull spec,
// the average encoded with it and decoded), back through the inverse; the
// relative L2 error against `exact` (the FP64 average). A transform's
// forward runs once for all the codec pairs measured through it.
class Measurer {
 public:
  Measurer(absl::Span<const float* const> grads, int64_t d_out, int64_t d_in, uint64_t tensor_id,
           uint64_t step, const codec::CodecOptions& codec_options)
      : grads_(grads),
        d_out_(d_out),
        d_in_(d_in),
        tensor_id_(tensor_id),
        step_(step),
        codec_options_(codec_options),
        exact_(static_cast<size_t>(d_out * d_in), 0.0),
        average_(static_cast<size_t>(d_out * d_in)) {
    for (const float* g : grads_) {
      for (size_t i = 0; i < exact_.size(); ++i) exact_[i] += g[i];
    }
    const double inv = 1.0 / static_cast<double>(grads_.size());
    for (double& x : exact_) {
      x *= inv;
      exact_norm2_ += x * x;
    }
  }

  // The error of each pair through `transform`, in the order of `pairs`.
  absl::StatusOr<std::vector<double>> Measure(const GradientTransform* transform,
                                              absl::Span<const CodecPair> pairs) {
    const size_t size = exact_.size();
    std::vector<const float*> inputs(grads_.begin(), grads_.end());
    if (transform != nullptr) {
      forwarded_.resize(grads_.size() * size);
      for (size_t w = 0; w < grads_.size(); ++w) {
        float* out = forwarded_.data() + w * size;
        GIFT_RETURN_IF_ERROR(transform->Forward(grads_[w], d_out_, d_in_, out));
        inputs[w] = out;
      }
    }
    std::vector<double> errors;
    errors.reserve(pairs.size());
    for (const CodecPair& pair : pairs) {
      std::vector<codec::EncodedView> views;
      views.reserve(grads_.size());
      for (size_t w = 0; w < grads_.size(); ++w) {
        GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor * encoded, Encoded(pair.push, w));
        const codec::RngKey key{
            .tensor = tensor_id_, .step = step_, .rank = static_cast<uint32_t>(w)};
        GIFT_RETURN_IF_ERROR(
            codec::Encode(inputs[w], encoded->mutable_view(), key, codec_options_));
        views.push_back(encoded->view());
      }
      GIFT_RETURN_IF_ERROR(codec::ReduceEncoded(views, average_.data(),
                                                1.0f / static_cast<float>(grads_.size()),
                                                codec::MutableEncodedView{}, {}, codec_options_));
      if (pair.pull.has_value()) GIFT_RETURN_IF_ERROR(AddPullError(*pair.pull, inputs));
      if (transform != nullptr) {
        GIFT_RETURN_IF_ERROR(transform->Inverse(average_.data(), d_out_, d_in_, average_.data()));
      }
      errors.push_back(Error());
    }
    return errors;
  }

 private:
  // The pull's rounding, added to the pushed average in average_. A server
  // encodes the average of P pushes, which lies on no worker's grid; the
  // pushed average of few workers (P = 1: the owner's own gradient) lies on
  // the push codec's grid, where a pull in the same codec would round
  // nothing. So the pull's error is taken as the pull codec's error on the
  // exact average of the (transformed) inputs, an off-grid tensor of the
  // same distribution, drawn from the servers' stochastic stream
  // (RngKey{tensor, step, rank 0}).
  absl::Status AddPullError(const codec::CodecSpec& pull, absl::Span<const float* const> inputs) {
    const size_t size = exact_.size();
    exact_inputs_.assign(size, 0.0f);
    for (const float* x : inputs) {
      for (size_t i = 0; i < size; ++i) exact_inputs_[i] += x[i];
    }
    const float inv = 1.0f / static_cast<float>(inputs.size());
    for (float& x : exact_inputs_) x *= inv;
    GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor * encoded, Encoded(pull, inputs.size()));
    GIFT_RETURN_IF_ERROR(codec::Encode(exact_inputs_.data(), encoded->mutable_view(),
                                       {.tensor = tensor_id_, .step = step_, .rank = 0},
                                       codec_options_));
    pulled_.resize(size);
    GIFT_RETURN_IF_ERROR(codec::Decode(encoded->view(), pulled_.data(), codec_options_));
    for (size_t i = 0; i < size; ++i) average_[i] += pulled_[i] - exact_inputs_[i];
    return absl::OkStatus();
  }

  double Error() const {
    double err2 = 0.0;
    for (size_t i = 0; i < exact_.size(); ++i) {
      const double d = static_cast<double>(average_[i]) - exact_[i];
      err2 += d * d;
    }
    if (exact_norm2_ == 0.0) {
      return err2 == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
    }
    return std::sqrt(err2 / exact_norm2_);
  }

  // Slot `slot` (a worker, or grads_.size() for the pull) of `spec`'s
  // encoded tensors, made on first use.
  absl::StatusOr<codec::EncodedTensor*> Encoded(const codec::CodecSpec& spec, size_t slot) {
    std::vector<codec::EncodedTensor>& tensors = encoded_[codec::ToString(spec)];
    while (tensors.size() <= slot) {
      GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor t,
                            codec::EncodedTensor::Create(spec, d_out_, d_in_));
      tensors.push_back(std::move(t));
    }
    return &tensors[slot];
  }

  absl::Span<const float* const> grads_;
  int64_t d_out_;
  int64_t d_in_;
  uint64_t tensor_id_;
  uint64_t step_;
  const codec::CodecOptions& codec_options_;
  std::vector<double> exact_;
  double exact_norm2_ = 0.0;
  std::vector<float> forwarded_;
  std::vector<float> average_;
  std::vector<float> exact_inputs_;  // AddPullError's scratch
  std::vector<float> pulled_;
  std::map<std::string, std::vector<codec::EncodedTensor>> encoded_;  // by spec
};

}  // namespace

absl::string_view SelectionReasonName(SelectionReason reason) {
  switch (reason) {
    case SelectionReason::kMeasured:
      return "measured";
    case SelectionReason::kTooSmall:
      return "too_small";
    case SelectionReason::kOneDimensional:
      return "one_dimensional";
    case SelectionReason::kNoCandidateBeatMargin:
      return "no_candidate_beat_margin";
  }
  return "unknown";
}

absl::StatusOr<Selection> SelectTransform(absl::Span<const float* const> grads, int64_t d_out,
                                          int64_t d_in,
                                          absl::Span<const SelectionCandidate> candidates,
                                          const SelectorOptions& options) {
  GIFT_RETURN_IF_ERROR(CheckInputs(grads, d_out, d_in, candidates, options));
  Selection selection;
  if (d_out == 1 || d_in == 1) {
    selection.reason = SelectionReason::kOneDimensional;
    return selection;
  }
  if (d_out * d_in < options.min_elements) {
    selection.reason = SelectionReason::kTooSmall;
    return selection;
  }

  Measurer measurer(grads, d_out, d_in, options.tensor_id, options.step, options.codec_options);
  const CodecPair push_only[] = {{.push = options.spec}};
  GIFT_ASSIGN_OR_RETURN(const std::vector<double> direct, measurer.Measure(nullptr, push_only));
  const double direct_error = direct[0];
  selection.errors.push_back({std::string(kDirectLabel), direct_error});
  int best = -1;
  double best_error = 0.0;
  for (size_t c = 0; c < candidates.size(); ++c) {
    absl::StatusOr<std::vector<double>> measured =
        measurer.Measure(candidates[c].transform.get(), push_only);
    if (!measured.ok()) return WithLabel(measured.status(), candidates[c].label);
    const double* error = &(*measured)[0];
    selection.errors.push_back({candidates[c].label, *error});
    if (best < 0 || *error < best_error) {
      best = static_cast<int>(c);
      best_error = *error;
    }
  }
  selection.reason = SelectionReason::kNoCandidateBeatMargin;
  if (best >= 0 && best_error < direct_error &&
      best_error <= (1.0 - options.margin) * direct_error) {
    selection.chosen = candidates[best].label;
    selection.chosen_index = best;
    selection.reason = SelectionReason::kMeasured;
  }
  return selection;
}

}  // namespace gift::transform

namespace gift::transform {

absl::StatusOr<CodecPairErrors> MeasureCodecPairs(absl::Span<const float* const> grads,
                                                  int64_t d_out, int64_t d_in,
                                                  absl::Span<const SelectionCandidate> candidates,
                                                  absl::Span<const CodecPair> pairs,
                                                  const SelectorOptions& options) {
  GIFT_RETURN_IF_ERROR(CheckInputs(grads, d_out, d_in, candidates, options));
  if (pairs.empty()) return absl::InvalidArgumentError("MeasureCodecPairs: no codec pairs");
  for (const CodecPair& pair : pairs) {
    for (const codec::CodecSpec* spec : {&pair.push, pair.pull ? &*pair.pull : nullptr}) {
      if (spec == nullptr) continue;
      if (absl::Status s = codec::Validate(*spec); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("MeasureCodecPairs: ", s.message()));
      }
    }
  }
  Measurer measurer(grads, d_out, d_in, options.tensor_id, options.step, options.codec_options);
  CodecPairErrors out;
  GIFT_ASSIGN_OR_RETURN(std::vector<double> direct, measurer.Measure(nullptr, pairs));
  out.push_back(std::move(direct));
  for (const SelectionCandidate& candidate : candidates) {
    absl::StatusOr<std::vector<double>> measured =
        measurer.Measure(candidate.transform.get(), pairs);
    if (!measured.ok()) return WithLabel(measured.status(), candidate.label);
    out.push_back(*std::move(measured));
  }
  return out;
}

}  // namespace gift::transform
