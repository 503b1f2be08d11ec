// A member's data-plane keys (docs/design.md section 8.2): its own member key
// (from the coordinator's Join and Heartbeat answers) and its peers' (from
// GetDataPlaneKeys: a server holds the workers', a worker the servers' and
// its node's), and
// from them the keys of one epoch that the data plane seals and checks
// chunks with (dataplane::EpochKeys, common/dataplane/chunk_mac.h).
//
//   DataPlaneKeyring ring(MEMBER_ROLE_SERVER);
//   ring.SetMemberKey(joined.dataplane_key());
//   if (ring.MissingPeers(state, id)) ring.AddPeers(client.GetDataPlaneKeys(...));
//   auto keys = ring.Build(state, member_id);   // epoch keys of state.epoch()
//
// Keys are secrets: nothing here logs or prints them.
//
// Thread safety: none; MemberSession guards it with its lock.
#ifndef GIFT_COMMON_CONTROL_DATAPLANE_KEYRING_H_
#define GIFT_COMMON_CONTROL_DATAPLANE_KEYRING_H_

#include <memory>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "common/dataplane/chunk_mac.h"
#include "gift/v1/cluster.pb.h"
#include "gift/v1/coordinator.pb.h"

namespace gift::control {

class DataPlaneKeyring {
 public:
  explicit DataPlaneKeyring(gift::v1::MemberRole role) : role_(role) {}

  // Installs the member's key and its answer's MAC (used for states
  // without ClusterState.dataplane_mac, from a coordinator before MAC
  // negotiation) from a Join or Heartbeat answer (no key: authentication
  // off). True when either changed; when the key changed the peers' keys
  // are forgotten (the coordinator's secret changed, so did theirs).
  // InvalidArgument for a key that is not kMacKeyBytes long or an
  // algorithm this build does not know.
  absl::StatusOr<bool> SetMemberKey(const gift::v1::DataPlaneKey& key);
  bool enabled() const { return member_key_.has_value(); }

  // Whether some peer of `state` has no key here, or (a worker) member
  // `member_id`'s node has none (fetch them then).
  bool MissingPeers(const gift::v1::ClusterState& state, const std::string& member_id) const;
  // InvalidArgument for a key of the wrong size (nothing installed then).
  absl::Status AddPeers(const gift::v1::DataPlaneKeys& keys);

  // The keys of `state`'s epoch for member `member_id` under the epoch's
  // MAC (state.dataplane_mac): its own, its peers' by rank (a peer without
  // a key is nullopt) and its node's (a worker whose node's key is here).
  // Null when authentication is off or the member is not in `state`;
  // InvalidArgument for a MAC this build does not know.
  absl::StatusOr<std::shared_ptr<const dataplane::EpochKeys>> Build(
      const gift::v1::ClusterState& state, const std::string& member_id) const;

 private:
  const google::protobuf::RepeatedPtrField<gift::v1::Member>& Peers(
      const gift::v1::ClusterState& state) const;

  const gift::v1::MemberRole role_;
  std::optional<dataplane::MacKey> member_key_;
  dataplane::MacAlgorithm algorithm_ = dataplane::MacAlgorithm::kAes256Gmac;
  absl::flat_hash_map<std::string, dataplane::MacKey> peers_;  // by member id
  // A worker's node and its key (GetDataPlaneKeys); empty: none.
  std::string node_;
  std::optional<dataplane::MacKey> node_key_;
};

}  // namespace gift::control

#endif  // GIFT_COMMON_CONTROL_DATAPLANE_KEYRING_H_
