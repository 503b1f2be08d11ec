// A member's data-plane keys (common/control/dataplane_keyring.h): what it
// fetches and the epoch keys it builds, a worker's node key included.
#include "common/control/dataplane_keyring.h"

#include <string>

#include "gtest/gtest.h"

namespace gift::control {
namespace {

namespace v1 = ::gift::v1;

std::string Bytes(uint8_t seed) { return std::string(dataplane::kMacKeyBytes, char(seed)); }
dataplane::MacKey Key(uint8_t seed) {
  dataplane::MacKey k;
  k.fill(seed);
  return k;
}

v1::ClusterState State() {
  v1::ClusterState s;
  s.set_epoch(7);
  for (auto [id, node] : {std::pair{"w0", "node-a"}, std::pair{"w1", ""}}) {
    v1::Member* w = s.add_workers();
    w->set_member_id(id);
    w->set_rank(static_cast<uint32_t>(s.workers_size() - 1));
    w->set_node(node);
  }
  v1::Member* server = s.add_servers();
  server->set_member_id("s0");
  server->set_rank(0);
  server->set_node("node-a");
  return s;
}

v1::DataPlaneKeys ServerKeys(const std::string& node = "", const std::string& node_key = "") {
  v1::DataPlaneKeys keys;
  keys.set_epoch(7);
  v1::PeerDataPlaneKey* peer = keys.add_peers();
  peer->set_member_id("s0");
  peer->set_key(Bytes(100));
  keys.set_node(node);
  keys.set_node_key(node_key);
  return keys;
}

TEST(DataPlaneKeyringTest, AWorkerOnANodeFetchesUntilItHasItsNodesKey) {
  DataPlaneKeyring ring(v1::MEMBER_ROLE_WORKER);
  v1::DataPlaneKey own;
  own.set_key(Bytes(1));
  ASSERT_TRUE(ring.SetMemberKey(own).ok());
  const v1::ClusterState state = State();
  EXPECT_TRUE(ring.MissingPeers(state, "w0"));
  ASSERT_TRUE(ring.AddPeers(ServerKeys()).ok());
  EXPECT_TRUE(ring.MissingPeers(state, "w0")) << "the server's key, not the node's";
  EXPECT_FALSE(ring.MissingPeers(state, "w1")) << "w1 has no node";
  ASSERT_TRUE(ring.AddPeers(ServerKeys("node-a", Bytes(50))).ok());
  EXPECT_FALSE(ring.MissingPeers(state, "w0"));

  auto keys = ring.Build(state, "w0");
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_NE(*keys, nullptr);
  EXPECT_EQ((*keys)->own, dataplane::DeriveEpochKey(Key(1), 7).value());
  ASSERT_EQ((*keys)->peers.size(), 1u);
  EXPECT_EQ((*keys)->peers[0], dataplane::DeriveEpochKey(Key(100), 7).value());
  EXPECT_EQ((*keys)->node, dataplane::DeriveEpochKey(Key(50), 7).value());
  // Another node's key is not this worker's: a move to node-b fetches again.
  v1::ClusterState moved = state;
  moved.mutable_workers(0)->set_node("node-b");
  EXPECT_TRUE(ring.MissingPeers(moved, "w0"));
  EXPECT_EQ((*ring.Build(moved, "w0"))->node, std::nullopt);
  EXPECT_FALSE(ring.AddPeers(ServerKeys("node-a", "short")).ok());
}

TEST(DataPlaneKeyringTest, AServerNeverWantsANodeKey) {
  DataPlaneKeyring ring(v1::MEMBER_ROLE_SERVER);
  v1::DataPlaneKey own;
  own.set_key(Bytes(2));
  ASSERT_TRUE(ring.SetMemberKey(own).ok());
  v1::DataPlaneKeys workers;
  for (const char* id : {"w0", "w1"}) {
    v1::PeerDataPlaneKey* peer = workers.add_peers();
    peer->set_member_id(id);
    peer->set_key(Bytes(3));
  }
  ASSERT_TRUE(ring.AddPeers(workers).ok());
  EXPECT_FALSE(ring.MissingPeers(State(), "s0"));
  auto keys = ring.Build(State(), "s0");
  ASSERT_TRUE(keys.ok());
  EXPECT_EQ((*keys)->node, std::nullopt);
  EXPECT_EQ((*keys)->peers.size(), 2u);
}

// A coordinator before MAC negotiation names the cluster's MAC with the
// member key only (no ClusterState.dataplane_mac): the epoch keys are
// derived for it (a key of one algorithm is never another's). A change of
// MAC alone keeps the peers' keys: they do not depend on it.
TEST(DataPlaneKeyringTest, WithoutANegotiatedMacEpochKeysAreOfTheMemberKeysMac) {
  DataPlaneKeyring ring(v1::MEMBER_ROLE_WORKER);
  v1::DataPlaneKey own;
  own.set_key(Bytes(1));  // no algorithm: a coordinator before the field
  ASSERT_TRUE(ring.SetMemberKey(own).ok());
  ASSERT_TRUE(ring.AddPeers(ServerKeys()).ok());
  auto gmac = ring.Build(State(), "w1");
  ASSERT_TRUE(gmac.ok() && *gmac != nullptr);
  EXPECT_EQ((*gmac)->algorithm, dataplane::MacAlgorithm::kAes256Gmac);
  EXPECT_EQ((*gmac)->own, dataplane::DeriveEpochKey(Key(1), 7).value());

  own.set_algorithm(v1::MAC_ALGORITHM_CHACHA20_POLY1305);
  EXPECT_EQ(ring.SetMemberKey(own).value_or(false), true);
  EXPECT_FALSE(ring.MissingPeers(State(), "w1")) << "a new MAC alone keeps the peers' keys";
  auto chacha = ring.Build(State(), "w1");
  ASSERT_TRUE(chacha.ok() && *chacha != nullptr);
  constexpr auto kChaCha = dataplane::MacAlgorithm::kChaCha20Poly1305;
  EXPECT_EQ((*chacha)->algorithm, kChaCha);
  EXPECT_EQ((*chacha)->own, dataplane::DeriveEpochKey(Key(1), 7, kChaCha).value());
  EXPECT_EQ((*chacha)->peers[0], dataplane::DeriveEpochKey(Key(100), 7, kChaCha).value());
  EXPECT_NE((*chacha)->own, (*gmac)->own);
  EXPECT_EQ(ring.SetMemberKey(own).value_or(true), false) << "the same key and algorithm";

  own.set_key(Bytes(2));  // a new secret: the peers' keys changed too
  EXPECT_EQ(ring.SetMemberKey(own).value_or(false), true);
  EXPECT_TRUE(ring.MissingPeers(State(), "w1"));

  own.set_algorithm(static_cast<v1::MacAlgorithm>(9));
  EXPECT_EQ(ring.SetMemberKey(own).status().code(), absl::StatusCode::kInvalidArgument);
}

// A coordinator that negotiates names each epoch's MAC in the state: the
// epoch keys follow the state, whatever the member key's answer said (a
// heartbeat may come before or after the state of a new epoch).
TEST(DataPlaneKeyringTest, EpochKeysAreOfTheStatesNegotiatedMac) {
  DataPlaneKeyring ring(v1::MEMBER_ROLE_WORKER);
  v1::DataPlaneKey own;
  own.set_key(Bytes(1));
  own.set_algorithm(v1::MAC_ALGORITHM_CHACHA20_POLY1305);
  ASSERT_TRUE(ring.SetMemberKey(own).ok());
  ASSERT_TRUE(ring.AddPeers(ServerKeys()).ok());
  v1::ClusterState state = State();
  state.set_dataplane_mac(v1::MAC_ALGORITHM_AES_256_GMAC);
  auto gmac = ring.Build(state, "w1");
  ASSERT_TRUE(gmac.ok() && *gmac != nullptr);
  EXPECT_EQ((*gmac)->algorithm, dataplane::MacAlgorithm::kAes256Gmac);
  EXPECT_EQ((*gmac)->own, dataplane::DeriveEpochKey(Key(1), 7).value());
  EXPECT_EQ((*gmac)->peers[0], dataplane::DeriveEpochKey(Key(100), 7).value());

  state.set_epoch(8);
  state.set_dataplane_mac(v1::MAC_ALGORITHM_CHACHA20_POLY1305);
  auto chacha = ring.Build(state, "w1");
  ASSERT_TRUE(chacha.ok() && *chacha != nullptr);
  constexpr auto kChaCha = dataplane::MacAlgorithm::kChaCha20Poly1305;
  EXPECT_EQ((*chacha)->algorithm, kChaCha);
  EXPECT_EQ((*chacha)->own, dataplane::DeriveEpochKey(Key(1), 8, kChaCha).value());

  state.set_dataplane_mac(static_cast<v1::MacAlgorithm>(9));
  EXPECT_EQ(ring.Build(state, "w1").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace gift::control
