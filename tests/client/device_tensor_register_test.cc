// WorkerClient::Register with device tensors (worker/client/device_tensor.h)
// against an in-process fake of the Worker service on a Unix socket (unit
// logic: no real worker opens CUDA IPC handles without a device) with the
// worker's real buffer socket (worker/intake/buffer_socket.h): host and device
// tensors go to the worker in ONE RegisterBuffers call; the worker's
// WorkerInfo.cuda_device_count gates device tensors (FAILED_PRECONDITION,
// nothing registered); local argument checks come before any call.
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "common/base/temp_dir.h"
#include "gift/v1/worker.grpc.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/client/worker_client.h"
#include "worker/intake/buffer_socket.h"

namespace gift::client {
namespace {

using ::testing::HasSubstr;

// Records each RegisterBuffers request and answers ids 100, 101, ...
class FakeWorker final : public gift::v1::Worker::Service {
 public:
  FakeWorker(int cuda_device_count, std::string buffer_socket)
      : cuda_device_count_(cuda_device_count), buffer_socket_(std::move(buffer_socket)) {}

  grpc::Status GetWorkerInfo(grpc::ServerContext*, const gift::v1::GetWorkerInfoRequest*,
                             gift::v1::WorkerInfo* info) override {
    info->set_cuda_device_count(cuda_device_count_);
    info->set_buffer_socket(buffer_socket_);
    return grpc::Status::OK;
  }

  grpc::Status RegisterBuffers(grpc::ServerContext*,
                               const gift::v1::RegisterBuffersRequest* request,
                               gift::v1::RegisterBuffersResponse* response) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(*request);
    for (int i = 0; i < request->buffers_size(); ++i) {
      response->add_buffers()->set_tensor_id(100 + i);
    }
    response->set_rank(0);
    response->set_world_size(1);
    return grpc::Status::OK;
  }

  std::vector<gift::v1::RegisterBuffersRequest> requests() {
    absl::MutexLock lock(&mu_);
    return requests_;
  }

 private:
  const int cuda_device_count_;
  const std::string buffer_socket_;
  absl::Mutex mu_;
  std::vector<gift::v1::RegisterBuffersRequest> requests_ ABSL_GUARDED_BY(mu_);
};

class DeviceTensorRegisterTest : public ::testing::Test {
 protected:
  // A fake worker reporting `cuda_device_count` devices, with a buffer
  // socket when `buffer_socket`, and a client connected to it.
  void Start(int cuda_device_count, bool buffer_socket = true) {
    absl::StatusOr<TempDir> dir = TempDir::Create("gift-device-tensor-register");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<TempDir>(*std::move(dir));
    if (buffer_socket) {
      auto socket = worker::BufferSocket::Start(dir_->File("worker.sock.buffers"));
      ASSERT_TRUE(socket.ok()) << socket.status();
      buffers_ = *std::move(socket);
    }
    worker_ = std::make_unique<FakeWorker>(cuda_device_count,
                                           buffers_ != nullptr ? buffers_->path() : "");
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + dir_->File("worker.sock"),
                             grpc::InsecureServerCredentials());
    builder.RegisterService(worker_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    auto client = WorkerClient::Connect(dir_->File("worker.sock"));
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
  }

  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) server_->Shutdown();
  }

  std::unique_ptr<TempDir> dir_;
  std::unique_ptr<worker::BufferSocket> buffers_;
  std::unique_ptr<FakeWorker> worker_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<WorkerClient> client_;
};

// A device tensor of `shape` FP32 on `device` at `offset` of a made-up
// allocation (the fake never opens it).
DeviceTensorSpec Device(std::string name, std::vector<int64_t> shape, int device, uint64_t offset) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  DeviceBuffer b;
  b.ipc_handle = std::string(kCudaIpcHandleBytes, static_cast<char>('a' + device));
  b.device = device;
  b.offset_bytes = offset;
  b.size_bytes = n * sizeof(float);
  b.address = reinterpret_cast<void*>(uintptr_t{0x7f0000000000} + offset);
  return {std::move(name), std::move(shape), gift::v1::DTYPE_FLOAT32, std::move(b)};
}

TEST_F(DeviceTensorRegisterTest, HostAndDeviceTensorsGoInOneRegisterBuffersCall) {
  Start(/*cuda_device_count=*/2);
  DeviceTensorSpec bf16 = Device("dev.b", {8}, 1, 4096);
  bf16.dtype = gift::v1::DTYPE_BFLOAT16;
  bf16.buffer.size_bytes = 8 * 2;
  absl::StatusOr<RegisteredTensors> set = client_->Register(
      {{"host.a", {4, 4}}, {"host.b", {3}}}, {Device("dev.a", {16, 8}, 0, 256), bf16});
  ASSERT_TRUE(set.ok()) << set.status();

  const std::vector<gift::v1::RegisterBuffersRequest> requests = worker_->requests();
  ASSERT_EQ(requests.size(), 1u);
  const gift::v1::RegisterBuffersRequest& r = requests[0];
  ASSERT_EQ(r.buffers_size(), 4);
  // Host tensors first, in one handed-over region.
  EXPECT_EQ(r.buffers(0).name(), "host.a");
  EXPECT_EQ(r.buffers(1).name(), "host.b");
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(r.buffers(i).buffer().location_case(), gift::v1::SharedBuffer::kHandle);
    EXPECT_TRUE(buffers_->Find(r.buffers(i).buffer().handle()).ok());
  }
  EXPECT_EQ(r.buffers(1).buffer().offset_bytes(), 64u);  // after 64 bytes, aligned
  // Then the device tensors, as described.
  const gift::v1::BufferSpec& a = r.buffers(2);
  EXPECT_EQ(a.name(), "dev.a");
  EXPECT_THAT(a.shape(), ::testing::ElementsAre(16, 8));
  EXPECT_EQ(a.dtype(), gift::v1::DTYPE_FLOAT32);
  EXPECT_EQ(a.buffer().location_case(), gift::v1::SharedBuffer::kCudaIpcHandle);
  EXPECT_EQ(a.buffer().cuda_ipc_handle(), std::string(kCudaIpcHandleBytes, 'a'));
  EXPECT_EQ(a.buffer().cuda_device(), 0);
  EXPECT_EQ(a.buffer().offset_bytes(), 256u);
  EXPECT_EQ(a.buffer().size_bytes(), 16u * 8 * 4);
  const gift::v1::BufferSpec& b = r.buffers(3);
  EXPECT_EQ(b.dtype(), gift::v1::DTYPE_BFLOAT16);
  EXPECT_EQ(b.buffer().cuda_ipc_handle(), std::string(kCudaIpcHandleBytes, 'b'));
  EXPECT_EQ(b.buffer().cuda_device(), 1);
  EXPECT_EQ(b.buffer().offset_bytes(), 4096u);
  EXPECT_EQ(b.buffer().size_bytes(), 16u);

  ASSERT_EQ(set->host.size(), 2u);
  ASSERT_EQ(set->device.size(), 2u);
  EXPECT_EQ(set->host[0].tensor_id(), 100u);
  EXPECT_EQ(set->host[1].tensor_id(), 101u);
  set->host[1].data()[2] = 1.5f;  // host tensors are writable memory here
  EXPECT_EQ(set->device[0].tensor_id(), 102u);
  EXPECT_EQ(set->device[0].name(), "dev.a");
  EXPECT_EQ(set->device[0].device(), 0);
  EXPECT_EQ(set->device[0].size_bytes(), 16u * 8 * 4);
  EXPECT_EQ(set->device[0].device_address(), reinterpret_cast<void*>(uintptr_t{0x7f0000000100}));
  EXPECT_EQ(set->device[1].tensor_id(), 103u);
  EXPECT_EQ(set->device[1].dtype(), gift::v1::DTYPE_BFLOAT16);
}

TEST_F(DeviceTensorRegisterTest, DeviceTensorsAloneNeedNoBufferSocket) {
  Start(/*cuda_device_count=*/1, /*buffer_socket=*/false);
  absl::StatusOr<RegisteredTensors> set = client_->Register({}, {Device("dev.a", {4}, 0, 0)});
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_TRUE(set->host.empty());
  ASSERT_EQ(set->device.size(), 1u);
  ASSERT_EQ(worker_->requests().size(), 1u);
  // A host tensor needs the buffer socket, which this worker lacks.
  EXPECT_EQ(client_->Register({{"h", {2}}}, {}).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(DeviceTensorRegisterTest, HostOnlyWorkerRefusesDeviceTensorsBeforeRegistering) {
  Start(/*cuda_device_count=*/0);
  const absl::Status s = client_->Register({{"h", {2}}}, {Device("dev.a", {4}, 0, 0)}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("takes host buffers only"));
  EXPECT_THAT(s.message(), HasSubstr("dev.a"));
  EXPECT_TRUE(worker_->requests().empty());
  // Host tensors alone still register.
  EXPECT_TRUE(client_->Register({{"h", {2}}}).ok());
  EXPECT_EQ(worker_->requests().size(), 1u);
}

TEST_F(DeviceTensorRegisterTest, DeviceAtOrAboveTheWorkersCountIsRefused) {
  Start(/*cuda_device_count=*/1);
  const absl::Status s =
      client_->Register({}, {Device("dev.a", {4}, 0, 0), Device("dev.b", {4}, 1, 0)}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("'dev.b' is on CUDA device 1"));
  EXPECT_THAT(s.message(), HasSubstr("devices below 1"));
  EXPECT_TRUE(worker_->requests().empty());
}

TEST(DeviceTensorRegisterChecks, BadDeviceSpecsAreRefusedBeforeAnyCall) {
  // Nothing listens there: a check that needed the worker would fail with
  // UNAVAILABLE / DEADLINE_EXCEEDED, not INVALID_ARGUMENT.
  auto client = WorkerClient::Connect(
      "/nonexistent-dir/worker.sock",
      {.connect_timeout = absl::ZeroDuration(), .rpc_timeout = absl::Seconds(1)});
  ASSERT_TRUE(client.ok());
  std::vector<DeviceTensorSpec> bad(8, Device("d", {4, 2}, 0, 64));
  bad[0].buffer.ipc_handle = "short";
  bad[1].buffer.device = -1;
  bad[2].buffer.size_bytes = 4 * 2 * 4 + 4;  // not the shape's bytes
  bad[3].dtype = gift::v1::DTYPE_FLOAT16;    // size_bytes still FP32's
  bad[4].dtype = gift::v1::DTYPE_UNSPECIFIED;
  bad[5].buffer.offset_bytes = 66;  // not FP32-aligned
  bad[6].shape = {4, 0};
  bad[7].name = "";
  for (size_t i = 0; i < bad.size(); ++i) {
    const absl::Status s = (*client)->Register({}, {bad[i]}).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << i << ": " << s;
  }
  // A name shared by a host and a device tensor.
  EXPECT_EQ((*client)->Register({{"d", {2}}}, {Device("d", {4}, 0, 0)}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*client)->Register({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::client
