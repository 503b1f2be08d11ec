#include "server/aggregator/step_reduction.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "common/codec/codec.h"
#include "common/codec/payload.h"
#include "common/codec/reduce.h"
#include "gtest/gtest.h"
#include "tests/codec/test_util.h"

namespace gift::server::reducer_internal {
namespace {

constexpr uint64_t kRows = 4, kCols = 256;

using codec::testing::Spec;

// A deterministic gradient of its own for every seed.
std::vector<float> Gradient(uint32_t seed) {
  std::vector<float> g(kRows * kCols);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = std::sin(0.1f * static_cast<float>(i) + static_cast<float>(seed)) *
           static_cast<float>(seed + 1);
  }
  return g;
}

// Encodes one gradient per received rank into its slot of `inputs`, as a
// push would land there; the other slots stay empty (counted in a node sum).
void Receive(StepInputs& inputs, const codec::CodecSpec& spec, const std::vector<bool>& received,
             std::vector<codec::EncodedTensor>& encoded,
             const std::shared_ptr<BufferRegistry>& registry) {
  const uint64_t dims[] = {kRows, kCols};
  inputs.slots.resize(received.size());
  for (uint32_t r = 0; r < received.size(); ++r) {
    if (!received[r]) continue;
    const std::vector<float> g = Gradient(r + 1);
    auto t = codec::EncodedTensor::Create(spec, kRows, kCols).value();
    ASSERT_TRUE(
        codec::Encode(g.data(), t.mutable_view(), {.tensor = 3, .step = 1, .rank = r}).ok());
    const std::vector<uint8_t> payload = codec::SerializePayload(t.view(), dims).value();
    auto parsed = codec::ParsePayload(payload);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    inputs.slots[r].view = CopyIntoSlot(inputs.slots[r], payload, parsed->view, registry);
    inputs.slots[r].state = Slot::State::kReceived;
    encoded.push_back(std::move(t));
  }
}

TEST(StepReductionTest, EncodesTheAverageOverTheWorldBitForBitReduceEncoded) {
  auto registry = std::make_shared<BufferRegistry>(nullptr);
  StepInputs inputs;
  std::vector<codec::EncodedTensor> encoded;
  // Rank 1 was counted in a node sum (its slot empty): the average is still
  // over all three slots.
  Receive(inputs, Spec("e4m3/block128"), {true, false, true}, encoded, registry);
  const codec::RngKey key{.tensor = 3, .step = 1, .rank = 99};
  ReusableBuffer out;
  ASSERT_TRUE(
      EncodeAverage(inputs, {kRows, kCols}, Spec("e4m3/block32/sr"), key, {}, out, registry).ok());

  std::vector<codec::EncodedView> views;
  for (const auto& e : encoded) views.push_back(e.view());
  auto want = codec::EncodedTensor::Create(Spec("e4m3/block32/sr"), kRows, kCols).value();
  std::vector<float> sum(kRows * kCols);
  ASSERT_TRUE(codec::ReduceEncoded(views, sum.data(), 1.0f / 3, want.mutable_view(), key).ok());
  const uint64_t dims[] = {kRows, kCols};
  const std::vector<uint8_t> want_bytes = codec::SerializePayload(want.view(), dims).value();
  const absl::Span<const uint8_t> got = out.span();
  EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.end()), want_bytes);
}

TEST(StepReductionTest, Fp32InputsGetAnFp32Result) {
  auto registry = std::make_shared<BufferRegistry>(nullptr);
  StepInputs inputs;
  std::vector<codec::EncodedTensor> encoded;
  Receive(inputs, Spec("fp32"), {true, true}, encoded, registry);
  ReusableBuffer out;
  ASSERT_TRUE(EncodeAverage(inputs, {kRows, kCols}, Spec("bf16"), {}, {}, out, registry).ok());
  auto parsed = codec::ParsePayload(out.span());
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->view.spec.format, codec::Format::kF32);
  std::vector<float> avg(kRows * kCols);
  ASSERT_TRUE(codec::Decode(parsed->view, avg.data()).ok());
  const std::vector<float> a = Gradient(1), b = Gradient(2);
  for (size_t i = 0; i < avg.size(); ++i) ASSERT_EQ(avg[i], (a[i] + b[i]) * 0.5f) << i;
}

TEST(StepReductionTest, ANonFiniteSumIsInvalidArgument) {
  auto registry = std::make_shared<BufferRegistry>(nullptr);
  StepInputs inputs;
  std::vector<codec::EncodedTensor> encoded;
  Receive(inputs, Spec("fp32"), {true, true}, encoded, registry);
  // Both ranks' first element at FP32's largest: their sum overflows.
  for (Slot& slot : inputs.slots) {
    const float big = 3.0e38f;
    std::memcpy(const_cast<uint8_t*>(slot.view.codes), &big, sizeof(big));
  }
  ReusableBuffer out;
  EXPECT_EQ(EncodeAverage(inputs, {kRows, kCols}, Spec("bf16"), {}, {}, out, registry).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::server::reducer_internal
