// BasisLedger on its own: proposals, acknowledgements, commits at the
// tentative step, postponements past the frozen horizon, pruning, bytes.
#include "server/coordinator/basis_ledger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>

namespace gift::coordinator {
namespace {

using ::testing::ElementsAre;

gift::v1::BasisHeader Header(uint64_t tensor, uint64_t version, const std::string& publisher,
                             bool direct = false) {
  gift::v1::BasisHeader h;
  h.set_member_id(publisher);
  h.set_tensor_id(tensor);
  h.set_version(version);
  h.set_rank(direct ? 0 : 4);
  h.set_direct(direct);
  h.set_size_bytes(direct ? 0 : 3);
  return h;
}

std::shared_ptr<const std::string> Bytes(const std::string& s) {
  return std::make_shared<const std::string>(s);
}

TEST(BasisLedgerTest, NewTensorHasTheDirectVersionZero) {
  BasisLedger ledger;
  ledger.AddTensor(5);
  gift::v1::TensorBasisState* b = ledger.Find(5).value();
  ASSERT_EQ(b->versions_size(), 1);
  EXPECT_TRUE(b->versions(0).direct());
  EXPECT_EQ(BasisLedger::LastVersion(*b), 0u);
  EXPECT_EQ(ledger.Find(6).status().code(), absl::StatusCode::kNotFound);
}

TEST(BasisLedgerTest, CommitsOnceEveryWorkerAcknowledged) {
  BasisLedger ledger;
  ledger.AddTensor(1);
  ledger.Propose(Header(1, 1, "m1"), 20, Bytes("abc"));
  gift::v1::TensorBasisState* b = ledger.Find(1).value();
  const std::set<std::string> workers = {"m1", "m2"};
  EXPECT_FALSE(ledger.MaybeCommit(b, workers));
  EXPECT_FALSE(ledger.Ack(1, 2, "m2"));  // not the pending version
  EXPECT_TRUE(ledger.Ack(1, 1, "m2"));
  EXPECT_FALSE(ledger.Ack(1, 1, "m2"));  // twice
  EXPECT_TRUE(ledger.MaybeCommit(b, workers));
  EXPECT_FALSE(b->has_proposal());
  ASSERT_EQ(b->versions_size(), 2);
  EXPECT_EQ(b->versions(1).version(), 1u);
  EXPECT_EQ(b->versions(1).activation_step(), 20u);
  EXPECT_EQ(ledger.counters().commits, 1u);
  EXPECT_EQ(*ledger.CachedBytes(1, 1), "abc");
  EXPECT_EQ(ledger.Header(1, 1)->rank(), 4u);
  EXPECT_EQ(ledger.Header(1, 3).status().code(), absl::StatusCode::kNotFound);
}

TEST(BasisLedgerTest, NewerProposalReplacesThePendingOneAndItsBytes) {
  BasisLedger ledger;
  ledger.AddTensor(1);
  ledger.Propose(Header(1, 1, "m1"), 20, Bytes("one"));
  ledger.Propose(Header(1, 2, "m1"), 21, Bytes("two"));
  EXPECT_EQ(ledger.CachedBytes(1, 1), nullptr);
  EXPECT_EQ(*ledger.CachedBytes(1, 2), "two");
  StoreMutation m;
  ledger.AddChangesTo(&m);
  ASSERT_EQ(m.put_basis_bytes.size(), 1u);
  EXPECT_EQ(m.put_basis_bytes[0].version, 2u);
  EXPECT_THAT(m.delete_basis_bytes, ElementsAre(std::make_pair(uint64_t{1}, uint64_t{1})));
  EXPECT_EQ(BasisLedger::LastVersion(*ledger.Find(1).value()), 2u);
}

TEST(BasisLedgerTest, PostponeKeepsPendingStepsAboveTheFrozenHorizon) {
  BasisLedger ledger;
  ledger.AddTensor(1);
  ledger.AddTensor(2);
  ledger.Propose(Header(1, 1, "m1"), 12, Bytes("abc"));
  ledger.Propose(Header(2, 1, "m1", /*direct=*/true), 30, nullptr);
  EXPECT_FALSE(ledger.Postpone(11, 4));
  EXPECT_TRUE(ledger.Postpone(12, 4));
  EXPECT_EQ(ledger.Find(1).value()->proposal().tentative_activation_step(), 16u);
  EXPECT_EQ(ledger.Find(1).value()->proposal().postponements(), 1u);
  EXPECT_EQ(ledger.Find(2).value()->proposal().tentative_activation_step(), 30u);
  EXPECT_EQ(ledger.counters().postponements, 1u);
}

TEST(BasisLedgerTest, PruneDropsVersionsNoWorkerCanUse) {
  BasisLedger ledger;
  ledger.AddTensor(1);
  ledger.Propose(Header(1, 1, "m1"), 10, Bytes("abc"));
  ASSERT_TRUE(ledger.MaybeCommit(ledger.Find(1).value(), {"m1"}));
  EXPECT_FALSE(ledger.PruneAll(9));  // a worker still runs step 9 on version 0
  EXPECT_TRUE(ledger.PruneAll(10));  // version 1 is active at every next step
  const gift::v1::TensorBasisState& b = *ledger.Find(1).value();
  ASSERT_EQ(b.versions_size(), 1);
  EXPECT_EQ(b.versions(0).version(), 1u);
}

TEST(BasisLedgerTest, ChangesUntilClearedAndReset) {
  BasisLedger ledger;
  ledger.AddTensor(1);
  ledger.SetOwner(1, "m3");
  ledger.RequestRefresh(1);
  StoreMutation m;
  ledger.AddChangesTo(&m);
  ASSERT_EQ(m.put_bases.size(), 1u);
  EXPECT_EQ(m.put_bases[0].owner_member_id(), "m3");
  EXPECT_EQ(m.put_bases[0].refresh_requests(), 1u);
  ledger.ClearChanges();
  StoreMutation none;
  ledger.AddChangesTo(&none);
  EXPECT_TRUE(none.put_bases.empty());

  ledger.Propose(Header(1, 1, "m3"), 10, Bytes("abc"));
  gift::v1::TensorBasisState stored;
  stored.set_tensor_id(9);
  ledger.Reset({stored});
  EXPECT_EQ(ledger.bases().size(), 1u);
  EXPECT_EQ(ledger.CachedBytes(1, 1), nullptr);
  StoreMutation after;
  ledger.AddChangesTo(&after);
  EXPECT_TRUE(after.put_bases.empty() && after.put_basis_bytes.empty());
}

}  // namespace
}  // namespace gift::coordinator
