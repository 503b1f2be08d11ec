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
// The issuer also names the MAC every member seals and checks chunks with
// (set_mac_algorithm, from gift-coordinator --dataplane-mac; handed out
// with each member key). Changing it across a restart changes every epoch
// key, as a new secret would.
//
// Ownership: owns the secret (wiped on destruction). Thread safety:
// immutable once serving (set_mac_algorithm before that); MemberKey may be
// called concurrently.
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

  // ChaCha20-Poly1305 unless set: 1.5x AES-256-GMAC's speed with OpenSSL
  // 3.0 on the machines measured (docs/design.md section 8.2).
  void set_mac_algorithm(dataplane::MacAlgorithm algorithm) { mac_algorithm_ = algorithm; }
  dataplane::MacAlgorithm mac_algorithm() const { return mac_algorithm_; }

 private:
  explicit DataPlaneKeyIssuer(std::string secret) : secret_(std::move(secret)) {}
  std::string secret_;
  dataplane::MacAlgorithm mac_algorithm_ = dataplane::MacAlgorithm::kChaCha20Poly1305;
};

}  // namespace gift::coordinator

#endif  // GIFT_SERVER_COORDINATOR_DATAPLANE_KEY_ISSUER_H_
