#include "worker/client/worker_client.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/unix_socket_path.h"
#include "common/rpc/credentials.h"
#include "common/rpc/grpc_status.h"

namespace gift::client {
namespace {

// Each tensor of a region starts at a multiple of this (a cache line).
constexpr size_t kTensorAlignment = 64;

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

std::chrono::system_clock::time_point Deadline(absl::Duration timeout) {
  return absl::ToChronoTime(absl::Now() + timeout);
}

void FillBuffer(const std::string& handle, size_t offset, size_t size,
                gift::v1::SharedBuffer* buffer) {
  buffer->set_handle(handle);
  buffer->set_offset_bytes(offset);
  buffer->set_size_bytes(size);
}

// The elements of tensor `index`'s shape; INVALID_ARGUMENT for an empty or
// repeated name (`seen` collects them), an empty shape or a dimension < 1.
absl::StatusOr<size_t> CheckedElements(const std::string& name, const std::vector<int64_t>& shape,
                                       size_t index, absl::flat_hash_set<std::string>& seen) {
  if (name.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor ", index, " has an empty name"));
  }
  if (!seen.insert(name).second) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' appears twice"));
  }
  if (shape.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("tensor '", name, "' has no shape"));
  }
  size_t elements = 1;
  for (int64_t d : shape) {
    if (d < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name, "' shape ", ShapeString(shape), ": dimensions must be >= 1"));
    }
    elements *= static_cast<size_t>(d);
  }
  return elements;
}

// The local checks of a device tensor of `elements` elements.
absl::Status CheckDeviceBuffer(const DeviceTensorSpec& spec, size_t elements) {
  const size_t element_bytes = DTypeBytes(spec.dtype);
  const DeviceBuffer& b = spec.buffer;
  if (element_bytes == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device tensor '", spec.name, "': dtype ", gift::v1::DType_Name(spec.dtype),
                     " is not DTYPE_FLOAT32, DTYPE_BFLOAT16 or DTYPE_FLOAT16"));
  }
  if (b.ipc_handle.size() != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("device tensor '", spec.name,
                                                   "': an IPC handle of ", b.ipc_handle.size(),
                                                   " bytes, not ", kCudaIpcHandleBytes));
  }
  if (b.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("device tensor '", spec.name, "': device ", b.device, " < 0"));
  }
  if (b.size_bytes != elements * element_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "device tensor '", spec.name, "' shape ", ShapeString(spec.shape), ": size_bytes ",
        b.size_bytes, ", not ", elements, " elements of ", element_bytes, " bytes"));
  }
  if (b.offset_bytes % element_bytes != 0) {
    return absl::InvalidArgumentError(absl::StrCat("device tensor '", spec.name, "': offset ",
                                                   b.offset_bytes, " not aligned to ",
                                                   element_bytes, " bytes"));
  }
  return absl::OkStatus();
}

}  // namespace

// ---- WorkerClient --------------------------------------------------------------

std::string WorkerClient::Target(const std::string& address) {
  if (address.rfind("unix:", 0) == 0 || address.rfind("unix-abstract:", 0) == 0 ||
      address.rfind("dns:", 0) == 0 || address.rfind("ipv4:", 0) == 0 ||
      address.rfind("ipv6:", 0) == 0) {
    return address;
  }
  if (address.find('/') != std::string::npos) return absl::StrCat("unix:", address);
  return address;
}

absl::StatusOr<std::unique_ptr<WorkerClient>> WorkerClient::Connect(
    const std::string& address, const WorkerClientOptions& options) {
  if (address.empty()) return absl::InvalidArgumentError("worker address is empty");
  std::string target = Target(address);
  if (target == address && address.find(':') == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat("worker address '", address,
                                                   "' is neither a socket path (write ./", address,
                                                   " for one in this directory) nor host:port"));
  }
  if (options.connect_timeout > absl::ZeroDuration() && target.rfind("unix:", 0) == 0) {
    // A wrong path is named now, not after the connect timeout.
    const std::string path = target.rfind("unix://", 0) == 0 ? target.substr(7) : target.substr(5);
    if (absl::Status s = CheckSocketPathToDial(path); absl::IsNotFound(s)) {
      return absl::NotFoundError(
          absl::StrCat(s.message(), "; is gift-worker running with --socket ", path, "?"));
    } else if (!s.ok()) {
      return s;
    }
  }
  grpc::ChannelArguments args;
  // Reconnect quickly after a worker restart (gRPC's default backs off to 120 s).
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 2000);
  const bool unix_socket = target.rfind("unix:", 0) == 0 || target.rfind("unix-abstract:", 0) == 0;
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      rpc::MakeChannelCredentials(unix_socket ? rpc::TlsFiles{} : options.tls);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, *std::move(credentials), args);
  if (options.connect_timeout > absl::ZeroDuration() &&
      !channel->WaitForConnected(Deadline(options.connect_timeout))) {
    return absl::UnavailableError(absl::StrCat("worker at ", target, " is not reachable within ",
                                               absl::FormatDuration(options.connect_timeout)));
  }
  return std::unique_ptr<WorkerClient>(new WorkerClient(std::move(channel), options));
}

WorkerClient::WorkerClient(std::shared_ptr<grpc::Channel> channel, WorkerClientOptions options)
    : options_(options),
      channel_(std::move(channel)),
      stub_(gift::v1::Worker::NewStub(channel_)),
      caller_([this] { RunCalls(); }) {}

WorkerClient::~WorkerClient() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  caller_.join();
}

absl::StatusOr<std::vector<SharedTensor>> WorkerClient::Register(
    const std::vector<TensorSpec>& specs) {
  absl::StatusOr<RegisteredTensors> registered = Register(specs, {});
  if (!registered.ok()) return registered.status();
  return std::move(registered->host);
}

absl::StatusOr<RegisteredTensors> WorkerClient::Register(
    const std::vector<TensorSpec>& specs, const std::vector<DeviceTensorSpec>& device) {
  // Check everything before creating anything.
  if (specs.empty() && device.empty()) return absl::InvalidArgumentError("no tensors to register");
  absl::flat_hash_set<std::string> seen;
  std::vector<size_t> elements(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    absl::StatusOr<size_t> n = CheckedElements(specs[i].name, specs[i].shape, i, seen);
    if (!n.ok()) return n.status();
    elements[i] = *n;
  }
  for (size_t i = 0; i < device.size(); ++i) {
    const DeviceTensorSpec& spec = device[i];
    absl::StatusOr<size_t> n = CheckedElements(spec.name, spec.shape, specs.size() + i, seen);
    if (!n.ok()) return n.status();
    if (absl::Status s = CheckDeviceBuffer(spec, *n); !s.ok()) return s;
  }
  if (!device.empty()) {
    if (absl::Status s = CheckWorkerTakesDeviceTensors(device); !s.ok()) return s;
  }
  std::vector<size_t> offsets(specs.size());
  size_t total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    offsets[i] = total;
    total +=
        (elements[i] * sizeof(float) + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  }
  // Host tensors: one sealed region handed to the worker (none without any).
  std::shared_ptr<const SealedRegion> region;
  std::string handle;
  if (!specs.empty()) {
    absl::StatusOr<SealedRegion> created = SealedRegion::Create(total);
    if (!created.ok()) return created.status();
    region = std::make_shared<const SealedRegion>(*std::move(created));
    absl::StatusOr<std::string> handed = Hand(*region);
    if (!handed.ok()) return handed.status();
    handle = *std::move(handed);
  }
  gift::v1::RegisterBuffersRequest request;
  request.set_run_id(options_.run_id);
  for (size_t i = 0; i < specs.size(); ++i) {
    gift::v1::BufferSpec* buffer = request.add_buffers();
    buffer->set_name(specs[i].name);
    for (int64_t d : specs[i].shape) buffer->add_shape(d);
    buffer->set_dtype(gift::v1::DTYPE_FLOAT32);
    FillBuffer(handle, offsets[i], elements[i] * sizeof(float), buffer->mutable_buffer());
  }
  for (const DeviceTensorSpec& spec : device) {
    gift::v1::BufferSpec* buffer = request.add_buffers();
    buffer->set_name(spec.name);
    for (int64_t d : spec.shape) buffer->add_shape(d);
    buffer->set_dtype(spec.dtype);
    gift::v1::SharedBuffer* shared = buffer->mutable_buffer();
    shared->set_cuda_ipc_handle(spec.buffer.ipc_handle);
    shared->set_cuda_device(spec.buffer.device);
    shared->set_offset_bytes(spec.buffer.offset_bytes);
    shared->set_size_bytes(spec.buffer.size_bytes);
  }
  grpc::ClientContext context;
  context.set_deadline(Deadline(options_.rpc_timeout));
  gift::v1::RegisterBuffersResponse response;
  grpc::Status status = stub_->RegisterBuffers(&context, request, &response);
  const size_t count = specs.size() + device.size();
  if (!status.ok() || response.buffers_size() != static_cast<int>(count)) {
    if (!handle.empty()) Release(handle);
    if (!status.ok()) return rpc::FromGrpcStatus(status, "RegisterBuffers");
    return absl::InternalError(absl::StrCat("RegisterBuffers: the worker replied with ",
                                            response.buffers_size(), " tensors for ", count));
  }
  {
    // The worker's registration of the new set holds its own mapping; the
    // previous set's handle is no longer named.
    absl::MutexLock lock(&hand_mu_);
    std::swap(registered_handle_, handle);
  }
  if (!handle.empty()) Release(handle);
  std::string registered_handle_copy;
  {
    absl::MutexLock lock(&hand_mu_);
    registered_handle_copy = registered_handle_;
  }
  RegisteredTensors tensors;
  tensors.host.reserve(specs.size());
  tensors.device.reserve(device.size());
  absl::flat_hash_map<uint64_t, std::string> names;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t id = response.buffers(static_cast<int>(i)).tensor_id();
    if (i < specs.size()) {
      names[id] = specs[i].name;
      tensors.host.emplace_back(specs[i], id, region, offsets[i], registered_handle_copy);
    } else {
      names[id] = device[i - specs.size()].name;
      tensors.device.emplace_back(device[i - specs.size()], id);
    }
  }
  absl::MutexLock lock(&mu_);
  names_ = std::move(names);
  rank_ = response.rank();
  world_size_ = response.world_size();
  return tensors;
}

absl::Status WorkerClient::CheckWorkerTakesDeviceTensors(
    const std::vector<DeviceTensorSpec>& device) {
  absl::StatusOr<gift::v1::WorkerInfo> info = Info();
  if (!info.ok()) return info.status();
  const int count = info->cuda_device_count();
  if (count <= 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RegisterBuffers: the worker takes host buffers only (WorkerInfo.cuda_device_count 0: "
        "no CUDA device, or a build without CUDA), so device tensor '",
        device.front().name, "' cannot be registered by CUDA IPC; register it as a host tensor"));
  }
  for (const DeviceTensorSpec& spec : device) {
    if (spec.buffer.device >= count) {
      return absl::FailedPreconditionError(absl::StrCat(
          "RegisterBuffers: device tensor '", spec.name, "' is on CUDA device ", spec.buffer.device,
          ", and the worker opens CUDA IPC buffers on devices below ", count,
          " only; register it as a host tensor"));
    }
  }
  return absl::OkStatus();
}

uint32_t WorkerClient::rank() const {
  absl::MutexLock lock(&mu_);
  return rank_;
}

uint32_t WorkerClient::world_size() const {
  absl::MutexLock lock(&mu_);
  return world_size_;
}

absl::StatusOr<PushPullResult> WorkerClient::PushPull(uint64_t step, bool measure_error,
                                                      std::vector<uint64_t> tensor_ids) {
  return PushPullAsync(step, measure_error, std::move(tensor_ids)).get();
}

std::future<absl::StatusOr<PushPullResult>> WorkerClient::PushPullAsync(
    uint64_t step, bool measure_error, std::vector<uint64_t> tensor_ids) {
  Call call;
  call.request.set_step(step);
  call.request.set_measure_error(measure_error);
  for (uint64_t id : tensor_ids) call.request.add_tensor_ids(id);
  std::future<absl::StatusOr<PushPullResult>> future = call.promise.get_future();
  absl::MutexLock lock(&mu_);
  calls_.push_back(std::move(call));
  return future;
}

absl::Status WorkerClient::StartTensors(uint64_t step, std::vector<uint64_t> tensor_ids) {
  return StartTensorsAsync(step, std::move(tensor_ids)).get();
}

std::future<absl::Status> WorkerClient::StartTensorsAsync(uint64_t step,
                                                          std::vector<uint64_t> tensor_ids) {
  Call call;
  call.start = true;
  call.start_request.set_step(step);
  for (uint64_t id : tensor_ids) call.start_request.add_tensor_ids(id);
  std::future<absl::Status> future = call.started.get_future();
  absl::MutexLock lock(&mu_);
  calls_.push_back(std::move(call));
  return future;
}

absl::Status WorkerClient::DoStartTensors(const gift::v1::StartTensorsRequest& request) {
  grpc::ClientContext context;
  if (options_.push_pull_timeout != absl::InfiniteDuration()) {
    context.set_deadline(Deadline(options_.push_pull_timeout));
  }
  gift::v1::StartTensorsResponse response;
  grpc::Status status = stub_->StartTensors(&context, request, &response);
  if (!status.ok()) return rpc::FromGrpcStatus(status, "StartTensors");
  return absl::OkStatus();
}

void WorkerClient::RunCalls() {
  while (true) {
    Call call;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(this, &WorkerClient::HasWork));
      if (calls_.empty()) return;  // stopping, nothing left
      call = std::move(calls_.front());
      calls_.pop_front();
    }
    // Calls queued before destruction still run (the destructor waits).
    if (call.start) {
      call.started.set_value(DoStartTensors(call.start_request));
    } else {
      call.promise.set_value(DoPushPull(call.request));
    }
  }
}

absl::StatusOr<PushPullResult> WorkerClient::DoPushPull(const gift::v1::PushPullRequest& request) {
  grpc::ClientContext context;
  if (options_.push_pull_timeout != absl::InfiniteDuration()) {
    context.set_deadline(Deadline(options_.push_pull_timeout));
  }
  gift::v1::PushPullResponse response;
  grpc::Status status = stub_->PushPull(&context, request, &response);
  if (!status.ok()) return rpc::FromGrpcStatus(status, "PushPull");
  PushPullResult result;
  result.step = response.step();
  result.epoch = response.epoch();
  result.world_size = response.world_size();
  result.previous_world_size = response.previous_world_size();
  for (const gift::v1::Member& m : response.lost_members()) {
    result.lost_members.push_back(
        {.rank = m.rank(), .name = m.name(), .member_id = m.member_id(), .node = m.node()});
  }
  result.seconds = response.seconds();
  result.tensors.reserve(response.tensors_size());
  absl::MutexLock lock(&mu_);
  for (const gift::v1::TensorResult& t : response.tensors()) {
    TensorResult r;
    r.tensor_id = t.tensor_id();
    auto it = names_.find(t.tensor_id());
    if (it != names_.end()) r.name = it->second;
    r.basis_version = t.basis_version();
    r.transformed = t.transformed();
    r.bytes_sent = t.bytes_sent();
    r.bytes_received = t.bytes_received();
    r.rel_l2_error = request.measure_error() ? t.rel_l2_error() : std::nan("");
    result.tensors.push_back(std::move(r));
  }
  return result;
}

absl::Status WorkerClient::SubmitActivationStats(uint64_t tensor_id, uint64_t step,
                                                 absl::Span<const float> gram,
                                                 uint64_t num_samples) {
  const size_t d = static_cast<size_t>(std::llround(std::sqrt(static_cast<double>(gram.size()))));
  if (gram.empty() || d * d != gram.size()) {
    return absl::InvalidArgumentError(absl::StrCat("SubmitActivationStats: the gram matrix has ",
                                                   gram.size(), " values, not d_in * d_in"));
  }
  absl::MutexLock lock(&stats_mu_);
  auto it = stats_buffers_.find(tensor_id);
  if (it == stats_buffers_.end() || it->second.region.size_bytes() != gram.size() * sizeof(float)) {
    if (it != stats_buffers_.end()) {
      Release(it->second.handle);
      stats_buffers_.erase(it);
    }
    absl::StatusOr<SealedRegion> region = SealedRegion::Create(gram.size() * sizeof(float));
    if (!region.ok()) return region.status();
    absl::StatusOr<std::string> handle = Hand(*region);
    if (!handle.ok()) return handle.status();
    it = stats_buffers_.emplace(tensor_id, StatsBuffer{*std::move(region), *std::move(handle)})
             .first;
  }
  std::memcpy(it->second.region.data(), gram.data(), gram.size() * sizeof(float));
  gift::v1::SubmitActivationStatsRequest request;
  request.set_tensor_id(tensor_id);
  request.set_step(step);
  request.set_num_samples(num_samples);
  FillBuffer(it->second.handle, 0, it->second.region.size_bytes(), request.mutable_gram());
  grpc::ClientContext context;
  context.set_deadline(Deadline(options_.rpc_timeout));
  gift::v1::SubmitActivationStatsResponse response;
  return rpc::FromGrpcStatus(stub_->SubmitActivationStats(&context, request, &response),
                             "SubmitActivationStats");
}

void WorkerClient::Release(const std::string& handle) {
  absl::MutexLock lock(&hand_mu_);
  // Best effort: a failed release only keeps memory until the connection ends.
  if (buffers_ != nullptr && !buffers_->Release(handle).ok()) buffers_.reset();
}

absl::StatusOr<std::string> WorkerClient::Hand(const SealedRegion& region) {
  absl::MutexLock lock(&hand_mu_);
  if (buffers_ == nullptr) {
    absl::StatusOr<gift::v1::WorkerInfo> info = Info();
    if (!info.ok()) return info.status();
    if (info->buffer_socket().empty()) {
      return absl::FailedPreconditionError(
          "the worker has no buffer socket (it serves no Unix socket), so it cannot take "
          "buffers");
    }
    absl::StatusOr<std::unique_ptr<BufferChannel>> channel =
        BufferChannel::Connect(info->buffer_socket());
    if (!channel.ok()) return channel.status();
    buffers_ = *std::move(channel);
  }
  absl::StatusOr<std::string> handle = buffers_->Hand(region.fd());
  // A refusal of this buffer keeps the connection; anything else (a broken
  // connection, a restarted worker, one refused at the socket's connection
  // cap and closed, a connection's handle cap) connects afresh next time.
  const absl::StatusCode code = handle.status().code();
  if (code != absl::StatusCode::kOk && code != absl::StatusCode::kInvalidArgument &&
      code != absl::StatusCode::kFailedPrecondition) {
    buffers_.reset();
  }
  return handle;
}

absl::StatusOr<gift::v1::WorkerInfo> WorkerClient::Info() {
  grpc::ClientContext context;
  context.set_deadline(Deadline(options_.rpc_timeout));
  gift::v1::WorkerInfo info;
  grpc::Status status = stub_->GetWorkerInfo(&context, gift::v1::GetWorkerInfoRequest(), &info);
  if (!status.ok()) return rpc::FromGrpcStatus(status, "GetWorkerInfo");
  return info;
}

}  // namespace gift::client
