// The SQLite store on a real file: round trip, reopen, and clear errors for
// corrupt, foreign, newer or locked files.
#include "server/coordinator/state_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "tests/coordinator/test_util.h"
#include "tests/testing/temp_dir.h"

namespace gift::coordinator {
namespace {

using ::testing::HasSubstr;

StoreMutation SampleMutation() {
  StoreMutation m;
  m.meta.cluster_id = "c0ffee";
  m.meta.epoch = 3;
  m.meta.revision = 17;
  m.meta.frozen_through_step = 40;
  m.meta.next_member_seq = 5;
  m.meta.next_tensor_id = 2;
  m.meta.policy.set_version(4);
  m.meta.policy.mutable_transform()->set_rank(32);
  m.meta.shard_map.set_epoch(3);
  m.meta.shard_map.add_chunks()->set_num_elements(100);
  gift::v1::Member& w = m.put_members.emplace_back();
  w.set_member_id("m4");
  w.set_name("host/gpu0");
  w.set_rank(0);
  gift::v1::TensorInfo& t = m.put_tensors.emplace_back();
  t.set_tensor_id(1);
  t.set_name("w");
  t.add_shape(4);
  t.add_shape(4);
  gift::v1::TensorBasisState& b = m.put_bases.emplace_back();
  b.set_tensor_id(1);
  b.set_owner_member_id("m4");
  b.add_versions()->set_version(2);
  m.put_basis_bytes.push_back({1, 2, std::make_shared<const std::string>("basis\0bytes", 11)});
  m.history.push_back({1000, 3, "join", "m4", "host/gpu0", gift::v1::MEMBER_ROLE_WORKER, 0});
  return m;
}

TEST(StateStoreTest, ReopenKeepsEverything) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  const std::string path = dir.File("s.db");
  {
    auto store = StateStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    auto fresh = (*store)->Load();
    ASSERT_TRUE(fresh.ok());
    EXPECT_TRUE(fresh->fresh);
    ASSERT_TRUE((*store)->Commit(SampleMutation()).ok());
  }
  auto store = StateStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_FALSE(state->fresh);
  EXPECT_EQ(state->meta.cluster_id, "c0ffee");
  EXPECT_EQ(state->meta.epoch, 3u);
  EXPECT_EQ(state->meta.revision, 17u);
  EXPECT_EQ(state->meta.frozen_through_step, 40u);
  EXPECT_EQ(state->meta.next_member_seq, 5u);
  EXPECT_EQ(state->meta.next_tensor_id, 2u);
  EXPECT_EQ(state->meta.policy.transform().rank(), 32u);
  EXPECT_EQ(state->meta.shard_map.chunks_size(), 1);
  ASSERT_EQ(state->members.size(), 1u);
  EXPECT_EQ(state->members[0].name(), "host/gpu0");
  ASSERT_EQ(state->tensors.size(), 1u);
  EXPECT_EQ(state->tensors[0].shape_size(), 2);
  ASSERT_EQ(state->bases.size(), 1u);
  EXPECT_EQ(state->bases[0].owner_member_id(), "m4");
  auto bytes = (*store)->LoadBasisBytes(1, 2);
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(*bytes, std::string("basis\0bytes", 11));
  EXPECT_EQ((*store)->LoadBasisBytes(1, 3).status().code(), absl::StatusCode::kNotFound);
  auto history = (*store)->History(10);
  ASSERT_TRUE(history.ok());
  ASSERT_EQ(history->size(), 1u);
  EXPECT_EQ((*history)[0].event, "join");
  EXPECT_EQ((*history)[0].epoch, 3u);

  // Deletions.
  StoreMutation del;
  del.meta = state->meta;
  del.delete_members.push_back("m4");
  del.delete_basis_bytes.push_back({1, 2});
  ASSERT_TRUE((*store)->Commit(del).ok());
  auto after = (*store)->Load();
  ASSERT_TRUE(after.ok());
  EXPECT_TRUE(after->members.empty());
  EXPECT_EQ((*store)->LoadBasisBytes(1, 2).status().code(), absl::StatusCode::kNotFound);
}

TEST(StateStoreTest, CorruptFileIsAClearError) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  const std::string path = dir.File("corrupt.db");
  std::ofstream(path) << std::string(8192, 'x');
  auto store = StateStore::Open(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_THAT(store.status().message(), HasSubstr("not a usable SQLite database"));
}

TEST(StateStoreTest, ForeignDatabaseIsRefused) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  const std::string path = dir.File("other.db");
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t (x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto store = StateStore::Open(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("not a gift-coordinator state file"));
}

TEST(StateStoreTest, OtherSchemaVersionIsRefused) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  const std::string path = dir.File("new.db");
  ASSERT_TRUE(StateStore::Open(path).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  auto store = StateStore::Open(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(store.status().message(), HasSubstr("schema version 99"));
}

// The run (schema version 2) round-trips; a new run's mutation deletes every
// tensor row; a version-1 file (no run column) is migrated on open.
TEST(StateStoreTest, TheRunIsKeptAndAVersionOneFileIsMigrated) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  const std::string path = dir.File("s.db");
  {
    auto store = StateStore::Open(path);
    ASSERT_TRUE(store.ok()) << store.status();
    StoreMutation m = SampleMutation();
    m.meta.run.set_run_id("r2");
    m.meta.run.set_generation(2);
    m.meta.run.set_base_step(57);
    ASSERT_TRUE((*store)->Commit(m).ok());
    StoreMutation drop;
    drop.meta = m.meta;
    drop.drop_all_tensors = true;
    ASSERT_TRUE((*store)->Commit(drop).ok());
    auto state = (*store)->Load();
    ASSERT_TRUE(state.ok()) << state.status();
    EXPECT_EQ(state->meta.run.run_id(), "r2");
    EXPECT_EQ(state->meta.run.base_step(), 57u);
    EXPECT_TRUE(state->tensors.empty());
    EXPECT_TRUE(state->bases.empty());
    EXPECT_EQ((*store)->LoadBasisBytes(1, 2).status().code(), absl::StatusCode::kNotFound);
  }
  // Back to version 1's layout: meta without the run column.
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "ALTER TABLE meta DROP COLUMN run; PRAGMA user_version = 1", nullptr,
                         nullptr, nullptr),
            SQLITE_OK)
      << sqlite3_errmsg(db);
  sqlite3_close(db);
  auto store = StateStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  auto state = (*store)->Load();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->meta.cluster_id, "c0ffee");
  EXPECT_EQ(state->meta.run.generation(), 0u);  // version 1 knew no run
  store->reset();
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int(stmt, 0), kSchemaVersion);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST(StateStoreTest, SecondOpenWhileInUseFails) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  const std::string path = dir.File("s.db");
  auto first = StateStore::Open(path);
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE((*first)->Commit(SampleMutation()).ok());
  auto second = StateStore::Open(path);
  EXPECT_FALSE(second.ok());
}

// The WAL does not keep its peak size after a checkpoint: a full disk then
// fails the next commit as it would any growing file (the soak's
// coordinator-disk-full fault), instead of being absorbed by a WAL that
// once grew.
TEST(StateStoreTest, TheWalIsTruncatedWhenACheckpointRewindsIt) {
  const gift::TempDir dir = test::NewTempDir("gift-coord");
  const std::string path = dir.File("s.db");
  auto store = StateStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  // 2 x 2 MiB of basis bytes pass the 1,000-page auto-checkpoint (4 MiB),
  // which runs after the second commit.
  for (uint64_t version = 1; version <= 2; ++version) {
    StoreMutation m = SampleMutation();
    m.put_basis_bytes = {{1, version, std::make_shared<const std::string>(2 << 20, 'b')}};
    ASSERT_TRUE((*store)->Commit(m).ok());
  }
  // The next commit rewinds the WAL (4.3 MB without the size limit).
  StoreMutation small = SampleMutation();
  small.put_basis_bytes.clear();
  ASSERT_TRUE((*store)->Commit(small).ok());
  const std::uintmax_t wal = std::filesystem::file_size(path + "-wal");
  EXPECT_LT(wal, std::uintmax_t{1} << 20) << "the WAL kept " << wal << " bytes";
}

}  // namespace
}  // namespace gift::coordinator
