// The coordinator's side of data-plane authentication (docs/design.md
// section 8.2): a 32-byte secret from which every member's data-plane key is
// derived, HKDF-SHA256(secret, "gift-dataplane-member-v1", member id). Member
// ids are never reused, so no two members share a key, and nothing is
// stored: the same secret gives the same keys after a restart. The secret
// comes from a file the operator provides (--dataplane-secret-file, e.g. a
// Kubernetes Secret) or is drawn once and kept in a file next to the state
// file (KeptAt), so a restart keeps the keys either way. (A secret drawn
// anew at each start changed every key on a restart: members pick their new
// key from their next heartbeat, at different times, and a step whose chunks
// were sealed and checked under different secrets waited out its timeout.)
//
// The keys do not depend on the MAC: each epoch's MAC is negotiated in the
// cluster state (ClusterState.dataplane_mac), and the epoch keys derive
// from these with a salt per MAC (common/dataplane/chunk_mac.h).
//
// Ownership: owns the secret (wiped on destruction). Thread safety:
// immutable; MemberKey and NodeKey may be called concurrently.
#ifndef GIFT_SERVER_COORDINATOR_DATAPLANE_KEY_ISSUER_H_
#define GIFT_SERVER_COORDINATOR_DATAPLANE_KEY_ISSUER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/dataplane/chunk_mac.h"

namespace gift::coordinator {

class DataPlaneKeyIssuer {
 public:
  // The file's bytes (at least 32) are the secret. InvalidArgument for a
  // shorter file, NotFound when it cannot be read.
  static absl::StatusOr<std::unique_ptr<DataPlaneKeyIssuer>> FromFile(const std::string& path);
  // A secret from RAND_bytes.
  static absl::StatusOr<std::unique_ptr<DataPlaneKeyIssuer>> Random();
  // The secret in `path` (FromFile), or, when there is no such file, a new
  // one from RAND_bytes written there first (mode 0600, written to a
  // temporary file and renamed; Internal when it cannot be written).
  static absl::StatusOr<std::unique_ptr<DataPlaneKeyIssuer>> KeptAt(const std::string& path);
  ~DataPlaneKeyIssuer();

  // Internal only on an OpenSSL failure.
  absl::StatusOr<dataplane::MacKey> MemberKey(absl::string_view member_id) const;
  // The key the workers of node `node` share for their chunks to one
  // another (hierarchy NODE): HKDF-SHA256(secret, "gift-dataplane-node-v1",
  // node). Internal only on an OpenSSL failure.
  absl::StatusOr<dataplane::MacKey> NodeKey(absl::string_view node) const;

 private:
  explicit DataPlaneKeyIssuer(std::string secret) : secret_(std::move(secret)) {}
  std::string secret_;
};

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_DATAPLANE_KEY_ISSUER_H_
