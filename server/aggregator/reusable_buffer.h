// The aggregator's long-lived byte buffers (receive slots, result send
// buffers) and their transport registrations.
//
// A ReusableBuffer keeps its capacity across uses: Resize only allocates
// when the size grows past it, and never zero-fills. Registration
// (Transport::RegisterMemory) and unregistration wait for the transport's
// progress thread, so they must not run on it; buffers are resized or
// destroyed there (placing a payload, the last send of a result completing),
// so a registered buffer's memory and registration are not released where
// it dies but handed to its BufferRegistry, which frees them on the next
// Drain (a thread that may block: the reduction pool, epoch changes, the
// shard's destructor).
//
// Thread safety: BufferRegistry is thread-safe. A ReusableBuffer is
// thread-compatible (its owner serialises use).
#ifndef GIFT_SERVER_AGGREGATOR_REUSABLE_BUFFER_H_
#define GIFT_SERVER_AGGREGATOR_REUSABLE_BUFFER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"
#include "common/transport/transport.h"

namespace gift::server {

// Registers buffers with a transport (e.g. Transport::RegisterMemory), or
// null to register nothing.
using RegisterMemoryFn =
    std::function<absl::StatusOr<std::unique_ptr<transport::MemoryRegion>>(absl::Span<uint8_t>)>;

class BufferRegistry {
 public:
  explicit BufferRegistry(RegisterMemoryFn register_memory)
      : register_memory_(std::move(register_memory)) {}
  ~BufferRegistry();  // Drains.

  // A registration of `buffer`, or null when registration is off, closed or
  // failed (it is an optimisation). Never on the progress thread.
  std::unique_ptr<transport::MemoryRegion> Register(absl::Span<uint8_t> buffer);

  // Takes a buffer's memory and registration; they are freed on the next
  // Drain (registration first). Any thread.
  void Retire(std::unique_ptr<uint8_t[]> memory, std::unique_ptr<transport::MemoryRegion> region);

  // Frees what was retired. Never on the progress thread.
  void Drain();

  // Drains and stops registering; registrations retired afterwards are
  // leaked, never unregistered (the transport may be gone). Call before the
  // transport is destroyed.
  void Close();

 private:
  struct Retired {
    std::unique_ptr<uint8_t[]> memory;
    std::unique_ptr<transport::MemoryRegion> region;
  };
  const RegisterMemoryFn register_memory_;
  absl::Mutex mu_;
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<Retired> retired_ ABSL_GUARDED_BY(mu_);
};

class ReusableBuffer {
 public:
  ReusableBuffer() = default;
  ReusableBuffer(ReusableBuffer&& other) noexcept { *this = std::move(other); }
  ReusableBuffer& operator=(ReusableBuffer&& other) noexcept;
  ~ReusableBuffer() { Release(); }

  // Sets the size to `bytes`; when that exceeds the capacity, the buffer is
  // reallocated (contents lost, the old memory retired) and is unregistered
  // until Register. Any thread (the registry, when set, takes the old
  // memory).
  void Resize(size_t bytes, const std::shared_ptr<BufferRegistry>& registry);

  // Registers the whole capacity when it is not registered yet (a no-op
  // without a registry). Never on the progress thread.
  void Register();
  // Drops the registration now, keeping the memory. Never on the progress
  // thread.
  void Unregister() { region_.reset(); }

  absl::Span<uint8_t> span() { return {data_.get(), size_}; }
  absl::Span<const uint8_t> span() const { return {data_.get(), size_}; }
  uint8_t* data() { return data_.get(); }
  size_t size() const { return size_; }
  size_t capacity() const { return capacity_; }
  bool registered() const { return region_ != nullptr; }

 private:
  void Release();

  std::unique_ptr<uint8_t[]> data_;
  size_t size_ = 0;
  size_t capacity_ = 0;
  std::unique_ptr<transport::MemoryRegion> region_;
  std::shared_ptr<BufferRegistry> registry_;
};

}  // namespace gift::server

#endif  // GIFT_SERVER_AGGREGATOR_REUSABLE_BUFFER_H_
