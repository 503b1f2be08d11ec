#include "worker/daemon/step_measurement.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace gift::worker {
namespace {

TEST(StepMeasurementTest, RelativeL2OfHandComputedVectors) {
  const float want[] = {3, 4};
  const float got[] = {3, 4.5f};
  EXPECT_DOUBLE_EQ(RelativeL2(got, want, 2), 0.5 / 5.0);
  EXPECT_EQ(RelativeL2(want, want, 2), 0.0);
  const float zeros[] = {0, 0};
  EXPECT_EQ(RelativeL2(zeros, zeros, 2), 0.0);
  EXPECT_TRUE(std::isinf(RelativeL2(got, zeros, 2)));
}

TEST(StepMeasurementTest, CompareSetsEachTensorsErrorAndSummarizeSplitsByTransform) {
  // Two host tensors: the step's averages against exact ones given here.
  std::vector<float> a = {1, 2, 2, 1}, b = {0, 0, 3, 4};
  const std::vector<LocalTensor> tensors = {
      {.tensor_id = 1, .rows = 2, .cols = 2, .data = a.data()},
      {.tensor_id = 2, .rows = 1, .cols = 4, .data = b.data()}};
  StepMeasurement m({{1, 2, 2, 1}, {0, 0, 3, 3}}, StepReport{.bytes_pushed = 64});
  EXPECT_EQ(m.report().bytes_pushed, 64u);
  gift::v1::PushPullResponse response;
  response.add_tensors()->set_transformed(true);
  response.add_tensors()->set_transformed(false);
  ASSERT_TRUE(m.Compare(tensors, nullptr, &response).ok());
  EXPECT_EQ(response.tensors(0).rel_l2_error(), 0.0);
  EXPECT_DOUBLE_EQ(response.tensors(1).rel_l2_error(), 1.0 / std::sqrt(18.0));
  EXPECT_EQ(m.device_average(0), nullptr);  // host tensors are read in place
  const StepMeasurement::Summary errors = StepMeasurement::Summarize(response);
  ASSERT_TRUE(errors.transformed.has_value());
  ASSERT_TRUE(errors.direct.has_value());
  EXPECT_EQ(*errors.transformed, 0.0);
  EXPECT_DOUBLE_EQ(*errors.direct, 1.0 / std::sqrt(18.0));
  response.mutable_tensors(0)->set_transformed(false);
  EXPECT_FALSE(StepMeasurement::Summarize(response).transformed.has_value());
}

TEST(StepMeasurementTest, ADeviceTensorWithoutDeviceMemoryFailsTheComparison) {
  float fake = 0;
  const std::vector<LocalTensor> tensors = {
      {.tensor_id = 1, .rows = 1, .cols = 1, .data = &fake, .device = true}};
  StepMeasurement m({{1}}, StepReport{});
  gift::v1::PushPullResponse response;
  response.add_tensors();
  EXPECT_FALSE(m.Compare(tensors, nullptr, &response).ok());
}

}  // namespace
}  // namespace gift::worker
