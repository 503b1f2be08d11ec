#include "bench/mac_bench.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/bench_util.h"
#include "common/base/status_macros.h"
#include "common/dataplane/chunk_mac.h"
#include "nlohmann/json.hpp"

namespace gift::bench {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

const unsigned char kKey[32] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12, 13, 14, 15, 16,
                                17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
const unsigned char kIv[12] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 1, 2};

// One tag over `data`; false on an OpenSSL failure.
bool Hmac(absl::Span<const uint8_t> data) {
  unsigned char tag[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  return HMAC(EVP_sha256(), kKey, sizeof(kKey), data.data(), data.size(), tag, &n) != nullptr;
}

// An AEAD over additional data only (GMAC, Poly1305).
bool AeadTag(const EVP_CIPHER* cipher, absl::Span<const uint8_t> data) {
  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx(EVP_CIPHER_CTX_new(),
                                                                      EVP_CIPHER_CTX_free);
  int n = 0;
  unsigned char tag[16];
  return ctx != nullptr && EVP_EncryptInit_ex(ctx.get(), cipher, nullptr, kKey, kIv) == 1 &&
         EVP_EncryptUpdate(ctx.get(), nullptr, &n, data.data(), static_cast<int>(data.size())) ==
             1 &&
         EVP_EncryptFinal_ex(ctx.get(), tag, &n) == 1 &&
         EVP_CIPHER_CTX_ctrl(ctx.get(), EVP_CTRL_AEAD_GET_TAG, 16, tag) == 1;
}

bool Blake2b(EVP_MAC* mac, absl::Span<const uint8_t> data) {
  std::unique_ptr<EVP_MAC_CTX, decltype(&EVP_MAC_CTX_free)> ctx(EVP_MAC_CTX_new(mac),
                                                                EVP_MAC_CTX_free);
  unsigned char tag[64];
  size_t n = 0;
  return ctx != nullptr && EVP_MAC_init(ctx.get(), kKey, sizeof(kKey), nullptr) == 1 &&
         EVP_MAC_update(ctx.get(), data.data(), data.size()) == 1 &&
         EVP_MAC_final(ctx.get(), tag, &n, sizeof(tag)) == 1;
}

struct Candidate {
  std::string name;
  std::function<bool(absl::Span<const uint8_t>)> tag;
};

}  // namespace

absl::Status RunMacBench(const MacBenchOptions& o) {
  if (o.rounds < 1 || o.reps < 1 || o.sizes.empty()) {
    return absl::InvalidArgumentError("--rounds and --reps must be >= 1, --sizes non-empty");
  }
  GIFT_ASSIGN_OR_RETURN(OutputSinks sinks, OutputSinks::Open(o.json_path));
  std::ostream& os = sinks.table();
  std::unique_ptr<EVP_MAC, decltype(&EVP_MAC_free)> blake(
      EVP_MAC_fetch(nullptr, "BLAKE2BMAC", nullptr), EVP_MAC_free);
  const dataplane::MacKey key = dataplane::DeriveEpochKey(dataplane::MacKey{}, 1).value();
  const dataplane::ChunkHeader header{.kind = dataplane::ChunkKind::kPush, .world_size = 1};
  constexpr auto& kAlgorithms = dataplane::kMacAlgorithms;
  auto keys_of = [&](dataplane::MacAlgorithm a) {
    return dataplane::EpochKeys{.epoch = 0, .algorithm = a, .own = key, .peers = {key}};
  };
  std::vector<Candidate> candidates = {
      {"aes-256-gmac", [](auto d) { return AeadTag(EVP_aes_256_gcm(), d); }},
      {"chacha20-poly1305", [](auto d) { return AeadTag(EVP_chacha20_poly1305(), d); }},
      {"hmac-sha256", Hmac},
      {"blake2b-mac", [&](auto d) { return blake != nullptr && Blake2b(blake.get(), d); }},
  };
  // The data plane's own, with each algorithm: seal, then (below, per size)
  // check the header and chunk tags.
  for (dataplane::MacAlgorithm a : kAlgorithms) {
    candidates.push_back({absl::StrCat("seal ", dataplane::MacAlgorithmName(a)), [&, a](auto d) {
                            return dataplane::SealChunk(header, 0, d, key, a).ok();
                          }});
  }
  json results = json::array();
  os << absl::StrFormat(
      "gift-bench mac: %d rounds x %d calls per MAC and size, one core, %d CPUs\n", o.rounds,
      o.reps, HardwareThreads());
  for (uint64_t size : o.sizes) {
    std::vector<uint8_t> data(size);
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 131 + 7);
    // A sealed header per algorithm, kept until the size's rows are done.
    std::vector<std::array<uint8_t, dataplane::kSealedChunkHeaderBytes>> sealed;
    for (dataplane::MacAlgorithm a : kAlgorithms) {
      auto s = dataplane::SealChunk(header, 0, data, key, a);
      if (!s.ok()) return s.status();
      sealed.push_back(*s);
    }
    for (size_t i = 0; i < std::size(kAlgorithms); ++i) {
      candidates.push_back(
          {absl::StrCat("check ", dataplane::MacAlgorithmName(kAlgorithms[i])), [&, i](auto d) {
             return !dataplane::CheckChunk(keys_of(kAlgorithms[i]), header, sealed[i], d)
                         .has_value();
           }});
    }
    std::vector<std::vector<double>> gbps(candidates.size());
    for (int round = 0; round < o.rounds; ++round) {
      for (size_t c = 0; c < candidates.size(); ++c) {
        if (!candidates[c].tag(data)) {
          return absl::InternalError(absl::StrCat(candidates[c].name, " failed"));
        }
        const Clock::time_point t0 = Clock::now();
        for (int r = 0; r < o.reps; ++r) (void)candidates[c].tag(data);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        gbps[c].push_back(GigabytesPerSecond(static_cast<double>(size) * o.reps, s));
      }
    }
    const double gmac = Median(gbps[0]);
    WriteLine(os, absl::StrFormat("%-24s %10s %10s %12s", absl::StrFormat("payload %d B", size),
                                  "GB/s", "min..max", "vs GMAC"));
    for (size_t c = 0; c < candidates.size(); ++c) {
      const double median = Median(gbps[c]);
      const auto [lo, hi] = std::minmax_element(gbps[c].begin(), gbps[c].end());
      WriteLine(os, absl::StrFormat("%-24s %10.3f %4.2f..%-4.2f %12.3f", candidates[c].name, median,
                                    *lo, *hi, gmac > 0 ? median / gmac : 0));
      results.push_back({{"mac", candidates[c].name},
                         {"bytes", size},
                         {"median_gbps", median},
                         {"gbps", gbps[c]},
                         {"ratio_to_gmac", gmac > 0 ? median / gmac : 0}});
    }
    candidates.resize(candidates.size() - std::size(kAlgorithms));
  }
  return sinks.WriteJson({{"benchmark", "mac"},
                          {"rounds", o.rounds},
                          {"reps", o.reps},
                          {"cpus", HardwareThreads()},
                          {"results", results}});
}

Command AddMacCommand(CLI::App& parent) {
  CLI::App* app = parent.add_subcommand("mac", "data-plane MAC candidates: GB/s on this machine");
  auto o = std::make_shared<MacBenchOptions>();
  app->add_option("--sizes", o->sizes, "payload sizes in bytes")->capture_default_str();
  app->add_option("--rounds", o->rounds, "rounds (the MACs take turns)")->capture_default_str();
  app->add_option("--reps", o->reps, "calls per MAC per round")->capture_default_str();
  app->add_option("--json", o->json_path, "write JSON here (\"-\": stdout, the table to stderr)");
  return {app, [o] { return RunMacBench(*o); }};
}

}  // namespace gift::bench
