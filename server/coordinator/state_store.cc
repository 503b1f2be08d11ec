#include "server/coordinator/state_store.h"

#include <sqlite3.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"

namespace gift::coordinator {
namespace {

constexpr int kApplicationId = 0x47494654;  // "GIFT"
// The WAL is truncated to empty whenever a checkpoint rewinds it, so the
// state file's disk use does not keep its peak (up to the 1,000-page
// auto-checkpoint, about 4 MiB), and a full disk fails the next commit as
// it would any growing file, instead of only once the WAL outgrows its peak.
constexpr const char* kWalSizeLimit = "PRAGMA journal_size_limit = 0";

constexpr const char* kSchema[] = {
    "CREATE TABLE meta (id INTEGER PRIMARY KEY CHECK (id = 1), cluster_id TEXT NOT NULL,"
    " epoch INTEGER NOT NULL, revision INTEGER NOT NULL, frozen_through_step INTEGER NOT NULL,"
    " next_member_seq INTEGER NOT NULL, next_tensor_id INTEGER NOT NULL, policy BLOB NOT NULL,"
    " shard_map BLOB NOT NULL, run BLOB NOT NULL DEFAULT x'')",
    "CREATE TABLE members (member_id TEXT PRIMARY KEY, member BLOB NOT NULL)",
    "CREATE TABLE tensors (tensor_id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE,"
    " info BLOB NOT NULL)",
    "CREATE TABLE bases (tensor_id INTEGER PRIMARY KEY, state BLOB NOT NULL)",
    "CREATE TABLE basis_bytes (tensor_id INTEGER NOT NULL, version INTEGER NOT NULL,"
    " bytes BLOB NOT NULL, PRIMARY KEY (tensor_id, version))",
    "CREATE TABLE membership_history (id INTEGER PRIMARY KEY AUTOINCREMENT,"
    " time_unix_ms INTEGER NOT NULL, epoch INTEGER NOT NULL, event TEXT NOT NULL,"
    " member_id TEXT NOT NULL, name TEXT NOT NULL, role INTEGER NOT NULL, rank INTEGER NOT NULL)",
};

// A prepared statement: its own, finalized on destruction, or one of a
// store's prepared statements, reset for its next use on destruction.
class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql) : db_(db) {
    rc_ = sqlite3_prepare_v2(db, sql, -1, &stmt_, nullptr);
  }
  Stmt(sqlite3* db, absl::flat_hash_map<std::string, sqlite3_stmt*>& prepared, const char* sql)
      : db_(db), cached_(true) {
    auto [it, inserted] = prepared.try_emplace(sql, nullptr);
    if (inserted) {
      rc_ = sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &it->second, nullptr);
      if (rc_ != SQLITE_OK) {
        sqlite3_finalize(it->second);
        prepared.erase(it);
        return;
      }
    }
    stmt_ = it->second;
  }
  ~Stmt() {
    if (!cached_) {
      sqlite3_finalize(stmt_);
    } else if (stmt_ != nullptr) {
      sqlite3_reset(stmt_);
      sqlite3_clear_bindings(stmt_);
    }
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

  absl::Status status(absl::string_view what) const {
    if (rc_ == SQLITE_OK) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(what, ": ", sqlite3_errmsg(db_)));
  }
  void Bind(int i, int64_t v) { Check(sqlite3_bind_int64(stmt_, i, v)); }
  void Bind(int i, uint64_t v) { Bind(i, static_cast<int64_t>(v)); }
  void Bind(int i, const std::string& text) {
    Check(
        sqlite3_bind_text(stmt_, i, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT));
  }
  void BindBlob(int i, const std::string& blob) {
    Check(sqlite3_bind_blob64(stmt_, i, blob.data(), blob.size(), SQLITE_TRANSIENT));
  }
  // SQLITE_ROW, SQLITE_DONE, or an error code (kept in status()).
  int Step() {
    if (rc_ != SQLITE_OK) return rc_;
    int rc = sqlite3_step(stmt_);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) rc_ = rc;
    return rc;
  }
  absl::Status Run(absl::string_view what) {
    Step();
    return status(what);
  }
  int64_t Int(int col) { return sqlite3_column_int64(stmt_, col); }
  std::string Text(int col) {
    const void* p = sqlite3_column_blob(stmt_, col);
    int n = sqlite3_column_bytes(stmt_, col);
    return p == nullptr ? std::string() : std::string(static_cast<const char*>(p), n);
  }

 private:
  void Check(int rc) {
    if (rc_ == SQLITE_OK && rc != SQLITE_OK) rc_ = rc;
  }
  sqlite3* db_;
  const bool cached_ = false;
  sqlite3_stmt* stmt_ = nullptr;
  int rc_ = SQLITE_OK;
};

template <typename Message>
absl::Status ParseRow(const std::string& blob, absl::string_view what, Message* out) {
  if (!out->ParseFromString(blob)) {
    return absl::DataLossError(absl::StrCat("state file: cannot parse ", what));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> PragmaInt(sqlite3* db, const char* sql) {
  Stmt stmt(db, sql);
  if (stmt.Step() != SQLITE_ROW) return stmt.status(sql);
  return stmt.Int(0);
}

}  // namespace

absl::StatusOr<std::unique_ptr<StateStore>> StateStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close(db);
    return absl::FailedPreconditionError(
        absl::StrCat("cannot open state file ", path, ": ", message));
  }
  std::unique_ptr<StateStore> store(new StateStore(path, db));
  auto fail = [&](absl::string_view why) {
    return absl::FailedPreconditionError(absl::StrCat("state file ", path, ": ", why));
  };
  absl::MutexLock lock(&store->mu_);
  sqlite3_busy_timeout(db, 1000);
  absl::StatusOr<int64_t> user_version = PragmaInt(db, "PRAGMA user_version");
  if (!user_version.ok()) {
    return fail(
        absl::StrCat("not a usable SQLite database (", user_version.status().message(), ")"));
  }
  GIFT_ASSIGN_OR_RETURN(int64_t app_id, PragmaInt(db, "PRAGMA application_id"));
  GIFT_ASSIGN_OR_RETURN(int64_t tables, PragmaInt(db, "SELECT count(*) FROM sqlite_master"));
  if (*user_version == 0 && app_id == 0 && tables == 0) {
    // A new (empty) file: create the schema.
    absl::Status s = store->Exec("PRAGMA locking_mode = EXCLUSIVE");
    if (s.ok()) s = store->Exec("PRAGMA journal_mode = WAL");
    if (s.ok()) s = store->Exec(kWalSizeLimit);
    if (s.ok()) s = store->Exec("BEGIN IMMEDIATE");
    for (const char* sql : kSchema) {
      if (s.ok()) s = store->Exec(sql);
    }
    if (s.ok()) {
      s = store->Exec(absl::StrCat("PRAGMA application_id = ", kApplicationId).c_str());
    }
    if (s.ok()) s = store->Exec(absl::StrCat("PRAGMA user_version = ", kSchemaVersion).c_str());
    if (s.ok()) s = store->Exec("COMMIT");
    if (!s.ok()) return fail(absl::StrCat("cannot create the schema: ", s.message()));
  } else if (app_id != kApplicationId) {
    return fail("not a gift-coordinator state file");
  } else if (*user_version != kSchemaVersion && *user_version != 1) {
    return fail(absl::StrCat("schema version ", *user_version, ", this build reads version ",
                             kSchemaVersion));
  } else {
    absl::Status s = store->Exec("PRAGMA locking_mode = EXCLUSIVE");
    if (s.ok()) s = store->Exec("PRAGMA journal_mode = WAL");
    if (s.ok()) s = store->Exec(kWalSizeLimit);
    // Takes the exclusive lock now, so a second coordinator fails here.
    if (s.ok()) s = store->Exec("BEGIN IMMEDIATE");
    if (s.ok() && *user_version == 1) {
      // Version 1 had no run: the cluster's steps so far are run "" of base 0.
      s = store->Exec("ALTER TABLE meta ADD COLUMN run BLOB NOT NULL DEFAULT x''");
      if (s.ok()) {
        s = store->Exec(absl::StrCat("PRAGMA user_version = ", kSchemaVersion).c_str());
      }
    }
    if (s.ok()) s = store->Exec("COMMIT");
    if (!s.ok())
      return fail(absl::StrCat("cannot lock it (in use by another process?): ", s.message()));
  }
  GIFT_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous = FULL"));
  return store;
}

StateStore::~StateStore() {
  absl::MutexLock lock(&mu_);
  for (auto& [sql, stmt] : statements_) sqlite3_finalize(stmt);
  sqlite3_close(db_);
}

absl::Status StateStore::Exec(const char* sql) {
  char* error = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &error);
  if (rc == SQLITE_OK) return absl::OkStatus();
  std::string message = error != nullptr ? error : sqlite3_errstr(rc);
  sqlite3_free(error);
  return absl::InternalError(absl::StrCat(sql, ": ", message));
}

absl::StatusOr<StoredState> StateStore::Load() {
  absl::MutexLock lock(&mu_);
  StoredState state;
  {
    Stmt stmt(db_, statements_,
              "SELECT cluster_id, epoch, revision, frozen_through_step, next_member_seq,"
              " next_tensor_id, policy, shard_map, run FROM meta WHERE id = 1");
    int rc = stmt.Step();
    if (rc == SQLITE_ROW) {
      state.fresh = false;
      StoredMeta& m = state.meta;
      m.cluster_id = stmt.Text(0);
      m.epoch = stmt.Int(1);
      m.revision = stmt.Int(2);
      m.frozen_through_step = stmt.Int(3);
      m.next_member_seq = stmt.Int(4);
      m.next_tensor_id = stmt.Int(5);
      GIFT_RETURN_IF_ERROR(ParseRow(stmt.Text(6), "the policy", &m.policy));
      GIFT_RETURN_IF_ERROR(ParseRow(stmt.Text(7), "the shard map", &m.shard_map));
      GIFT_RETURN_IF_ERROR(ParseRow(stmt.Text(8), "the run", &m.run));
    } else {
      GIFT_RETURN_IF_ERROR(stmt.status("reading meta"));
    }
  }
  {
    Stmt stmt(db_, statements_, "SELECT member FROM members ORDER BY member_id");
    while (stmt.Step() == SQLITE_ROW) {
      GIFT_RETURN_IF_ERROR(ParseRow(stmt.Text(0), "a member", &state.members.emplace_back()));
    }
    GIFT_RETURN_IF_ERROR(stmt.status("reading members"));
  }
  {
    Stmt stmt(db_, statements_, "SELECT info FROM tensors ORDER BY tensor_id");
    while (stmt.Step() == SQLITE_ROW) {
      GIFT_RETURN_IF_ERROR(ParseRow(stmt.Text(0), "a tensor", &state.tensors.emplace_back()));
    }
    GIFT_RETURN_IF_ERROR(stmt.status("reading tensors"));
  }
  {
    Stmt stmt(db_, statements_, "SELECT state FROM bases ORDER BY tensor_id");
    while (stmt.Step() == SQLITE_ROW) {
      GIFT_RETURN_IF_ERROR(ParseRow(stmt.Text(0), "a basis state", &state.bases.emplace_back()));
    }
    GIFT_RETURN_IF_ERROR(stmt.status("reading bases"));
  }
  return state;
}

absl::Status StateStore::Commit(const StoreMutation& mutation) {
  absl::MutexLock lock(&mu_);
  absl::Status s = Stmt(db_, statements_, "BEGIN IMMEDIATE").Run("BEGIN IMMEDIATE");
  if (s.ok()) {
    s = CommitLocked(mutation);
    if (s.ok()) s = Stmt(db_, statements_, "COMMIT").Run("COMMIT");
    if (!s.ok()) Stmt(db_, statements_, "ROLLBACK").Run("ROLLBACK").IgnoreError();
  }
  if (!s.ok()) {
    return absl::UnavailableError(
        absl::StrCat("state file ", path_, ": commit failed: ", s.message()));
  }
  return absl::OkStatus();
}

absl::Status StateStore::CommitLocked(const StoreMutation& m) {
  {
    Stmt stmt(db_, statements_,
              "INSERT OR REPLACE INTO meta (id, cluster_id, epoch, revision, frozen_through_step,"
              " next_member_seq, next_tensor_id, policy, shard_map, run)"
              " VALUES (1, ?, ?, ?, ?, ?, ?, ?, ?, ?)");
    stmt.Bind(1, m.meta.cluster_id);
    stmt.Bind(2, m.meta.epoch);
    stmt.Bind(3, m.meta.revision);
    stmt.Bind(4, m.meta.frozen_through_step);
    stmt.Bind(5, m.meta.next_member_seq);
    stmt.Bind(6, m.meta.next_tensor_id);
    stmt.BindBlob(7, m.meta.policy.SerializeAsString());
    stmt.BindBlob(8, m.meta.shard_map.SerializeAsString());
    stmt.BindBlob(9, m.meta.run.SerializeAsString());
    GIFT_RETURN_IF_ERROR(stmt.Run("writing meta"));
  }
  if (m.drop_all_tensors) {
    for (const char* sql :
         {"DELETE FROM tensors", "DELETE FROM bases", "DELETE FROM basis_bytes"}) {
      Stmt stmt(db_, statements_, sql);
      GIFT_RETURN_IF_ERROR(stmt.Run("dropping the tensors"));
    }
  }
  for (const gift::v1::Member& member : m.put_members) {
    Stmt stmt(db_, statements_, "INSERT OR REPLACE INTO members (member_id, member) VALUES (?, ?)");
    stmt.Bind(1, member.member_id());
    stmt.BindBlob(2, member.SerializeAsString());
    GIFT_RETURN_IF_ERROR(stmt.Run("writing a member"));
  }
  for (const std::string& id : m.delete_members) {
    Stmt stmt(db_, statements_, "DELETE FROM members WHERE member_id = ?");
    stmt.Bind(1, id);
    GIFT_RETURN_IF_ERROR(stmt.Run("deleting a member"));
  }
  for (const gift::v1::TensorInfo& t : m.put_tensors) {
    Stmt stmt(db_, statements_,
              "INSERT OR REPLACE INTO tensors (tensor_id, name, info) VALUES (?, ?, ?)");
    stmt.Bind(1, t.tensor_id());
    stmt.Bind(2, t.name());
    stmt.BindBlob(3, t.SerializeAsString());
    GIFT_RETURN_IF_ERROR(stmt.Run("writing a tensor"));
  }
  for (const gift::v1::TensorBasisState& b : m.put_bases) {
    Stmt stmt(db_, statements_, "INSERT OR REPLACE INTO bases (tensor_id, state) VALUES (?, ?)");
    stmt.Bind(1, b.tensor_id());
    stmt.BindBlob(2, b.SerializeAsString());
    GIFT_RETURN_IF_ERROR(stmt.Run("writing a basis state"));
  }
  for (const auto& [tensor_id, version] : m.delete_basis_bytes) {
    Stmt stmt(db_, statements_, "DELETE FROM basis_bytes WHERE tensor_id = ? AND version = ?");
    stmt.Bind(1, tensor_id);
    stmt.Bind(2, version);
    GIFT_RETURN_IF_ERROR(stmt.Run("deleting basis bytes"));
  }
  for (const StoreMutation::BasisBytes& b : m.put_basis_bytes) {
    Stmt stmt(db_, statements_,
              "INSERT OR REPLACE INTO basis_bytes (tensor_id, version, bytes) VALUES (?, ?, ?)");
    stmt.Bind(1, b.tensor_id);
    stmt.Bind(2, b.version);
    stmt.BindBlob(3, b.bytes != nullptr ? *b.bytes : std::string());
    GIFT_RETURN_IF_ERROR(stmt.Run("writing basis bytes"));
  }
  for (const MembershipEvent& e : m.history) {
    Stmt stmt(db_, statements_,
              "INSERT INTO membership_history (time_unix_ms, epoch, event, member_id, name, role,"
              " rank) VALUES (?, ?, ?, ?, ?, ?, ?)");
    stmt.Bind(1, e.time_unix_ms);
    stmt.Bind(2, e.epoch);
    stmt.Bind(3, e.event);
    stmt.Bind(4, e.member_id);
    stmt.Bind(5, e.name);
    stmt.Bind(6, static_cast<int64_t>(e.role));
    stmt.Bind(7, static_cast<int64_t>(e.rank));
    GIFT_RETURN_IF_ERROR(stmt.Run("writing membership history"));
  }
  return absl::OkStatus();
}

absl::Status StateStore::SetReadOnlyForTesting(bool read_only) {
  absl::MutexLock lock(&mu_);
  return Exec(read_only ? "PRAGMA query_only = 1" : "PRAGMA query_only = 0");
}

absl::StatusOr<std::string> StateStore::LoadBasisBytes(uint64_t tensor_id, uint64_t version) {
  absl::MutexLock lock(&mu_);
  Stmt stmt(db_, statements_, "SELECT bytes FROM basis_bytes WHERE tensor_id = ? AND version = ?");
  stmt.Bind(1, tensor_id);
  stmt.Bind(2, version);
  if (stmt.Step() == SQLITE_ROW) return stmt.Text(0);
  GIFT_RETURN_IF_ERROR(stmt.status("reading basis bytes"));
  return absl::NotFoundError(
      absl::StrCat("no bytes stored for tensor ", tensor_id, " version ", version));
}

absl::StatusOr<std::vector<MembershipEvent>> StateStore::History(int limit) {
  absl::MutexLock lock(&mu_);
  Stmt stmt(db_, statements_,
            "SELECT time_unix_ms, epoch, event, member_id, name, role, rank FROM"
            " (SELECT * FROM membership_history ORDER BY id DESC LIMIT ?) ORDER BY id");
  stmt.Bind(1, static_cast<int64_t>(limit));
  std::vector<MembershipEvent> out;
  while (stmt.Step() == SQLITE_ROW) {
    MembershipEvent& e = out.emplace_back();
    e.time_unix_ms = stmt.Int(0);
    e.epoch = stmt.Int(1);
    e.event = stmt.Text(2);
    e.member_id = stmt.Text(3);
    e.name = stmt.Text(4);
    e.role = static_cast<gift::v1::MemberRole>(stmt.Int(5));
    e.rank = static_cast<uint32_t>(stmt.Int(6));
  }
  GIFT_RETURN_IF_ERROR(stmt.status("reading membership history"));
  return out;
}

}  // namespace gift::coordinator
