#include "common/transform/budgeted_selection.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace gift::transform {
namespace {

// Two tensors, each at rank 8 (cost 1) or 64 (cost 8). Values per unit of
// cost from direct: A r8 0.4 / 1, A r64 0.7 / 8; B (weight 2) r8 2 x 0.2 / 1,
// B r64 2 x 0.5 / 8.
std::vector<BudgetedTensor> TwoTensors() {
  return {{.weight = 1.0, .direct_error = 1.0, .candidates = {{0.6, 1.0}, {0.3, 8.0}}},
          {.weight = 2.0, .direct_error = 1.0, .candidates = {{0.8, 1.0}, {0.5, 8.0}}}};
}

std::vector<int> Choose(const std::vector<BudgetedTensor>& tensors, double budget,
                        double margin = 0.1) {
  auto chosen = ChooseUnderBudget(tensors, budget, margin);
  EXPECT_TRUE(chosen.ok()) << chosen.status();
  return chosen.value_or(std::vector<int>{});
}

TEST(ChooseUnderBudgetTest, HandComputedChoices) {
  const auto tensors = TwoTensors();
  // Nothing fits: both direct.
  EXPECT_EQ(Choose(tensors, 0.0), (std::vector<int>{-1, -1}));
  EXPECT_EQ(Choose(tensors, 0.5), (std::vector<int>{-1, -1}));
  // 1: A r8 and B r8 tie at 0.4; the lower index goes first.
  EXPECT_EQ(Choose(tensors, 1.0), (std::vector<int>{0, -1}));
  // 2: both at rank 8.
  EXPECT_EQ(Choose(tensors, 2.0), (std::vector<int>{0, 0}));
  // 9: then B's upgrade (2 x 0.3 / 7 = 0.086) beats A's (0.3 / 7 = 0.043),
  // and the 7 left pay for one of them.
  EXPECT_EQ(Choose(tensors, 9.0), (std::vector<int>{0, 1}));
  // 16: both upgrades fit.
  EXPECT_EQ(Choose(tensors, 16.0), (std::vector<int>{1, 1}));
  // Off: the lowest-error eligible candidate of each.
  EXPECT_EQ(Choose(tensors, std::numeric_limits<double>::infinity()), (std::vector<int>{1, 1}));
}

TEST(ChooseUnderBudgetTest, ACandidateMustBeatDirectByTheMargin) {
  std::vector<BudgetedTensor> tensors = {
      {.weight = 1.0, .direct_error = 1.0, .candidates = {{0.95, 1.0}, {0.85, 2.0}}}};
  // 0.95 is within the 10 % margin of direct: only 0.85 is eligible.
  EXPECT_EQ(Choose(tensors, 1.5), (std::vector<int>{-1}));
  EXPECT_EQ(Choose(tensors, 2.0), (std::vector<int>{1}));
  // With no margin the cheap one is eligible, and first per unit of cost.
  EXPECT_EQ(Choose(tensors, 1.5, 0.0), (std::vector<int>{0}));
  // A candidate worse than direct never runs.
  tensors[0].candidates = {{1.2, 1.0}};
  EXPECT_EQ(Choose(tensors, 10.0, 0.0), (std::vector<int>{-1}));
}

TEST(ChooseUnderBudgetTest, NeverExceedsTheBudget) {
  // Ranks 8..64 at cost proportional to the rank, error falling with it.
  std::vector<BudgetedTensor> tensors;
  for (int t = 0; t < 6; ++t) {
    BudgetedTensor tensor{.weight = 1.0 + t, .direct_error = 1.0};
    for (int r : {8, 16, 32, 64}) {
      tensor.candidates.push_back({.error = 0.25 + 2.0 / (r + t), .cost = r / 64.0});
    }
    tensors.push_back(tensor);
  }
  for (double budget : {0.1, 0.3, 1.0, 2.5, 5.0}) {
    const std::vector<int> chosen = Choose(tensors, budget);
    double spent = 0.0;
    for (size_t t = 0; t < tensors.size(); ++t) {
      if (chosen[t] >= 0) spent += tensors[t].candidates[chosen[t]].cost;
    }
    EXPECT_LE(spent, budget + 1e-12) << budget;
  }
}

TEST(ChooseUnderBudgetTest, RejectsBadInputs) {
  auto tensors = TwoTensors();
  EXPECT_FALSE(ChooseUnderBudget(tensors, -1.0, 0.1).ok());
  EXPECT_FALSE(ChooseUnderBudget(tensors, std::nan(""), 0.1).ok());
  EXPECT_FALSE(ChooseUnderBudget(tensors, 1.0, 1.0).ok());
  tensors[0].direct_error = 0.0;
  EXPECT_FALSE(ChooseUnderBudget(tensors, 1.0, 0.1).ok());
  tensors = TwoTensors();
  tensors[1].candidates[0].cost = 0.0;
  EXPECT_FALSE(ChooseUnderBudget(tensors, 1.0, 0.1).ok());
  tensors = TwoTensors();
  tensors[1].weight = std::numeric_limits<double>::infinity();
  EXPECT_FALSE(ChooseUnderBudget(tensors, 1.0, 0.1).ok());
  EXPECT_TRUE(ChooseUnderBudget({}, 1.0, 0.1).ok());
}

}  // namespace
}  // namespace gift::transform
