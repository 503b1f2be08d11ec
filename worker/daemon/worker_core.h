// The core of gift-worker: the local Worker API (worker.proto) over the
// data path of one GPU's worker, independent of gRPC (worker_grpc_service.h
// adapts it).
//
//   RegisterBuffers  views the buffers the training process handed over on
//                    the buffer socket (buffer_socket.h: sealed memfds, so
//                    no client action can make the worker fault on them) and
//                    registers the tensors with the coordinator;
//   PushPull(step)   plans the step from the cluster state (step_planner.h),
//                    runs it through the push-pull engine, and on an aborted
//                    epoch (a member left) plans it again under the new epoch
//                    and re-sends (step_exchange.h): the buffers keep this
//                    worker's gradient until the step completes, so nothing
//                    is lost and the servers count each rank once per epoch;
//   StartTensors     starts a step's tensors early (as backward finishes
//                    them), so their pushes overlap the rest of backward;
//                    the step's PushPull then only adds the rest and waits;
//   owner duties     for the tensors this member owns: statistics and basis
//                    refreshes on the owner queue's thread (owner_duties.h);
//   sketches         on the collect steps of tensors whose source is
//                    per-worker gradients, every worker sketches its own
//                    gradient and exchanges the sketches (in the policy's
//                    statistics codec, their own step key) after the step's gradients
//                    (step_sketches.h); the owner folds in the average. A
//                    sketch exchange that fails (e.g. workers disagreed on
//                    the policy for one step) only costs the owner that
//                    step's statistics: it is bounded by sketch_timeout and
//                    does not fail the step;
//   acknowledgements a follower thread fetches and acknowledges every new
//                    basis proposal and aborts a step whose epoch ended, or
//                    one a peer cannot push (membership_guard.h);
//   waiting          a step that waits is reported begun to the coordinator
//                    and logs who it waits for (step_wait_reporter.h); a
//                    step that times out names them;
//   membership       a worker lost since the previous step is reported in
//                    the response (on_member_loss continue) or fails every
//                    step until the next RegisterBuffers (fail);
//   runs             the registered buffers' run (run_steps.h), and whether
//                    its clients are still connected (training_client_watch.h):
//                    a registration without a run id after they all left
//                    starts a new run.
//
// The first step waits until at least `min_workers` workers have joined (a
// start barrier for a cluster that is still starting; not for a worker
// admitted at a later step, which joined a running cluster); later steps run
// with whatever world the epoch has. A worker that joined again (its lease was
// lost) or late is admitted at a step the coordinator names
// (MemberIdentity::admit_step): PushPull of a step below it, also one in
// flight when the session joined again, fails FAILED_PRECONDITION naming
// the admit step and why the lease was lost, so that the training loop can
// resynchronise and resume there (docs/operations.md, Rejoining).
//
// Buffer dtypes (registered_tensor.h): an FP32 buffer is the engine's span
// itself (zero copy); a BF16 / FP16 buffer gets an FP32 staging span owned
// by the daemon, filled from the buffer in one pass before the step and
// rounded back into it (nearest even) after the step succeeded. CUDA IPC
// buffers (options.device): FP32 ones are the engine's device tensors (zero
// copy), 16-bit ones are staged through the host like host buffers; the
// measured step's exact copies, the error, the owner's copies and the
// sketches read device tensors through DeviceMemory (ReadTensor).
//
// Ownership: owns the engine and its threads; shares the session, which
// must outlive the daemon. Thread safety: every public method may be called
// from any thread; PushPull, StartTensors and RegisterBuffers run one at a
// time (a second call waits).
#ifndef GIFT_WORKER_DAEMON_WORKER_CORE_H_
#define GIFT_WORKER_DAEMON_WORKER_CORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/codec/codec.h"
#include "common/control/member_session.h"
#include "common/control/state_follower.h"
#include "gift/v1/worker.pb.h"
#include "worker/daemon/membership_guard.h"
#include "worker/daemon/owner_duties.h"
#include "worker/daemon/run_steps.h"
#include "worker/daemon/step_admission.h"
#include "worker/daemon/step_exchange.h"
#include "worker/daemon/step_key.h"
#include "worker/daemon/step_measurement.h"
#include "worker/daemon/step_sketches.h"
#include "worker/daemon/step_wait_reporter.h"
#include "worker/daemon/training_client_watch.h"
#include "worker/engine/push_pull_engine.h"
#include "worker/intake/buffer_socket.h"
#include "worker/intake/device_memory.h"
#include "worker/intake/registered_tensor.h"
#include "worker/intake/shared_buffer.h"
#include "worker/owner/basis_owner.h"
#include "worker/owner/basis_store.h"
#include "worker/owner/sketch_exchange.h"
#include "worker/plan/step_planner.h"

namespace gift::worker {

// What one completed step cost, for metrics.
struct StepStats {
  double seconds = 0;         // the whole PushPull
  double encode_seconds = 0;  // transform + encode (all attempts' last)
  double wait_seconds = 0;    // from the last push to the last result
  double decode_seconds = 0;  // decode + inverse transform
  uint64_t bytes_pushed = 0;
  uint64_t bytes_pulled = 0;
  uint32_t attempts = 1;  // > 1 when the step ran again under a new epoch
  // The step's sketch exchange (none: 0): payload bytes, and the seconds
  // spent computing this worker's sketches and exchanging them.
  uint64_t sketch_bytes_pushed = 0;
  uint64_t sketch_bytes_pulled = 0;
  double sketch_compute_seconds = 0;
  double sketch_exchange_seconds = 0;
  // Measured steps only: the mean relative error of the tensors sent through
  // a basis and of those sent direct (NaN when there were none).
  std::optional<double> error_transformed;
  std::optional<double> error_direct;
};

struct WorkerCoreOptions {
  // The longest a PushPull may take, retries under new epochs included.
  absl::Duration step_timeout = absl::Seconds(120);
  // The first step waits until the world has at least this many workers.
  uint32_t min_workers = 1;
  codec::CodecOptions codec_options = {};  // the pool is not owned
  // Owner jobs waiting beyond this are dropped (counted): statistics are
  // best effort, steps are not held up by them.
  size_t max_owner_jobs = 64;
  // The longest a step's sketch exchange may take (after its gradients).
  absl::Duration sketch_timeout = absl::Seconds(10);
  // Called after every completed step (on the PushPull caller's thread).
  std::function<void(const StepStats&)> on_step;
  // When a waiting step reports itself begun and logs who it waits for.
  StepWaitReporterOptions step_wait = {};
  // Device memory for CUDA IPC buffers (device_memory.h; not owned, must
  // outlive the core), and what is answered for them without it. A device
  // FP32 tensor is handed to the engine as a device tensor
  // (TensorStep::device: the engine needs PushPullEngineOptions::
  // device_stages); every other read or write of its data goes through
  // `device.memory`.
  DeviceAccess device = {};
};

class WorkerCore {
 public:
  struct Counters {
    uint64_t steps_completed = 0;
    uint64_t step_retries = 0;  // plans run again under a new epoch
    uint64_t bytes_pushed = 0;
    uint64_t bytes_pulled = 0;
    uint64_t owner_jobs_dropped = 0;
    uint64_t basis_publications = 0;
    double last_step_seconds = 0;
    uint64_t error_feedback_bytes = 0;  // PushPullEngine::error_feedback_bytes
    uint64_t sketch_exchanges = 0;      // completed
    uint64_t sketch_failures = 0;       // sketches not computed or not exchanged
    uint64_t sketch_bytes_pushed = 0;
    uint64_t sketch_bytes_pulled = 0;
    double sketch_seconds = 0;  // computing and exchanging sketches
  };

  // Starts the follower thread and the owner duties (owner_duties.h).
  WorkerCore(std::unique_ptr<PushPullEngine> engine, control::MemberSession* session,
             WorkerCoreOptions options);
  ~WorkerCore();
  WorkerCore(const WorkerCore&) = delete;
  WorkerCore& operator=(const WorkerCore&) = delete;

  // Starts the buffer socket at `path` (see buffer_socket.h); call once,
  // before serving the Worker API. Until then RegisterBuffers fails.
  absl::Status ServeBuffers(const std::string& path);

  // Errors: InvalidArgument (a bad spec: name, shape, dtype, sizes,
  // alignment; a shm_name buffer, which is refused; a bad CUDA IPC handle,
  // device or range), options.device.unavailable (CUDA IPC buffers without
  // device memory: Unimplemented in a build without CUDA,
  // FailedPrecondition without a device), FailedPrecondition (no buffer
  // socket, a CUDA IPC handle the driver refuses),
  // NotFound (unknown handle), OutOfRange (a range past the handed buffer),
  // and the coordinator's errors. Nothing changes on error.
  absl::StatusOr<gift::v1::RegisterBuffersResponse> RegisterBuffers(
      const gift::v1::RegisterBuffersRequest& request);

  // Errors: FailedPrecondition (nothing registered), InvalidArgument (step
  // not above the last one, unknown tensor id), Unavailable (draining),
  // DeadlineExceeded (no complete step within step_timeout), and data-path
  // errors (push_pull_engine.h). The buffers change only on success.
  absl::StatusOr<gift::v1::PushPullResponse> PushPull(const gift::v1::PushPullRequest& request);

  // Starts `request.step` with some of its tensors, whose gradients are
  // final (worker.proto StartTensors): opens the step (the first call of a
  // step: checks as PushPull, the start barrier), plans the tensors and
  // pushes them through the engine's open step (push_pull_engine.h Begin /
  // Add), and returns without waiting for results. The PushPull of the same
  // step adds the tensors not started and completes the step; its results
  // are bit-identical to a PushPull without StartTensors. When early pushes
  // cannot proceed (the schedule is not planned that far yet, the epoch
  // changed, a push failed), the failure is kept and PushPull runs the
  // whole step again the ordinary way (retrying under a new epoch as
  // PushPull does). A StartTensors or PushPull of a later step, or a
  // RegisterBuffers, abandons an open step (logged; nothing is written).
  // A measured step (measure_error) cannot be started early. Errors:
  // as PushPull's checks, InvalidArgument for a tensor started twice in a
  // step or a step below the open one.
  absl::Status StartTensors(const gift::v1::StartTensorsRequest& request);

  // Copies X^T X from the handed buffer and queues it for the owner.
  // InvalidArgument for an unknown tensor or a buffer of the wrong size or
  // kind; NotFound / OutOfRange as RegisterBuffers.
  absl::Status SubmitActivationStats(const gift::v1::SubmitActivationStatsRequest& request);

  gift::v1::WorkerInfo Info() const;
  Counters counters() const;
  // The owner's latest error ratio of each tensor it owns (basis_owner.h).
  std::vector<gift::v1::TensorErrorRatio> error_ratios() const;

  // Refuses new steps (Unavailable) from now on and waits until the step in
  // flight, if any, has finished; false when `timeout` passed first.
  bool Drain(absl::Duration timeout);
  // Whether the coordinator asked this member to drain (Member.state).
  bool drain_requested() const { return drain_requested_.HasBeenNotified(); }

 private:
  // One step's tensors and its gradients' exchange: what a PushPull step
  // and a step opened by StartTensors both carry to CompleteStep.
  struct StepState {
    uint64_t step = 0;
    std::chrono::steady_clock::time_point start;
    uint64_t retries_before = 0;
    std::vector<const RegisteredTensor*> selected;  // in start order
    std::vector<LocalTensor> tensors;               // the same
    std::vector<OwnedTensorStep> owned;
    // The gradients' exchange (an open step: its epoch and the versions of
    // the tensors pushed so far; the report once it finished).
    Exchanged exchanged;
  };
  // A step opened by StartTensors (worker_core_overlap.cc).
  struct OpenStep : StepState {
    absl::Time deadline;
    std::shared_ptr<const gift::v1::ClusterState> before;  // the owner's view
    bool begun = false;  // the engine's step was begun (pushes under exchanged.epoch)
    // Non-OK once early pushes stopped (the engine's step ended or never
    // began): PushPull runs the whole step again.
    absl::Status failed;
  };
  // What CompleteStep needs of a step that succeeded.
  struct Completed : StepState {
    std::optional<StepMeasurement> measurement;  // measured steps
    StepSketches::Cost sketches;  // the step's sketches
  };

  // The registered tensors named by `ids` (empty: all).
  absl::StatusOr<std::vector<const RegisteredTensor*>> Select(
      const google::protobuf::RepeatedField<uint64_t>& ids) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // Narrows, builds the response, counts, and hands owned tensors on.
  // Errors: a device tensor's copy (then the step is not counted).
  absl::StatusOr<gift::v1::PushPullResponse> CompleteStep(Completed c);
  // PushPull after its checks, with the step lock: an open step's finish,
  // or the whole step.
  absl::StatusOr<gift::v1::PushPullResponse> RunStep(const gift::v1::PushPullRequest& request,
                                                     std::chrono::steady_clock::time_point start,
                                                     absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // The open step: adds `more` (widened, owned, planned and pushed). Errors:
  // a device tensor's widening copy (the caller abandons the step); a
  // failed push is kept in `failed` instead.
  absl::Status AddToOpenStep(const std::vector<const RegisteredTensor*>& more)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  absl::StatusOr<gift::v1::PushPullResponse> FinishOpenStep(
      const gift::v1::PushPullRequest& request) ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  void AbandonOpenStep(absl::string_view why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(step_mu_);
  // The follower's callbacks (control::StateFollower, its thread).
  void CheckStepPeers();
  void FollowRevision(const gift::v1::ClusterState& state);

  const WorkerCoreOptions options_;
  control::MemberSession* const session_;
  std::unique_ptr<PushPullEngine> engine_;
  StepWaitReporter waits_;      // who the step in progress waits for
  MembershipGuard membership_;  // peers that cannot push, lost ones
  BasisStore store_;
  StepAdmission admission_;  // which steps may begin; the run; drain
  StepExchange exchange_;  // plans and runs a step's exchanges, with retries
  // Before buffer_socket_, whose thread reports closed connections to it.
  TrainingClientWatch client_watch_;
  std::unique_ptr<BufferSocket> buffer_socket_;  // set once by ServeBuffers

  // Serializes RegisterBuffers, PushPull and StartTensors.
  absl::Mutex step_mu_;
  std::vector<RegisteredTensor> registered_ ABSL_GUARDED_BY(step_mu_);
  std::optional<OpenStep> open_ ABSL_GUARDED_BY(step_mu_);
  StepSketches sketches_ ABSL_GUARDED_BY(step_mu_);

  mutable absl::Mutex mu_;
  Counters counters_ ABSL_GUARDED_BY(mu_);
  // The last dimension of each registered tensor (for activation statistics).
  absl::flat_hash_map<uint64_t, uint64_t> d_in_by_tensor_ ABSL_GUARDED_BY(mu_);

  absl::Notification drain_requested_;
  OwnerDuties owner_;  // statistics and bases of the tensors this member owns
  absl::Status last_sync_error_;  // used only by the follower's thread
  std::optional<control::StateFollower> follower_;
};

}  // namespace gift::worker

#endif  // GIFT_WORKER_DAEMON_WORKER_CORE_H_
