"""GradientSync end to end: two training processes (subprocesses of
/usr/bin/python3 train_tiny.py) train a tiny 2-layer model for 5 SGD steps
through a real local cluster (coordinator + 2 servers + 2 workers).

- FP32 communication (push and pull codec fp32): the parameters after the 5
  steps equal, bit for bit, those of a local reference that averages the two
  gradients in FP32 as (g0 + g1) * 0.5; likewise for a BF16 and an FP16
  model, whose reference rounds that FP32 average to the model's dtype (the
  worker widens 16-bit gradients, averages in FP32 and rounds to nearest
  even).
- e4m3/block128 push, bf16 pull: both processes end
  with identical parameters; every tensor's measured relative L2 error of the
  averaged gradient, and the L2 distance of the final parameters from the
  reference's relative to the reference's parameter change, stay below
  2^-4 = 0.0625 (E4M3's worst-case relative rounding error of a normal value;
  the bf16 pull adds at most 2^-9). Measured: about 0.02 for the parameters.

Skipped when the daemons are not built.
"""

import os
import sys
import tempfile
import unittest

import torch

import cluster_util
import train_tiny

SKIP = cluster_util.skip_reason()
HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 5
BOUND = 0.0625


def train(cluster, first_step: int, dtype: str = "float32"):
    """Runs the two training processes; returns their saved results."""
    with tempfile.TemporaryDirectory() as d:
        outs = [os.path.join(d, f"rank{rank}.pt") for rank in range(len(cluster.sockets))]
        cluster_util.run_trainers(
            [[sys.executable, os.path.join(HERE, "train_tiny.py"), socket, str(rank),
              str(first_step), str(STEPS), out, dtype]
             for rank, (socket, out) in enumerate(zip(cluster.sockets, outs))],
            timeout=600, cluster=cluster)
        return [torch.load(o) for o in outs]


@unittest.skipIf(SKIP is not None, SKIP or "")
class Fp32BitIdenticalTest(cluster_util.ClusterFixture, unittest.TestCase):
    PUSH = PULL = "fp32"

    def test_parameters_equal_local_fp32_average(self):
        results = train(self.cluster, first_step=1)
        self.assertEqual(sorted(r["rank"] for r in results), [0, 1])
        ref = train_tiny.reference(STEPS)
        for r in results:
            for name, expected in ref.items():
                got = r["params"][name]
                self.assertTrue(torch.equal(got, expected),
                                f"{name}: max |diff| {float((got - expected).abs().max())}")
            for report in r["reports"]:
                self.assertEqual(set(report.values()), {0.0})

    def check_16_bit(self, dtype: str, first_step: int):
        results = train(self.cluster, first_step=first_step, dtype=dtype)
        ref = train_tiny.reference(STEPS, getattr(torch, dtype))
        init = train_tiny.initial()
        for r in results:
            for name, expected in ref.items():
                got = r["params"][name]
                self.assertEqual(got.dtype, getattr(torch, dtype))
                self.assertTrue(torch.equal(got, expected),
                                f"{dtype} {name}: max |diff| "
                                f"{float((got.float() - expected.float()).abs().max())}")
        # The run trained: the parameters moved.
        moved = sum(float((ref[n].float() - init[n]).abs().sum()) for n in ref)
        self.assertGreater(moved, 0)

    def test_with_bf16_model_equal_local_average_in_bf16(self):
        self.check_16_bit("bfloat16", first_step=11)

    def test_with_fp16_model_equal_local_average_in_fp16(self):
        self.check_16_bit("float16", first_step=21)


@unittest.skipIf(SKIP is not None, SKIP or "")
class E4m3WithinBoundTest(cluster_util.ClusterFixture, unittest.TestCase):
    PUSH, PULL = "e4m3/block128", "bf16"

    def test_parameters_within_bound(self):
        results = train(self.cluster, first_step=1)
        for name in results[0]["params"]:
            self.assertTrue(torch.equal(results[0]["params"][name], results[1]["params"][name]),
                            name)
        ref = train_tiny.reference(STEPS)
        init = train_tiny.initial()
        num = sum(float((results[0]["params"][n] - ref[n]).pow(2).sum()) for n in ref) ** 0.5
        den = sum(float((ref[n] - init[n]).pow(2).sum()) for n in ref) ** 0.5
        print(f"\ne4m3/block128 + bf16: ||theta - theta_ref|| / ||theta_ref - theta_0|| = "
              f"{num / den:.4g} (bound {BOUND})", file=sys.stderr)
        self.assertLess(num / den, BOUND)
        for report in results[0]["reports"]:
            for name, err in report.items():
                self.assertLess(err, BOUND, name)
        self.assertTrue(any(err > 0 for rep in results[0]["reports"] for err in rep.values()))


if __name__ == "__main__":
    unittest.main()
