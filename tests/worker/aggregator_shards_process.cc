// A test helper process: aggregator shards over UCX, outside the process
// under test, so a test can count what its push-pull engines alone allocate
// and fault in. Protocol, one command per line on stdin:
//
//   (started with: aggregator_shards_process NUM_SHARDS PULL_SPEC)
//   -> prints "shard ADDRESS" once per shard, then "ready"
//   <- "chunk SHARD TENSOR INDEX ROWS COLS"   a chunk for the next epoch
//   <- "epoch EPOCH WORKER_ADDRESS..."        installs it on every shard
//   -> prints "ok" (or "error MESSAGE")
//   <- end of input: the process exits.
//
// Addresses (binary for UCX) travel hex-encoded.
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "common/codec/codec_spec.h"
#include "common/transport/ucx/ucx_transport.h"
#include "server/aggregator/aggregator_shard.h"

int main(int argc, char** argv) {
  using namespace gift;
  if (argc != 3) {
    std::cerr << "usage: aggregator_shards_process NUM_SHARDS PULL_SPEC\n";
    return 64;
  }
  const int num_shards = std::stoi(argv[1]);
  auto pull = codec::ParseCodecSpec(argv[2]);
  if (!pull.ok()) {
    std::cerr << pull.status() << "\n";
    return 64;
  }
  std::vector<std::unique_ptr<server::AggregatorShard>> shards;
  for (int s = 0; s < num_shards; ++s) {
    auto shard = server::AggregatorShard::Create(
        {.reducer = {.pull_spec = *pull}},
        [](transport::TransportHandlers h) { return transport::CreateUcxTransport(std::move(h)); });
    if (!shard.ok()) {
      std::cerr << shard.status() << "\n";
      return 1;
    }
    std::cout << "shard " << absl::BytesToHexString((*shard)->address()) << "\n";
    shards.push_back(*std::move(shard));
  }
  std::cout << "ready" << std::endl;
  std::vector<server::ShardEpoch> next(shards.size());
  std::string line;
  while (std::getline(std::cin, line)) {
    std::istringstream in(line);
    std::string command;
    in >> command;
    if (command == "chunk") {
      size_t shard = 0;
      uint64_t tensor = 0, rows = 0, cols = 0;
      uint32_t index = 0;
      in >> shard >> tensor >> index >> rows >> cols;
      if (!in || shard >= shards.size()) {
        std::cout << "error bad chunk line" << std::endl;
        continue;
      }
      next[shard].chunks[{tensor, index}] = {.rows = rows, .cols = cols};
    } else if (command == "epoch") {
      uint64_t epoch = 0;
      in >> epoch;
      std::vector<std::string> workers;
      for (std::string w; in >> w;) workers.push_back(absl::HexStringToBytes(w));
      std::string error;
      for (size_t s = 0; s < shards.size(); ++s) {
        next[s].epoch = epoch;
        next[s].workers = workers;
        if (auto st = shards[s]->SetEpoch(next[s]); !st.ok()) error = st.ToString();
        next[s] = {};
      }
      std::cout << (error.empty() ? "ok" : "error " + error) << std::endl;
    } else {
      std::cout << "error unknown command" << std::endl;
    }
  }
  return 0;
}
