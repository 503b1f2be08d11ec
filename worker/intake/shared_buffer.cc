#include "worker/intake/shared_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gift::worker {

absl::StatusOr<SharedBuffer> SharedBuffer::MapSealed(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return absl::FailedPreconditionError(absl::StrCat("fstat: ", std::strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        "the buffer descriptor is not a memfd (not a regular file)");
  }
  if (st.st_size <= 0) return absl::FailedPreconditionError("the buffer memfd is empty");
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || (flags & O_ACCMODE) != O_RDWR) {
    return absl::FailedPreconditionError("the buffer descriptor is not open read-write");
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0 || (seals & F_SEAL_SHRINK) == 0) {
    return absl::FailedPreconditionError(
        "the buffer is not sealed against shrinking: hand over a memfd "
        "(MFD_ALLOW_SEALING) carrying F_SEAL_SHRINK, so that no later ftruncate can make the "
        "worker fault");
  }
  if ((seals & (F_SEAL_WRITE | F_SEAL_FUTURE_WRITE)) != 0) {
    return absl::FailedPreconditionError("the buffer memfd is sealed against writing");
  }
  const size_t length = static_cast<size_t>(st.st_size);
  void* mapping = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (mapping == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("mmap of the buffer memfd: ", std::strerror(errno)));
  }
  SharedBuffer buffer;
  buffer.data_ = static_cast<char*>(mapping);
  buffer.size_ = length;
  return buffer;
}

absl::StatusOr<char*> SharedBuffer::Range(uint64_t offset, uint64_t size,
                                          uint64_t alignment) const {
  if (size == 0) return absl::InvalidArgumentError("buffer range of size 0");
  if (offset > UINT64_MAX - size) return absl::InvalidArgumentError("offset + size overflows");
  if (offset + size > size_) {
    return absl::OutOfRangeError(absl::StrCat("the range [", offset, ", ", offset + size,
                                              ") ends past the buffer of ", size_, " bytes"));
  }
  if (offset % alignment != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("offset ", offset, " is not ", alignment, "-byte aligned"));
  }
  return data_ + offset;
}

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept { *this = std::move(other); }

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedBuffer::~SharedBuffer() { Reset(); }

void SharedBuffer::Reset() {
  if (data_ != nullptr) munmap(data_, static_cast<size_t>(size_));
  data_ = nullptr;
  size_ = 0;
}

}  // namespace gift::worker
