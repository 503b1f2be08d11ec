#include "common/transform/tensor_basis_fp32.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "common/transform/blas_runtime.h"

namespace gift::transform {
namespace {

constexpr int kForward = static_cast<int>(Direction::kForward);
constexpr int kInverse = static_cast<int>(Direction::kInverse);

// Whether all `size` floats are finite: an exponent field of all ones is
// Inf or NaN. Branch-free so that it vectorizes.
bool AllFinite(const float* x, int64_t size) {
  constexpr uint32_t kExponent = 0x7f800000u;
  uint32_t bad = 0;
  for (int64_t i = 0; i < size; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    bad |= static_cast<uint32_t>((bits & kExponent) == kExponent);
  }
  return bad == 0;
}

}  // namespace

TensorBasisFp32::Side TensorBasisFp32::MakeSide(const std::optional<SideBasis>& basis, int64_t n,
                                                double p) {
  Side s;
  s.n = n;
  if (!basis.has_value()) return s;
  const SideBasis::Parts& parts = basis->parts();
  s.r = basis->rank();
  s.identity = s.r < n;
  const int64_t r = s.r;
  s.z.resize(n * r);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < r; ++j) s.z[i * r + j] = static_cast<float>(parts.z(i, j));
  }
  for (int d : {kForward, kInverse}) {
    const double q = d == kForward ? -p : p;
    s.scale[d].resize(n);
    for (int64_t i = 0; i < n; ++i) {
      const double di = parts.d.size() == 1 ? parts.d(0) : parts.d(i);
      s.scale[d][i] = static_cast<float>(std::pow(di, q));
    }
    s.core[d].resize(r);
    for (int64_t j = 0; j < r; ++j) {
      s.core[d][j] =
          static_cast<float>(std::pow(parts.one_plus_sig(j), q) - (s.identity ? 1.0 : 0.0));
    }
    s.z_scaled[d].resize(n * r);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < r; ++j) s.z_scaled[d][i * r + j] = s.scale[d][i] * s.z[i * r + j];
    }
    const std::vector<float>& post = d == kForward ? s.z : s.z_scaled[d];
    s.zt_post[d].resize(r * n);
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < r; ++j) s.zt_post[d][j * n + i] = post[i * r + j];
    }
  }
  return s;
}

TensorBasisFp32::TensorBasisFp32(const std::optional<SideBasis>& output_side,
                                 const std::optional<SideBasis>& input_side, int64_t d_out,
                                 int64_t d_in, double p)
    : d_out_(d_out),
      d_in_(d_in),
      out_(MakeSide(output_side, d_out, p)),
      in_(MakeSide(input_side, d_in, p)),
      k_(out_.r + (out_.identity ? in_.r : 0)),
      identity_term_(out_.identity && in_.identity) {}

// The steps of the header's derivation: L = [P C_in | Z_out] (its first
// block only when S_out has its identity term), R = [Z_in^T ; C_out (Q +
// M C_in Z_in^T)] (Q only when S_in has its identity term); for the
// inverse, A times L's rows and B times R's columns. Q is formed in R's
// last r_out rows.
bool TensorBasisFp32::Prepare(Direction direction, const float* x, LowRankTerm* term) const {
  const int d = static_cast<int>(direction);
  const bool forward = direction == Direction::kForward;
  const int64_t m = d_out_, n = d_in_, ro = out_.r, ri = in_.r, k = k_;
  const int64_t ri_l = k - ro;  // r_in, or 0 when S_out is Z E Z^T alone
  term->direction = direction;
  term->d_out = m;
  term->d_in = n;
  term->k = k;
  term->l.resize(m * k);
  term->r.resize(k * n);
  term->p.resize(m * ri);
  term->scratch.resize(ro * ri);
  float* l = term->l.data();
  float* pp = term->p.data();
  float* r_top = term->r.data();       // ri_l x n
  float* r_bottom = r_top + ri_l * n;  // r_out x n
  // The diagonals applied before the products (forward) or after (inverse).
  const float* a = ro > 0 ? out_.scale[d].data() : nullptr;
  const float* b = ri > 0 ? in_.scale[d].data() : nullptr;
  bool products_finite = true;

  if (ri > 0) {  // P = X (B Z_in); forward: then rows times A.
    const float* z_pre = forward ? in_.z_scaled[d].data() : in_.z.data();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BlasInt(m), BlasInt(ri), BlasInt(n),
                1.0f, x, BlasInt(n), z_pre, BlasInt(ri), 0.0f, pp, BlasInt(ri));
    products_finite = AllFinite(pp, m * ri);
    if (forward && a != nullptr) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t c = 0; c < ri; ++c) pp[i * ri + c] *= a[i];
      }
    }
  }
  const bool q_term = ro > 0 && in_.identity;
  if (q_term) {  // Q = (A Z_out)^T X into R's bottom; forward: then columns times B.
    const float* z_pre = forward ? out_.z_scaled[d].data() : out_.z.data();
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, BlasInt(ro), BlasInt(n), BlasInt(m), 1.0f,
                z_pre, BlasInt(ro), x, BlasInt(n), 0.0f, r_bottom, BlasInt(n));
    if (ri == 0) products_finite = AllFinite(r_bottom, ro * n);
    if (forward && b != nullptr) {
      for (int64_t c = 0; c < ro; ++c) {
        for (int64_t j = 0; j < n; ++j) r_bottom[c * n + j] *= b[j];
      }
    }
  }
  if (ro > 0 && ri > 0) {  // R's bottom (+)= (Z_out^T P) C_in Z_in^T
    float* mm = term->scratch.data();
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, BlasInt(ro), BlasInt(ri), BlasInt(m), 1.0f,
                out_.z.data(), BlasInt(ro), pp, BlasInt(ri), 0.0f, mm, BlasInt(ri));
    const float* c_in = in_.core[d].data();
    for (int64_t i = 0; i < ro; ++i) {
      for (int64_t c = 0; c < ri; ++c) mm[i * ri + c] *= c_in[c];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, BlasInt(ro), BlasInt(n), BlasInt(ri), 1.0f,
                mm, BlasInt(ri), in_.z.data(), BlasInt(ri), q_term ? 1.0f : 0.0f, r_bottom,
                BlasInt(n));
  }
  if (ro > 0) {  // R's bottom: rows times C_out; inverse: columns times B.
    const float* c_out = out_.core[d].data();
    const bool post_b = !forward && b != nullptr;
    for (int64_t c = 0; c < ro; ++c) {
      float* row = r_bottom + c * n;
      const float cc = c_out[c];
      if (post_b) {
        for (int64_t j = 0; j < n; ++j) row[j] = (row[j] * cc) * b[j];
      } else {
        for (int64_t j = 0; j < n; ++j) row[j] *= cc;
      }
    }
  }
  if (ri_l > 0) std::memcpy(r_top, in_.zt_post[d].data(), sizeof(float) * ri_l * n);

  // L: [P C_in | Z_out], inverse: rows times A (Z_out's copy is pre-scaled).
  const float* c_in = ri > 0 ? in_.core[d].data() : nullptr;
  const float* z_post = ro > 0 ? (forward ? out_.z.data() : out_.z_scaled[d].data()) : nullptr;
  const bool post_a = !forward && a != nullptr;
  for (int64_t i = 0; i < m; ++i) {
    float* row = l + i * k;
    const float* pr = pp + i * ri;
    if (post_a) {
      for (int64_t c = 0; c < ri_l; ++c) row[c] = (pr[c] * c_in[c]) * a[i];
    } else {
      for (int64_t c = 0; c < ri_l; ++c) row[c] = pr[c] * c_in[c];
    }
    if (ro > 0) std::memcpy(row + ri_l, z_post + i * ro, sizeof(float) * ro);
  }
  return products_finite;
}

bool TensorBasisFp32::ApplyRows(const LowRankTerm& term, const float* x, int64_t row0, int64_t row1,
                                float* out) const {
  // Fixed blocks, so that a row's bits do not depend on the range it came in.
  for (int64_t b0 = row0; b0 < row1;) {
    const int64_t b1 = std::min(row1, (b0 / kRowBlock + 1) * kRowBlock);
    if (!ApplyBlock(term, x, b0, b1, out)) return false;
    b0 = b1;
  }
  return true;
}

bool TensorBasisFp32::ApplyBlock(const LowRankTerm& term, const float* x, int64_t row0,
                                 int64_t row1, float* out) const {
  const int d = static_cast<int>(term.direction);
  const int64_t n = d_in_, k = term.k, rows = row1 - row0;
  if (!identity_term_) {  // out = L R alone
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BlasInt(rows), BlasInt(n), BlasInt(k),
                1.0f, term.l.data() + row0 * k, BlasInt(k), term.r.data(), BlasInt(n), 0.0f,
                out + row0 * n, BlasInt(n));
    return AllFinite(out + row0 * n, rows * n);
  }
  const float* a = out_.r > 0 ? out_.scale[d].data() : nullptr;
  const float* b = in_.r > 0 ? in_.scale[d].data() : nullptr;
  // out = A X B, row by row (in place allowed).
  for (int64_t i = row0; i < row1; ++i) {
    const float* xr = x + i * n;
    float* o = out + i * n;
    if (a != nullptr && b != nullptr) {
      const float ai = a[i];
      for (int64_t j = 0; j < n; ++j) o[j] = (ai * xr[j]) * b[j];
    } else if (a != nullptr) {
      const float ai = a[i];
      for (int64_t j = 0; j < n; ++j) o[j] = ai * xr[j];
    } else {
      for (int64_t j = 0; j < n; ++j) o[j] = xr[j] * b[j];
    }
  }
  // out += L R over these rows.
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, BlasInt(rows), BlasInt(n), BlasInt(k),
              1.0f, term.l.data() + row0 * k, BlasInt(k), term.r.data(), BlasInt(n), 1.0f,
              out + row0 * n, BlasInt(n));
  return AllFinite(out + row0 * n, rows * n);
}

}  // namespace gift::transform
