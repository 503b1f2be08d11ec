#include "common/dataplane/chunk_mac.h"

#include <openssl/evp.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/base/crc32c.h"
#include "gtest/gtest.h"

namespace gift::dataplane {
namespace {

ChunkHeader Push(uint32_t rank) {
  return {.kind = ChunkKind::kPush,
          .epoch = 5,
          .step = 99,
          .tensor_id = 7,
          .basis_version = 3,
          .chunk_index = 2,
          .rank = rank,
          .world_size = 4};
}

MacKey KeyOf(uint8_t seed) {
  MacKey member;
  for (size_t i = 0; i < member.size(); ++i) member[i] = static_cast<uint8_t>(seed * 31 + i);
  return member;
}

// A server's keys of `epoch`: the workers' epoch keys by rank.
EpochKeys ServerKeys(uint64_t epoch, MacAlgorithm algorithm) {
  EpochKeys keys{.epoch = epoch,
                 .algorithm = algorithm,
                 .signer = 0,
                 .own = DeriveEpochKey(KeyOf(100), epoch, algorithm).value()};
  for (uint8_t rank = 0; rank < 4; ++rank)
    keys.peers.push_back(DeriveEpochKey(KeyOf(rank), epoch, algorithm).value());
  return keys;
}

// The tests below run with each algorithm.
class ChunkMacTest : public ::testing::TestWithParam<MacAlgorithm> {};
INSTANTIATE_TEST_SUITE_P(Algorithms, ChunkMacTest,
                         ::testing::Values(MacAlgorithm::kAes256Gmac,
                                           MacAlgorithm::kChaCha20Poly1305),
                         [](const auto& info) {
                           return info.param == MacAlgorithm::kAes256Gmac ? "Gmac" : "ChaCha";
                         });

std::vector<uint8_t> Payload() {
  std::vector<uint8_t> p(4096 + 13);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 7 + 1);
  return p;
}

// Rewrites a field of a sealed header (and its CRC), as a forger would.
void Rewrite(std::array<uint8_t, kSealedChunkHeaderBytes>& h, size_t offset, uint64_t value) {
  for (int i = 0; i < 8; ++i) h[offset + i] = static_cast<uint8_t>(value >> (8 * i));
  const uint32_t crc = crc32c::Value(h.data(), 56);
  for (int i = 0; i < 4; ++i) h[56 + i] = static_cast<uint8_t>(crc >> (8 * i));
}

std::optional<AuthFailure> Check(const EpochKeys& keys, absl::Span<const uint8_t> header,
                                 absl::Span<const uint8_t> payload) {
  auto parsed = ParseChunkHeader(header);
  if (!parsed.ok()) return AuthFailure::kBadMac;  // never reached in these tests
  return CheckChunk(keys, *parsed, header, payload);
}

TEST_P(ChunkMacTest, SealedChunksVerifyAndParse) {
  const EpochKeys keys = ServerKeys(5, GetParam());
  const std::vector<uint8_t> payload = Payload();
  for (uint32_t rank = 0; rank < 4; ++rank) {
    auto sealed = SealChunk(Push(rank), rank, payload, *keys.peers[rank], GetParam());
    ASSERT_TRUE(sealed.ok()) << sealed.status();
    auto parsed = ParseChunkHeader(*sealed);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, Push(rank));
    EXPECT_TRUE(IsSealedChunkHeader(*sealed));
    EXPECT_EQ(CheckChunk(keys, *parsed, *sealed, payload), std::nullopt);
    EXPECT_EQ(CheckChunk(keys, *parsed, *sealed, std::nullopt), std::nullopt);  // header tag
  }
  // An empty payload (an abort without reason) is sealed too.
  auto empty = SealChunk(Push(1), 1, {}, *keys.peers[1], GetParam());
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(Check(keys, *empty, {}), std::nullopt);
  // Two seals of one chunk draw different nonces.
  auto again = SealChunk(Push(1), 1, {}, *keys.peers[1], GetParam());
  ASSERT_TRUE(again.ok());
  EXPECT_NE(std::memcmp(empty->data() + kSealNonceOffset, again->data() + kSealNonceOffset,
                        kSealNonceBytes),
            0);
}

TEST_P(ChunkMacTest, TamperedHeaderByteIsRefused) {
  const EpochKeys keys = ServerKeys(5, GetParam());
  const std::vector<uint8_t> payload = Payload();
  const auto good = SealChunk(Push(2), 2, payload, *keys.peers[2], GetParam()).value();
  const ChunkHeader parsed = ParseChunkHeader(good).value();
  for (size_t byte = 0; byte < kSealedChunkHeaderBytes; ++byte) {
    auto bad = good;
    bad[byte] ^= 0x10;
    const auto failure = CheckChunk(keys, parsed, bad, payload);
    ASSERT_TRUE(failure.has_value()) << "byte " << byte;
    if (byte == kSealAlgorithmOffset) {
      EXPECT_EQ(*failure, AuthFailure::kUnknownKey) << "another algorithm";
    } else if (byte < kSealSignerOffset || byte >= kSealSignerOffset + 4) {
      EXPECT_EQ(*failure, AuthFailure::kBadMac) << "byte " << byte;
    } else {
      EXPECT_EQ(*failure, AuthFailure::kWrongSigner) << "byte " << byte;
    }
    // The header tag alone catches everything before the chunk tag.
    if (byte < kSealChunkTagOffset) {
      EXPECT_TRUE(CheckChunk(keys, parsed, bad, std::nullopt).has_value()) << "byte " << byte;
    }
  }
}

TEST_P(ChunkMacTest, TamperedPayloadByteIsRefused) {
  const EpochKeys keys = ServerKeys(5, GetParam());
  std::vector<uint8_t> payload = Payload();
  const auto sealed = SealChunk(Push(0), 0, payload, *keys.peers[0], GetParam()).value();
  for (size_t at : {size_t{0}, payload.size() / 2, payload.size() - 1}) {
    std::vector<uint8_t> bad = payload;
    bad[at] ^= 1;
    EXPECT_EQ(Check(keys, sealed, bad), AuthFailure::kBadMac) << "at " << at;
  }
  payload.push_back(0);  // one byte appended
  EXPECT_EQ(Check(keys, sealed, payload), AuthFailure::kBadMac);
}

TEST_P(ChunkMacTest, WrongKeyAndWrongRankAreRefused) {
  const EpochKeys keys = ServerKeys(5, GetParam());
  const std::vector<uint8_t> payload = Payload();
  // A key nobody was given.
  const MacKey stranger = DeriveEpochKey(KeyOf(200), 5, GetParam()).value();
  EXPECT_EQ(Check(keys, SealChunk(Push(1), 1, payload, stranger, GetParam()).value(), payload),
            AuthFailure::kBadMac);
  // Rank 1's key, claiming rank 3 as signer and rank: the red team's forgery.
  EXPECT_EQ(
      Check(keys, SealChunk(Push(3), 3, payload, *keys.peers[1], GetParam()).value(), payload),
      AuthFailure::kBadMac);
  // Rank 1's honest signer on a push that claims rank 3.
  EXPECT_EQ(
      Check(keys, SealChunk(Push(3), 1, payload, *keys.peers[1], GetParam()).value(), payload),
      AuthFailure::kWrongSigner);
  // A node sum (leader -> server) is signed by its leader's rank like a
  // push: honest, and claiming another rank.
  ChunkHeader node_sum = Push(1);
  node_sum.kind = ChunkKind::kNodePush;
  node_sum.status_code = 2;
  EXPECT_EQ(
      Check(keys, SealChunk(node_sum, 1, payload, *keys.peers[1], GetParam()).value(), payload),
      std::nullopt);
  node_sum.rank = 3;
  EXPECT_EQ(
      Check(keys, SealChunk(node_sum, 1, payload, *keys.peers[1], GetParam()).value(), payload),
      AuthFailure::kWrongSigner);
  // A signer the receiver holds no key for.
  EpochKeys partial = keys;
  partial.peers[3].reset();
  EXPECT_EQ(
      Check(partial, SealChunk(Push(3), 3, payload, *keys.peers[3], GetParam()).value(), payload),
      AuthFailure::kUnknownKey);
}

TEST_P(ChunkMacTest, ReplayFromAnotherEpochOrStepIsRefused) {
  const EpochKeys epoch4 = ServerKeys(4, GetParam());
  const EpochKeys epoch5 = ServerKeys(5, GetParam());
  const std::vector<uint8_t> payload = Payload();
  ChunkHeader old = Push(1);
  old.epoch = 4;
  const auto sealed = SealChunk(old, 1, payload, *epoch4.peers[1], GetParam()).value();
  EXPECT_EQ(Check(epoch4, sealed, payload), std::nullopt);
  // As sent: the receiver has no key of epoch 4 any more.
  EXPECT_EQ(Check(epoch5, sealed, payload), AuthFailure::kUnknownKey);
  // With its epoch rewritten to the current one: epoch 4's key made the tags.
  auto moved = sealed;
  Rewrite(moved, 8, 5);
  EXPECT_EQ(Check(epoch5, moved, payload), AuthFailure::kBadMac);
  // With its step rewritten to a later one.
  auto later = sealed;
  Rewrite(later, 16, 100);
  EXPECT_EQ(Check(epoch4, later, payload), AuthFailure::kBadMac);
}

TEST(ChunkMacFormatTest, UnsealedHeaderIsMissing) {
  const EpochKeys keys = ServerKeys(5, MacAlgorithm::kChaCha20Poly1305);
  const std::vector<uint8_t> payload = Payload();
  const auto v1 = SerializeChunkHeader(Push(1));
  EXPECT_EQ(Check(keys, v1, payload), AuthFailure::kMissing);
  EXPECT_EQ(AuthFailureStatus(AuthFailure::kMissing, Push(1)).code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(AuthFailureName(AuthFailure::kMissing), "missing");
  EXPECT_EQ(AuthFailureName(AuthFailure::kBadMac), "bad_mac");
}

TEST(ChunkMacFormatTest, SealedHeaderFieldsAreChecked) {
  auto sealed = SealChunk(Push(1), 1, {}, KeyOf(1)).value();
  auto bad_algorithm = sealed;
  bad_algorithm[kSealAlgorithmOffset] = 9;
  EXPECT_EQ(ParseChunkHeader(bad_algorithm).status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_reserved = sealed;
  bad_reserved[62] = 1;
  EXPECT_EQ(ParseChunkHeader(bad_reserved).status().code(), absl::StatusCode::kInvalidArgument);
  // A version 2 header cut to version 1's size, and a version 1 header padded.
  EXPECT_EQ(ParseChunkHeader(absl::MakeConstSpan(sealed.data(), kChunkHeaderBytes)).status().code(),
            absl::StatusCode::kInvalidArgument);
  std::vector<uint8_t> padded(kSealedChunkHeaderBytes, 0);
  const auto v1 = SerializeChunkHeader(Push(1));
  std::memcpy(padded.data(), v1.data(), v1.size());
  EXPECT_EQ(ParseChunkHeader(padded).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChunkMacFormatTest, KeyDerivation) {
  // RFC 5869 test case 1 (the first 32 of its 42 bytes).
  const std::vector<uint8_t> ikm(22, 0x0b);
  std::string salt;
  for (int i = 0; i <= 0x0c; ++i) salt.push_back(static_cast<char>(i));
  std::vector<uint8_t> info;
  for (int i = 0xf0; i <= 0xf9; ++i) info.push_back(static_cast<uint8_t>(i));
  const MacKey okm = DeriveKey(ikm, salt, info).value();
  const uint8_t expected[32] = {0x3c, 0xb2, 0x5f, 0x25, 0xfa, 0xac, 0xd5, 0x7a, 0x90, 0x43, 0x4f,
                                0x64, 0xd0, 0x36, 0x2f, 0x2a, 0x2d, 0x2d, 0x0a, 0x90, 0xcf, 0x1a,
                                0x5a, 0x4c, 0x5d, 0xb0, 0x2d, 0x56, 0xec, 0xc4, 0xc5, 0xbf};
  EXPECT_EQ(std::memcmp(okm.data(), expected, 32), 0);
  // Epoch keys: one per (member, epoch).
  EXPECT_EQ(DeriveEpochKey(KeyOf(1), 5).value(), DeriveEpochKey(KeyOf(1), 5).value());
  EXPECT_NE(DeriveEpochKey(KeyOf(1), 5).value(), DeriveEpochKey(KeyOf(1), 6).value());
  EXPECT_NE(DeriveEpochKey(KeyOf(1), 5).value(), DeriveEpochKey(KeyOf(2), 5).value());
  // ... and algorithm: no key serves two.
  EXPECT_NE(DeriveEpochKey(KeyOf(1), 5, MacAlgorithm::kAes256Gmac).value(),
            DeriveEpochKey(KeyOf(1), 5, MacAlgorithm::kChaCha20Poly1305).value());
  // AES-256-GMAC keeps the format's first salt.
  const std::vector<uint8_t> epoch5 = {5, 0, 0, 0, 0, 0, 0, 0};
  EXPECT_EQ(DeriveEpochKey(KeyOf(1), 5, MacAlgorithm::kAes256Gmac).value(),
            DeriveKey(KeyOf(1), "gift-dataplane-epoch-v1", epoch5).value());
  EXPECT_EQ(DeriveEpochKey(KeyOf(1), 5, MacAlgorithm::kChaCha20Poly1305).value(),
            DeriveKey(KeyOf(1), "gift-dataplane-epoch-chacha20-poly1305-v1", epoch5).value());
}

// A receiver checks a chunk with the cluster's algorithm only: a chunk
// sealed with the other, even under the very key bytes the receiver holds,
// is refused as sealed with no key it has.
TEST(ChunkMacFormatTest, AChunkOfTheOtherAlgorithmIsRefused) {
  const std::vector<uint8_t> payload = Payload();
  for (MacAlgorithm ours : {MacAlgorithm::kAes256Gmac, MacAlgorithm::kChaCha20Poly1305}) {
    const MacAlgorithm theirs = ours == MacAlgorithm::kAes256Gmac ? MacAlgorithm::kChaCha20Poly1305
                                                                  : MacAlgorithm::kAes256Gmac;
    const EpochKeys keys = ServerKeys(5, ours);
    const auto sealed = SealChunk(Push(1), 1, payload, *keys.peers[1], theirs).value();
    ASSERT_TRUE(ParseChunkHeader(sealed).ok());
    EXPECT_EQ(sealed[kSealAlgorithmOffset], static_cast<uint8_t>(theirs));
    EXPECT_EQ(Check(keys, sealed, payload), AuthFailure::kUnknownKey);
    EXPECT_EQ(Check(keys, SealChunk(Push(1), 1, payload, *keys.peers[1], ours).value(), payload),
              std::nullopt);
  }
  EXPECT_STREQ(MacAlgorithmName(MacAlgorithm::kChaCha20Poly1305), "chacha20-poly1305");
  EXPECT_STREQ(MacAlgorithmName(MacAlgorithm::kAes256Gmac), "aes-256-gmac");
  for (MacAlgorithm a : kMacAlgorithms) {
    EXPECT_EQ(ParseMacAlgorithm(MacAlgorithmName(a)), a);
    EXPECT_EQ(MacAlgorithmOf(static_cast<uint32_t>(a)), a);
  }
  EXPECT_EQ(ParseMacAlgorithm("md5"), std::nullopt);
  EXPECT_EQ(MacAlgorithmOf(0), std::nullopt);
  EXPECT_EQ(MacAlgorithmOf(3), std::nullopt);
}

TEST(ChunkMacFormatTest, OnlyAMissingSignerKeyOfTheEpochMayStillBeAwaited) {
  const std::vector<uint8_t> payload = Payload();
  const MacAlgorithm mac = MacAlgorithm::kChaCha20Poly1305;
  const EpochKeys all = ServerKeys(5, mac);
  const auto sealed = SealChunk(Push(2), 2, payload, *all.peers[2], mac).value();
  const ChunkHeader parsed = ParseChunkHeader(sealed).value();
  EpochKeys lacking = all;
  lacking.peers[2].reset();
  ASSERT_EQ(CheckChunk(lacking, parsed, sealed, payload), AuthFailure::kUnknownKey);
  // Rank 2's key is not here yet: a receiver may hold the chunk for it ...
  EXPECT_TRUE(AwaitsSignerKey(lacking, parsed, sealed, /*world_size=*/4));
  lacking.peers.resize(2);  // the last rank's slot not even allocated
  EXPECT_TRUE(AwaitsSignerKey(lacking, parsed, sealed, 4));
  // ... but not for a signer outside the epoch's world, another epoch's
  // chunk, the other MAC's, or one whose key is here.
  EXPECT_FALSE(AwaitsSignerKey(lacking, parsed, sealed, 2));
  EpochKeys later = lacking;
  later.epoch = 6;
  EXPECT_FALSE(AwaitsSignerKey(later, parsed, sealed, 4));
  EpochKeys gmac = lacking;
  gmac.algorithm = MacAlgorithm::kAes256Gmac;
  EXPECT_FALSE(AwaitsSignerKey(gmac, parsed, sealed, 4));
  EXPECT_FALSE(AwaitsSignerKey(all, parsed, sealed, 4));
  EXPECT_FALSE(AwaitsSignerKey(all, parsed, SerializeChunkHeader(parsed), 4));  // unsealed
  // A node member's chunk waits for the node key, whoever signed it.
  ChunkHeader member = Push(1);
  member.kind = ChunkKind::kNodeMember;
  const MacKey node = KeyOf(50);
  const auto to_leader = SealChunk(member, 1, payload, node, mac).value();
  const ChunkHeader member_parsed = ParseChunkHeader(to_leader).value();
  EXPECT_TRUE(AwaitsSignerKey(all, member_parsed, to_leader, 4));
  EpochKeys leader = all;
  leader.node = node;
  EXPECT_FALSE(AwaitsSignerKey(leader, member_parsed, to_leader, 4));
}

// The AEAD's tag over `aad` under `key` and `iv`, from a context of its own.
std::array<uint8_t, kSealTagBytes> FreshTag(MacAlgorithm algorithm, const MacKey& key,
                                            const uint8_t* iv, absl::Span<const uint8_t> aad) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  std::array<uint8_t, kSealTagBytes> tag{};
  int out = 0;
  const EVP_CIPHER* cipher =
      algorithm == MacAlgorithm::kAes256Gmac ? EVP_aes_256_gcm() : EVP_chacha20_poly1305();
  EXPECT_EQ(EVP_EncryptInit_ex2(ctx, cipher, key.data(), iv, nullptr), 1);
  EXPECT_EQ(EVP_EncryptUpdate(ctx, nullptr, &out, aad.data(), static_cast<int>(aad.size())), 1);
  EXPECT_EQ(EVP_EncryptFinal_ex(ctx, nullptr, &out), 1);
  EXPECT_EQ(EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, kSealTagBytes, tag.data()), 1);
  EVP_CIPHER_CTX_free(ctx);
  return tag;
}

// Each thread reuses one AEAD context across keys (chunk_mac.cc): the tags
// must be those of a fresh context whatever the thread sealed before, and
// a chunk checks under its own key only, on any thread, concurrently.
TEST_P(ChunkMacTest, TagsDoNotDependOnWhatTheThreadSealedBefore) {
  const std::vector<uint8_t> payload = Payload();
  const MacKey keys[] = {DeriveEpochKey(KeyOf(0), 5, GetParam()).value(),
                         DeriveEpochKey(KeyOf(1), 5, GetParam()).value()};
  for (int i = 0; i < 6; ++i) {
    const MacKey& key = keys[(i * i + i / 2) % 2];  // both keys, in turns and repeated
    const auto sealed = SealChunk(Push(0), 0, payload, key, GetParam()).value();
    std::array<uint8_t, kSealNonceBytes> iv;
    std::memcpy(iv.data(), sealed.data() + kSealNonceOffset, iv.size());
    const auto header_tag = FreshTag(GetParam(), key, iv.data(),
                                     absl::MakeConstSpan(sealed.data(), kSealHeaderTagOffset));
    EXPECT_EQ(std::memcmp(header_tag.data(), sealed.data() + kSealHeaderTagOffset, kSealTagBytes),
              0);
    iv.back() |= 1;
    std::vector<uint8_t> aad(sealed.begin(), sealed.begin() + kSealChunkTagOffset);
    aad.insert(aad.end(), payload.begin(), payload.end());
    const auto chunk_tag = FreshTag(GetParam(), key, iv.data(), aad);
    EXPECT_EQ(std::memcmp(chunk_tag.data(), sealed.data() + kSealChunkTagOffset, kSealTagBytes),
              0);
  }
  std::vector<std::thread> threads;
  std::vector<int> verified(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      const EpochKeys server = ServerKeys(5, GetParam());
      for (int i = 0; i < 50; ++i) {
        const uint32_t rank = static_cast<uint32_t>((t + i) % 4);
        const auto sealed =
            SealChunk(Push(rank), rank, payload, *server.peers[rank], GetParam()).value();
        EpochKeys wrong = server;
        wrong.peers[rank] = server.peers[(rank + 1) % 4];
        if (!Check(server, sealed, payload).has_value() &&
            Check(wrong, sealed, payload) == AuthFailure::kBadMac) {
          ++verified[t];
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(verified, std::vector<int>(4, 50));
}

}  // namespace
}  // namespace gift::dataplane
