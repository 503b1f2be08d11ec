#include "server/aggregator/reusable_buffer.h"

#include <utility>

namespace gift::server {

BufferRegistry::~BufferRegistry() { Drain(); }

std::unique_ptr<transport::MemoryRegion> BufferRegistry::Register(absl::Span<uint8_t> buffer) {
  if (!register_memory_ || buffer.empty()) return nullptr;
  {
    absl::MutexLock lock(&mu_);
    if (closed_) return nullptr;
  }
  auto region = register_memory_(buffer);
  if (!region.ok()) return nullptr;
  return *std::move(region);
}

void BufferRegistry::Retire(std::unique_ptr<uint8_t[]> memory,
                            std::unique_ptr<transport::MemoryRegion> region) {
  absl::MutexLock lock(&mu_);
  if (closed_ && region != nullptr) {
    (void)region.release();  // the transport may be gone: never unregister
  }
  retired_.push_back({.memory = std::move(memory), .region = std::move(region)});
}

void BufferRegistry::Drain() {
  std::vector<Retired> retired;
  {
    absl::MutexLock lock(&mu_);
    retired.swap(retired_);
  }
  for (Retired& r : retired) {
    r.region.reset();  // unregister before the memory goes
    r.memory.reset();
  }
}

void BufferRegistry::Close() {
  Drain();
  absl::MutexLock lock(&mu_);
  closed_ = true;
}

ReusableBuffer& ReusableBuffer::operator=(ReusableBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::move(other.data_);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
    region_ = std::move(other.region_);
    registry_ = std::move(other.registry_);
  }
  return *this;
}

void ReusableBuffer::Release() {
  if (region_ != nullptr && registry_ != nullptr) {
    registry_->Retire(std::move(data_), std::move(region_));
  }
  region_.reset();
  data_.reset();
  size_ = capacity_ = 0;
}

void ReusableBuffer::Resize(size_t bytes, const std::shared_ptr<BufferRegistry>& registry) {
  if (bytes > capacity_) {
    Release();
    // No value-initialisation: the bytes are written before they are read.
    data_.reset(new uint8_t[bytes]);
    capacity_ = bytes;
  }
  registry_ = registry;
  size_ = bytes;
}

void ReusableBuffer::Register() {
  if (region_ != nullptr || registry_ == nullptr || capacity_ == 0) return;
  region_ = registry_->Register({data_.get(), capacity_});
}

}  // namespace gift::server
