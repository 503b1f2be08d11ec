#include "common/dataplane/chunk_mac.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"

namespace gift::dataplane {
namespace {

using Tag = std::array<uint8_t, kSealTagBytes>;

// The AEAD whose tag over additional data alone is `algorithm`'s MAC.
const EVP_CIPHER* Cipher(MacAlgorithm algorithm) {
  static const EVP_CIPHER* const gcm = EVP_CIPHER_fetch(nullptr, "AES-256-GCM", nullptr);
  static const EVP_CIPHER* const chacha = EVP_CIPHER_fetch(nullptr, "ChaCha20-Poly1305", nullptr);
  switch (algorithm) {
    case MacAlgorithm::kAes256Gmac:
      return gcm;
    case MacAlgorithm::kChaCha20Poly1305:
      return chacha;
  }
  return nullptr;
}

// One AEAD context per thread, keyed with the last algorithm and key it
// used: a chunk's two tags, and the next chunk under the same epoch key,
// only set a new IV instead of building a context (and GCM's key schedule
// and GHASH tables) each time. The cached key is wiped when the thread
// exits.
class MacContext {
 public:
  MacContext() : ctx_(EVP_CIPHER_CTX_new()) {}
  ~MacContext() {
    OPENSSL_cleanse(key_.data(), key_.size());
    EVP_CIPHER_CTX_free(ctx_);
  }
  MacContext(const MacContext&) = delete;
  MacContext& operator=(const MacContext&) = delete;

  // Ready for a message under (`algorithm`, `key`) with `iv`; false on an
  // OpenSSL failure.
  bool Start(MacAlgorithm algorithm, const MacKey& key, const uint8_t* iv) {
    const EVP_CIPHER* cipher = Cipher(algorithm);
    if (ctx_ == nullptr || cipher == nullptr) return false;
    if (keyed_ && algorithm_ == algorithm &&
        std::memcmp(key_.data(), key.data(), key.size()) == 0) {
      if (EVP_EncryptInit_ex2(ctx_, nullptr, nullptr, iv, nullptr) == 1) return true;
    }
    keyed_ = false;
    if (EVP_EncryptInit_ex2(ctx_, cipher, key.data(), iv, nullptr) != 1) return false;
    key_ = key;
    algorithm_ = algorithm;
    keyed_ = true;
    return true;
  }
  EVP_CIPHER_CTX* get() { return ctx_; }
  // After a failure mid-message: the next Start sets the key again.
  void Reset() { keyed_ = false; }

 private:
  EVP_CIPHER_CTX* const ctx_;
  MacKey key_{};
  MacAlgorithm algorithm_ = MacAlgorithm::kAes256Gmac;
  bool keyed_ = false;
};

// The AEAD's tag with everything as additional data and no plaintext.
absl::StatusOr<Tag> Mac(MacAlgorithm algorithm, const MacKey& key, const uint8_t* iv,
                        std::initializer_list<absl::Span<const uint8_t>> parts) {
  thread_local MacContext context;
  if (!context.Start(algorithm, key, iv)) {
    context.Reset();
    return absl::InternalError(absl::StrCat(MacAlgorithmName(algorithm), " unavailable"));
  }
  EVP_CIPHER_CTX* ctx = context.get();
  int out = 0;
  for (absl::Span<const uint8_t> part : parts) {
    // EVP lengths are int: feed large payloads in pieces.
    for (size_t done = 0; done < part.size();) {
      const size_t n = std::min<size_t>(part.size() - done, size_t{1} << 30);
      if (EVP_EncryptUpdate(ctx, nullptr, &out, part.data() + done, static_cast<int>(n)) != 1) {
        context.Reset();
        return absl::InternalError("MAC update failed");
      }
      done += n;
    }
  }
  Tag tag;
  if (EVP_EncryptFinal_ex(ctx, nullptr, &out) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, kSealTagBytes, tag.data()) != 1) {
    context.Reset();
    return absl::InternalError("MAC final failed");
  }
  return tag;
}

std::array<uint8_t, kSealNonceBytes> ChunkIv(const uint8_t* nonce) {
  std::array<uint8_t, kSealNonceBytes> iv;
  std::memcpy(iv.data(), nonce, kSealNonceBytes);
  iv.back() |= 1;
  return iv;
}

uint32_t GetU32(const uint8_t* p) {
  return uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 | uint32_t{p[3]} << 24;
}

bool TagMatches(const absl::StatusOr<Tag>& tag, const uint8_t* expected) {
  return tag.ok() && CRYPTO_memcmp(tag->data(), expected, kSealTagBytes) == 0;
}

}  // namespace

absl::StatusOr<MacKey> DeriveKey(absl::Span<const uint8_t> secret, absl::string_view salt,
                                 absl::Span<const uint8_t> info) {
  EVP_KDF* kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf == nullptr) return absl::InternalError("HKDF unavailable");
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  EVP_KDF_free(kdf);
  if (ctx == nullptr) return absl::InternalError("HKDF unavailable");
  char digest[] = "SHA256";
  OSSL_PARAM params[] = {
      OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<uint8_t*>(secret.data()),
                                        secret.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT, const_cast<char*>(salt.data()),
                                        salt.size()),
      OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO, const_cast<uint8_t*>(info.data()),
                                        info.size()),
      OSSL_PARAM_construct_end()};
  MacKey key;
  const int ok = EVP_KDF_derive(ctx, key.data(), key.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) return absl::InternalError("HKDF failed");
  return key;
}

absl::StatusOr<MacKey> DeriveEpochKey(const MacKey& member_key, uint64_t epoch,
                                      MacAlgorithm algorithm) {
  uint8_t info[8];
  for (int i = 0; i < 8; ++i) info[i] = static_cast<uint8_t>(epoch >> (8 * i));
  // AES-256-GMAC keeps the format's first salt; each algorithm has its own,
  // so no key ever serves two.
  return DeriveKey(member_key,
                   algorithm == MacAlgorithm::kAes256Gmac
                       ? "gift-dataplane-epoch-v1"
                       : "gift-dataplane-epoch-chacha20-poly1305-v1",
                   info);
}

absl::StatusOr<std::array<uint8_t, kSealedChunkHeaderBytes>> SealChunk(
    const ChunkHeader& header, uint32_t signer, absl::Span<const uint8_t> payload,
    const MacKey& key, MacAlgorithm algorithm) {
  auto out = SerializeSealedChunkHeaderPrefix(header, signer, algorithm);
  uint8_t* nonce = out.data() + kSealNonceOffset;
  if (RAND_bytes(nonce, kSealNonceBytes) != 1) return absl::InternalError("RAND_bytes failed");
  nonce[kSealNonceBytes - 1] &= 0xFE;
  auto header_tag =
      Mac(algorithm, key, nonce, {absl::MakeConstSpan(out.data(), kSealHeaderTagOffset)});
  if (!header_tag.ok()) return header_tag.status();
  std::memcpy(out.data() + kSealHeaderTagOffset, header_tag->data(), kSealTagBytes);
  const auto chunk_iv = ChunkIv(nonce);
  auto chunk_tag = Mac(algorithm, key, chunk_iv.data(),
                       {absl::MakeConstSpan(out.data(), kSealChunkTagOffset), payload});
  if (!chunk_tag.ok()) return chunk_tag.status();
  std::memcpy(out.data() + kSealChunkTagOffset, chunk_tag->data(), kSealTagBytes);
  return out;
}

absl::string_view AuthFailureName(AuthFailure failure) {
  switch (failure) {
    case AuthFailure::kMissing:
      return "missing";
    case AuthFailure::kUnknownKey:
      return "unknown_key";
    case AuthFailure::kWrongSigner:
      return "wrong_signer";
    case AuthFailure::kBadMac:
      return "bad_mac";
  }
  return "unknown";
}

std::optional<AuthFailure> CheckChunk(const EpochKeys& keys, const ChunkHeader& parsed,
                                      absl::Span<const uint8_t> header_bytes,
                                      std::optional<absl::Span<const uint8_t>> payload) {
  if (!IsSealedChunkHeader(header_bytes)) return AuthFailure::kMissing;
  const uint8_t* p = header_bytes.data();
  const uint32_t signer = GetU32(p + kSealSignerOffset);
  if ((parsed.kind == ChunkKind::kPush || parsed.kind == ChunkKind::kNodePush ||
       parsed.kind == ChunkKind::kNodeMember) &&
      signer != parsed.rank) {
    return AuthFailure::kWrongSigner;
  }
  // A node member's chunk is checked with the node's key, any other with
  // its signer's.
  const bool node_member = parsed.kind == ChunkKind::kNodeMember;
  if (parsed.epoch != keys.epoch ||
      p[kSealAlgorithmOffset] != static_cast<uint8_t>(keys.algorithm) ||
      (node_member ? !keys.node.has_value()
                   : signer >= keys.peers.size() || !keys.peers[signer].has_value())) {
    return AuthFailure::kUnknownKey;
  }
  const MacKey& key = node_member ? *keys.node : *keys.peers[signer];
  const uint8_t* nonce = p + kSealNonceOffset;
  if (!TagMatches(Mac(keys.algorithm, key, nonce, {header_bytes.first(kSealHeaderTagOffset)}),
                  p + kSealHeaderTagOffset)) {
    return AuthFailure::kBadMac;
  }
  if (payload.has_value()) {
    const auto chunk_iv = ChunkIv(nonce);
    if (!TagMatches(Mac(keys.algorithm, key, chunk_iv.data(),
                        {header_bytes.first(kSealChunkTagOffset), *payload}),
                    p + kSealChunkTagOffset)) {
      return AuthFailure::kBadMac;
    }
  }
  return std::nullopt;
}

bool AwaitsSignerKey(const EpochKeys& keys, const ChunkHeader& parsed,
                     absl::Span<const uint8_t> header_bytes, uint32_t world_size) {
  if (!IsSealedChunkHeader(header_bytes)) return false;
  const uint8_t* p = header_bytes.data();
  const uint32_t signer = GetU32(p + kSealSignerOffset);
  if (parsed.epoch != keys.epoch ||
      p[kSealAlgorithmOffset] != static_cast<uint8_t>(keys.algorithm) || signer >= world_size) {
    return false;
  }
  if (parsed.kind == ChunkKind::kNodeMember) return !keys.node.has_value();
  return signer >= keys.peers.size() || !keys.peers[signer].has_value();
}

absl::Status AuthFailureStatus(AuthFailure failure, const ChunkHeader& parsed) {
  return absl::UnauthenticatedError(absl::StrCat(
      "chunk authentication failed (", AuthFailureName(failure), "): ", ToString(parsed)));
}

}  // namespace gift::dataplane
