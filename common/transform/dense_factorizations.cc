#include "common/transform/dense_factorizations.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"

// LAPACK's Fortran entry points, as OpenBLAS exports them (it has no
// LAPACKE). Character arguments carry their lengths as trailing hidden
// arguments (gfortran's convention), given here.
extern "C" {
void dgeqrf_(const int* m, const int* n, double* a, const int* lda, double* tau, double* work,
             const int* lwork, int* info);
void dorgqr_(const int* m, const int* n, const int* k, double* a, const int* lda,
             const double* tau, double* work, const int* lwork, int* info);
void dsyevd_(const char* jobz, const char* uplo, const int* n, double* a, const int* lda,
             double* w, double* work, const int* lwork, int* iwork, const int* liwork, int* info,
             size_t jobz_len, size_t uplo_len);
void dgesdd_(const char* jobz, const int* m, const int* n, double* a, const int* lda, double* s,
             double* u, const int* ldu, double* vt, const int* ldvt, double* work,
             const int* lwork, int* iwork, int* info, size_t jobz_len);
}

namespace gift::transform {
namespace {

absl::Status CheckSize(const Eigen::MatrixXd& m, const char* what) {
  constexpr Eigen::Index kMax = std::numeric_limits<int>::max();
  if (m.rows() < 1 || m.cols() < 1 || m.rows() > kMax || m.cols() > kMax ||
      m.size() > kMax) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " of a ", m.rows(), "x", m.cols(), " matrix"));
  }
  return absl::OkStatus();
}

// The optimal workspace LAPACK reported in its size query.
int Workspace(double query) { return std::max(1, static_cast<int>(query)); }

}  // namespace

absl::StatusOr<ThinQr> ThinQrOf(const Eigen::MatrixXd& y) {
  if (absl::Status s = CheckSize(y, "QR"); !s.ok()) return s;
  if (y.cols() > y.rows()) {
    return absl::InvalidArgumentError(
        absl::StrCat("thin QR of a ", y.rows(), "x", y.cols(), " matrix (more columns than rows)"));
  }
  const int m = static_cast<int>(y.rows()), k = static_cast<int>(y.cols());
  Eigen::MatrixXd a = y;
  std::vector<double> tau(k);
  int info = 0, lwork = -1;
  double query = 0.0;
  dgeqrf_(&m, &k, a.data(), &m, tau.data(), &query, &lwork, &info);
  double query2 = 0.0;
  dorgqr_(&m, &k, &k, a.data(), &m, tau.data(), &query2, &lwork, &info);
  lwork = std::max(Workspace(query), Workspace(query2));
  std::vector<double> work(lwork);
  dgeqrf_(&m, &k, a.data(), &m, tau.data(), work.data(), &lwork, &info);
  if (info != 0) return absl::InternalError(absl::StrCat("dgeqrf failed (info ", info, ")"));
  ThinQr out;
  out.r = a.topRows(k).triangularView<Eigen::Upper>();
  dorgqr_(&m, &k, &k, a.data(), &m, tau.data(), work.data(), &lwork, &info);
  if (info != 0) return absl::InternalError(absl::StrCat("dorgqr failed (info ", info, ")"));
  out.q = std::move(a);
  return out;
}

absl::StatusOr<SymmetricEigen> SymmetricEigenOf(const Eigen::MatrixXd& a) {
  if (absl::Status s = CheckSize(a, "eigendecomposition"); !s.ok()) return s;
  if (a.rows() != a.cols()) {
    return absl::InvalidArgumentError(
        absl::StrCat("eigendecomposition of a ", a.rows(), "x", a.cols(), " matrix (not square)"));
  }
  const int n = static_cast<int>(a.rows());
  SymmetricEigen out;
  out.vectors = a;
  out.values.resize(n);
  const char jobz = 'V', uplo = 'L';
  int info = 0, lwork = -1, liwork = -1, iquery = 0;
  double query = 0.0;
  dsyevd_(&jobz, &uplo, &n, out.vectors.data(), &n, out.values.data(), &query, &lwork, &iquery,
          &liwork, &info, 1, 1);
  lwork = Workspace(query);
  liwork = std::max(1, iquery);
  std::vector<double> work(lwork);
  std::vector<int> iwork(liwork);
  dsyevd_(&jobz, &uplo, &n, out.vectors.data(), &n, out.values.data(), work.data(), &lwork,
          iwork.data(), &liwork, &info, 1, 1);
  if (info != 0) {
    return absl::InternalError(absl::StrCat("dsyevd did not converge (info ", info, ")"));
  }
  return out;
}

absl::StatusOr<ThinSvdLeft> ThinSvdLeftOf(const Eigen::MatrixXd& b) {
  if (absl::Status s = CheckSize(b, "SVD"); !s.ok()) return s;
  const int m = static_cast<int>(b.rows()), n = static_cast<int>(b.cols());
  const int p = std::min(m, n);
  Eigen::MatrixXd a = b;
  ThinSvdLeft out;
  out.u.resize(m, p);
  out.singular_values.resize(p);
  Eigen::MatrixXd vt(p, n);
  const char jobz = 'S';
  std::vector<int> iwork(8 * static_cast<size_t>(p));
  int info = 0, lwork = -1;
  double query = 0.0;
  dgesdd_(&jobz, &m, &n, a.data(), &m, out.singular_values.data(), out.u.data(), &m, vt.data(),
          &p, &query, &lwork, iwork.data(), &info, 1);
  lwork = Workspace(query);
  std::vector<double> work(lwork);
  dgesdd_(&jobz, &m, &n, a.data(), &m, out.singular_values.data(), out.u.data(), &m, vt.data(),
          &p, work.data(), &lwork, iwork.data(), &info, 1);
  if (info != 0) {
    return absl::InternalError(absl::StrCat("dgesdd did not converge (info ", info, ")"));
  }
  return out;
}

}  // namespace gift::transform
