"""Communication hidden behind backward, end to end on loopback (real
coordinator, 2 servers and 2 workers per cluster, training processes as
subprocesses of /usr/bin/python3):

- StartTensors from two clients in different orders and batches (one of
  them starting nothing early) completes, with FP32 codecs, to exactly
  (g0 + g1) * 0.5; a tensor started twice in a step and a measured step
  started early are refused with INVALID_ARGUMENT, and later steps work.
- GradientSync(overlap=True) (per-tensor starts on one worker, 3000-byte
  buckets on the other, gradient accumulation with no_sync) gives gradients
  and parameters bit-identical to sync-after-backward on another cluster
  with the same data, with a lossy stochastically rounded push codec
  (e4m3/block128/sr, bf16 pull), so equal bits mean equal payloads and
  rounding keys.
- A 2-process DDP (gloo on 127.0.0.1) with gift_hook gives gradients and
  parameters bit-identical to GradientSync on the same gradients.

Skipped when the daemons are not built.
"""

import itertools
import os
import socket as socketlib
import sys
import tempfile
import unittest

import torch

import cluster_util
from gift_ps import GiftError

SKIP = cluster_util.skip_reason()
HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 4
FIRST_STEP = 1
PUSH, PULL = "e4m3/block128/sr", "bf16"


def free_port() -> int:
    with socketlib.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_logs(cluster) -> str:
    text = []
    for root, _, files in os.walk(cluster.dir):
        for f in files:
            if f.startswith("worker") and f.endswith(".log"):
                with open(os.path.join(root, f), errors="replace") as fh:
                    text.append(fh.read())
    return "\n".join(text)


def train(mode: str):
    """Runs train_overlap.py MODE on a fresh cluster; returns the results by rank."""
    cluster = cluster_util.start_cluster(2, 2, PUSH, PULL)
    try:
        port = str(free_port())
        with tempfile.TemporaryDirectory() as d:
            outs = [os.path.join(d, f"out{i}.pt") for i in range(len(cluster.sockets))]
            cluster_util.run_trainers(
                [[sys.executable, os.path.join(HERE, "train_overlap.py"), sock, mode,
                  str(FIRST_STEP), str(STEPS), out, port]
                 for sock, out in zip(cluster.sockets, outs)],
                timeout=300, cluster=cluster, label=mode)
            results = sorted((torch.load(o) for o in outs), key=lambda r: r["rank"])
        # Early pushes ran as such: no step fell back to the plain path.
        for event in ("early_push_fallback", "open_step_abandoned"):
            if event in worker_logs(cluster):
                raise AssertionError(f"{mode}: a worker logged {event}:\n{cluster.logs()}")
    finally:
        cluster.stop()
    return results


@unittest.skipIf(SKIP is not None, SKIP or "")
class StartTensorsClientTest(cluster_util.ClusterFixture, unittest.TestCase):
    CLIENTS = True

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.shapes = {"ov.a": (5, 300), "ov.b": (64,), "ov.c": (3, 129)}
        cls.tensors = [c.register(cls.shapes) for c in cls.clients]

    def fill(self, seed):
        gen = torch.Generator().manual_seed(seed)
        grads = [{n: torch.randn(s, generator=gen) for n, s in self.shapes.items()}
                 for _ in self.clients]
        for t, g in zip(self.tensors, grads):
            for n in self.shapes:
                t[n].copy_(g[n])
        return grads

    def check_average(self, grads):
        for n in self.shapes:
            expected = (grads[0][n] + grads[1][n]) * 0.5
            for t in self.tensors:
                self.assertTrue(torch.equal(t[n], expected), n)

    def test_orders_and_batches_differ(self):
        orders = [
            ([["ov.c"], ["ov.a"]], [["ov.b", "ov.a"]]),  # rank-wise batches, then the rest
            ([["ov.a"], ["ov.b"], ["ov.c"]], []),         # one worker starts nothing early
            ([["ov.c", "ov.b", "ov.a"]], [["ov.a", "ov.b", "ov.c"]]),
        ]
        for seed, batches in enumerate(orders):
            step = next(self.steps)
            grads = self.fill(100 + seed)
            starts = [[c.start_tensors(step, names) for names in b]
                      for c, b in zip(self.clients, batches)]
            futures = [c.push_pull_async(step) for c in self.clients]
            results = [f.result(timeout=120) for f in futures]
            for s in itertools.chain(*starts):
                self.assertIsNone(s.result(timeout=10))
            self.check_average(grads)
            for r in results:
                self.assertEqual(r.step, step)
                self.assertEqual(sorted(t.name for t in r.tensors), sorted(self.shapes))

    def test_refusals_then_next_step(self):
        step = next(self.steps)
        grads = self.fill(7)
        first = [c.start_tensors(step, ["ov.a"]) for c in self.clients]
        twice = [c.start_tensors(step, ["ov.a"]) for c in self.clients]
        futures = [c.push_pull_async(step) for c in self.clients]
        for f in first:
            f.result(timeout=60)
        for f in twice:
            with self.assertRaises(GiftError) as ctx:
                f.result(timeout=60)
            self.assertEqual(ctx.exception.code, "INVALID_ARGUMENT", ctx.exception)
        for f in futures:
            f.result(timeout=120)
        self.check_average(grads)

        step = next(self.steps)
        self.fill(8)
        starts = [c.start_tensors(step, ["ov.b"]) for c in self.clients]
        futures = [c.push_pull_async(step, measure_error=True) for c in self.clients]
        for s in starts:
            s.result(timeout=60)
        for f in futures:
            with self.assertRaises(GiftError) as ctx:
                f.result(timeout=60)
            self.assertEqual(ctx.exception.code, "INVALID_ARGUMENT", ctx.exception)

        step = next(self.steps)
        grads = self.fill(9)
        starts = [c.start_tensors(step) for c in self.clients]
        futures = [c.push_pull_async(step) for c in self.clients]
        for f in starts + futures:
            f.result(timeout=120)
        self.check_average(grads)


@unittest.skipIf(SKIP is not None, SKIP or "")
class OverlapBitIdenticalTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sequential = train("sequential")

    def assert_same(self, got, want, what):
        self.assertEqual([r["rank"] for r in got], [0, 1])
        for g, w in zip(got, want):
            for step, (gs, ws) in enumerate(zip(g["grads"], w["grads"])):
                for name in ws:
                    self.assertTrue(torch.equal(gs[name], ws[name]),
                                    f"{what}: step {step} gradient {name}: max |diff| "
                                    f"{float((gs[name] - ws[name]).abs().max())}")
            for name in w["params"]:
                self.assertTrue(torch.equal(g["params"][name], w["params"][name]), name)

    def test_sequential_ranks_agree_and_train(self):
        r0, r1 = self.sequential
        for name in r0["params"]:
            self.assertTrue(torch.equal(r0["params"][name], r1["params"][name]), name)
        self.assertTrue(any(float(g.abs().max()) > 0 for g in r0["grads"][-1].values()))

    def test_overlap_equals_sequential(self):
        self.assert_same(train("overlap"), self.sequential, "overlap")

    def test_ddp_hook_equals_gradient_sync(self):
        self.assert_same(train("ddp"), self.sequential, "ddp hook")


if __name__ == "__main__":
    unittest.main()
