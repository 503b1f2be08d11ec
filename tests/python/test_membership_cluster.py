"""Membership changes are never silent (issue 33 item 2), against a real
local cluster (coordinator + 1 server + 2 workers, 2 s leases): kill -9 of
one worker; under the default policy (on_member_loss continue) the
survivor's next push_pull raises WorldSizeChanged, after the step, naming
the lost worker; under on_member_loss fail every step raises MemberLost
until the client registers again. Skipped when the daemons are not built."""

import os
import signal
import unittest

import cluster_util
from gift_ps import MemberLost, WorkerClient, WorldSizeChanged

SKIP = cluster_util.skip_reason()


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


if __name__ == "__main__":
    unittest.main()
