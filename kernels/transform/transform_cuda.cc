// Host side of the CUDA transform: the per-side operators built in double
// from the basis's parts, their upload, validation, status conversion, and
// the order of the cuBLAS calls and the scaling kernel (transform_cuda.h has
// the algebra).
//
// Layout: cuBLAS is column-major, so a row-major d_out x d_in tensor G is
// seen as the column-major d_in x d_out matrix G^T (leading dimension d_in),
// and every step below computes the transpose of the formula it implements:
//   P    (d_out x r_i) = G A1_i             -> R[:, 0:r_i]
//   Q^T  (d_in  x r_o) = G^T A1_o           -> L[:, r_i:k]
//   K    (r_o x r_i)   = A1_o^T P
//   L[:, r_i:k] = diag(s_i) Q^T + A2_i K^T,   R[:, 0:r_i] = diag(s_o) P
//   out = diag(s_o) G diag(s_i)                          (ScaleOuter kernel)
//   out^T += L R^T, with L = [A2_i | ...] (d_in x k), R = [... | A2_o] (d_out x k)
// where k = r_i + r_o, and A2_i, A2_o are stored in L and R once at upload.
#include "kernels/transform/transform_cuda.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <Eigen/Dense>
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/transform/side_basis.h"
#include "common/transform/tensor_basis.h"
#include "kernels/cuda_status.h"
#include "kernels/transform/cublas_handle.h"
#include "kernels/transform/transform_kernels.h"

namespace gift::kernels {
namespace {

using transform::SideBasis;

// Device memory for `count` floats, freed on destruction.
class DeviceFloats {
 public:
  DeviceFloats() = default;
  ~DeviceFloats() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  DeviceFloats(DeviceFloats&& o) noexcept : ptr_(std::exchange(o.ptr_, nullptr)) {}
  DeviceFloats& operator=(DeviceFloats&& o) noexcept {
    if (this != &o) {
      if (ptr_ != nullptr) cudaFree(ptr_);
      ptr_ = std::exchange(o.ptr_, nullptr);
    }
    return *this;
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;

  // A buffer holding a copy of `host` (empty: no allocation).
  static absl::StatusOr<DeviceFloats> Upload(const std::vector<float>& host) {
    DeviceFloats d;
    if (host.empty()) return d;
    GIFT_RETURN_IF_ERROR(
        CudaStatus(cudaMalloc(&d.ptr_, host.size() * sizeof(float)), "cudaMalloc"));
    GIFT_RETURN_IF_ERROR(CudaStatus(
        cudaMemcpy(d.ptr_, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
        "cudaMemcpy"));
    return d;
  }

  float* get() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// One side's operator in one direction, as FP32 host arrays: the diagonal
// s (n values) and A1, A2 (n x r, column-major); see transform_cuda.h.
struct SideOperator {
  std::vector<float> s, a1, a2;
};

std::vector<float> ToFloats(const Eigen::MatrixXd& m) {
  std::vector<float> out(m.size());
  for (Eigen::Index i = 0; i < m.size(); ++i) out[i] = static_cast<float>(m.data()[i]);
  return out;
}

// Forward: s = D^{-p}, A1 = D^{-p} Z, A2 = Z diag((1+Sig)^{-p} - 1).
// Inverse: s = D^p,    A1 = Z,        A2 = D^p Z diag((1+Sig)^p - 1).
// In double, as SideBasis computes its own factors, then rounded once.
SideOperator MakeSideOperator(const SideBasis& side, double p, bool inverse) {
  const SideBasis::Parts& parts = side.parts();
  const int64_t n = side.dim();
  const double q = inverse ? p : -p;
  const Eigen::VectorXd d = parts.d.size() == 1
                                ? Eigen::VectorXd::Constant(n, std::pow(parts.d(0), q))
                                : Eigen::VectorXd(parts.d.array().pow(q));
  const Eigen::VectorXd core = parts.one_plus_sig.array().pow(q) - 1.0;
  const Eigen::MatrixXd z_core = parts.z * core.asDiagonal();
  SideOperator op;
  op.s = ToFloats(d);
  if (inverse) {
    op.a1 = ToFloats(parts.z);
    op.a2 = ToFloats(d.asDiagonal() * z_core);
  } else {
    op.a1 = ToFloats(d.asDiagonal() * parts.z);
    op.a2 = ToFloats(z_core);
  }
  return op;
}

// The device buffers of one direction. L (d_in x k) holds A2_i in its first
// r_i columns, R (d_out x k) holds A2_o in its last r_o columns; the other
// columns are written by each call.
struct DirectionBuffers {
  DeviceFloats a1_in, s_in;    // present with the input side
  DeviceFloats a1_out, s_out;  // present with the output side
  DeviceFloats left, right;
};

}  // namespace

struct TensorBasisCuda::Impl {
  int64_t d_out = 0;
  int64_t d_in = 0;
  int r_in = 0;   // 0: no input side
  int r_out = 0;  // 0: no output side
  cudaStream_t stream = nullptr;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  CublasHandle handle;
  DirectionBuffers forward, inverse;
  DeviceFloats k_buffer;  // K (r_out x r_in), with both sides

  absl::Status Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) const {
    const float alpha = 1.0f;
    return CublasStatus(
        cublasGemmEx(handle.get(), ta, tb, m, n, k, &alpha, a, CUDA_R_32F, lda, b, CUDA_R_32F, ldb,
                     &beta, c, CUDA_R_32F, ldc, compute, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  }

  absl::Status Scale(const float* in, float* out, int64_t rows, int64_t cols,
                     const float* row_scale, const float* col_scale) const {
    internal::ScaleOuterArgs args;
    args.in = in;
    args.out = out;
    args.rows = static_cast<uint64_t>(rows);
    args.cols = static_cast<uint64_t>(cols);
    args.row_scale = row_scale;
    args.col_scale = col_scale;
    return CudaStatus(internal::EnqueueScaleOuter(args, stream), "ScaleOuter kernel");
  }

  // Every step of the transform but the last two (transform_cuda.h,
  // LowRankTerms): the GEMMs over `in` and the small r-sized work, leaving
  // L and R complete.
  absl::StatusOr<LowRankTerms> PrepareLowRank(const DirectionBuffers& dir, const float* in) const {
    const int m = static_cast<int>(d_out);
    const int n = static_cast<int>(d_in);
    float* const left = dir.left.get();
    float* const right = dir.right.get();
    float* const q_t = left + static_cast<int64_t>(n) * r_in;  // L[:, r_i:k]
    if (r_in > 0) {                                            // P = G A1_i
      GIFT_RETURN_IF_ERROR(
          Gemm(CUBLAS_OP_T, CUBLAS_OP_N, m, r_in, n, in, n, dir.a1_in.get(), n, 0.0f, right, m));
    }
    if (r_out > 0) {  // Q^T = G^T A1_o
      GIFT_RETURN_IF_ERROR(
          Gemm(CUBLAS_OP_N, CUBLAS_OP_N, n, r_out, m, in, n, dir.a1_out.get(), m, 0.0f, q_t, n));
    }
    if (r_in > 0 && r_out > 0) {
      // K = A1_o^T P, before P is scaled.
      GIFT_RETURN_IF_ERROR(Gemm(CUBLAS_OP_T, CUBLAS_OP_N, r_out, r_in, m, dir.a1_out.get(), m,
                                right, m, 0.0f, k_buffer.get(), r_out));
      // Q^T <- diag(s_i) Q^T + A2_i K^T (Q^T as row-major r_o x d_in: scale its columns).
      GIFT_RETURN_IF_ERROR(Scale(q_t, q_t, r_out, n, nullptr, dir.s_in.get()));
      GIFT_RETURN_IF_ERROR(Gemm(CUBLAS_OP_N, CUBLAS_OP_T, n, r_out, r_in, left, n, k_buffer.get(),
                                r_out, 1.0f, q_t, n));
      // P <- diag(s_o) P (P as row-major r_i x d_out: scale its columns).
      GIFT_RETURN_IF_ERROR(Scale(right, right, r_in, m, nullptr, dir.s_out.get()));
    }
    LowRankTerms terms;
    terms.s_out = r_out > 0 ? dir.s_out.get() : nullptr;
    terms.s_in = r_in > 0 ? dir.s_in.get() : nullptr;
    terms.left = left;
    terms.right = right;
    terms.k = r_in + r_out;
    return terms;
  }

  absl::Status Apply(const DirectionBuffers& dir, const float* in, float* out) const {
    GIFT_ASSIGN_OR_RETURN(const LowRankTerms t, PrepareLowRank(dir, in));
    const int m = static_cast<int>(d_out);
    const int n = static_cast<int>(d_in);
    // out = diag(s_o) G diag(s_i), after every read of `in` above (in place allowed).
    GIFT_RETURN_IF_ERROR(Scale(in, out, m, n, t.s_out, t.s_in));
    // out^T += L R^T.
    return Gemm(CUBLAS_OP_N, CUBLAS_OP_T, n, m, t.k, t.left, n, t.right, m, 1.0f, out, n);
  }

  absl::Status Check(const char* fn, const float* in, int64_t rows, int64_t cols,
                     const float* out) const {
    if (in == nullptr || out == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(fn, ": null buffer"));
    }
    if (rows != d_out || cols != d_in) {
      return absl::InvalidArgumentError(absl::StrCat(fn, ": tensor of shape ", rows, "x", cols,
                                                     " for a basis of shape ", d_out, "x", d_in));
    }
    return absl::OkStatus();
  }
};

namespace {

// Uploads one direction's operators. `in_op` / `out_op` are absent for a
// side not enabled.
absl::StatusOr<DirectionBuffers> UploadDirection(const std::optional<SideOperator>& in_op,
                                                 const std::optional<SideOperator>& out_op,
                                                 int64_t d_out, int64_t d_in, int r_in, int r_out) {
  const int64_t k = r_in + r_out;
  std::vector<float> left(d_in * k, 0.0f), right(d_out * k, 0.0f);
  DirectionBuffers b;
  if (in_op.has_value()) {
    std::copy(in_op->a2.begin(), in_op->a2.end(), left.begin());
    GIFT_ASSIGN_OR_RETURN(b.a1_in, DeviceFloats::Upload(in_op->a1));
    GIFT_ASSIGN_OR_RETURN(b.s_in, DeviceFloats::Upload(in_op->s));
  }
  if (out_op.has_value()) {
    std::copy(out_op->a2.begin(), out_op->a2.end(), right.begin() + d_out * r_in);
    GIFT_ASSIGN_OR_RETURN(b.a1_out, DeviceFloats::Upload(out_op->a1));
    GIFT_ASSIGN_OR_RETURN(b.s_out, DeviceFloats::Upload(out_op->s));
  }
  GIFT_ASSIGN_OR_RETURN(b.left, DeviceFloats::Upload(left));
  GIFT_ASSIGN_OR_RETURN(b.right, DeviceFloats::Upload(right));
  return b;
}

}  // namespace

absl::StatusOr<TensorBasisCuda> TensorBasisCuda::Create(const transform::TensorBasis& basis,
                                                        cudaStream_t stream, TransformMath math) {
  if (!CudaDeviceAvailable()) {
    return absl::FailedPreconditionError("TensorBasisCuda::Create: no CUDA device is available");
  }
  const transform::TensorBasisHeader& h = basis.header();
  if (h.d_out > INT_MAX || h.d_in > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("TensorBasisCuda::Create: shape ", h.d_out, "x",
                                                   h.d_in, " exceeds cuBLAS's int dimensions"));
  }
  auto impl = std::make_unique<Impl>();
  impl->d_out = h.d_out;
  impl->d_in = h.d_in;
  impl->stream = stream;
  impl->compute = math == TransformMath::kTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const double p = h.config.power;
  std::optional<SideOperator> in_fwd, in_inv, out_fwd, out_inv;
  if (basis.input_side().has_value()) {
    impl->r_in = static_cast<int>(basis.input_side()->rank());
    in_fwd = MakeSideOperator(*basis.input_side(), p, /*inverse=*/false);
    in_inv = MakeSideOperator(*basis.input_side(), p, /*inverse=*/true);
  }
  if (basis.output_side().has_value()) {
    impl->r_out = static_cast<int>(basis.output_side()->rank());
    out_fwd = MakeSideOperator(*basis.output_side(), p, /*inverse=*/false);
    out_inv = MakeSideOperator(*basis.output_side(), p, /*inverse=*/true);
  }
  GIFT_RETURN_IF_ERROR(impl->handle.Init(stream));
  GIFT_ASSIGN_OR_RETURN(impl->forward,
                        UploadDirection(in_fwd, out_fwd, h.d_out, h.d_in, impl->r_in, impl->r_out));
  GIFT_ASSIGN_OR_RETURN(impl->inverse,
                        UploadDirection(in_inv, out_inv, h.d_out, h.d_in, impl->r_in, impl->r_out));
  if (impl->r_in > 0 && impl->r_out > 0) {
    GIFT_ASSIGN_OR_RETURN(impl->k_buffer,
                          DeviceFloats::Upload(std::vector<float>(
                              static_cast<size_t>(impl->r_in) * impl->r_out, 0.0f)));
  }
  return TensorBasisCuda(std::move(impl));
}

TensorBasisCuda::TensorBasisCuda(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TensorBasisCuda::TensorBasisCuda(TensorBasisCuda&&) noexcept = default;
TensorBasisCuda& TensorBasisCuda::operator=(TensorBasisCuda&&) noexcept = default;
TensorBasisCuda::~TensorBasisCuda() = default;

absl::Status TensorBasisCuda::Forward(const float* g, int64_t d_out, int64_t d_in, float* out) {
  GIFT_RETURN_IF_ERROR(impl_->Check("TensorBasisCuda::Forward", g, d_out, d_in, out));
  return impl_->Apply(impl_->forward, g, out);
}

absl::Status TensorBasisCuda::Inverse(const float* x, int64_t d_out, int64_t d_in, float* out) {
  GIFT_RETURN_IF_ERROR(impl_->Check("TensorBasisCuda::Inverse", x, d_out, d_in, out));
  return impl_->Apply(impl_->inverse, x, out);
}

absl::StatusOr<TensorBasisCuda::LowRankTerms> TensorBasisCuda::ForwardLowRank(const float* g,
                                                                              int64_t d_out,
                                                                              int64_t d_in) {
  // `g` stands in for the output buffer too: only its presence is checked.
  GIFT_RETURN_IF_ERROR(impl_->Check("TensorBasisCuda::ForwardLowRank", g, d_out, d_in, g));
  return impl_->PrepareLowRank(impl_->forward, g);
}

absl::StatusOr<TensorBasisCuda::LowRankTerms> TensorBasisCuda::InverseLowRank(const float* x,
                                                                              int64_t d_out,
                                                                              int64_t d_in) {
  GIFT_RETURN_IF_ERROR(impl_->Check("TensorBasisCuda::InverseLowRank", x, d_out, d_in, x));
  return impl_->PrepareLowRank(impl_->inverse, x);
}

int64_t TensorBasisCuda::d_out() const { return impl_->d_out; }
int64_t TensorBasisCuda::d_in() const { return impl_->d_in; }
cudaStream_t TensorBasisCuda::stream() const { return impl_->stream; }

}  // namespace gift::kernels
