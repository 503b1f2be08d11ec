// TensorRegistry on its own: checks, idempotent registration, conflicts.
#include "server/coordinator/tensor_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/coordinator/test_util.h"

namespace gift::coordinator {
namespace {

using ::testing::HasSubstr;

gift::v1::RegisterTensorsRequest Request(
    const std::vector<std::pair<std::string, std::vector<int64_t>>>& tensors) {
  return testing::MakeRegisterRequest(tensors);
}

TEST(TensorRegistryTest, ChecksAndRegistersNewNamesOnce) {
  TensorRegistry registry;
  auto request = Request({{"w", {8, 16}}, {"b", {16}}, {"w", {8, 16}}});
  auto fresh = registry.Check(request);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  ASSERT_EQ(fresh->size(), 2u);
  uint64_t id = 1;
  for (const gift::v1::TensorSpec* spec : *fresh) registry.Add(*spec, id++);
  ASSERT_NE(registry.FindByName("w"), nullptr);
  EXPECT_EQ(registry.FindByName("w")->num_elements(), 128u);
  EXPECT_TRUE(registry.Check(request)->empty());  // all known now
  EXPECT_EQ(registry.Shapes({}).size(), 2u);
  StoreMutation m;
  registry.AddChangesTo(&m);
  EXPECT_EQ(m.put_tensors.size(), 2u);
}

TEST(TensorRegistryTest, RefusesBadSpecsAndConflicts) {
  TensorRegistry registry;
  auto w = Request({{"w", {8, 16}}});
  registry.Add(w.tensors(0), 1);
  absl::Status s = registry.Check(Request({{"w", {16, 8}}})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(s.message(), HasSubstr("registered with shape [8, 16]"));
  s = registry.Check(Request({{"x", {4}}, {"x", {5}}})).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(registry.Check(Request({{"", {4}}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Check(Request({{"z", {0, 4}}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Check(Request({{"z", {1 << 25, 1 << 25}}})).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(registry.Check(Request({{"z", {}}})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::coordinator
