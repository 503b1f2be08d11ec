// Membership on its own: ids, epochs, dense stable ranks, leases, steps,
// history and the changes it hands to a commit.
#include "server/coordinator/membership.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>

namespace gift::coordinator {
namespace {

using ::testing::ElementsAre;
using ::testing::UnorderedElementsAre;

gift::v1::Member NewMember(const std::string& name,
                           gift::v1::MemberRole role = gift::v1::MEMBER_ROLE_WORKER,
                           int64_t lease_ms = 1000) {
  gift::v1::Member m;
  m.set_name(name);
  m.set_role(role);
  m.set_lease_expires_unix_ms(lease_ms);
  return m;
}

std::map<std::string, uint32_t> Ranks(const Membership& ms) {
  std::map<std::string, uint32_t> ranks;
  for (const auto& [id, m] : ms.members()) ranks[m.name()] = m.rank();
  return ranks;
}

TEST(MembershipTest, AddAssignsIdsAndEpochsAndRerankMakesDenseRanks) {
  Membership ms;
  const std::string a = ms.Add(NewMember("a")).member_id();
  ms.Add(NewMember("s", gift::v1::MEMBER_ROLE_SERVER));
  ms.Add(NewMember("b"));
  EXPECT_EQ(a, "m1");
  EXPECT_EQ(ms.epoch(), 3u);
  EXPECT_EQ(ms.next_member_seq(), 4u);
  ms.Rerank();
  EXPECT_EQ(Ranks(ms), (std::map<std::string, uint32_t>{{"a", 0}, {"b", 1}, {"s", 0}}));
  EXPECT_EQ(ms.Count(gift::v1::MEMBER_ROLE_WORKER), 2u);
  EXPECT_EQ(ms.Count(gift::v1::MEMBER_ROLE_SERVER), 1u);
  EXPECT_EQ((*ms.Live(a))->joined_epoch(), 1u);
}

TEST(MembershipTest, SurvivorsKeepRanksAndHolesAreRefilled) {
  Membership ms;
  for (const char* name : {"a", "b", "c", "d"}) ms.Add(NewMember(name));
  ms.Rerank();
  ms.Remove(ms.FindByName("b")->member_id(), "leave", 5);
  ms.Rerank();
  // d (rank 3, out of range for 3 workers) fills b's hole; a and c stay.
  EXPECT_EQ(Ranks(ms), (std::map<std::string, uint32_t>{{"a", 0}, {"c", 2}, {"d", 1}}));
  EXPECT_EQ(ms.epoch(), 5u);
}

TEST(MembershipTest, LiveDistinguishesFormerAndUnknownMembers) {
  Membership ms;
  const std::string a = ms.Add(NewMember("a")).member_id();
  const std::string s = ms.Add(NewMember("s", gift::v1::MEMBER_ROLE_SERVER)).member_id();
  EXPECT_TRUE(ms.Live(a).ok());
  EXPECT_EQ(ms.LiveWorker(s).status().code(), absl::StatusCode::kFailedPrecondition);
  ms.Remove(a, "expire", 0);
  EXPECT_EQ(ms.Live(a).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ms.Live("m99").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ms.Live("").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ms.FindByName("a"), nullptr);
}

TEST(MembershipTest, AnEvictedWorkerIsToldItsStepAndTheClusters) {
  Membership ms;
  gift::v1::Member& a = ms.Add(NewMember("a"));
  a.set_last_step(4);
  const std::string a_id = a.member_id();
  ms.Add(NewMember("b")).set_last_step(22);
  ms.Remove(a_id, "expire", 0);
  const absl::Status s = ms.Live(a_id).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("evicted at step 4"));
  EXPECT_THAT(s.message(), ::testing::HasSubstr("cluster at step 22"));
}

TEST(MembershipTest, ExpiredAndWorkerSteps) {
  Membership ms;
  gift::v1::Member& a = ms.Add(NewMember("a", gift::v1::MEMBER_ROLE_WORKER, 100));
  a.set_last_step(7);
  const std::string a_id = a.member_id();
  gift::v1::Member& b = ms.Add(NewMember("b", gift::v1::MEMBER_ROLE_WORKER, 200));
  b.set_last_step(3);
  const std::string b_id = b.member_id();
  ms.Add(NewMember("s", gift::v1::MEMBER_ROLE_SERVER, 50));
  EXPECT_THAT(ms.Expired(100), UnorderedElementsAre(a_id, "m3"));
  uint64_t min_next = 0, max_last = 0;
  ASSERT_TRUE(ms.WorkerSteps(&min_next, &max_last));
  EXPECT_EQ(min_next, 4u);
  EXPECT_EQ(max_last, 7u);
  EXPECT_THAT(ms.WorkerIds(), UnorderedElementsAre(a_id, b_id));
  Membership empty;
  EXPECT_FALSE(empty.WorkerSteps(&min_next, &max_last));
}

TEST(MembershipTest, ChangesCarryPutsDeletesAndHistoryUntilCleared) {
  Membership ms;
  const std::string a = ms.Add(NewMember("a")).member_id();
  const std::string b = ms.Add(NewMember("b")).member_id();
  ms.Rerank();
  ms.Record("join", *ms.Live(a).value(), 10);
  ms.Remove(b, "leave", 11);
  StoreMutation m;
  ms.AddChangesTo(&m);
  ASSERT_EQ(m.put_members.size(), 1u);
  EXPECT_EQ(m.put_members[0].member_id(), a);
  EXPECT_THAT(m.delete_members, ElementsAre(b));
  ASSERT_EQ(m.history.size(), 2u);
  EXPECT_EQ(m.history[0].event, "join");
  EXPECT_EQ(m.history[1].event, "leave");
  EXPECT_EQ(m.history[1].epoch, 3u);
  ms.ClearChanges();
  StoreMutation empty;
  ms.AddChangesTo(&empty);
  EXPECT_TRUE(empty.put_members.empty() && empty.delete_members.empty() && empty.history.empty());
}

TEST(MembershipTest, ResetReplacesEverything) {
  Membership ms;
  ms.Add(NewMember("a"));
  gift::v1::Member stored = NewMember("z");
  stored.set_member_id("m7");
  stored.set_rank(0);
  ms.Reset(12, 9, {stored});
  EXPECT_EQ(ms.epoch(), 12u);
  EXPECT_EQ(ms.next_member_seq(), 9u);
  ASSERT_EQ(ms.members().size(), 1u);
  EXPECT_EQ(ms.members().begin()->first, "m7");
  StoreMutation m;
  ms.AddChangesTo(&m);
  EXPECT_TRUE(m.put_members.empty());
  EXPECT_EQ(ms.Add(NewMember("y")).member_id(), "m9");
}

}  // namespace
}  // namespace gift::coordinator
