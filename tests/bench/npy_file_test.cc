#include "bench/npy_file.h"

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/temp_dir.h"

namespace gift::bench {
namespace {

using ::testing::HasSubstr;

// Values exactly representable as float16.
const std::vector<double> kValues = {0.0, -1.5, 2.0, 0.25, -65504.0, 6.103515625e-05};

// A version 1.0 file exactly as numpy.save writes it for `dict`, with the
// given data bytes.
std::string NumpyFile(const std::string& dict, const std::string& data, int version = 1) {
  const size_t preamble = version == 1 ? 10 : 12;
  std::string header = dict;
  const size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - preamble - header.size() - 1, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(version));
  out.push_back('\0');
  const auto len = static_cast<uint32_t>(header.size());
  out.push_back(static_cast<char>(len & 0xff));
  out.push_back(static_cast<char>(len >> 8));
  if (version != 1) out.append(2, '\0');
  return out + header + data;
}

std::string FloatBytes(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

struct RoundTripCase {
  NpyDtype dtype;
  int version;
};

class NpyRoundTripTest : public ::testing::TestWithParam<RoundTripCase> {};

TEST_P(NpyRoundTripTest, EncodeThenParseGivesTheValuesBack) {
  const RoundTripCase c = GetParam();
  absl::StatusOr<std::string> bytes = EncodeNpy(kValues, 2, 3, c.dtype, c.version);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ(static_cast<uint8_t>((*bytes)[6]), c.version);

  absl::StatusOr<NpyMatrix<double>> d = ParseNpyDouble(*bytes, "x.npy");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->rows, 2);
  EXPECT_EQ(d->cols, 3);
  EXPECT_EQ(d->stored, c.dtype);
  EXPECT_EQ(d->values, kValues);

  absl::StatusOr<NpyMatrix<float>> f = ParseNpyFloat(*bytes, "x.npy");
  if (c.dtype == NpyDtype::kFloat64) {
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(f.status().message(), HasSubstr("<f8"));
  } else {
    ASSERT_TRUE(f.ok()) << f.status();
    EXPECT_EQ(std::vector<double>(f->values.begin(), f->values.end()), kValues);
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllDtypesAndVersions, NpyRoundTripTest,
    ::testing::Values(RoundTripCase{NpyDtype::kFloat16, 1}, RoundTripCase{NpyDtype::kFloat16, 2},
                      RoundTripCase{NpyDtype::kFloat16, 3}, RoundTripCase{NpyDtype::kFloat32, 1},
                      RoundTripCase{NpyDtype::kFloat32, 2}, RoundTripCase{NpyDtype::kFloat32, 3},
                      RoundTripCase{NpyDtype::kFloat64, 1}, RoundTripCase{NpyDtype::kFloat64, 2},
                      RoundTripCase{NpyDtype::kFloat64, 3}));

TEST(NpyFileTest, ReadsTheHeaderNumpyWrites) {
  const std::string file = NumpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }",
                                     FloatBytes({1.0f, 2.0f, -3.0f, 0.5f}));
  absl::StatusOr<NpyMatrix<float>> m = ParseNpyFloat(file, "numpy.npy");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->values, (std::vector<float>{1.0f, 2.0f, -3.0f, 0.5f}));
}

TEST(NpyFileTest, Float16IsDecodedExactly) {
  // 0x3c00 = 1, 0xc000 = -2, 0x0001 = 2^-24 (smallest subnormal), 0x7bff = 65504.
  const std::string data("\x00\x3c\x00\xc0\x01\x00\xff\x7b", 8);
  const std::string file =
      NumpyFile("{'descr': '<f2', 'fortran_order': False, 'shape': (1, 4), }", data);
  absl::StatusOr<NpyMatrix<float>> m = ParseNpyFloat(file, "h.npy");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->values, (std::vector<float>{1.0f, -2.0f, 0x1p-24f, 65504.0f}));
}

TEST(NpyFileTest, FileRoundTripAndMissingFile) {
  const gift::TempDir dir = test::NewTempDir("gift-npy-file-test");
  const std::string path = dir.File("npy_file_test_roundtrip.npy");
  ASSERT_TRUE(WriteNpy(path, kValues, 3, 2, NpyDtype::kFloat64).ok());
  absl::StatusOr<NpyMatrix<double>> m = ReadNpyDouble(path);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->rows, 3);
  EXPECT_EQ(m->values, kValues);

  absl::StatusOr<NpyMatrix<float>> missing = ReadNpyFloat(path + ".missing");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(), HasSubstr("npy_file_test_roundtrip.npy.missing"));
}

TEST(NpyFileTest, EncodeRefusesBadArguments) {
  EXPECT_EQ(EncodeNpy(kValues, 4, 2, NpyDtype::kFloat32).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EncodeNpy(kValues, 2, 3, NpyDtype::kFloat32, 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

struct MalformedCase {
  std::string label;
  std::string bytes;
  std::string message;  // expected in the error
};

std::vector<MalformedCase> MalformedCases() {
  const std::string good_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }";
  const std::string data = FloatBytes({1, 2, 3, 4});
  const std::string good = NumpyFile(good_dict, data);
  std::string lying = good;
  lying[8] = '\xff';  // header length 0x??ff: runs past the file
  lying[9] = '\x7f';
  std::string huge = NumpyFile(good_dict, data, 2);
  huge[8] = huge[9] = huge[10] = huge[11] = '\xff';
  std::string bad_version = good;
  bad_version[6] = 4;
  return {
      {"empty", "", "magic"},
      {"bad magic", "\x93NUMPZ" + good.substr(6), "magic"},
      {"preamble cut", good.substr(0, 9), "preamble"},
      {"bad version", bad_version, "version 4.0"},
      {"header length lies", lying, "only"},
      {"huge header", huge, "more than"},
      {"truncated data", good.substr(0, good.size() - 1), "truncated"},
      {"trailing data", good + "xxxx", "needs 16 data bytes"},
      {"fortran order",
       NumpyFile("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", data),
       "fortran_order"},
      {"3-D", NumpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2, 2), }", data),
       "3 dimensions"},
      {"1-D", NumpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", data),
       "1 dimensions"},
      {"int dtype", NumpyFile("{'descr': '<i4', 'fortran_order': False, 'shape': (2, 2), }", data),
       "'<i4'"},
      {"big endian", NumpyFile("{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", data),
       "'>f4'"},
      {"missing key", NumpyFile("{'descr': '<f4', 'shape': (2, 2), }", data), "lacks"},
      {"unknown key",
       NumpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", data), "'x'"},
      {"not a dict", NumpyFile("descr=<f4", data), "'{'"},
      {"unterminated string", NumpyFile("{'descr: <f4", data), "unterminated"},
      {"negative dim",
       NumpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 2), }", data),
       "non-negative integer"},
      {"empty shape", NumpyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 2), }", ""),
       "empty"},
      {"overflowing shape",
       NumpyFile("{'descr': '<f4', 'fortran_order': False, "
                 "'shape': (4294967296, 4294967296), }",
                 data),
       "too large"},
      {"dim too long",
       NumpyFile("{'descr': '<f4', 'fortran_order': False, "
                 "'shape': (99999999999999999999999, 1), }",
                 data),
       "non-negative integer"},
  };
}

TEST(NpyFileTest, MalformedInputsAreInvalidArgumentNamingTheFile) {
  for (const MalformedCase& c : MalformedCases()) {
    SCOPED_TRACE(c.label);
    absl::StatusOr<NpyMatrix<double>> m = ParseNpyDouble(c.bytes, "bad.npy");
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(m.status().message(), HasSubstr("bad.npy"));
    EXPECT_THAT(m.status().message(), HasSubstr(c.message));
  }
}

TEST(NpyFileTest, EveryTruncationOfAValidFileFailsCleanly) {
  absl::StatusOr<std::string> bytes = EncodeNpy(kValues, 2, 3, NpyDtype::kFloat32, 2);
  ASSERT_TRUE(bytes.ok());
  for (size_t n = 0; n < bytes->size(); ++n) {
    EXPECT_EQ(ParseNpyFloat(absl::string_view(*bytes).substr(0, n), "t.npy").status().code(),
              absl::StatusCode::kInvalidArgument)
        << "prefix of " << n << " bytes";
  }
}

}  // namespace
}  // namespace gift::bench
