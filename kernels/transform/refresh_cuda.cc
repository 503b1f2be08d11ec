#include "kernels/transform/refresh_cuda.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/transform/gaussian_sketch.h"
#include "kernels/cuda_status.h"
#include "kernels/transform/cublas_handle.h"

namespace gift::kernels {
namespace {

using transform::LowRankEigenOptions;
using transform::LowRankEigenpairs;
using transform::SideBasis;

absl::Status CheckHandles(const RefreshHandles& h) {
  if (h.cublas == nullptr || h.cusolver == nullptr) {
    return absl::InvalidArgumentError("refresh needs a cuBLAS and a cuSOLVER handle");
  }
  return absl::OkStatus();
}

// Stream-ordered device scratch of `count` elements of T, freed on the
// stream on destruction.
template <typename T>
class Scratch {
 public:
  Scratch() = default;
  ~Scratch() {
    if (ptr_ != nullptr) (void)cudaFreeAsync(ptr_, stream_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  absl::Status Allocate(size_t count, cudaStream_t stream) {
    stream_ = stream;
    return CudaStatus(cudaMallocAsync(reinterpret_cast<void**>(&ptr_),
                                      std::max<size_t>(count, 1) * sizeof(T), stream),
                      "cudaMallocAsync");
  }
  T* get() const { return ptr_; }
  void Swap(Scratch& o) {
    std::swap(ptr_, o.ptr_);
    std::swap(stream_, o.stream_);
  }

 private:
  T* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// Enqueues the download of `count` elements and waits for the stream.
template <typename T>
absl::Status DownloadAndWait(const RefreshHandles& h, const T* src, size_t count, T* dst) {
  GIFT_RETURN_IF_ERROR(
      CudaStatus(cudaMemcpyAsync(dst, src, count * sizeof(T), cudaMemcpyDeviceToHost, h.stream),
                 "cudaMemcpyAsync"));
  return CudaStatus(cudaStreamSynchronize(h.stream), "cudaStreamSynchronize");
}

// The dense and the randomized eigen steps share these: one devInfo slot
// per cuSOLVER call (checked together at the end), one workspace.
struct Solver {
  const RefreshHandles& h;
  Scratch<int> info;
  int calls = 0;
  int max_calls = 0;
  Scratch<float> work;
  int lwork = 0;

  absl::Status Init(int slots, int workspace) {
    max_calls = slots;
    lwork = workspace;
    GIFT_RETURN_IF_ERROR(info.Allocate(slots, h.stream));
    GIFT_RETURN_IF_ERROR(CudaStatus(cudaMemsetAsync(info.get(), 0, slots * sizeof(int), h.stream),
                                    "cudaMemsetAsync"));
    return work.Allocate(workspace, h.stream);
  }
  int* NextInfo() { return info.get() + std::min(calls++, max_calls - 1); }

  // Q = qr(y) in place (n x k, column-major, ld n); tau: k floats.
  absl::Status Orthonormalize(float* y, int n, int k, float* tau) {
    GIFT_RETURN_IF_ERROR(
        CusolverStatus(cusolverDnSgeqrf(h.cusolver, n, k, y, n, tau, work.get(), lwork, NextInfo()),
                       "cusolverDnSgeqrf"));
    return CusolverStatus(
        cusolverDnSorgqr(h.cusolver, n, k, k, y, n, tau, work.get(), lwork, NextInfo()),
        "cusolverDnSorgqr");
  }
  // Eigendecomposition of the symmetric m x m `b` (lower triangle) in place:
  // vectors in b, values ascending in w.
  absl::Status Eigh(float* b, int m, float* w) {
    return CusolverStatus(
        cusolverDnSsyevd(h.cusolver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, m, b, m, w,
                         work.get(), lwork, NextInfo()),
        "cusolverDnSsyevd");
  }
  // Internal when any call reported devInfo != 0. Synchronizes.
  absl::Status CheckInfo() {
    std::vector<int> host(max_calls);
    GIFT_RETURN_IF_ERROR(DownloadAndWait(h, info.get(), host.size(), host.data()));
    for (int i = 0; i < std::min(calls, max_calls); ++i) {
      if (host[i] != 0) {
        return absl::InternalError(
            absl::StrCat("cuSOLVER call ", i, " of the refresh reported devInfo = ", host[i]));
      }
    }
    return absl::OkStatus();
  }
};

absl::Status Symm(const RefreshHandles& h, const float* a, int n, const float* x, int k, float* y) {
  const float one = 1.0f, zero = 0.0f;
  return CublasStatus(cublasSsymm(h.cublas, CUBLAS_SIDE_LEFT, CUBLAS_FILL_MODE_LOWER, n, k, &one, a,
                                  n, x, n, &zero, y, n),
                      "cublasSsymm");
}

// The top `rank` of m ascending (values, vectors: m_rows x m column-major)
// pairs, descending, values clamped >= 0, widened to double.
LowRankEigenpairs TopPairs(const std::vector<float>& values, const std::vector<float>& vectors,
                           int64_t rows, int64_t m, int64_t rank) {
  LowRankEigenpairs out;
  out.values.resize(rank);
  out.vectors.resize(rows, rank);
  for (int64_t j = 0; j < rank; ++j) {
    const int64_t src = m - 1 - j;
    out.values(j) = std::max(static_cast<double>(values[src]), 0.0);
    for (int64_t i = 0; i < rows; ++i) out.vectors(i, j) = vectors[i + src * rows];
  }
  return out;
}

// FP32 vectors are orthonormal to ~1e-6; SideBasis wants double's 1e-9.
// One Cholesky QR in double on the host (V <- V L^-T, G = V^T V = L L^T;
// O(n r^2)) keeps each column's direction and sign and leaves ~1e-15.
absl::Status Reorthonormalize(Eigen::MatrixXd& v) {
  const Eigen::MatrixXd gram = v.transpose() * v;
  const Eigen::LLT<Eigen::MatrixXd> llt(gram);
  if (llt.info() != Eigen::Success) {
    return absl::InternalError("the GPU eigenvectors are not linearly independent");
  }
  v = llt.matrixU().solve<Eigen::OnTheRight>(v);  // V U^-1, U = L^T
  return absl::OkStatus();
}

}  // namespace

absl::Status CusolverStatus(cusolverStatus_t st, const char* what) {
  if (st == CUSOLVER_STATUS_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": cuSOLVER status ", static_cast<int>(st)));
}

absl::Status CusolverHandle::Init(cudaStream_t stream) {
  GIFT_RETURN_IF_ERROR(CusolverStatus(cusolverDnCreate(h_.put()), "cusolverDnCreate"));
  return CusolverStatus(cusolverDnSetStream(h_.get(), stream), "cusolverDnSetStream");
}

// ---- statistics -------------------------------------------------------------

absl::StatusOr<SideStatisticsCuda> SideStatisticsCuda::Create(int64_t n, double decay) {
  if (n < 1 || n > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("dimension ", n, " is not in [1, INT_MAX]"));
  }
  if (!(decay >= 0.0 && decay < 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat("decay ", decay, " is not in [0, 1)"));
  }
  if (!CudaDeviceAvailable()) return absl::FailedPreconditionError("no CUDA device");
  void* value = nullptr;
  GIFT_RETURN_IF_ERROR(CudaStatus(
      cudaMalloc(&value, static_cast<size_t>(n) * static_cast<size_t>(n) * sizeof(float)),
      "cudaMalloc"));
  return SideStatisticsCuda(n, decay, static_cast<float*>(value));
}

SideStatisticsCuda::SideStatisticsCuda(SideStatisticsCuda&& o) noexcept
    : n_(o.n_),
      decay_(o.decay_),
      num_updates_(o.num_updates_),
      value_(std::exchange(o.value_, nullptr)) {}

SideStatisticsCuda& SideStatisticsCuda::operator=(SideStatisticsCuda&& o) noexcept {
  if (this != &o) {
    if (value_ != nullptr) cudaFree(value_);
    n_ = o.n_;
    decay_ = o.decay_;
    num_updates_ = o.num_updates_;
    value_ = std::exchange(o.value_, nullptr);
  }
  return *this;
}

SideStatisticsCuda::~SideStatisticsCuda() {
  if (value_ != nullptr) cudaFree(value_);
}

absl::Status SideStatisticsCuda::Update(const RefreshHandles& handles, StatisticsSide side,
                                        absl::Span<const float* const> grads, int64_t d_out,
                                        int64_t d_in) {
  GIFT_RETURN_IF_ERROR(CheckHandles(handles));
  if (grads.empty()) return absl::InvalidArgumentError("no gradients given");
  if (d_out < 1 || d_in < 1 || d_out > INT_MAX || d_in > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("bad gradient shape ", d_out, "x", d_in));
  }
  const bool input = side == StatisticsSide::kInput;
  if ((input ? d_in : d_out) != n_) {
    return absl::InvalidArgumentError(absl::StrCat(input ? "input" : "output",
                                                   " side of dimension ", n_, " given a ", d_out,
                                                   "x", d_in, " gradient"));
  }
  for (size_t i = 0; i < grads.size(); ++i) {
    if (grads[i] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("gradient ", i, " is null"));
    }
  }
  // Row-major G (d_out x d_in) is the column-major d_in x d_out matrix
  // G^T with leading dimension d_in: the input side's G^T G is syrk N of
  // it (k = d_out), the output side's G G^T is syrk T (k = d_in). The
  // weights are SecondMomentEma's, rounded to FP32 once.
  const double weight =
      1.0 / (static_cast<double>(input ? d_out : d_in) * static_cast<double>(grads.size()));
  const float alpha = static_cast<float>((num_updates_ == 0 ? 1.0 : 1.0 - decay_) * weight);
  const float keep = num_updates_ == 0 ? 0.0f : static_cast<float>(decay_);
  const float one = 1.0f;
  const int n = static_cast<int>(n_);
  const int k = static_cast<int>(input ? d_out : d_in);
  const cublasOperation_t op = input ? CUBLAS_OP_N : CUBLAS_OP_T;
  for (size_t i = 0; i < grads.size(); ++i) {
    GIFT_RETURN_IF_ERROR(
        CublasStatus(cublasSsyrk(handles.cublas, CUBLAS_FILL_MODE_LOWER, op, n, k, &alpha, grads[i],
                                 static_cast<int>(d_in), i == 0 ? &keep : &one, value_, n),
                     "cublasSsyrk"));
  }
  ++num_updates_;
  return absl::OkStatus();
}

absl::StatusOr<Eigen::MatrixXd> SideStatisticsCuda::Download(const RefreshHandles& handles) const {
  std::vector<float> host(static_cast<size_t>(n_ * n_));
  GIFT_RETURN_IF_ERROR(
      DownloadAndWait(handles, static_cast<const float*>(value_), host.size(), host.data()));
  Eigen::MatrixXd m(n_, n_);
  for (int64_t j = 0; j < n_; ++j) {
    for (int64_t i = j; i < n_; ++i) m(i, j) = m(j, i) = host[i + j * n_];
  }
  return m;
}

// ---- eigenpairs -------------------------------------------------------------

absl::StatusOr<LowRankEigenpairs> TopEigenpairsCuda(const RefreshHandles& h, const float* a,
                                                    int64_t n64, int64_t rank,
                                                    const LowRankEigenOptions& options,
                                                    Eigen::VectorXd* diagonal) {
  GIFT_RETURN_IF_ERROR(CheckHandles(h));
  if (a == nullptr) return absl::InvalidArgumentError("null matrix");
  if (n64 < 1 || n64 > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("dimension ", n64, " is not in [1, INT_MAX]"));
  }
  if (rank < 1 || rank > n64) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " is not in [1, ", n64, "]"));
  }
  if (options.oversample < 0 || options.power_iterations < 0 || options.power_iterations > 1000) {
    return absl::InvalidArgumentError("oversample and power_iterations must be in [0, 1000]");
  }
  const int n = static_cast<int>(n64);
  const int k = static_cast<int>(std::min<int64_t>(rank + options.oversample, n64));
  const bool dense = rank + options.oversample >= n64;

  // The diagonal first: the trace, and a non-finite element anywhere in the
  // gradients that built `a` shows up here.
  std::vector<float> diag(n);
  {
    Scratch<float> d;
    GIFT_RETURN_IF_ERROR(d.Allocate(n, h.stream));
    GIFT_RETURN_IF_ERROR(
        CublasStatus(cublasScopy(h.cublas, n, a, n + 1, d.get(), 1), "cublasScopy"));
    GIFT_RETURN_IF_ERROR(
        DownloadAndWait(h, static_cast<const float*>(d.get()), diag.size(), diag.data()));
  }
  double trace = 0.0;
  for (const float v : diag) {
    if (!std::isfinite(v)) return absl::InvalidArgumentError("matrix has non-finite elements");
    trace += v;
  }

  Solver solver{h};
  const int m = dense ? n : k;  // the order of the dense eigenproblem
  Scratch<float> b, w, vectors;
  GIFT_RETURN_IF_ERROR(b.Allocate(static_cast<size_t>(m) * m, h.stream));
  GIFT_RETURN_IF_ERROR(w.Allocate(m, h.stream));
  std::vector<float> host_values(m);
  std::vector<float> host_vectors(static_cast<size_t>(n) * m);
  if (dense) {
    int lwork = 0;
    GIFT_RETURN_IF_ERROR(CusolverStatus(
        cusolverDnSsyevd_bufferSize(h.cusolver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, n,
                                    b.get(), n, w.get(), &lwork),
        "cusolverDnSsyevd_bufferSize"));
    GIFT_RETURN_IF_ERROR(solver.Init(1, lwork));
    GIFT_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpyAsync(b.get(), a, sizeof(float) * n * n, cudaMemcpyDeviceToDevice, h.stream),
        "cudaMemcpyAsync"));
    GIFT_RETURN_IF_ERROR(solver.Eigh(b.get(), n, w.get()));
    GIFT_RETURN_IF_ERROR(DownloadAndWait(h, static_cast<const float*>(b.get()), host_vectors.size(),
                                         host_vectors.data()));
  } else {
    Scratch<float> y, q, tau;
    const size_t nk = static_cast<size_t>(n) * k;
    GIFT_RETURN_IF_ERROR(y.Allocate(nk, h.stream));
    GIFT_RETURN_IF_ERROR(q.Allocate(nk, h.stream));
    GIFT_RETURN_IF_ERROR(tau.Allocate(k, h.stream));
    GIFT_RETURN_IF_ERROR(vectors.Allocate(nk, h.stream));
    int lq = 0, lo = 0, le = 0;
    GIFT_RETURN_IF_ERROR(
        CusolverStatus(cusolverDnSgeqrf_bufferSize(h.cusolver, n, k, y.get(), n, &lq),
                       "cusolverDnSgeqrf_bufferSize"));
    GIFT_RETURN_IF_ERROR(
        CusolverStatus(cusolverDnSorgqr_bufferSize(h.cusolver, n, k, k, y.get(), n, tau.get(), &lo),
                       "cusolverDnSorgqr_bufferSize"));
    GIFT_RETURN_IF_ERROR(CusolverStatus(
        cusolverDnSsyevd_bufferSize(h.cusolver, CUSOLVER_EIG_MODE_VECTOR, CUBLAS_FILL_MODE_LOWER, k,
                                    b.get(), k, w.get(), &le),
        "cusolverDnSsyevd_bufferSize"));
    const int calls = 2 * static_cast<int>(options.power_iterations + 1) + 1;
    GIFT_RETURN_IF_ERROR(solver.Init(calls, std::max({lq, lo, le})));

    // Omega: the CPU's sketch for this seed, rounded to FP32; into q.
    const Eigen::MatrixXd omega = transform::GaussianSketch(n, k, options.seed);
    std::vector<float> omega_f(nk);
    for (size_t i = 0; i < nk; ++i) omega_f[i] = static_cast<float>(omega.data()[i]);
    GIFT_RETURN_IF_ERROR(CudaStatus(cudaMemcpyAsync(q.get(), omega_f.data(), nk * sizeof(float),
                                                    cudaMemcpyHostToDevice, h.stream),
                                    "cudaMemcpyAsync"));
    GIFT_RETURN_IF_ERROR(Symm(h, a, n, q.get(), k, y.get()));  // Y = A Omega
    for (int64_t it = 0; it < options.power_iterations; ++it) {
      GIFT_RETURN_IF_ERROR(solver.Orthonormalize(y.get(), n, k, tau.get()));  // y <- Q
      GIFT_RETURN_IF_ERROR(Symm(h, a, n, y.get(), k, q.get()));               // q <- A Q
      y.Swap(q);
    }
    GIFT_RETURN_IF_ERROR(solver.Orthonormalize(y.get(), n, k, tau.get()));  // Q in y
    GIFT_RETURN_IF_ERROR(Symm(h, a, n, y.get(), k, q.get()));               // A Q in q
    const float one = 1.0f, half = 0.5f, zero = 0.0f;
    // tau (k floats) is too small for B: B = Q^T (A Q) goes to vectors, then
    // 0.5 (B + B^T) to b.
    GIFT_RETURN_IF_ERROR(CublasStatus(cublasSgemm(h.cublas, CUBLAS_OP_T, CUBLAS_OP_N, k, k, n, &one,
                                                  y.get(), n, q.get(), n, &zero, vectors.get(), k),
                                      "cublasSgemm"));
    GIFT_RETURN_IF_ERROR(
        CublasStatus(cublasSgeam(h.cublas, CUBLAS_OP_N, CUBLAS_OP_T, k, k, &half, vectors.get(), k,
                                 &half, vectors.get(), k, b.get(), k),
                     "cublasSgeam"));
    GIFT_RETURN_IF_ERROR(solver.Eigh(b.get(), k, w.get()));
    // Ritz vectors Q V (n x k; the top `rank` columns are kept on the host).
    GIFT_RETURN_IF_ERROR(CublasStatus(cublasSgemm(h.cublas, CUBLAS_OP_N, CUBLAS_OP_N, n, k, k, &one,
                                                  y.get(), n, b.get(), k, &zero, vectors.get(), n),
                                      "cublasSgemm"));
    GIFT_RETURN_IF_ERROR(DownloadAndWait(h, static_cast<const float*>(vectors.get()),
                                         host_vectors.size(), host_vectors.data()));
  }
  GIFT_RETURN_IF_ERROR(DownloadAndWait(h, static_cast<const float*>(w.get()), host_values.size(),
                                       host_values.data()));
  GIFT_RETURN_IF_ERROR(solver.CheckInfo());
  LowRankEigenpairs out = TopPairs(host_values, host_vectors, n, m, rank);
  if (!out.vectors.allFinite() || !out.values.allFinite()) {
    return absl::InternalError("the GPU eigenpairs are not finite");
  }
  GIFT_RETURN_IF_ERROR(Reorthonormalize(out.vectors));
  out.trace = trace;
  if (diagonal != nullptr) {
    diagonal->resize(n);
    for (int i = 0; i < n; ++i) (*diagonal)(i) = diag[i];
  }
  return out;
}

// ---- bases ------------------------------------------------------------------

absl::StatusOr<SideBasis> SideBasisFromStatisticsCuda(const RefreshHandles& handles,
                                                      const SideStatisticsCuda& statistics,
                                                      int64_t rank,
                                                      const transform::SideBasisOptions& options,
                                                      const LowRankEigenOptions& eigen_options) {
  if (statistics.num_updates() == 0) {
    return absl::FailedPreconditionError("the statistics have no update yet");
  }
  Eigen::VectorXd diag;
  GIFT_ASSIGN_OR_RETURN(LowRankEigenpairs eig,
                        TopEigenpairsCuda(handles, statistics.device_value(), statistics.dim(),
                                          rank, eigen_options, &diag));
  return SideBasis::FromEigenpairs(eig, diag, statistics.dim(), options);
}

absl::StatusOr<transform::TensorBasis> TensorBasisFromStatisticsCuda(
    const RefreshHandles& handles, const transform::TensorBasisHeader& header,
    const SideStatisticsCuda* output, const SideStatisticsCuda* input, int64_t rank,
    const transform::SideBasisOptions& options, const LowRankEigenOptions& eigen_options) {
  const transform::Sides sides = header.config.sides;
  const bool want_out = sides != transform::Sides::kInput;
  const bool want_in = sides != transform::Sides::kOutput;
  if (want_out != (output != nullptr) || want_in != (input != nullptr)) {
    return absl::InvalidArgumentError("statistics must be given exactly for the present sides");
  }
  if ((output != nullptr && output->dim() != header.d_out) ||
      (input != nullptr && input->dim() != header.d_in)) {
    return absl::InvalidArgumentError(
        absl::StrCat("statistics do not fit a ", header.d_out, "x", header.d_in, " tensor"));
  }
  std::optional<SideBasis> out_side, in_side;
  if (output != nullptr) {
    GIFT_ASSIGN_OR_RETURN(
        SideBasis side, SideBasisFromStatisticsCuda(handles, *output, std::min(rank, header.d_out),
                                                    options, eigen_options));
    out_side.emplace(std::move(side));
  }
  if (input != nullptr) {
    GIFT_ASSIGN_OR_RETURN(SideBasis side,
                          SideBasisFromStatisticsCuda(handles, *input, std::min(rank, header.d_in),
                                                      options, eigen_options));
    in_side.emplace(std::move(side));
  }
  return transform::TensorBasis::Create(header, std::move(out_side), std::move(in_side));
}

}  // namespace gift::kernels
