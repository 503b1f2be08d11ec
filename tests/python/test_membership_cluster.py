"""Membership changes are never silent (issue 33 items 2-3), against a real
local cluster (coordinator + 1 server + 2 workers, 2 s leases): kill -9 of
one worker; under the default policy (on_member_loss continue) the
survivor's next push_pull raises WorldSizeChanged, after the step, naming
the lost worker; under on_member_loss fail every step raises MemberLost
until the client registers again. Skipped when the daemons are not built."""

import os
import signal
import sys
import tempfile
import time
import unittest

import torch

import cluster_util
import train_tiny
from gift_ps import MemberLost, WorkerClient, WorldSizeChanged

SKIP = cluster_util.skip_reason()
HERE = os.path.dirname(os.path.abspath(__file__))


@unittest.skipIf(SKIP is not None, SKIP or "")
class MembershipClusterTest(unittest.TestCase):
    def setUp(self):
        self.cluster = cluster_util.Cluster(servers=1, workers=2, lease_ttl="2s")
        self.clients = []

    def tearDown(self):
        for c in self.clients:
            c.close()
        self.cluster.stop()

    def start(self, on_member_loss: str):
        self.cluster.giftctl("policy", "set", "--selection", "list", "--exclude", "*",
                             "--on-member-loss", on_member_loss)
        self.clients = [WorkerClient(s, connect_timeout=30) for s in self.cluster.sockets]
        for c in self.clients:
            c.register({"layer.w": (32, 16)})
        futures = [c.push_pull_async(1) for c in self.clients]
        for f in futures:
            self.assertEqual(f.result(timeout=120).world_size, 2)
        os.kill(self.cluster.worker_pids[1], signal.SIGKILL)

    def test_continue_raises_world_size_changed_naming_the_lost_worker(self):
        self.start("continue")
        with self.assertRaises(WorldSizeChanged) as ctx:
            self.clients[0].push_pull(2)
        e = ctx.exception
        self.assertEqual((e.previous_world_size, e.world_size), (2, 1), self.cluster.logs())
        self.assertEqual([w.name for w in e.lost], ["worker-1"])
        self.assertEqual(e.result.step, 2)
        self.assertEqual(self.clients[0].push_pull(3).world_size, 1)  # said once

    def test_fail_raises_member_lost_until_the_client_registers_again(self):
        self.start("fail")
        for step in (2, 3):
            with self.assertRaises(MemberLost) as ctx:
                self.clients[0].push_pull(step)
            self.assertIn("(worker-1, ", ctx.exception.message)
        self.clients[0].register({"layer.w": (32, 16)})  # a new run
        self.assertEqual(self.clients[0].push_pull(4).world_size, 1)


@unittest.skipIf(SKIP is not None, SKIP or "")
class RunTwiceTest(unittest.TestCase):
    """The same training script (train_tiny.py, FP32: exact) run again and
    again against one cluster, each run training exactly from step 0: with
    its own GIFT_RUN_ID (as a launcher gives each launch), and without one,
    which starts a new run by itself once every client of the last run has
    disconnected; while a client of the run is still connected (a live run)
    the script joins it and is refused, naming the remedy."""

    STEPS = 3

    def train(self, cluster, run_id: str) -> None:
        env = dict(os.environ, GIFT_RUN_ID=run_id)
        with tempfile.TemporaryDirectory() as d:
            outs = [os.path.join(d, f"rank{r}.pt") for r in range(2)]
            cluster_util.run_trainers(
                [[sys.executable, os.path.join(HERE, "train_tiny.py"), socket, str(rank), "0",
                  str(self.STEPS), out] for rank, (socket, out) in
                 enumerate(zip(cluster.sockets, outs))],
                timeout=300, cluster=cluster, label=f"run {run_id!r}", env=env)
            ref = train_tiny.reference(self.STEPS)
            for out in outs:
                got = torch.load(out)["params"]
                for name, want in ref.items():
                    self.assertTrue(torch.equal(got[name], want), f"run {run_id!r}: {name}")

    def test_the_same_script_runs_again_and_again(self):
        cluster = cluster_util.Cluster(servers=1, workers=2)
        try:
            cluster.set_codecs("fp32", "fp32")
            self.train(cluster, "first")
            # A client of run "first" stays connected on worker 0: the script
            # without a run id joins that live run, whose steps are taken.
            live = WorkerClient(cluster.sockets[0], connect_timeout=30, run_id="first")
            self.addCleanup(live.close)
            live.register({"live.w": (4, 4)})
            with self.assertRaises(AssertionError) as ctx:
                self.train(cluster, "")
            self.assertIn("giftctl run reset", str(ctx.exception))
            self.assertRegex(str(ctx.exception),
                             r"connected now, this one among them: [^`]*\(worker-0\)")
            # Every client gone: a new run by itself, twice in a row.
            live.close()
            self.train(cluster, "")
            self.assertIn("auto-2", cluster.giftctl("run"))
            # giftctl run says what the next registration will do (the
            # workers report a closed client within a heartbeat's RPC).
            deadline = time.monotonic() + 10
            while ("all 2 disconnected" not in cluster.giftctl("run")
                   and time.monotonic() < deadline):
                time.sleep(0.1)
            self.assertIn("all 2 disconnected: a registration without a run id starts a new run",
                          cluster.giftctl("run"))
            self.train(cluster, "")
            self.assertIn("auto-3", cluster.giftctl("run"))
            # A run id and `giftctl run reset` work as before.
            self.train(cluster, "second")
            self.assertIn("started run", cluster.giftctl("run", "reset"))
            self.train(cluster, "")
            self.assertIn("giftctl-", cluster.giftctl("run"))
        finally:
            cluster.stop()


if __name__ == "__main__":
    unittest.main()
