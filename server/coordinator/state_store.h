// SQLite persistence of the coordinator's state, so that a restarted
// coordinator resumes where it stopped: the meta record (cluster id, epoch,
// revision, frozen_through_step, id counters, policy, shard map), the members and their
// leases, the tensor registry, each tensor's basis state (versions and
// proposal), the basis bytes, and an append-only membership history.
//
// The file: schema version kSchemaVersion in PRAGMA user_version,
// application_id 'GIFT', WAL journal, synchronous=FULL, and locking_mode
// EXCLUSIVE (a second coordinator on the same file fails to open it). Every
// Commit is one transaction: all of it is on disk when Commit returns OK, or
// none of it.
//
// The proto-valued columns hold serialized gift.v1 messages, so fields added
// to those messages later need no schema change.
//
// A failed Commit (Unavailable) leaves the file as it was before it.
//
// Thread safety: all methods are internally synchronized.
#ifndef GIFT_SERVER_COORDINATOR_STATE_STORE_H_
#define GIFT_SERVER_COORDINATOR_STATE_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "gift/v1/cluster.pb.h"
#include "gift/v1/policy.pb.h"

struct sqlite3;
struct sqlite3_stmt;

namespace gift::coordinator {

// 2: meta.run (the training run). A version-1 file is migrated on open.
inline constexpr int kSchemaVersion = 2;

struct StoredMeta {
  std::string cluster_id;
  uint64_t epoch = 0;
  uint64_t revision = 0;
  uint64_t frozen_through_step = 0;
  uint64_t next_member_seq = 1;
  uint64_t next_tensor_id = 1;
  gift::v1::Policy policy;
  // The shard map of the current epoch, kept so that a restart within an
  // epoch serves the same chunk assignment.
  gift::v1::ShardMap shard_map;
  gift::v1::RunState run;  // the current training run
};

// One row of the membership history.
struct MembershipEvent {
  int64_t time_unix_ms = 0;
  uint64_t epoch = 0;  // the epoch after the event
  std::string event;   // "join", "leave", "expire", "drain"
  std::string member_id;
  std::string name;
  gift::v1::MemberRole role = gift::v1::MEMBER_ROLE_UNSPECIFIED;
  uint32_t rank = 0;
};

// Everything but the basis bytes, which are read on demand.
struct StoredState {
  bool fresh = true;  // no meta record yet: a new cluster
  StoredMeta meta;
  std::vector<gift::v1::Member> members;
  std::vector<gift::v1::TensorInfo> tensors;
  std::vector<gift::v1::TensorBasisState> bases;
};

// One atomic change. The meta record is always written.
struct StoreMutation {
  StoredMeta meta;
  std::vector<gift::v1::Member> put_members;
  std::vector<std::string> delete_members;
  // Every tensor, basis and basis byte row is deleted first (a new run).
  bool drop_all_tensors = false;
  std::vector<gift::v1::TensorInfo> put_tensors;
  std::vector<gift::v1::TensorBasisState> put_bases;
  struct BasisBytes {
    uint64_t tensor_id = 0;
    uint64_t version = 0;
    std::shared_ptr<const std::string> bytes;
  };
  std::vector<BasisBytes> put_basis_bytes;
  std::vector<std::pair<uint64_t, uint64_t>> delete_basis_bytes;  // (tensor id, version)
  std::vector<MembershipEvent> history;
};

class StateStore {
 public:
  // Opens or creates the file. Fails (FailedPrecondition) with a message
  // naming the file when it is not an SQLite database, belongs to something
  // else, has another schema version, or is in use by another process.
  static absl::StatusOr<std::unique_ptr<StateStore>> Open(const std::string& path);

  ~StateStore();
  StateStore(const StateStore&) = delete;
  StateStore& operator=(const StateStore&) = delete;

  absl::StatusOr<StoredState> Load();

  absl::Status Commit(const StoreMutation& mutation);

  // NotFound when the version has no bytes.
  absl::StatusOr<std::string> LoadBasisBytes(uint64_t tensor_id, uint64_t version);

  // The last `limit` history rows, oldest first.
  absl::StatusOr<std::vector<MembershipEvent>> History(int limit);

  const std::string& path() const { return path_; }

  // Test seam for a failing disk: while read-only (SQLite's query_only), every
  // Commit fails Unavailable as a full or read-only disk makes it fail; Load
  // and the other reads still work.
  absl::Status SetReadOnlyForTesting(bool read_only);

 private:
  StateStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

  absl::Status Exec(const char* sql) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CommitLocked(const StoreMutation& mutation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  // The statements run so far, by their SQL, each prepared once and reset
  // after each use; finalized before the database closes.
  absl::flat_hash_map<std::string, sqlite3_stmt*> statements_ ABSL_GUARDED_BY(mu_);
};

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_STATE_STORE_H_
