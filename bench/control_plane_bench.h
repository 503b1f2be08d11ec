// `gift-bench control-plane`: the coordinator under a simulated cluster.
//
// Starts a real gift-coordinator process on a loopback port (with a fresh
// state file in a temporary directory) and simulates --members workers in
// this process, each with its own lease and its own Watch stream. The
// streams and the heartbeats use gRPC's callback API, so 256 members need a
// handful of threads, not 512. Then it measures:
//   - refresh negotiation, --refreshes times: a tensor's owner publishes a
//     real serialized basis; every member fetches and acknowledges it while
//     the members keep stepping (heartbeats with their last step); reported
//     per refresh: publish -> commit (the ack that completes it returns) and
//     publish -> every member's Watch shows the committed version;
//   - watch fan-out of a policy change, --policy-changes times: SetPolicy ->
//     every member's Watch shows the new policy version;
//   - the coordinator's CPU time (utime + stime from /proc/PID/stat) over the
//     measured interval, per member per second.
// With --tls the whole measurement runs twice, plaintext then mutual TLS
// (common/rpc/credentials.h), and a table of TLS/plaintext ratios follows.
// Every number printed is measured in the run that prints it.
#ifndef GIFT_BENCH_CONTROL_PLANE_BENCH_H_
#define GIFT_BENCH_CONTROL_PLANE_BENCH_H_

#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "bench/command.h"

namespace gift::bench {

struct ControlPlaneBenchOptions {
  std::string coordinator_bin;  // "": next to gift-bench's build tree, else on PATH
  // Where the temporary directory of the state file goes ("": $TMPDIR or
  // /tmp). The coordinator commits every change with fsync, so the disk
  // under it bounds the refresh rate.
  std::string state_dir;
  int members = 256;
  int tensors = 8;
  int refreshes = 3;
  int policy_changes = 5;
  int channels = 8;      // members share this many HTTP/2 connections
  double step_ms = 500;  // simulated step time: one heartbeat per member per step
  double lease_ttl_s = 10;
  int fetch_threads = 8;  // threads that fetch and acknowledge bases for the members
  std::string json_path;  // "" none, "-" stdout
  // Then the same measurement with mutual TLS (openssl-made certificates),
  // printed with the TLS/plaintext ratios.
  bool tls = false;
};

// Registers `control-plane` on `parent`.
Command AddControlPlaneCommand(CLI::App& parent);

absl::Status RunControlPlaneBench(const ControlPlaneBenchOptions& options);

}  // namespace gift::bench

#endif  // GIFT_BENCH_CONTROL_PLANE_BENCH_H_
