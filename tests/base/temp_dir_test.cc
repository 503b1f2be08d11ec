#include "common/base/temp_dir.h"

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <vector>

#include "common/base/relative_error.h"
#include "common/base/split_mix64.h"
#include "gtest/gtest.h"

namespace gift {
namespace {

TEST(TempDirTest, CreatesAPrivateDirectoryAndRemovesItWithItsFiles) {
  std::string path;
  {
    absl::StatusOr<TempDir> dir = TempDir::Create("gift-temp-dir-test", testing::TempDir());
    ASSERT_TRUE(dir.ok()) << dir.status();
    path = dir->path();
    struct stat st {};
    ASSERT_EQ(stat(path.c_str(), &st), 0);
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    std::filesystem::create_directories(dir->File("a/b"));
    std::ofstream(dir->File("a/b/c.txt")) << "x";
    EXPECT_TRUE(std::filesystem::exists(path + "/a/b/c.txt"));
  }
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(TempDirTest, MovingTransfersOwnership) {
  absl::StatusOr<TempDir> dir = TempDir::Create("gift-temp-dir-test", testing::TempDir());
  ASSERT_TRUE(dir.ok());
  const std::string path = dir->path();
  std::optional<TempDir> moved(std::move(*dir));
  EXPECT_TRUE(dir->path().empty());
  EXPECT_TRUE(std::filesystem::exists(path));
  moved.reset();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(TempDirTest, FailsWithTheReasonForAMissingParent) {
  absl::StatusOr<TempDir> dir = TempDir::Create("x", "/nonexistent/gift-parent");
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(dir.status().message().find("/nonexistent/gift-parent/x-"), std::string::npos);
}

TEST(RelativeL2Test, MatchesTheDefinitionAndHandlesAZeroReference) {
  const std::vector<float> want = {3, 4};
  const std::vector<float> got = {3, 5};
  EXPECT_DOUBLE_EQ(RelativeL2(got, want), 1.0 / 5.0);
  const std::vector<double> want_d = {3, 4};
  EXPECT_DOUBLE_EQ(RelativeL2(got, want_d), 1.0 / 5.0);
  const std::vector<float> zero = {0, 0};
  EXPECT_EQ(RelativeL2(zero, zero), 0.0);
  EXPECT_EQ(RelativeL2(got, zero), std::numeric_limits<double>::infinity());
}

TEST(SplitMix64Test, IsTheReferenceSequenceAndUniformIsInUnitInterval) {
  uint64_t state = 0;
  // The first outputs of SplitMix64 seeded with 0 (Vigna's reference code).
  EXPECT_EQ(SplitMix64(state), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(SplitMix64(state), 0x6E789E6AA1B965F4ull);
  for (int i = 0; i < 1000; ++i) {
    const double u = SplitMix64Uniform(state);
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

}  // namespace
}  // namespace gift
