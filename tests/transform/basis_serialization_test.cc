// The byte form of a basis: bit-identical round trip, and rejection of every
// truncation, every single-byte corruption and inconsistent contents.
#include "common/transform/basis_serialization.h"

#include <cstring>
#include <string>
#include <vector>

#include "common/base/crc32c.h"
#include "gtest/gtest.h"
#include "tests/transform/test_util.h"

namespace gift::transform {
namespace {

constexpr int64_t kSerializedOut = 24, kSerializedIn = 40;

Eigen::MatrixXd Factor(int64_t n, uint32_t seed) {
  Eigen::VectorXd spectrum(n);
  for (int64_t k = 0; k < n; ++k) spectrum(k) = 10.0 / (1.0 + k);
  return testing::FactorWithSpectrum(spectrum, seed);
}

TensorBasis MakeBasis(Sides sides) {
  std::optional<SideBasis> out_side, in_side;
  if (sides != Sides::kInput) {
    out_side.emplace(
        SideBasis::FromFactor(Factor(kSerializedOut, 1), 3, {.residual = ResidualModel::kIsotropic})
            .value());
  }
  if (sides != Sides::kOutput) {
    in_side.emplace(
        SideBasis::FromFactor(Factor(kSerializedIn, 2), 5, {.residual = ResidualModel::kDiagonal})
            .value());
  }
  return TensorBasis::Create({.tensor_id = 0x1234567890ull,
                              .version = 42,
                              .d_out = kSerializedOut,
                              .d_in = kSerializedIn,
                              .config = {.sides = sides, .power = 0.25}},
                             std::move(out_side), std::move(in_side))
      .value();
}

std::vector<float> Apply(const TensorBasis& basis, const std::vector<float>& g, bool inverse) {
  std::vector<float> out(g.size());
  const absl::Status s = inverse
                             ? basis.Inverse(g.data(), kSerializedOut, kSerializedIn, out.data())
                             : basis.Forward(g.data(), kSerializedOut, kSerializedIn, out.data());
  EXPECT_TRUE(s.ok()) << s;
  return out;
}

TEST(BasisSerialization, RoundTripTransformsBitIdentically) {
  const std::vector<float> g = testing::AnisotropicMatrix(kSerializedOut, kSerializedIn, 5);
  for (Sides sides : {Sides::kInput, Sides::kOutput, Sides::kBoth}) {
    const TensorBasis basis = MakeBasis(sides);
    const std::string bytes = SerializeTensorBasis(basis);
    auto loaded = ParseTensorBasis(bytes);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->header().tensor_id, 0x1234567890ull);
    EXPECT_EQ(loaded->header().version, 42u);
    EXPECT_EQ(loaded->header().config.sides, sides);
    EXPECT_EQ(loaded->header().config.power, 0.25);
    EXPECT_EQ(SerializeTensorBasis(*loaded), bytes);
    for (bool inverse : {false, true}) {
      const std::vector<float> want = Apply(basis, g, inverse);
      const std::vector<float> got = Apply(*loaded, g, inverse);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
    }
  }
}

TEST(BasisSerialization, RejectsEveryTruncationAndEverySingleByteCorruption) {
  const std::string bytes = SerializeTensorBasis(MakeBasis(Sides::kBoth));
  for (size_t len = 0; len < bytes.size(); ++len) {
    EXPECT_EQ(ParseTensorBasis(absl::string_view(bytes.data(), len)).status().code(),
              absl::StatusCode::kDataLoss)
        << len;
  }
  std::string longer = bytes + '\0';
  EXPECT_EQ(ParseTensorBasis(longer).status().code(), absl::StatusCode::kDataLoss);
  std::string corrupt = bytes;
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      corrupt[i] = static_cast<char>(bytes[i] ^ flip);
      EXPECT_EQ(ParseTensorBasis(corrupt).status().code(), absl::StatusCode::kDataLoss)
          << "byte " << i << " flip " << int{flip};
    }
    corrupt[i] = bytes[i];
  }
}

// Replaces `len` bytes at `offset` and re-seals the checksum, so that only
// the consistency checks can catch the change.
std::string Reseal(std::string bytes, size_t offset, const void* value, size_t len) {
  std::memcpy(bytes.data() + offset, value, len);
  const size_t body = bytes.size() - 4;
  const uint32_t crc = crc32c::Value(bytes.data(), body);
  std::memcpy(bytes.data() + body, &crc, 4);
  return bytes;
}

absl::StatusCode ParseCode(const std::string& bytes) {
  return ParseTensorBasis(bytes).status().code();
}

TEST(BasisSerialization, RejectsInconsistentContentsUnderAValidChecksum) {
  const std::string bytes = SerializeTensorBasis(MakeBasis(Sides::kBoth));
  ASSERT_TRUE(ParseTensorBasis(Reseal(bytes, 0, "GFTB", 4)).ok());  // the real magic
  // Header: magic, version, d_out, sides, power.
  EXPECT_EQ(ParseCode(Reseal(bytes, 0, "XXXX", 4)), absl::StatusCode::kInvalidArgument);
  const uint32_t version = 2;
  EXPECT_EQ(ParseCode(Reseal(bytes, 4, &version, 4)), absl::StatusCode::kInvalidArgument);
  const uint64_t d_out = kSerializedOut + 1;
  EXPECT_EQ(ParseCode(Reseal(bytes, 32, &d_out, 8)), absl::StatusCode::kInvalidArgument);
  const uint8_t sides = 4;
  EXPECT_EQ(ParseCode(Reseal(bytes, 48, &sides, 1)), absl::StatusCode::kInvalidArgument);
  const uint8_t input_only = 1;  // the bytes then hold an unexpected side
  EXPECT_EQ(ParseCode(Reseal(bytes, 48, &input_only, 1)), absl::StatusCode::kInvalidArgument);
  const double power = -0.25;
  EXPECT_EQ(ParseCode(Reseal(bytes, 56, &power, 8)), absl::StatusCode::kInvalidArgument);
  // The output side starts at 64: residual, padding, n, r, eps, delta,
  // trace, lam[3], d[1], u[24 * 3], one_plus_sig[3].
  const uint8_t residual = 9;
  EXPECT_EQ(ParseCode(Reseal(bytes, 64, &residual, 1)), absl::StatusCode::kInvalidArgument);
  const uint64_t huge_rank = uint64_t{1} << 62;
  EXPECT_EQ(ParseCode(Reseal(bytes, 80, &huge_rank, 8)), absl::StatusCode::kInvalidArgument);
  // Offsets of damping_eps, lam[0], d and u(0, 0).
  const double negative = -1.0;
  for (size_t offset : {88, 112, 136, 144}) {
    EXPECT_EQ(ParseCode(Reseal(bytes, offset, &negative, 8)), absl::StatusCode::kInvalidArgument)
        << offset;
  }
  const double not_unit = 3.0;  // u no longer orthonormal
  EXPECT_EQ(ParseCode(Reseal(bytes, 144, &not_unit, 8)), absl::StatusCode::kInvalidArgument);
  const double nan = std::nan("");
  EXPECT_EQ(ParseCode(Reseal(bytes, 144, &nan, 8)), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::transform
