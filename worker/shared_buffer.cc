#include "worker/shared_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gift::worker {
namespace {

// POSIX allows names up to NAME_MAX (255) after the leading slash.
constexpr size_t kMaxNameBytes = 255;

absl::Status Errno(absl::string_view what, absl::string_view name, int err) {
  const std::string message = absl::StrCat(what, " '", name, "': ", std::strerror(err));
  switch (err) {
    case ENOENT:
      return absl::NotFoundError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

}  // namespace

absl::StatusOr<SharedBuffer> SharedBuffer::Open(absl::string_view name, uint64_t offset,
                                                uint64_t size) {
  if (name.size() < 2 || name.size() > kMaxNameBytes + 1 || name[0] != '/' ||
      name.find('/', 1) != absl::string_view::npos || name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory name '", name, "' is not of the form /name"));
  }
  if (size == 0) return absl::InvalidArgumentError("shared buffer of size 0");
  if (offset > UINT64_MAX - size) {
    return absl::InvalidArgumentError("shared buffer offset + size overflows");
  }
  const std::string path(name);
  const int fd = shm_open(path.c_str(), O_RDWR, 0);
  if (fd < 0) return Errno("shm_open", name, errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return Errno("fstat", name, err);
  }
  if (static_cast<uint64_t>(st.st_size) < offset + size) {
    close(fd);
    return absl::OutOfRangeError(absl::StrCat("shared-memory object '", name, "' has ", st.st_size,
                                              " bytes, the buffer needs ", offset + size));
  }
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t aligned = offset - offset % page;
  const size_t length = static_cast<size_t>(offset + size - aligned);
  void* mapping =
      mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(aligned));
  const int err = errno;
  close(fd);  // the mapping keeps the object alive
  if (mapping == MAP_FAILED) return Errno("mmap", name, err);
  SharedBuffer buffer;
  buffer.name_ = path;
  buffer.mapping_ = mapping;
  buffer.mapping_size_ = length;
  buffer.data_ = static_cast<char*>(mapping) + (offset - aligned);
  buffer.size_ = size;
  return buffer;
}

SharedBuffer::SharedBuffer(SharedBuffer&& other) noexcept { *this = std::move(other); }

SharedBuffer& SharedBuffer::operator=(SharedBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::move(other.name_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_size_ = std::exchange(other.mapping_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

SharedBuffer::~SharedBuffer() { Reset(); }

void SharedBuffer::Reset() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_size_);
  mapping_ = nullptr;
  data_ = nullptr;
  mapping_size_ = 0;
  size_ = 0;
}

}  // namespace gift::worker
