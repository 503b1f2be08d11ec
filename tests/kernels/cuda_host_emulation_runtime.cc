// The CUDA runtime API functions used by the codec and its tests, emulated
// on the host for cuda_host_emulation.h: one "device" whose memory is host
// memory (malloc, so AddressSanitizer sees exact bounds), streams that are
// only tokens, and calls that complete before they return.
//
// Linked instead of libcudart into the emulated test binary only.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>

namespace {

// Small, so that grid-stride loops take several turns even on small inputs.
constexpr int kEmulatedSms = 2;

thread_local cudaError_t last_error = cudaSuccess;

cudaError_t Fail(cudaError_t e) {
  last_error = e;
  return e;
}

}  // namespace

extern "C" {

cudaError_t cudaGetLastError(void) {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}

const char* cudaGetErrorName(cudaError_t error) {
  return error == cudaSuccess ? "cudaSuccess" : "cudaErrorEmulated";
}

const char* cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "emulated CUDA error";
}

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, enum cudaDeviceAttr attr, int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  *value = attr == cudaDevAttrMultiProcessorCount ? kEmulatedSms : 0;
  return cudaSuccess;
}

// A stream is a token holding its priority (kept, for cudaStreamGetPriority;
// it orders nothing, since every call completes at once). The emulated
// device's priority range is a current NVIDIA GPU's: 0 (the least, and the
// default) to -5.
constexpr int kLeastPriority = 0, kGreatestPriority = -5;

cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int /*flags*/,
                                         int priority) {
  int* token = static_cast<int*>(std::malloc(sizeof(int)));
  if (token == nullptr) return Fail(cudaErrorMemoryAllocation);
  // Clamped into the range, as CUDA does.
  *token = priority > kLeastPriority      ? kLeastPriority
           : priority < kGreatestPriority ? kGreatestPriority
                                          : priority;
  *stream = reinterpret_cast<cudaStream_t>(token);
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) {
  return cudaStreamCreateWithPriority(stream, flags, kLeastPriority);
}

cudaError_t cudaStreamGetPriority(cudaStream_t stream, int* priority) {
  if (stream == nullptr) return Fail(cudaErrorInvalidResourceHandle);
  *priority = *reinterpret_cast<int*>(stream);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  *least = kLeastPriority;
  *greatest = kGreatestPriority;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return Fail(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::strcpy(prop->name, "host emulation");
  prop->multiProcessorCount = kEmulatedSms;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  std::free(stream);
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t /*stream*/) { return cudaSuccess; }

cudaError_t cudaMalloc(void** ptr, size_t size) {
  *ptr = std::malloc(size == 0 ? 1 : size);
  return *ptr == nullptr ? Fail(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t /*stream*/) {
  return cudaMalloc(ptr, size);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t /*stream*/) { return cudaFree(ptr); }

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind /*kind*/) {
  if (count > 0) std::memcpy(dst, src, count);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind,
                            cudaStream_t /*stream*/) {
  return cudaMemcpy(dst, src, count, kind);
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (count > 0) std::memset(ptr, value, count);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t /*stream*/) {
  if (count > 0) std::memset(ptr, value, count);
  return cudaSuccess;
}

// Events and page-locking, for the worker's device stage: the emulated
// device runs every call to completion, so an event is complete once
// recorded, and host memory needs no pinning.
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int /*flags*/) {
  *event = static_cast<cudaEvent_t>(std::malloc(1));
  return *event == nullptr ? Fail(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  std::free(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t /*stream*/) {
  return event == nullptr ? Fail(cudaErrorInvalidResourceHandle) : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  return event == nullptr ? Fail(cudaErrorInvalidResourceHandle) : cudaSuccess;
}

cudaError_t cudaHostRegister(void* ptr, size_t size, unsigned int /*flags*/) {
  return ptr == nullptr || size == 0 ? Fail(cudaErrorInvalidValue) : cudaSuccess;
}

cudaError_t cudaHostUnregister(void* ptr) {
  return ptr == nullptr ? Fail(cudaErrorInvalidValue) : cudaSuccess;
}

// Page-locked allocations are plain host memory here.
cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int /*flags*/) {
  *ptr = std::malloc(size == 0 ? 1 : size);
  return *ptr == nullptr ? Fail(cudaErrorMemoryAllocation) : cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  std::free(ptr);
  return cudaSuccess;
}

}  // extern "C"
