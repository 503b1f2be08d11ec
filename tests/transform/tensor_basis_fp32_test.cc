// The FP32 BLAS path of TensorBasis (the default) against its double
// reference: the stated error bound on every shape, rank, residual model,
// side set and power of the transform tests, in both directions and in
// place; the round trip; row ranges; and the BLAS thread setting.
#include "common/transform/tensor_basis_fp32.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/transform/blas_runtime.h"
#include "common/transform/tensor_basis.h"
#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

using testing::SameBits;

using testing::MakeBasis;
using testing::Name;

struct Shape {
  int64_t d_out, d_in;
};

std::string Describe(const Shape& s, int64_t rank, ResidualModel residual, Sides sides, double p) {
  return "shape " + std::to_string(s.d_out) + "x" + std::to_string(s.d_in) +
         " r=" + std::to_string(rank) + " " + Name(residual) + " " + Name(sides) +
         " p=" + std::to_string(p);
}

// The shapes and ranks of tensor_basis_test.cc (rank 1, 8 and full: r = n
// on each side) plus a tall and a wide shape at rank 32.
TEST(TensorBasisFp32, MatchesDoubleReferenceWithinStatedBound) {
  struct Case {
    Shape shape;
    std::vector<int64_t> ranks;
  };
  const std::vector<Case> cases = {{{64, 96}, {1, 8, 96}},
                                   {{130, 70}, {1, 8, 130}},
                                   {{33, 33}, {1, 8, 33}},
                                   {{300, 48}, {32}},
                                   {{40, 320}, {32}}};
  double worst_ratio = 0.0, worst_error = 0.0, worst_round_trip = 0.0;
  std::string worst_what;
  for (const Case& c : cases) {
    const Shape s = c.shape;
    const testing::Factors f = testing::SampleFactors(s.d_out, s.d_in, 7, 4);
    const std::vector<float> g = testing::AnisotropicMatrix(s.d_out, s.d_in, 1000);
    for (int64_t rank : c.ranks) {
      for (ResidualModel residual : {ResidualModel::kIsotropic, ResidualModel::kDiagonal}) {
        for (Sides sides : {Sides::kInput, Sides::kOutput, Sides::kBoth}) {
          for (double p : {0.125, 0.25, 0.5}) {
            const std::string what = Describe(s, rank, residual, sides, p);
            const TensorBasis basis = MakeBasis(f, rank, residual, sides, p);
            const double bound = basis.Fp32ErrorBound();
            std::vector<float> fwd(g.size()), fwd_ref(g.size());
            ASSERT_TRUE(basis.Forward(g.data(), s.d_out, s.d_in, fwd.data()).ok()) << what;
            ASSERT_TRUE(
                basis.Forward(g.data(), s.d_out, s.d_in, fwd_ref.data(), Precision::kFp64Reference)
                    .ok())
                << what;
            // The inverse on the reference's forward, against the reference.
            std::vector<float> inv(g.size()), inv_ref(g.size());
            ASSERT_TRUE(basis.Inverse(fwd_ref.data(), s.d_out, s.d_in, inv.data()).ok()) << what;
            ASSERT_TRUE(basis
                            .Inverse(fwd_ref.data(), s.d_out, s.d_in, inv_ref.data(),
                                     Precision::kFp64Reference)
                            .ok())
                << what;
            for (const auto& [got, want, dir] :
                 {std::tuple{&fwd, &fwd_ref, "forward"}, std::tuple{&inv, &inv_ref, "inverse"}}) {
              const double err = RelativeL2(*got, *want);
              EXPECT_LE(err, bound) << what << " " << dir;
              worst_error = std::max(worst_error, err);
              if (err / bound > worst_ratio) {
                worst_ratio = err / bound;
                worst_what = what + " " + dir;
              }
            }

            // In place: the same bits, both directions.
            std::vector<float> in_place = g;
            ASSERT_TRUE(basis.Forward(in_place.data(), s.d_out, s.d_in, in_place.data()).ok());
            EXPECT_TRUE(SameBits(in_place, fwd)) << what;
            std::vector<float> back(g.size());
            ASSERT_TRUE(basis.Inverse(fwd.data(), s.d_out, s.d_in, back.data()).ok());
            ASSERT_TRUE(basis.Inverse(in_place.data(), s.d_out, s.d_in, in_place.data()).ok());
            EXPECT_TRUE(SameBits(in_place, back)) << what;

            // Round trip, FP32 both ways: each direction's bound.
            const double round_trip = RelativeL2(back, g);
            worst_round_trip = std::max(worst_round_trip, round_trip / (2 * bound));
            EXPECT_LE(round_trip, 2 * bound) << what;
          }
        }
      }
    }
  }
  std::cout << "[ fp32     ] worst relative L2 vs the double reference " << worst_error
            << "; worst error / Fp32ErrorBound() " << worst_ratio << " (" << worst_what
            << "); worst FP32 round trip / (2 Fp32ErrorBound()) " << worst_round_trip << "\n";
}

// Rows in any order, in chunks on block bounds, give the Forward / Inverse
// bits, in place and out of place; chunks off the bounds are within the
// bound of the reference.
TEST(TensorBasisFp32, RowRangesGiveTheWholeResult) {
  constexpr int64_t kB = TensorBasisFp32::kRowBlock;
  const Shape s{2 * kB + 44, 72};
  const testing::Factors f = testing::SampleFactors(s.d_out, s.d_in, 11, 4);
  const std::vector<float> g = testing::AnisotropicMatrix(s.d_out, s.d_in, 77);
  for (Sides sides : {Sides::kInput, Sides::kOutput, Sides::kBoth}) {
    for (int64_t rank : {int64_t{6}, s.d_out}) {
      const TensorBasis basis = MakeBasis(f, rank, ResidualModel::kDiagonal, sides, 0.25);
      for (bool inverse : {false, true}) {
        const std::string what =
            Name(sides) + " r=" + std::to_string(rank) + (inverse ? " inverse" : " forward");
        std::vector<float> whole(g.size());
        ASSERT_TRUE((inverse ? basis.Inverse(g.data(), s.d_out, s.d_in, whole.data())
                             : basis.Forward(g.data(), s.d_out, s.d_in, whole.data()))
                        .ok());
        LowRankTerm term;
        ASSERT_TRUE((inverse ? basis.PrepareInverse(g.data(), s.d_out, s.d_in, &term)
                             : basis.PrepareForward(g.data(), s.d_out, s.d_in, &term))
                        .ok());
        // Out of place, last chunk first, uneven chunks (one empty).
        std::vector<float> chunks(g.size(), -1.0f);
        const std::vector<int64_t> cuts = {0, kB, kB, 2 * kB, s.d_out};
        for (size_t c = cuts.size() - 1; c > 0; --c) {
          ASSERT_TRUE(basis.ApplyRows(term, g.data(), cuts[c - 1], cuts[c], chunks.data()).ok());
        }
        EXPECT_TRUE(SameBits(chunks, whole)) << what;
        // In place, first chunk first (the term is reused).
        std::vector<float> in_place = g;
        ASSERT_TRUE((inverse ? basis.PrepareInverse(in_place.data(), s.d_out, s.d_in, &term)
                             : basis.PrepareForward(in_place.data(), s.d_out, s.d_in, &term))
                        .ok());
        for (size_t c = 1; c < cuts.size(); ++c) {
          ASSERT_TRUE(
              basis.ApplyRows(term, in_place.data(), cuts[c - 1], cuts[c], in_place.data()).ok());
        }
        EXPECT_TRUE(SameBits(in_place, whole)) << what;
        // Off the block bounds: rounding only.
        std::vector<float> odd(g.size(), -1.0f), ref(g.size());
        ASSERT_TRUE((inverse ? basis.PrepareInverse(g.data(), s.d_out, s.d_in, &term)
                             : basis.PrepareForward(g.data(), s.d_out, s.d_in, &term))
                        .ok());
        const std::vector<int64_t> odd_cuts = {0, 1, 64, 97, kB + 3, s.d_out};
        for (size_t c = 1; c < odd_cuts.size(); ++c) {
          ASSERT_TRUE(
              basis.ApplyRows(term, g.data(), odd_cuts[c - 1], odd_cuts[c], odd.data()).ok());
        }
        ASSERT_TRUE(
            (inverse
                 ? basis.Inverse(g.data(), s.d_out, s.d_in, ref.data(), Precision::kFp64Reference)
                 : basis.Forward(g.data(), s.d_out, s.d_in, ref.data(), Precision::kFp64Reference))
                .ok());
        EXPECT_LE(RelativeL2(odd, ref), basis.Fp32ErrorBound()) << what;
      }
    }
  }
}

TEST(TensorBasisFp32, RowRangeArgumentsAreChecked) {
  const testing::Factors f = testing::SampleFactors(16, 24, 3, 4);
  const TensorBasis basis = MakeBasis(f, 4, ResidualModel::kIsotropic, Sides::kBoth, 0.25);
  const TensorBasis input_only = MakeBasis(f, 4, ResidualModel::kIsotropic, Sides::kInput, 0.25);
  std::vector<float> g = testing::AnisotropicMatrix(16, 24, 4), out(g.size(), 7.0f);
  LowRankTerm term;
  ASSERT_TRUE(basis.PrepareForward(g.data(), 16, 24, &term).ok());
  EXPECT_EQ(basis.ApplyRows(term, g.data(), 3, 2, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(basis.ApplyRows(term, g.data(), -1, 2, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(basis.ApplyRows(term, g.data(), 0, 17, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(input_only.ApplyRows(term, g.data(), 0, 16, out.data()).code(),
            absl::StatusCode::kInvalidArgument);  // a term of another k
  EXPECT_EQ(basis.ApplyRows(LowRankTerm{}, g.data(), 0, 16, out.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(basis.PrepareForward(g.data(), 24, 16, &term).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(basis.PrepareForward(g.data(), 16, 24, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  g[5] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(basis.PrepareInverse(g.data(), 16, 24, &term).code(),
            absl::StatusCode::kInvalidArgument);
  // Found through Q when there is no input side, -Inf and NaN too.
  const TensorBasis output_only = MakeBasis(f, 4, ResidualModel::kDiagonal, Sides::kOutput, 0.25);
  for (float bad :
       {-std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> h = testing::AnisotropicMatrix(16, 24, 4);
    h[16 * 24 - 1] = bad;
    const absl::Status status = output_only.Forward(h.data(), 16, 24, out.data());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
    EXPECT_NE(status.message().find("element 383"), std::string::npos) << status;
  }
  EXPECT_EQ(out, std::vector<float>(g.size(), 7.0f));  // untouched
  // A finite input whose result overflows FP32.
  std::vector<float> huge(g.size(), 3e38f);
  EXPECT_EQ(input_only.Inverse(huge.data(), 16, 24, out.data()).code(),
            absl::StatusCode::kOutOfRange);
}

// The thread count is a process-wide setting; the result does not depend on
// it beyond the stated bound (OpenBLAS splits rows and columns, not the
// accumulation, so it is in fact the same here).
TEST(TensorBasisFp32, BlasThreadsSettingAndLibrary) {
  EXPECT_NE(BlasLibrary().find("OpenBLAS"), std::string::npos) << BlasLibrary();
  const int before = BlasThreads();
  EXPECT_GE(before, 1);
  EXPECT_EQ(SetBlasThreads(0).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BlasThreads(), before);

  const Shape s{512, 384};
  const testing::Factors f = testing::SampleFactors(s.d_out, s.d_in, 5, 2);
  const std::vector<float> g = testing::AnisotropicMatrix(s.d_out, s.d_in, 9);
  const TensorBasis basis = MakeBasis(f, 32, ResidualModel::kIsotropic, Sides::kBoth, 0.25);
  std::vector<float> ref(g.size());
  ASSERT_TRUE(basis.Forward(g.data(), s.d_out, s.d_in, ref.data(), Precision::kFp64Reference).ok());
  for (int threads : {1, 2}) {
    ASSERT_TRUE(SetBlasThreads(threads).ok());
    EXPECT_EQ(BlasThreads(), threads);
    std::vector<float> out(g.size());
    ASSERT_TRUE(basis.Forward(g.data(), s.d_out, s.d_in, out.data()).ok());
    EXPECT_LE(RelativeL2(out, ref), basis.Fp32ErrorBound()) << threads << " threads";
  }
  ASSERT_TRUE(SetBlasThreads(before).ok());
}

}  // namespace
}  // namespace gift::transform
