#include "common/transform/transform_selector.h"

#include <cmath>
#include <cstddef>
#include <limits>
#include <set>
#include <utility>

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

// The measurement of one path: each gradient through `transform` (null:
// direct), encoded with the spec, reduced with 1/P, back through the inverse;
// the relative L2 error against `exact` (the FP64 average).
class Measurer {
 public:
  Measurer(absl::Span<const float* const> grads, int64_t d_out, int64_t d_in,
           const SelectorOptions& options)
      : grads_(grads),
        d_out_(d_out),
        d_in_(d_in),
        options_(options),
        exact_(static_cast<size_t>(d_out * d_in), 0.0),
        scratch_(static_cast<size_t>(d_out * d_in)),
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

  absl::Status Init() {
    for (size_t w = 0; w < grads_.size(); ++w) {
      GIFT_ASSIGN_OR_RETURN(codec::EncodedTensor t,
                            codec::EncodedTensor::Create(options_.spec, d_out_, d_in_));
      encoded_.push_back(std::move(t));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<double> Measure(const GradientTransform* transform) {
    std::vector<codec::EncodedView> views;
    views.reserve(encoded_.size());
    for (size_t w = 0; w < grads_.size(); ++w) {
      const float* x = grads_[w];
      if (transform != nullptr) {
        GIFT_RETURN_IF_ERROR(transform->Forward(x, d_out_, d_in_, scratch_.data()));
        x = scratch_.data();
      }
      const codec::RngKey key{
          .tensor = options_.tensor_id, .step = options_.step, .rank = static_cast<uint32_t>(w)};
      GIFT_RETURN_IF_ERROR(
          codec::Encode(x, encoded_[w].mutable_view(), key, options_.codec_options));
      views.push_back(encoded_[w].view());
    }
    GIFT_RETURN_IF_ERROR(
        codec::ReduceEncoded(views, average_.data(), 1.0f / static_cast<float>(grads_.size()),
                             codec::MutableEncodedView{}, {}, options_.codec_options));
    if (transform != nullptr) {
      GIFT_RETURN_IF_ERROR(transform->Inverse(average_.data(), d_out_, d_in_, average_.data()));
    }
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

 private:
  absl::Span<const float* const> grads_;
  int64_t d_out_;
  int64_t d_in_;
  const SelectorOptions& options_;
  std::vector<double> exact_;
  double exact_norm2_ = 0.0;
  std::vector<float> scratch_;
  std::vector<float> average_;
  std::vector<codec::EncodedTensor> encoded_;
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

  Measurer measurer(grads, d_out, d_in, options);
  GIFT_RETURN_IF_ERROR(measurer.Init());
  GIFT_ASSIGN_OR_RETURN(const double direct_error, measurer.Measure(nullptr));
  selection.errors.push_back({std::string(kDirectLabel), direct_error});
  int best = -1;
  double best_error = 0.0;
  for (size_t c = 0; c < candidates.size(); ++c) {
    absl::StatusOr<double> error = measurer.Measure(candidates[c].transform.get());
    if (!error.ok()) return WithLabel(error.status(), candidates[c].label);
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
