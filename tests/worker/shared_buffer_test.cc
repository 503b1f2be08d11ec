#include "worker/shared_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace gift::worker {
namespace {

// A shared-memory object of `bytes` bytes, unlinked at the end of the test.
class ShmObject {
 public:
  explicit ShmObject(size_t bytes) : name_(absl::StrCat("/gift-test-", getpid(), "-", ++count_)) {
    const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(ftruncate(fd, static_cast<off_t>(bytes)), 0);
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    EXPECT_NE(p, MAP_FAILED);
    data_ = static_cast<char*>(p);
    bytes_ = bytes;
    close(fd);
  }
  ~ShmObject() {
    munmap(data_, bytes_);
    shm_unlink(name_.c_str());
  }
  const std::string& name() const { return name_; }
  char* data() { return data_; }

 private:
  static inline int count_ = 0;
  std::string name_;
  char* data_ = nullptr;
  size_t bytes_ = 0;
};

TEST(SharedBufferTest, SharesBytesBothWaysAtAnUnalignedOffset) {
  ShmObject shm(3 * 4096);
  std::memset(shm.data(), 0, 3 * 4096);
  std::memcpy(shm.data() + 5000, "gradient", 8);
  auto buffer = SharedBuffer::Open(shm.name(), 5000, 100);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  EXPECT_EQ(std::memcmp(buffer->data(), "gradient", 8), 0);
  std::memcpy(buffer->data(), "average!", 8);
  EXPECT_EQ(std::memcmp(shm.data() + 5000, "average!", 8), 0);
  EXPECT_EQ(buffer->size(), 100u);
  SharedBuffer moved = *std::move(buffer);
  EXPECT_EQ(std::memcmp(moved.data(), "average!", 8), 0);
}

TEST(SharedBufferTest, RefusesBadRequests) {
  ShmObject shm(4096);
  EXPECT_EQ(SharedBuffer::Open("no-slash", 0, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedBuffer::Open("/a/b", 0, 8).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedBuffer::Open("/", 0, 8).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedBuffer::Open(shm.name(), 0, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedBuffer::Open(shm.name(), UINT64_MAX - 2, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharedBuffer::Open("/gift-test-does-not-exist", 0, 8).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(SharedBuffer::Open(shm.name(), 4000, 200).status().code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace gift::worker
