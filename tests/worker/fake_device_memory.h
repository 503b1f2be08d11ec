// A DeviceMemory (worker/intake/device_memory.h) over host memory, for tests: the
// test "exports" a host range (which stands in for a device allocation; in
// the emulated tests it is the emulated runtime's cudaMalloc memory) and
// gets a 64-byte handle for it; Open maps a handle once (counted), checks
// the device index and the range against the exported size as the CUDA
// implementation does; the copies are memcpy, counted.
//
// Guarded memory (AllocateGuarded) stands in for device memory the host must
// never touch: it is mapped PROT_NONE except while this fake copies from or
// to it, so any other host access (a worker dereferencing a device tensor)
// faults. (Memory the emulated device stage reads, the emulation's
// cudaMalloc, cannot be guarded: the emulated kernels run on the host.)
//
// Ownership: does not own the exported memory (it must outlive the fake),
// except guarded memory, unmapped with the fake. Thread safety: every method
// may be called from any thread.
#ifndef GIFT_TESTS_WORKER_FAKE_DEVICE_MEMORY_H_
#define GIFT_TESTS_WORKER_FAKE_DEVICE_MEMORY_H_

#include <sys/mman.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "worker/intake/device_memory.h"

namespace gift::worker::testing {

class FakeDeviceMemory final : public DeviceMemory {
 public:
  explicit FakeDeviceMemory(int devices = 1) : devices_(devices) {}
  ~FakeDeviceMemory() override {
    for (const Allocation& g : guarded_) munmap(g.base, g.size);
  }
  FakeDeviceMemory(const FakeDeviceMemory&) = delete;
  FakeDeviceMemory& operator=(const FakeDeviceMemory&) = delete;

  // `size` bytes of guarded memory (zeros; nullptr when mmap fails).
  void* AllocateGuarded(uint64_t size) {
    void* p = mmap(nullptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    absl::MutexLock lock(&mu_);
    guarded_.push_back({0, static_cast<char*>(p), size});
    return p;
  }

  // The handle of [base, base + size) on `device`.
  std::string Export(void* base, uint64_t size, int device = 0) {
    absl::MutexLock lock(&mu_);
    std::string handle(kCudaIpcHandleBytes, '\0');
    const uint64_t id = ++exported_;
    std::memcpy(handle.data(), &id, sizeof(id));
    allocations_[handle] = {device, static_cast<char*>(base), size};
    return handle;
  }

  absl::StatusOr<void*> Open(absl::string_view handle, int device, uint64_t offset,
                             uint64_t size) override {
    absl::MutexLock lock(&mu_);
    if (handle.size() != kCudaIpcHandleBytes) return absl::InvalidArgumentError("handle length");
    if (device < 0 || device >= devices_) return absl::InvalidArgumentError("device out of range");
    auto it = allocations_.find(std::string(handle));
    if (it == allocations_.end() || it->second.device != device) {
      return absl::FailedPreconditionError("the handle is not exported on that device");
    }
    if (offset > it->second.size || size > it->second.size - offset) {
      return absl::InvalidArgumentError(absl::StrCat("range [", offset, ", +", size,
                                                     ") outside the exported allocation of ",
                                                     it->second.size, " bytes"));
    }
    opened_.insert(std::string(handle));
    return it->second.base + offset;
  }

  absl::Status CopyToHost(void* host_dst, const void* device_src, uint64_t bytes) const override {
    if (fail_copies_) return absl::InternalError("injected copy failure");
    Copy(host_dst, device_src, bytes, device_src);
    copies_to_host_.fetch_add(1);
    return absl::OkStatus();
  }
  absl::Status CopyToDevice(void* device_dst, const void* host_src, uint64_t bytes) const override {
    if (fail_copies_) return absl::InternalError("injected copy failure");
    Copy(device_dst, host_src, bytes, device_dst);
    copies_to_device_.fetch_add(1);
    return absl::OkStatus();
  }
  // The test's own copies (its "client" writing gradients, reading
  // averages): not counted, never failed.
  void TestCopy(void* dst, const void* src, uint64_t bytes, const void* device) const {
    Copy(dst, src, bytes, device);
  }
  int device_count() const override { return devices_; }

  // Distinct handles opened so far (a handle opened twice maps once).
  size_t mapped() const {
    absl::MutexLock lock(&mu_);
    return opened_.size();
  }
  uint64_t copies_to_host() const { return copies_to_host_.load(); }
  uint64_t copies_to_device() const { return copies_to_device_.load(); }
  void set_fail_copies(bool fail) { fail_copies_ = fail; }

 private:
  struct Allocation {
    int device = 0;
    char* base = nullptr;
    uint64_t size = 0;
  };
  // memcpy; `device` (src or dst) in guarded memory: unprotected meanwhile.
  void Copy(void* dst, const void* src, uint64_t bytes, const void* device) const {
    absl::MutexLock lock(&mu_);
    const char* d = static_cast<const char*>(device);
    for (const Allocation& g : guarded_) {
      if (d >= g.base && d < g.base + g.size) {
        mprotect(g.base, g.size, PROT_READ | PROT_WRITE);
        std::memcpy(dst, src, bytes);
        mprotect(g.base, g.size, PROT_NONE);
        return;
      }
    }
    std::memcpy(dst, src, bytes);
  }

  const int devices_;
  mutable absl::Mutex mu_;
  uint64_t exported_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, Allocation> allocations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> opened_ ABSL_GUARDED_BY(mu_);
  std::vector<Allocation> guarded_ ABSL_GUARDED_BY(mu_);
  mutable std::atomic<uint64_t> copies_to_host_{0};
  mutable std::atomic<uint64_t> copies_to_device_{0};
  std::atomic<bool> fail_copies_{false};
};

}  // namespace gift::worker::testing

#endif  // GIFT_TESTS_WORKER_FAKE_DEVICE_MEMORY_H_
