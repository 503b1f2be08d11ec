// A move-only owner of one handle of a C library that creates handles
// through an out-parameter and destroys them with one call (a CUDA stream
// or event, a cuBLAS or cuSOLVER handle):
//
//   UniqueHandle<cudaStream_t, cudaStreamDestroy> stream;
//   cudaStreamCreate(stream.put());   // destroys a held stream first
//   kernel<<<g, b, 0, stream.get()>>>(...);
//   // destroyed with `stream` (or on reset / move-assignment)
//
// A value-initialized T (null) means "none": it is never destroyed. The
// destroy call's result is ignored (nothing can be done about it in a
// destructor). Header-only and free of any CUDA header, so that host code
// can name the type.
//
// Thread safety: as the handle's library says; the owner is not shared.
#ifndef GIFT_COMMON_BASE_UNIQUE_HANDLE_H_
#define GIFT_COMMON_BASE_UNIQUE_HANDLE_H_

#include <utility>

namespace gift {

template <typename T, auto Destroy>
class UniqueHandle {
 public:
  UniqueHandle() = default;
  ~UniqueHandle() { reset(); }
  UniqueHandle(UniqueHandle&& other) noexcept : h_(std::exchange(other.h_, T{})) {}
  UniqueHandle& operator=(UniqueHandle&& other) noexcept {
    if (this != &other) {
      reset();
      h_ = std::exchange(other.h_, T{});
    }
    return *this;
  }
  UniqueHandle(const UniqueHandle&) = delete;
  UniqueHandle& operator=(const UniqueHandle&) = delete;

  T get() const { return h_; }
  explicit operator bool() const { return h_ != T{}; }

  // Destroys the handle held, if any, and returns where a create call
  // writes the next one.
  T* put() {
    reset();
    return &h_;
  }

  // Destroys the handle held, if any.
  void reset() {
    if (h_ != T{}) Destroy(h_);
    h_ = T{};
  }

 private:
  T h_{};
};

}  // namespace gift

#endif  // GIFT_COMMON_BASE_UNIQUE_HANDLE_H_
