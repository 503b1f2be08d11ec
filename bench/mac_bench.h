// `gift-bench mac`: which MAC the data plane should use (docs/design.md
// section 8.2), measured on this machine: OpenSSL EVP HMAC-SHA256,
// AES-256-GMAC (GCM over additional data only), ChaCha20-Poly1305 (likewise)
// and BLAKE2b-MAC over payloads of --sizes bytes, and the data plane's own
// path (dataplane::SealChunk and CheckChunk, AES-256-GMAC). The MACs take
// turns, --rounds times, each round timing --reps calls per MAC on one core,
// so that a machine shared with other work slows them alike; printed: the
// median GB/s over the rounds and the ratio to AES-256-GMAC.
#ifndef GIFT_BENCH_MAC_BENCH_H_
#define GIFT_BENCH_MAC_BENCH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "bench/command.h"

namespace gift::bench {

struct MacBenchOptions {
  std::vector<uint64_t> sizes = {uint64_t{1} << 20, uint64_t{4} << 20};
  int rounds = 7;
  int reps = 8;
  std::string json_path;  // "" none, "-" stdout
};

// Registers `mac` on `parent`.
Command AddMacCommand(CLI::App& parent);

absl::Status RunMacBench(const MacBenchOptions& options);

}  // namespace gift::bench

#endif  // GIFT_BENCH_MAC_BENCH_H_
