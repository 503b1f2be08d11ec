// `gift-bench soak`: one cluster, every feature on, random faults for a set
// time, each followed by the repair a supervisor would make, and every step
// checked exactly. Real processes (tools/gift-cluster LocalCluster) on
// loopback, or on a netlab testbed with --placement.
//
// The cluster: --workers gift-worker daemons (two per node group, the
// policy's hierarchy NODE unless --hierarchy none), --servers gift-server
// shards, one gift-coordinator with data-plane MACs and coordinator chunks
// of 16 KiB. Two tensors per worker:
//   soak.exact  64 x 256, FP32 both ways, never transformed: worker w
//               pushes 4^w, so avg * world_size names who was counted
//               (bench/exact_counts.h);
//   soak.gift   256 x 256, always in a GIFT basis (e4m3/block128 both ways,
//               rank 16, periodic refreshes every 10 steps and drift
//               refreshes; error feedback on with --hierarchy none, which
//               the policy refuses with NODE): worker w's gradient is a
//               fixed function of (w, step), so the exact average of the
//               workers counted is known and the result's relative error
//               is checked against --gift-bound.
//
// Steps run in lockstep on the workers that are up. Every --fault-every
// seconds on average (exponential gaps), a fault drawn from --kinds hits
// during a step:
//   worker-kill / worker-stop   a random worker gets SIGKILL / SIGSTOP
//                               instead of calling the step; after the step
//                               it is restarted (a new daemon, client and
//                               registration) / resumed (SIGCONT); either
//                               way it joins again at the step the
//                               coordinator admits it at.
//   worker-partition            a random worker's netlab host is cut off (its
//                               bridge port down; --bridge-netns) instead of
//                               calling the step; mended after it, and the
//                               worker joins again as above.
//   server-kill / server-stop   a random server, while all but one worker
//   / server-partition          wait in the step; restarted / resumed /
//                               mended after.
//   coordinator-kill            SIGKILL and restart on its state file.
//   coordinator-stop            SIGSTOP, SIGCONT 1 s later.
//   coordinator-disk-full       the coordinator's disk fills up (a 16 MiB
//                               tmpfs under its state, in a mount namespace
//                               of its own; needs root), then a random
//                               worker is killed (its eviction needs a
//                               commit); space comes back 1 s later and the
//                               worker is restarted.
//   spoof                       forged pushes of a non-member for the step.
// --kinds all (the default) draws from every kind the run can inject.
// Each step's replies are checked: "lost" (a worker that called was missing
// from a result), "double" (counted twice, or counted without calling, or
// a forged push counted), "failed" (a call that returned an error other
// than the admission refusal of a worker that was evicted by a fault),
// "gift_bound" (the transformed tensor outside its bound). The stall of a
// fault is from the fault to the step's last result (a call refused because
// its worker must join again after an earlier fault keeps no one waiting,
// so it counts only in a step where no call got a result). Every --sample
// seconds the RSS and open descriptors of every daemon are read from /proc.
//
// A worker or server that exits on its own is restarted before the next
// step, as a supervisor would, and counted as a crash with its log named. A
// restart that fails (e.g. the coordinator still holds the killed member
// under its name) is tried again before each later step.
// The coordinator runs without --dataplane-secret-file: the secret it draws
// is kept next to its state file, so its restarts keep every key.
//
// Prints the counts, the stalls per kind and the daemons' RSS and fds (after
// warm-up and at the end), and writes --json FILE. Exit status 0 when
// nothing was lost, doubled, failed, out of bound or crashed.
#ifndef GIFT_BENCH_SOAK_H_
#define GIFT_BENCH_SOAK_H_

#include "CLI/CLI.hpp"
#include "bench/command.h"

namespace gift::bench {

Command AddSoakCommand(CLI::App& parent);

}  // namespace gift::bench

#endif  // GIFT_BENCH_SOAK_H_
