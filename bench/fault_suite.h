// `gift-bench faults`: a fault-injection suite with exact-once counts, on
// real processes on loopback (tools/gift-cluster LocalCluster).
//
// Every trial starts a fresh cluster (--workers gift-worker daemons,
// --servers gift-server shards, one gift-coordinator; coordinator chunks of
// 16 KiB so the test tensor spans every shard), sets the policy to FP32 push
// and pull without a transform (exact sums), and registers one 64 x 256
// tensor per worker. Worker w (its launch index, not its rank) always pushes
// 4^w in every element, so avg * world_size is an integer whose base-4
// digit w says how many times w was counted. Steps 0..2 run on every worker;
// step 3 is the fault step; steps 4..5 run on the workers still expected.
//
// Fault kinds (--kinds, comma-separated; default all: every kind this run
// can do, so without root no coordinator-disk-full, and without
// --bridge-netns no partitions):
//   worker-kill / worker-stop   the survivors start step 3, then the last
//                               worker gets SIGKILL / SIGSTOP without
//                               calling it; expected: the survivors once.
//   server-kill / server-stop   all but one worker start step 3, server 0
//                               gets SIGKILL / SIGSTOP, then the last worker
//                               calls; expected: every worker once.
//   coordinator-kill            all but one worker start step 3, the
//                               coordinator is SIGKILLed and restarted on its
//                               address and state file, the last one calls.
//   coordinator-stop            the same with SIGSTOP, SIGCONT 1 s later.
//   coordinator-disk-full       the coordinator's state file lives on a 4 MiB
//                               tmpfs mounted in its own mount namespace
//                               (unshare -m); the suite fills it (through
//                               /proc/PID/root), SIGKILLs the last worker
//                               (its eviction needs a commit) and frees the
//                               space 1 s later; expected: the survivors.
//   spoof                       before step 3 a non-member (fault_spoofer.h)
//                               sends every server forged FP32 pushes of the
//                               current epoch as rank 0, each element
//                               4^workers; expected: every worker once.
//                               Reported, not asserted: data-plane pushes are
//                               not authenticated yet, so forged pushes that
//                               arrive first are counted (the table says how
//                               often).
//   worker-partition /          under scripts/netlab.sh (--placement,
//   server-partition            --bridge-netns): the last worker's or server
//                               0's bridge port goes down (packets dropped
//                               both ways, connections open) as in the
//                               -stop kinds; up again at teardown.
// A step whose counts are not exactly the expected workers once is counted:
// "lost" (an expected worker missing), "double" (a worker counted twice or
// more, or one that did not take part counted); a step that returned an
// error is "failed". The stall is from the fault to the last reply of step
// 3 (the same step without faults takes milliseconds).
//
// Prints one table (kind, trials, lost, double, failed, max and median
// stall) and writes --json FILE (per kind and per trial). Exit status: 0
// when every asserted kind had 0 lost, 0 double and 0 failed, and (with
// --max-stall D) no trial stalled longer than D.
#ifndef GIFT_BENCH_FAULT_SUITE_H_
#define GIFT_BENCH_FAULT_SUITE_H_

#include "CLI/CLI.hpp"
#include "bench/command.h"

namespace gift::bench {

Command AddFaultsCommand(CLI::App& parent);

}  // namespace gift::bench

#endif  // GIFT_BENCH_FAULT_SUITE_H_
