#include "common/control/dataplane_keyring.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/control/member_text.h"

namespace gift::control {

namespace v1 = ::gift::v1;

namespace {

absl::StatusOr<dataplane::MacKey> ToKey(const std::string& bytes) {
  if (bytes.size() != dataplane::kMacKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a data-plane key of ", bytes.size(),
                                                   " bytes, expected ", dataplane::kMacKeyBytes));
  }
  dataplane::MacKey key;
  std::memcpy(key.data(), bytes.data(), key.size());
  return key;
}

absl::StatusOr<dataplane::MacAlgorithm> ToAlgorithm(v1::MacAlgorithm algorithm) {
  // A coordinator before the field: AES-256-GMAC, the format's first.
  if (algorithm == v1::MAC_ALGORITHM_UNSPECIFIED) return dataplane::MacAlgorithm::kAes256Gmac;
  // The proto's values are the wire's (static_assert in coordinator_service.cc).
  std::optional<dataplane::MacAlgorithm> known =
      dataplane::MacAlgorithmOf(static_cast<uint32_t>(algorithm));
  if (!known.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data-plane MAC algorithm ", static_cast<int>(algorithm), " is unknown to this build"));
  }
  return *known;
}

}  // namespace

absl::StatusOr<bool> DataPlaneKeyring::SetMemberKey(const v1::DataPlaneKey& key) {
  std::optional<dataplane::MacKey> next;
  if (!key.key().empty()) {
    auto k = ToKey(key.key());
    if (!k.ok()) return k.status();
    next = *k;
  }
  absl::StatusOr<dataplane::MacAlgorithm> algorithm = ToAlgorithm(key.algorithm());
  if (!algorithm.ok()) return algorithm.status();
  if (next == member_key_ && *algorithm == algorithm_) return false;
  algorithm_ = *algorithm;
  if (next != member_key_) {
    // A new secret: the peers' keys changed with it. (Their keys do not
    // depend on the MAC, so a change of MAC alone keeps them.)
    member_key_ = next;
    peers_.clear();
    node_.clear();
    node_key_.reset();
  }
  return true;
}

const google::protobuf::RepeatedPtrField<v1::Member>& DataPlaneKeyring::Peers(
    const v1::ClusterState& state) const {
  return role_ == v1::MEMBER_ROLE_SERVER ? state.workers() : state.servers();
}

bool DataPlaneKeyring::MissingPeers(const v1::ClusterState& state,
                                    const std::string& member_id) const {
  if (!enabled()) return false;
  for (const v1::Member& m : Peers(state)) {
    if (!peers_.contains(m.member_id())) return true;
  }
  const v1::Member* me = FindMember(state, member_id);
  return role_ == v1::MEMBER_ROLE_WORKER && me != nullptr && !me->node().empty() &&
         (me->node() != node_ || !node_key_.has_value());
}

absl::Status DataPlaneKeyring::AddPeers(const v1::DataPlaneKeys& keys) {
  absl::flat_hash_map<std::string, dataplane::MacKey> added;
  for (const v1::PeerDataPlaneKey& peer : keys.peers()) {
    auto k = ToKey(peer.key());
    if (!k.ok()) return k.status();
    added[peer.member_id()] = *k;
  }
  std::optional<dataplane::MacKey> node_key;
  if (!keys.node_key().empty()) {
    auto k = ToKey(keys.node_key());
    if (!k.ok()) return k.status();
    node_key = *k;
  }
  for (auto& [id, key] : added) peers_[id] = key;
  if (node_key.has_value()) {
    node_ = keys.node();
    node_key_ = node_key;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const dataplane::EpochKeys>> DataPlaneKeyring::Build(
    const v1::ClusterState& state, const std::string& member_id) const {
  if (!enabled()) return nullptr;
  const v1::Member* me = FindMember(state, member_id);
  if (me == nullptr) return nullptr;
  // The epoch's negotiated MAC; from a coordinator before negotiation, the
  // one of the member key's answer.
  dataplane::MacAlgorithm algorithm = algorithm_;
  if (state.dataplane_mac() != v1::MAC_ALGORITHM_UNSPECIFIED) {
    GIFT_ASSIGN_OR_RETURN(algorithm, ToAlgorithm(state.dataplane_mac()));
  }
  auto keys = std::make_shared<dataplane::EpochKeys>();
  keys->epoch = state.epoch();
  keys->algorithm = algorithm;
  keys->signer = me->rank();
  auto own = dataplane::DeriveEpochKey(*member_key_, state.epoch(), algorithm);
  if (!own.ok()) return own.status();
  keys->own = *own;
  for (const v1::Member& peer : Peers(state)) {
    auto it = peers_.find(peer.member_id());
    if (it == peers_.end()) continue;
    auto k = dataplane::DeriveEpochKey(it->second, state.epoch(), algorithm);
    if (!k.ok()) return k.status();
    if (keys->peers.size() <= peer.rank()) keys->peers.resize(peer.rank() + 1);
    keys->peers[peer.rank()] = *k;
  }
  if (node_key_.has_value() && !me->node().empty() && me->node() == node_) {
    auto k = dataplane::DeriveEpochKey(*node_key_, state.epoch(), algorithm);
    if (!k.ok()) return k.status();
    keys->node = *k;
  }
  return keys;
}

}  // namespace gift::control
