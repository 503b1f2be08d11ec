// cuBLAS loaded when it is first called, not when a binary starts.
//
// Linking libcublas makes the dynamic loader run cuBLAS Lt's constructors at
// every start of every binary that links it: 0.5 CPU-seconds and about
// 220 MB of resident memory for gift-worker, on a machine with a GPU or
// without one (`gift-worker --help`: 1.03 s and 237 MB against the server's
// 0.08 s and 18 MB), and a worker could not start at all where the CUDA
// libraries are missing although only its device path uses them. The
// functions below are the cuBLAS entry points the project calls, defined
// here under cuBLAS's own names: the first call of any of them dlopens
// libcublas.so.<major> (the soname, then the toolkit's library directory
// the build found), and each forwards to the library's function. Where the
// library cannot be loaded every call returns CUBLAS_STATUS_NOT_INITIALIZED,
// and cublasGetStatusString says why (dlerror's text), so a device transform
// fails with a status like any other cuBLAS failure.
//
// Only the real (nvcc) builds link this; the host emulation of the tests
// (tests/kernels/cublas_host_emulation.cc) defines the same names itself.
// Thread safety: the library is loaded once (a function-local static); each
// entry point resolves its symbol once the same way.
#include <cublas_v2.h>
#include <dlfcn.h>

#include <string>

#define GIFT_CUBLAS_STR2(x) #x
#define GIFT_CUBLAS_STR(x) GIFT_CUBLAS_STR2(x)

namespace {

constexpr char kSoname[] = "libcublas.so." GIFT_CUBLAS_STR(CUBLAS_VER_MAJOR);

struct Library {
  void* handle = nullptr;
  std::string error;  // why it did not load
};

const Library& Loaded() {
  static const Library* const library = [] {
    auto* lib = new Library;
    lib->handle = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL);
    if (lib->handle == nullptr) {
      const char* first = dlerror();
      lib->error = first != nullptr ? first : kSoname;
#ifdef GIFT_CUDA_LIBRARY_DIR
      const std::string path = std::string(GIFT_CUDA_LIBRARY_DIR) + "/" + kSoname;
      lib->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
#endif
    }
    return lib;
  }();
  return *library;
}

// The library's `name`, or null where the library or the symbol is missing.
template <typename Fn>
Fn Resolve(const char* name) {
  const Library& lib = Loaded();
  return lib.handle == nullptr ? nullptr : reinterpret_cast<Fn>(dlsym(lib.handle, name));
}

}  // namespace

// Defines cuBLAS's `name` with `params`, forwarding `args` to the library's.
#define GIFT_CUBLAS_FORWARD(name, params, args)                                  \
  extern "C" cublasStatus_t CUBLASWINAPI name params {                           \
    static const auto fn = Resolve<cublasStatus_t(CUBLASWINAPI*) params>(#name); \
    return fn == nullptr ? CUBLAS_STATUS_NOT_INITIALIZED : fn args;              \
  }

GIFT_CUBLAS_FORWARD(cublasCreate_v2, (cublasHandle_t * handle), (handle))
GIFT_CUBLAS_FORWARD(cublasDestroy_v2, (cublasHandle_t handle), (handle))
GIFT_CUBLAS_FORWARD(cublasSetStream_v2, (cublasHandle_t handle, cudaStream_t stream),
                    (handle, stream))
GIFT_CUBLAS_FORWARD(cublasScopy_v2,
                    (cublasHandle_t handle, int n, const float* x, int incx, float* y, int incy),
                    (handle, n, x, incx, y, incy))
GIFT_CUBLAS_FORWARD(cublasSgemm_v2,
                    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                     int m, int n, int k, const float* alpha, const float* a, int lda,
                     const float* b, int ldb, const float* beta, float* c, int ldc),
                    (handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc))
GIFT_CUBLAS_FORWARD(cublasGemmEx,
                    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                     int m, int n, int k, const void* alpha, const void* a, cudaDataType a_type,
                     int lda, const void* b, cudaDataType b_type, int ldb, const void* beta,
                     void* c, cudaDataType c_type, int ldc, cublasComputeType_t compute,
                     cublasGemmAlgo_t algo),
                    (handle, transa, transb, m, n, k, alpha, a, a_type, lda, b, b_type, ldb, beta,
                     c, c_type, ldc, compute, algo))
GIFT_CUBLAS_FORWARD(cublasSgeam,
                    (cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
                     int m, int n, const float* alpha, const float* a, int lda, const float* beta,
                     const float* b, int ldb, float* c, int ldc),
                    (handle, transa, transb, m, n, alpha, a, lda, beta, b, ldb, c, ldc))
GIFT_CUBLAS_FORWARD(cublasSsymm_v2,
                    (cublasHandle_t handle, cublasSideMode_t side, cublasFillMode_t uplo, int m,
                     int n, const float* alpha, const float* a, int lda, const float* b, int ldb,
                     const float* beta, float* c, int ldc),
                    (handle, side, uplo, m, n, alpha, a, lda, b, ldb, beta, c, ldc))
GIFT_CUBLAS_FORWARD(cublasSsyrk_v2,
                    (cublasHandle_t handle, cublasFillMode_t uplo, cublasOperation_t trans, int n,
                     int k, const float* alpha, const float* a, int lda, const float* beta,
                     float* c, int ldc),
                    (handle, uplo, trans, n, k, alpha, a, lda, beta, c, ldc))

#undef GIFT_CUBLAS_FORWARD

// The status texts: the library's where it loaded, else why it did not.
extern "C" const char* CUBLASWINAPI cublasGetStatusName(cublasStatus_t status) {
  static const auto fn = Resolve<const char*(CUBLASWINAPI*)(cublasStatus_t)>("cublasGetStatusName");
  return fn != nullptr ? fn(status) : "CUBLAS_STATUS_NOT_INITIALIZED";
}

extern "C" const char* CUBLASWINAPI cublasGetStatusString(cublasStatus_t status) {
  static const auto fn =
      Resolve<const char*(CUBLASWINAPI*)(cublasStatus_t)>("cublasGetStatusString");
  if (fn != nullptr) return fn(status);
  static const std::string* const why =
      new std::string("cuBLAS could not be loaded: " + Loaded().error);
  return why->c_str();
}
