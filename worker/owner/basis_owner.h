// The basis-owner duties of a worker for the tensors the coordinator assigns
// it (TensorBasisState.owner_member_id): keep each tensor's statistics from
// its geometry source (tensor_geometry.h), refresh its basis on the policy's
// schedule (refresh_schedule.h), choose by measurement between the candidate
// powers and direct quantization (transform_selector.h), and publish the
// result as a new version through the coordinator, which negotiates its
// activation step with every worker.
//
//   BasisOwner owner(session, store, {});
//   // after each completed step, for a tensor this member owns:
//   if (owner.WantsStep(state, tensor, step)) owner.Observe({...});
//
// Sources: kGradients (the reduced gradient of collect steps),
// kPerWorkerGradients (the servers' average of the workers' sketches of
// collect steps, exchanged by the daemon: sketch_exchange.h) and
// kActivations (X^T X / N handed in through SubmitActivationStats, output
// side from the reduced gradient) and kActivationsPerWorker (input side as
// kActivations, output side from the workers' sketches).
//
// Bounded work: a refresh builds one basis per candidate power, each of a
// rank clamped to the tensor's dimensions (the coordinator also refuses
// ranks no tensor can use), and stops between those pieces once
// options.cancelled says so (SIGTERM), so a shutdown waits for at most one.
//
// Measurement: the selection compares, on this worker's own gradient of the
// refresh step (P = 1), the quantization error through each candidate with
// direct quantization. On every measure step after that (multiples of the
// policy's refresh.measure_period, default 4; none with drift disabled),
// while its last refresh published a basis (the one in use once active), it
// measures that basis again on its own gradient of the step (one encode /
// decode through the basis and one direct, with the push codec).
//
// Step budget: for a tensor under measured selection (not one that is always
// transformed) with policy selection.gift_budget > 0, a refresh whose
// measurement chose a basis also measures that power at ranks 8, 16 and 32
// (below the policy's rank), times one forward and inverse transform on
// this worker, and chooses by error removed per second among all the
// owner's tensors' latest measurements, within the owner's share of the
// budget (worker/owner/transform_budget.h): the basis at a lower rank, or direct. The first such
// ratio of a basis is its drift reference (out of sample; the selection's ratio on the refresh step
// is optimistic: the statistics include that gradient), so a change of geometry between a refresh
// and its activation step is still seen as drift; a later one above reference * (1 +
// drift_threshold), or >= 1, refreshes early (kDrift, refresh_schedule.h). error_ratios() holds the
// latest measurement per tensor, for metrics and the coordinator.
//
// Fidelity target (policy selection.target, docs/design.md section 3.7): for
// a tensor under measured selection whose push codec no override names, a
// refresh also measures the target's codec pairs direct and through its
// candidate bases (wire_choice.h) and, when a pair other than the target's
// travels in fewer bytes within the target's error, publishes the version
// with those codecs (BasisVersion.push_codec / pull_codec). Its measure
// steps then check that choice against the target and publish the target
// codecs, direct, at once when it is above.
//
// Ownership: does not own the session or the store (both must outlive it).
// Thread safety: WantsStep may run on any thread, concurrently with the
// rest (it reads a copy of each tensor's schedule that Observe and
// AddActivationFactor update under a lock when they return); every other
// method from one thread at a time (the daemon's owner thread).
#ifndef GIFT_WORKER_OWNER_BASIS_OWNER_H_
#define GIFT_WORKER_OWNER_BASIS_OWNER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/codec/codec.h"
#include "common/control/member_session.h"
#include "common/policy/policy.h"
#include "common/transform/refresh_schedule.h"
#include "common/transform/tensor_basis_transform.h"
#include "common/transform/tensor_geometry.h"
#include "gift/v1/cluster.pb.h"
#include "worker/owner/basis_store.h"
#include "worker/owner/transform_budget.h"
#include "worker/owner/wire_choice.h"

namespace gift::worker {

inline constexpr int64_t kMaxTargetBackoff = 32;
inline constexpr double kTargetBackoffGap = 1.1;

struct BasisOwnerOptions {
  codec::CodecOptions codec_options = {};  // the pool is not owned
  // Called for every publication: tensor, version, "direct" or the chosen
  // candidate, the reason, and the measured ratio (GIFT / direct; 1 when
  // direct was chosen, absent when not measured).
  std::function<void(uint64_t tensor_id, uint64_t version, const std::string& chosen,
                     transform::RefreshReason reason, std::optional<double> ratio)>
      on_publish;
  // Called for an error of one tensor's duties (they continue next step).
  std::function<void(uint64_t tensor_id, const absl::Status& error)> on_error;
  // Whether the daemon is shutting down: a refresh checks it before each
  // candidate basis it builds, before the measurement and before publishing,
  // and gives up (Cancelled, nothing published) once it is true. Unset: never.
  // Called from the thread that calls Observe.
  std::function<bool()> cancelled;
};

// One step's data for one owned tensor.
struct OwnedTensorStep {
  uint64_t step = 0;
  uint64_t tensor_id = 0;
  std::string name;
  uint64_t rows = 0;
  uint64_t cols = 0;
  std::vector<float> average;  // the reduced gradient of the step
  // This worker's gradient: on refresh steps, and on collect steps when
  // WantsStep said needs_own (the drift measurement).
  std::vector<float> own;
  // The per-worker sources, collect steps: the servers' average of the
  // workers' sketch contributions (TensorGeometry::PerWorkerContribution
  // layout); empty when the step's sketch exchange did not complete.
  std::vector<float> sketch;
  // The step's wall time on this worker (0: unknown), for the step budget.
  double step_seconds = 0.0;
};

class BasisOwner {
 public:
  BasisOwner(const control::MemberSession* session, BasisStore* store, BasisOwnerOptions options)
      : session_(session), store_(store), options_(std::move(options)) {}

  // Whether this member owns `tensor` in `state` and the step is a collect
  // or refresh step for it (then Observe wants its average); `needs_own`
  // says whether it also wants this worker's gradient from before the step.
  bool WantsStep(const gift::v1::ClusterState& state, const gift::v1::TensorInfo& tensor,
                 uint64_t step, bool* needs_own) const;

  // Folds in the step's statistics and refreshes when due.
  absl::Status Observe(const gift::v1::ClusterState& state, const OwnedTensorStep& data);

  // X^T X / N of the layer's inputs (d_in x d_in) for a tensor whose source
  // is activations; ignored (OK) when this member does not own it or the
  // source differs.
  absl::Status AddActivationFactor(const gift::v1::ClusterState& state, uint64_t tensor_id,
                                   const std::vector<float>& gram, uint64_t num_samples);

  uint64_t publications() const { return publications_; }

  // The latest error ratio of every owned tensor that has one (measured on a
  // measure step, or at its last refresh), by tensor id.
  std::vector<gift::v1::TensorErrorRatio> error_ratios() const;

 private:
  struct Owned {
    std::string settings_key;  // the resolved settings the state below was built for
    policy::TensorSettings settings;
    std::optional<transform::TensorGeometry> geometry;
    std::optional<transform::RefreshSchedule> schedule;
    std::optional<double> ratio;  // measured at the last refresh
    // The transformed version the last refresh published (0: none or
    // direct), which the drift measurement uses.
    uint64_t reference_version = 0;
    std::optional<gift::v1::TensorErrorRatio> report;  // the latest ratio
    std::string choice;  // the last refresh's Choice::label (its report's choice)
    // The last refresh's choice under the fidelity target when it is not the
    // target codecs (then measure steps check it against the target).
    std::optional<WireChoice> wire;
    // The refresh back-off under the target (RefreshSchedule::MarkRefreshed),
    // doubles, up to kMaxTargetBackoff, with each refresh that keeps the
    // tensor direct in the target codecs while every cheaper way measured at
    // least kTargetBackoffGap times the target's error; 1 otherwise.
    int64_t backoff = 1;
  };

  // What WantsStep reads of an owned tensor (a copy, see Thread safety).
  struct StepView {
    std::string settings_key;
    transform::RefreshSchedule schedule;
    bool measures = false;  // measure steps measure the drift
  };

  // Whether this member owns `tensor` and its resolved settings may carry a
  // basis; those settings and their key.
  bool Eligible(const gift::v1::ClusterState& state, const gift::v1::TensorInfo& tensor,
                policy::TensorSettings* settings, std::string* key) const;
  // Copies the tensor's schedule (or its absence) for WantsStep.
  void SyncView(uint64_t tensor_id);
  absl::Status ObserveTensor(const gift::v1::ClusterState& state, const OwnedTensorStep& data);
  // Whether `step` measures the last published basis (see Measurement).
  bool MeasuresAt(const Owned& owned, uint64_t step) const;
  // Cancelled (naming the tensor and version) once options.cancelled says so.
  absl::Status CheckCancelled(uint64_t tensor_id, uint64_t version) const;
  // Times one forward and inverse of `basis` on data.own into the budget's rate.
  absl::Status TimeTransform(const transform::TensorBasisTransform& basis,
                             const OwnedTensorStep& data);
  // Without the fidelity target: the measured selection between `bases`
  // (at `rank`) and direct with the tensor's push codec `spec`, under the
  // margin and the step budget (docs/design.md 3.3); `ratio` gets the
  // choice's error over direct's when measured.
  struct Choice;
  absl::StatusOr<Choice> ChooseMeasured(
      const gift::v1::ClusterState& state, const OwnedTensorStep& data, const Owned& owned,
      absl::Span<const std::shared_ptr<const transform::TensorBasisTransform>> bases,
      absl::Span<const transform::SelectionCandidate> candidates, const codec::CodecSpec& spec,
      int64_t rank, uint64_t version, std::optional<double>* ratio);
  // The fidelity target's part (basis_owner_target.cc): whether it chooses
  // the tensor's codecs.
  static bool TargetApplies(const gift::v1::Policy& policy, const policy::TensorSettings& settings);
  // The refresh's wire choice (wire_choice.h) among direct and `bases` (all
  // at `rank`, labelled as the refresh labels them).
  absl::StatusOr<WireChoice> ChooseWireFor(
      const gift::v1::ClusterState& state, const gift::v1::Policy& policy,
      const OwnedTensorStep& data, const Owned& owned,
      absl::Span<const std::shared_ptr<const transform::TensorBasisTransform>> bases,
      absl::Span<const transform::SelectionCandidate> labels);
  // A measure step of a tensor whose codecs the target chose: its error
  // through the active choice against the target's on data.own; above the
  // target it publishes the target codecs, direct, at once (true).
  absl::StatusOr<bool> CheckWire(const gift::v1::ClusterState& state,
                                 const gift::v1::TensorBasisState& basis,
                                 const OwnedTensorStep& data, Owned& owned);
  // GIFT / direct error of basis `version` on data.own; nullopt when direct
  // quantization has no error to compare with.
  absl::StatusOr<std::optional<double>> MeasureRatio(const gift::v1::ClusterState& state,
                                                     const OwnedTensorStep& data, uint64_t version);

  // The tensor's entry, (re)built when its resolved settings changed; null
  // when it is direct by policy or not transformable.
  Owned* Entry(const gift::v1::ClusterState& state, const gift::v1::TensorInfo& tensor);
  absl::Status Refresh(const gift::v1::ClusterState& state, const gift::v1::TensorBasisState& basis,
                       const OwnedTensorStep& data, Owned& owned, transform::RefreshReason reason);
  // The version after every version and proposal of `basis`.
  static uint64_t NextVersion(const gift::v1::TensorBasisState& basis);
  // Publishes a direct version with `codecs` (unset: the tensor's own).
  absl::Status PublishDirect(uint64_t tensor_id, uint64_t version,
                             const control::MemberSession::VersionCodecs& codecs);

  // What a refresh publishes: a basis (null: direct), the rank it was built
  // with, and the label on_publish reports.
  struct Choice {
    std::shared_ptr<const transform::TensorBasisTransform> basis;
    int64_t rank = 0;
    std::string label = "direct";
    double error = 0.0;  // measured (the refresh's relative L2 error)
  };
  // The step budget (policy selection.gift_budget, see Measurement): with
  // `full` the measured winner at the policy's rank (its error measured by
  // the refresh, as `direct_error`), measures the same power at the lower
  // ranks of kBudgetRanks on data.own, times a forward and inverse of
  // `full`, and chooses among the owner's tensors (TransformBudget).
  absl::StatusOr<Choice> ChooseWithinBudget(const gift::v1::ClusterState& state,
                                            const OwnedTensorStep& data, const Owned& owned,
                                            const Choice& full, double direct_error, double power,
                                            uint64_t version);

  const control::MemberSession* const session_;
  BasisStore* const store_;
  const BasisOwnerOptions options_;
  absl::flat_hash_map<uint64_t, Owned> owned_;
  mutable absl::Mutex views_mu_;
  absl::flat_hash_map<uint64_t, StepView> views_ ABSL_GUARDED_BY(views_mu_);
  uint64_t publications_ = 0;
  TransformBudget budget_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_OWNER_BASIS_OWNER_H_
