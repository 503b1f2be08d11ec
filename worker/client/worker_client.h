// The training loop's client of the local gift-worker daemon (service
// gift.v1.Worker, proto/gift/v1/worker.proto).
//
// Gradients never travel through gRPC: Register creates one sealed memfd
// for the set (buffer_handoff.h), maps it, hands it to the worker over its
// buffer socket (WorkerInfo.buffer_socket) and registers the tensors at
// offsets in it; the training loop writes its gradient into
// SharedTensor::data(), calls PushPull(step), and reads the average from the
// same memory when the call returns.
//
//   absl::StatusOr<std::unique_ptr<WorkerClient>> client =
//       WorkerClient::Connect("unix:/run/gift/worker.sock");
//   absl::StatusOr<std::vector<SharedTensor>> tensors =
//       (*client)->Register({{"layer0.weight", {1024, 512}}, {"layer0.bias", {1024}}});
//   for (uint64_t step = 0; step < steps; ++step) {
//     ComputeGradients((*tensors)[0].data(), (*tensors)[1].data());  // writes in place
//     absl::StatusOr<PushPullResult> result = (*client)->PushPull(step);
//     if (!result.ok()) return result.status();     // the worker's code and message
//     ApplyUpdate((*tensors)[0].data(), ...);       // now holds the average
//   }
//
// Device tensors (device_tensor.h) go in the same Register call as the host
// ones (a call replaces the worker's whole set): the worker opens them by
// CUDA IPC and averages them in place in device memory.
//
//   DeviceTensorSpec dev{"layer1.weight", {4096, 4096}, gift::v1::DTYPE_FLOAT32,
//                        *DescribeDeviceBuffer(d_grad, bytes)};  // cuda_device_buffer.h
//   auto set = (*client)->Register({{"layer0.bias", {1024}}}, {dev});
//   ... cudaStreamSynchronize(stream); (*client)->PushPull(step); ...
//
// Errors: every call returns the worker's gRPC code and message as an
// absl::Status (rpc::FromGrpcStatus), prefixed with the call's name
// ("PushPull: ..."). Documented codes: PushPull FAILED_PRECONDITION (nothing
// registered), INVALID_ARGUMENT (step not above the last one, unknown
// tensor), DEADLINE_EXCEEDED, UNAVAILABLE (worker draining or unreachable).
//
// Ownership: SharedTensors share their region (unmapped with the last of
// them). The worker keeps its own mapping, so destroying
// a SharedTensor that is still registered is memory safe, but the averages
// then land in memory nobody reads; keep the tensors of the registered set
// alive while using it. The client owns its channel, its connection to the
// buffer socket (the worker's handles end with it, registrations do not),
// its activation-stats scratch buffers and one background thread that
// issues PushPull calls.
//
// Thread safety: WorkerClient's methods may be called from any thread.
// PushPull and PushPullAsync calls are issued to the worker one at a time, in
// the order they were made (a FIFO served by the background thread), because
// steps must strictly increase per worker; PushPull(step) is
// PushPullAsync(step).get(). The caller must not write the registered tensors
// while a PushPull of theirs is in flight (the worker reads the gradients and
// writes the averages during the call). A SharedTensor is not synchronized:
// share it across threads with external synchronization only.
#ifndef GIFT_WORKER_CLIENT_WORKER_CLIENT_H_
#define GIFT_WORKER_CLIENT_WORKER_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/rpc/credentials.h"
#include "gift/v1/worker.grpc.pb.h"
#include "worker/client/buffer_handoff.h"
#include "worker/client/device_tensor.h"

namespace gift::client {

// A host tensor to register: its name (the same on every worker) and shape.
struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// A registered tensor: FP32, row-major, in a sealed shared region with the
// worker (one region per Register call holds the whole set; each tensor
// keeps the region alive).
class SharedTensor {
 public:
  SharedTensor(TensorSpec spec, uint64_t tensor_id, std::shared_ptr<const SealedRegion> region,
               size_t offset_bytes, std::string handle)
      : spec_(std::move(spec)),
        tensor_id_(tensor_id),
        region_(std::move(region)),
        offset_(offset_bytes),
        handle_(std::move(handle)) {
    size_t n = 1;
    for (int64_t d : spec_.shape) n *= static_cast<size_t>(d);
    size_ = n;
  }

  float* data() const {
    return reinterpret_cast<float*>(static_cast<char*>(region_->data()) + offset_);
  }
  // Number of FP32 elements.
  size_t size() const { return size_; }
  absl::Span<float> span() const { return {data(), size()}; }
  const std::string& name() const { return spec_.name; }
  const std::vector<int64_t>& shape() const { return spec_.shape; }
  // The cluster-wide id the coordinator assigned to the name.
  uint64_t tensor_id() const { return tensor_id_; }
  // The worker's handle of the region holding the tensor, and its offset.
  const std::string& handle() const { return handle_; }
  size_t offset_bytes() const { return offset_; }

 private:
  TensorSpec spec_;
  uint64_t tensor_id_;
  std::shared_ptr<const SealedRegion> region_;
  size_t offset_;
  std::string handle_;
  size_t size_ = 0;
};

// What a Register call with device tensors returns: each kind in spec order.
struct RegisteredTensors {
  std::vector<SharedTensor> host;
  std::vector<DeviceTensor> device;
};

struct TensorResult {
  uint64_t tensor_id = 0;
  std::string name;  // empty for a tensor this client did not register
  uint64_t basis_version = 0;
  bool transformed = false;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;  // results, in the servers' pull codecs
  // ||avg_q - avg|| / ||avg||; NaN unless the step measured errors.
  double rel_l2_error = 0.0;
};

// A worker of the previous step's world that is gone (its rank then).
struct LostWorker {
  uint32_t rank = 0;
  std::string name;
  std::string member_id;
  std::string node;
};

struct PushPullResult {
  uint64_t step = 0;
  uint64_t epoch = 0;
  uint32_t world_size = 0;
  double seconds = 0.0;  // as the worker measured it
  std::vector<TensorResult> tensors;
  // Nonzero when the world changed since this worker's previous completed
  // step (Policy.on_member_loss continue): that step's world size, and the
  // workers of it that are gone. The step itself completed (in world_size).
  uint32_t previous_world_size = 0;
  std::vector<LostWorker> lost_members;
};

struct WorkerClientOptions {
  // The training run the registrations belong to (worker.proto
  // RegisterBuffersRequest.run_id): every process of one run of the job
  // passes the same id, a new run (the job started again from step 0) a new
  // one; "" registers in the cluster's current run, or starts a new one when
  // every client of that run has disconnected (docs/operations.md, Runs).
  std::string run_id;
  // Connect waits this long for the channel to be ready; zero: it does not
  // wait (the first call connects).
  absl::Duration connect_timeout = absl::Seconds(10);
  // Deadline of RegisterBuffers, SubmitActivationStats and GetWorkerInfo.
  absl::Duration rpc_timeout = absl::Seconds(60);
  // Deadline of PushPull; infinite: none (the worker's --step-timeout bounds
  // the step).
  absl::Duration push_pull_timeout = absl::InfiniteDuration();
  // For a TCP address: mutual TLS with these PEM files (a `worker` or
  // `operator` certificate, common/rpc/credentials.h) when set, else
  // plaintext. A Unix socket is always plaintext (its file mode guards it).
  rpc::TlsFiles tls;
};

class WorkerClient {
 public:
  // `address`: "unix:/path", a socket path ("/run/gift/worker.sock": anything
  // with a '/'), or "host:port"; a bare name is INVALID_ARGUMENT. With a
  // connect_timeout, a socket path is checked first: NOT_FOUND "no such
  // socket", FAILED_PRECONDITION when it is not a socket. UNAVAILABLE when the
  // worker is not ready within options.connect_timeout.
  static absl::StatusOr<std::unique_ptr<WorkerClient>> Connect(
      const std::string& address, const WorkerClientOptions& options = {});

  // Makes a gRPC target from a Connect address ("/p" -> "unix:/p").
  static std::string Target(const std::string& address);

  ~WorkerClient();
  WorkerClient(const WorkerClient&) = delete;
  WorkerClient& operator=(const WorkerClient&) = delete;

  // Creates one zero-filled sealed region for the specs and registers the
  // set (replacing the worker's previously registered set). Returns the
  // tensors in spec order. INVALID_ARGUMENT for an empty or duplicate name,
  // an empty shape or a dimension < 1 (checked before anything is created);
  // otherwise the worker's status. Nothing stays allocated on failure.
  absl::StatusOr<std::vector<SharedTensor>> Register(const std::vector<TensorSpec>& specs);

  // Registers host tensors (in one sealed region, as above; none created
  // when `host` is empty) and device tensors (by CUDA IPC) as one set, in
  // one RegisterBuffers call. INVALID_ARGUMENT, before anything is created
  // or sent, for the checks above over both lists together (names unique
  // across them, one tensor at least) and, for a device tensor, a dtype
  // other than FP32 / BF16 / FP16, a handle not kCudaIpcHandleBytes long,
  // a negative device, a size_bytes that is not elements * element size or
  // an offset not aligned to the element size. FAILED_PRECONDITION when the
  // worker takes host buffers only (WorkerInfo.cuda_device_count 0) or a
  // tensor's device is not below cuda_device_count. Otherwise as above.
  absl::StatusOr<RegisteredTensors> Register(const std::vector<TensorSpec>& host,
                                             const std::vector<DeviceTensorSpec>& device);

  // The rank and world size the last successful Register reported.
  uint32_t rank() const;
  uint32_t world_size() const;

  // Averages the registered tensors of `step` across all workers, in place
  // (a collective: every worker calls it with the same step and
  // measure_error). `tensor_ids` empty: all registered tensors.
  absl::StatusOr<PushPullResult> PushPull(uint64_t step, bool measure_error = false,
                                          std::vector<uint64_t> tensor_ids = {});

  // Queues the same call; the future becomes ready when the worker replies.
  // Calls are issued in order, one at a time, by the client's thread.
  std::future<absl::StatusOr<PushPullResult>> PushPullAsync(uint64_t step,
                                                            bool measure_error = false,
                                                            std::vector<uint64_t> tensor_ids = {});

  // Starts `step` with `tensor_ids` (empty: every registered tensor not
  // started yet), whose gradients are final: the worker encodes and pushes
  // them at once (worker.proto StartTensors), and the step's PushPull then
  // only adds the rest and waits, with results bit-identical to a PushPull
  // alone. Queued in the same FIFO as PushPullAsync, so a StartTensors
  // reaches the worker before a PushPull called after it; the future is
  // ready once the worker pushed the tensors. The tensors must not be
  // written until the step's PushPull returns.
  std::future<absl::Status> StartTensorsAsync(uint64_t step, std::vector<uint64_t> tensor_ids);
  absl::Status StartTensors(uint64_t step, std::vector<uint64_t> tensor_ids);

  // Hands in X^T X (d_in x d_in FP32, row-major, unscaled: `gram` holds
  // d_in * d_in values) of `num_samples` input rows of the layer whose weight
  // is `tensor_id`, for `step`. The values are copied into a sealed
  // scratch region (one per tensor id, reused) that the worker reads during
  // the call. INVALID_ARGUMENT for an empty gram or one that is not square.
  absl::Status SubmitActivationStats(uint64_t tensor_id, uint64_t step,
                                     absl::Span<const float> gram, uint64_t num_samples);

  absl::StatusOr<gift::v1::WorkerInfo> Info();

 private:
  // A PushPull, or (start) a StartTensors.
  struct Call {
    gift::v1::PushPullRequest request;
    std::promise<absl::StatusOr<PushPullResult>> promise;
    bool start = false;
    gift::v1::StartTensorsRequest start_request;
    std::promise<absl::Status> started;
  };

  WorkerClient(std::shared_ptr<grpc::Channel> channel, WorkerClientOptions options);

  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_ || !calls_.empty(); }
  void RunCalls();
  absl::StatusOr<PushPullResult> DoPushPull(const gift::v1::PushPullRequest& request);
  absl::Status DoStartTensors(const gift::v1::StartTensorsRequest& request);
  // FAILED_PRECONDITION unless the worker opens CUDA IPC buffers on every
  // device of `device` (asks GetWorkerInfo).
  absl::Status CheckWorkerTakesDeviceTensors(const std::vector<DeviceTensorSpec>& device);
  // Hands `region` to the worker (connecting to its buffer socket first).
  absl::StatusOr<std::string> Hand(const SealedRegion& region);
  // Tells the worker `handle` is no longer named (best effort).
  void Release(const std::string& handle);

  const WorkerClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<gift::v1::Worker::Stub> stub_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<uint64_t, std::string> names_ ABSL_GUARDED_BY(mu_);  // tensor id -> name
  uint32_t rank_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t world_size_ ABSL_GUARDED_BY(mu_) = 0;
  std::deque<Call> calls_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;

  absl::Mutex hand_mu_;
  std::unique_ptr<BufferChannel> buffers_ ABSL_GUARDED_BY(hand_mu_);
  std::string registered_handle_ ABSL_GUARDED_BY(hand_mu_);  // of the registered set

  struct StatsBuffer {
    SealedRegion region;
    std::string handle;
  };
  absl::Mutex stats_mu_;
  absl::flat_hash_map<uint64_t, StatsBuffer> stats_buffers_ ABSL_GUARDED_BY(stats_mu_);

  std::thread caller_;
};

}  // namespace gift::client

#endif  // GIFT_WORKER_CLIENT_WORKER_CLIENT_H_
