// worker/cuda/cuda_ipc_buffers.h (gift_worker_cuda; tested here with the
// other CUDA-only code). Without a device: Create refuses with
// FailedPrecondition (runs everywhere, against the real CUDA runtime). With
// one: a second process (this binary re-executed with GIFT_IPC_EXPORTER=1,
// so that no CUDA state crosses a fork) allocates and fills device memory,
// exports it, and keeps it alive while the test opens, reads and checks it.
// The host emulation of the runtime is not used: it cannot express two
// processes sharing device memory.
#include "worker/cuda/cuda_ipc_buffers.h"

#include <cuda_runtime_api.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cuda_status.h"

extern char** environ;

namespace gift::worker {
namespace {

using ::testing::HasSubstr;

constexpr size_t kWords = 1 << 18;  // 1 MiB of uint32_t
constexpr char kExporterEnv[] = "GIFT_IPC_EXPORTER";

uint32_t Pattern(size_t i) { return static_cast<uint32_t>(i * 2654435761u + 17u); }

// The exporter: writes the handle to stdout, waits for stdin's EOF, exits.
// Runs before main in the re-executed process, so gtest never starts there.
[[maybe_unused]] const bool kExporterRan = [] {
  if (std::getenv(kExporterEnv) == nullptr) return false;
  void* d = nullptr;
  std::vector<uint32_t> host(kWords);
  for (size_t i = 0; i < kWords; ++i) host[i] = Pattern(i);
  cudaIpcMemHandle_t h;
  if (cudaMalloc(&d, kWords * sizeof(uint32_t)) != cudaSuccess ||
      cudaMemcpy(d, host.data(), kWords * sizeof(uint32_t), cudaMemcpyHostToDevice) !=
          cudaSuccess ||
      cudaIpcGetMemHandle(&h, d) != cudaSuccess) {
    _exit(2);
  }
  if (write(STDOUT_FILENO, &h, sizeof(h)) != static_cast<ssize_t>(sizeof(h))) _exit(3);
  char c;
  while (read(STDIN_FILENO, &c, 1) > 0) {
  }
  cudaFree(d);
  _exit(0);
}();

bool HaveDevice() { return kernels::CudaDeviceAvailable(); }

TEST(CudaIpcBuffersNoDevice, CreateFailsWithFailedPrecondition) {
  if (HaveDevice()) GTEST_SKIP() << "a CUDA device is present";
  const absl::StatusOr<std::unique_ptr<CudaIpcBuffers>> b = CudaIpcBuffers::Create();
  EXPECT_EQ(b.status().code(), absl::StatusCode::kFailedPrecondition) << b.status();
  EXPECT_THAT(b.status().message(), HasSubstr("register host buffers"));
}

// The exporter process: its handle and the pipe that keeps it alive.
class Exporter {
 public:
  Exporter() {
    int out[2], in[2];
    if (pipe(out) != 0 || pipe(in) != 0) return;
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    std::vector<std::string> env_strings;
    for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
    env_strings.push_back(absl::StrCat(kExporterEnv, "=1"));
    std::vector<char*> env;
    for (std::string& s : env_strings) env.push_back(s.data());
    env.push_back(nullptr);
    char self[] = "/proc/self/exe";
    char* argv[] = {self, nullptr};
    spawned_ = posix_spawn(&pid_, self, &actions, nullptr, argv, env.data()) == 0;
    posix_spawn_file_actions_destroy(&actions);
    close(out[1]);
    close(in[0]);
    release_ = in[1];
    if (spawned_) {
      handle_.resize(sizeof(cudaIpcMemHandle_t));
      size_t got = 0;
      while (got < handle_.size()) {
        const ssize_t n = read(out[0], handle_.data() + got, handle_.size() - got);
        if (n <= 0) break;
        got += static_cast<size_t>(n);
      }
      handle_.resize(got);
    }
    close(out[0]);
  }
  // Lets the exporter free its memory and exit; its exit status.
  int Release() {
    if (release_ >= 0) close(release_);
    release_ = -1;
    int status = -1;
    if (spawned_ && waitpid(pid_, &status, 0) == pid_ && WIFEXITED(status)) {
      return WEXITSTATUS(status);
    }
    return -1;
  }
  ~Exporter() { (void)Release(); }

  bool spawned() const { return spawned_; }
  const std::string& handle() const { return handle_; }

 private:
  pid_t pid_ = -1;
  bool spawned_ = false;
  int release_ = -1;
  std::string handle_;
};

TEST(CudaIpcBuffersGpu, OpensAnExportedAllocationOnceAndChecksRanges) {
  if (!HaveDevice()) GTEST_SKIP() << "no CUDA device";
  Exporter exporter;
  ASSERT_TRUE(exporter.spawned());
  ASSERT_EQ(exporter.handle().size(), sizeof(cudaIpcMemHandle_t));
  {
    absl::StatusOr<std::unique_ptr<CudaIpcBuffers>> buffers = CudaIpcBuffers::Create();
    ASSERT_TRUE(buffers.ok()) << buffers.status();
    CudaIpcBuffers& b = **buffers;
    const uint64_t bytes = kWords * sizeof(uint32_t);
    absl::StatusOr<void*> whole = b.Open(exporter.handle(), 0, 0, bytes);
    ASSERT_TRUE(whole.ok()) << whole.status();
    std::vector<uint32_t> got(kWords);
    ASSERT_EQ(cudaMemcpy(got.data(), *whole, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    size_t wrong = 0;
    for (size_t i = 0; i < kWords; ++i) wrong += got[i] != Pattern(i);
    EXPECT_EQ(wrong, 0u);

    // A second tensor of the same allocation maps nothing new.
    absl::StatusOr<void*> tail = b.Open(exporter.handle(), 0, bytes - 64, 64);
    ASSERT_TRUE(tail.ok()) << tail.status();
    EXPECT_EQ(static_cast<char*>(*tail), static_cast<char*>(*whole) + bytes - 64);
    EXPECT_EQ(b.mapped(), 1u);

    const absl::Status past_end = b.Open(exporter.handle(), 0, 64, bytes).status();
    EXPECT_EQ(past_end.code(), absl::StatusCode::kInvalidArgument) << past_end;
    EXPECT_THAT(past_end.message(), HasSubstr("outside the exported allocation"));
    EXPECT_EQ(b.Open(exporter.handle(), 0, ~uint64_t{0}, 2).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Open("short", 0, 0, 4).status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(b.Open(exporter.handle(), 1 << 20, 0, 4).status().code(),
              absl::StatusCode::kInvalidArgument);
    const std::string garbage(sizeof(cudaIpcMemHandle_t), '\x5a');
    EXPECT_EQ(b.Open(garbage, 0, 0, 4).status().code(), absl::StatusCode::kFailedPrecondition);
  }  // unmapped before the exporter frees
  EXPECT_EQ(exporter.Release(), 0);
}

}  // namespace
}  // namespace gift::worker
