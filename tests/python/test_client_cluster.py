"""WorkerClient against a real local cluster (coordinator + 2 servers + 2
workers): two clients register the same tensors, push different gradients
and get the same bits back; with the FP32 codecs the average is exactly
(g0 + g1) * 0.5; bad calls give the documented codes. Skipped when the
daemons are not built."""

import unittest

import torch

import cluster_util
from gift_ps import GiftError

SKIP = cluster_util.skip_reason()


@unittest.skipIf(SKIP is not None, SKIP or "")
class ClientClusterTest(cluster_util.ClusterFixture, unittest.TestCase):
    CLIENTS = True

    def push_pull_both(self, step, **kwargs):
        futures = [c.push_pull_async(step, **kwargs) for c in self.clients]
        return [f.result(timeout=120) for f in futures]

    def test_a_push_before_register(self):
        with self.assertRaises(GiftError) as ctx:
            self.clients[0].push_pull(0)
        self.assertEqual(ctx.exception.code, "FAILED_PRECONDITION", ctx.exception)

    def test_b_exact_fp32_average_and_codes(self):
        shapes = {"client.w": (3, 200), "client.b": (17,)}
        tensors = [c.register(shapes) for c in self.clients]
        self.assertEqual([c.world_size for c in self.clients], [2, 2])
        self.assertEqual(sorted(c.rank for c in self.clients), [0, 1])
        for name in shapes:
            self.assertEqual(self.clients[0].tensor_id(name), self.clients[1].tensor_id(name))
        gen = torch.Generator().manual_seed(5)
        for _ in range(3):
            step = next(self.steps)
            grads = [{n: torch.randn(s, generator=gen) * (10.0 ** r) for n, s in shapes.items()}
                     for r in range(2)]
            for t, g in zip(tensors, grads):
                for n in shapes:
                    t[n].copy_(g[n])
            results = self.push_pull_both(step, measure_error=True)
            for r in results:
                self.assertEqual(r.step, step)
                self.assertEqual(r.world_size, 2)
                self.assertEqual({t.name for t in r.tensors}, set(shapes))
                for t in r.tensors:
                    self.assertEqual(t.rel_l2_error, 0.0, t)
            for n in shapes:
                expected = (grads[0][n] + grads[1][n]) * 0.5
                self.assertTrue(torch.equal(tensors[0][n], tensors[1][n]), n)
                self.assertTrue(torch.equal(tensors[0][n], expected), n)

        # A step not above the last one.
        with self.assertRaises(GiftError) as ctx:
            self.clients[0].push_pull(step)
        self.assertEqual(ctx.exception.code, "INVALID_ARGUMENT", ctx.exception)

        # Activation statistics of the weight (d_in = 200), and a wrong size.
        gram = torch.eye(200)
        self.clients[0].submit_activation_stats("client.w", step, gram, 64)
        with self.assertRaises(GiftError) as ctx:
            self.clients[0].submit_activation_stats("client.w", step, torch.eye(10), 64)
        self.assertEqual(ctx.exception.code, "INVALID_ARGUMENT", ctx.exception)

        info = self.clients[0].info()
        self.assertEqual(info.world_size, 2)
        self.assertEqual(info.last_step, step)
        self.assertEqual(info.rank, self.clients[0].rank)
        self.assertTrue(info.member_id)


if __name__ == "__main__":
    unittest.main()
