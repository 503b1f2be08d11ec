"""Unit tests of gift_ps that need no cluster: shared-memory lifetime and
cleanup, name validation, GiftError mapping, and the client and GradientSync
against an in-process fake Worker service."""

import fcntl
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest

import grpc
import torch
from torch import nn

from gift_ps import (GiftError, GradientSync, LostWorker, MemberLost, RejoinRequired,
                     WorkerClient, WorldSizeChanged, worker_target)
from gift_ps import shm as gshm

from fake_worker import FakeWorker


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


class SealedBufferTest(unittest.TestCase):
    def test_views_share_the_memfd_and_seals_hold(self):
        buffer = gshm.SealedBuffer(64)
        view = buffer.tensor((4, 4))
        self.assertEqual(view.dtype, torch.float32)
        self.assertTrue(torch.equal(view, torch.zeros(4, 4)))
        view.fill_(3.0)
        # The bytes are in the memfd, seen through another mapping of it.
        with open(f"/proc/self/fd/{buffer.fileno()}", "rb") as f:
            data = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
        self.assertTrue(torch.equal(data, torch.full((16,), 3.0)))
        # Neither shrinking nor growing nor removing the seals is possible.
        with self.assertRaises(PermissionError):
            os.ftruncate(buffer.fileno(), 16)
        with self.assertRaises(PermissionError):
            os.ftruncate(buffer.fileno(), 128)
        with self.assertRaises(PermissionError):
            fcntl.fcntl(buffer.fileno(), fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
        half = buffer.tensor((2,), torch.bfloat16, offset=8)  # a 16-bit view at an offset
        self.assertEqual(half.tolist(), [0.0, 3.0])  # the high half of 3.0f is bf16 3.0
        before = fd_count()
        buffer.close()
        self.assertEqual(fd_count(), before - 1)
        self.assertEqual(float(view.sum()), 48.0)  # still mapped
        buffer.close()  # idempotent
        with self.assertRaises(ValueError):
            gshm.SealedBuffer(0)

    def test_channel_refusal(self):
        with self.assertRaises(gshm.HandoffError) as ctx:
            gshm.BufferChannel("/nonexistent/buffers")
        self.assertEqual(ctx.exception.code, "UNAVAILABLE")


class ErrorTest(unittest.TestCase):
    def test_from_rpc_error(self):
        class FakeRpcError(grpc.RpcError):
            def code(self):
                return grpc.StatusCode.FAILED_PRECONDITION

            def details(self):
                return "no buffers are registered"

        e = GiftError.from_rpc_error(FakeRpcError(), "PushPull")
        self.assertEqual(e.code, "FAILED_PRECONDITION")
        self.assertEqual(e.message, "no buffers are registered")
        self.assertEqual(e.method, "PushPull")
        self.assertEqual(str(e), "PushPull: FAILED_PRECONDITION: no buffers are registered")
        self.assertEqual(GiftError.from_rpc_error(ValueError("x")).code, "UNKNOWN")

    def test_rejoin_required_carries_the_admit_step(self):
        class Refusal(grpc.RpcError):
            def __init__(self, code, details):
                self._code, self._details = code, details

            def code(self):
                return self._code

            def details(self):
                return self._details

        message = ("worker m9 is admitted at step 39; step 5 is below it (member m3 was evicted "
                   "at step 4 (its lease expired), cluster at step 30; join again): "
                   "resynchronise the parameters and resume at step 39")
        e = GiftError.from_rpc_error(
            Refusal(grpc.StatusCode.FAILED_PRECONDITION, message), "PushPull")
        self.assertIsInstance(e, RejoinRequired)
        self.assertEqual((e.code, e.admit_step, e.message), ("FAILED_PRECONDITION", 39, message))
        # Another code with the same words is not a re-admission.
        other = GiftError.from_rpc_error(Refusal(grpc.StatusCode.INTERNAL, message))
        self.assertNotIsInstance(other, RejoinRequired)

    def test_member_lost_under_on_member_loss_fail(self):
        class Refusal(grpc.RpcError):
            def code(self):
                return grpc.StatusCode.FAILED_PRECONDITION

            def details(self):
                return ("on_member_loss=fail: rank 1 (worker-1, m4 on node-b) has left the job "
                        "(2 workers in epoch 3, now 1); step 7 and every later one fail until "
                        "the training processes register their buffers again (a new run)")

        e = GiftError.from_rpc_error(Refusal(), "PushPull")
        self.assertIsInstance(e, MemberLost)
        self.assertEqual(e.code, "FAILED_PRECONDITION")
        self.assertIn("rank 1 (worker-1", e.message)

    def test_targets(self):
        self.assertEqual(worker_target("/run/gift/worker.sock"), "unix:/run/gift/worker.sock")
        self.assertEqual(worker_target("./w.sock"), "unix:./w.sock")
        self.assertEqual(worker_target("unix:/x"), "unix:/x")
        self.assertEqual(worker_target("localhost:7072"), "localhost:7072")
        with self.assertRaises(ValueError):
            worker_target("")
        with self.assertRaisesRegex(ValueError, r"\./worker\.sock"):
            worker_target("worker.sock")  # a bare name: neither a path nor host:port

    def test_a_wrong_socket_path_is_named_at_once(self):
        start = time.monotonic()
        with tempfile.TemporaryDirectory() as d:
            with self.assertRaisesRegex(GiftError, "no such socket") as ctx:
                WorkerClient(os.path.join(d, "none.sock"), connect_timeout=30)
            self.assertEqual(ctx.exception.code, "NOT_FOUND")
            with self.assertRaisesRegex(GiftError, "directory .* does not exist"):
                WorkerClient(os.path.join(d, "missing", "w.sock"), connect_timeout=30)
            plain = os.path.join(d, "plain")
            open(plain, "w").close()
            with self.assertRaisesRegex(GiftError, r"not a socket \(a regular file\)") as ctx:
                WorkerClient(plain, connect_timeout=30)
            self.assertEqual(ctx.exception.code, "FAILED_PRECONDITION")
        self.assertLess(time.monotonic() - start, 5)

    def test_unreachable(self):
        # The path is a socket, but nobody accepts on it.
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "w.sock")
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.bind(path)
                with self.assertRaises(GiftError) as ctx:
                    WorkerClient(path, connect_timeout=0.3)
            self.assertEqual(ctx.exception.code, "UNAVAILABLE")


class FakeWorkerTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.fake = FakeWorker(os.path.join(self.dir.name, "w.sock"), scale=0.5, offset=1.0)
        self.client = WorkerClient(self.fake.address, connect_timeout=10)

    def tearDown(self):
        self.client.close()
        self.fake.stop()
        self.dir.cleanup()

    def test_register_push_pull_zero_copy(self):
        with self.assertRaises(GiftError) as ctx:
            self.client.push_pull(0)
        self.assertEqual(ctx.exception.code, "FAILED_PRECONDITION")
        self.assertEqual(ctx.exception.method, "PushPull")

        t = self.client.register({"w": (2, 3), "b": [3], "s": ()})
        self.assertEqual(list(t), ["w", "b", "s"])
        self.assertEqual(t["w"].shape, (2, 3))
        self.assertEqual(t["s"].shape, ())
        self.assertEqual(self.client.world_size, 1)
        # One sealed memfd holds the set, each tensor cache-line aligned.
        base = t["w"].data_ptr()
        self.assertEqual(t["b"].data_ptr() - base, 64)
        self.assertEqual(t["s"].data_ptr() - base, 128)
        t["w"].copy_(torch.arange(6, dtype=torch.float32).view(2, 3))
        t["b"].fill_(2.0)
        result = self.client.push_pull(1, measure_error=True)
        self.assertEqual(result.step, 1)
        self.assertEqual(result.epoch, 7)
        self.assertEqual({r.name for r in result.tensors}, {"w", "b", "s"})
        self.assertEqual(result.by_name()["w"].rel_l2_error, 0.25)
        # The step's per-worker statistics, outside every tensor's bytes.
        self.assertEqual((result.statistics_bytes_sent, result.statistics_bytes_received), (100, 60))
        self.assertEqual(result.by_name()["w"].tensor_id, self.client.tensor_id("w"))
        self.assertTrue(torch.equal(t["w"], torch.arange(6, dtype=torch.float32).view(2, 3) * 0.5
                                    + 1.0))
        self.assertTrue(torch.equal(t["b"], torch.full((3,), 2.0)))
        self.assertEqual(float(t["s"]), 1.0)
        self.assertIsNone(self.client.push_pull(2).tensors[0].rel_l2_error)

        with self.assertRaises(GiftError) as ctx:
            self.client.push_pull(2)
        self.assertEqual(ctx.exception.code, "INVALID_ARGUMENT")
        self.assertIn("not above", ctx.exception.message)

        # Only some tensors.
        before = t["b"].clone()
        r = self.client.push_pull(3, names=["w"])
        self.assertEqual([x.name for x in r.tensors], ["w"])
        self.assertTrue(torch.equal(t["b"], before))

        self.client.close()
        self.assertEqual(float(t["b"][0]), 2.0)  # views still readable

    def test_register_validation(self):
        for bad in [{}, {"": (2,)}, {"x": (0, 2)}, {"x": (-1,)}, {"x": "ab"}]:
            with self.assertRaises(ValueError, msg=repr(bad)):
                self.client.register(bad)

    def test_register_validation_of_dtypes(self):
        with self.assertRaises(TypeError):
            self.client.register({"x": (2,)}, dtypes={"x": torch.float64})
        with self.assertRaises(ValueError):
            self.client.register({"x": (2,)}, dtypes={"y": torch.float16})

    def test_16_bit_buffers(self):
        t = self.client.register({"h": (3,), "b": (5,)},
                                 dtypes={"h": torch.float16, "b": torch.bfloat16})
        self.assertEqual((t["h"].dtype, t["b"].dtype), (torch.float16, torch.bfloat16))
        t["h"].copy_(torch.tensor([1.0, 2.0, 3.0]))
        t["b"].copy_(torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0]))
        self.client.push_pull(1)
        self.assertEqual(t["h"].tolist(), [1.5, 2.0, 2.5])
        self.assertEqual(t["b"].tolist(), [1.5, 2.0, 2.5, 3.0, 3.5])

    def test_reregister_replaces_and_closes_previous(self):
        self.client.register({"a": (4,)})
        old, old_handle = self.client._buffer, self.client._handle
        self.assertIn(old_handle, self.fake.handed)
        self.client.register({"a": (4,), "c": (2,)})
        self.assertTrue(old.closed)
        self.assertNotIn(old_handle, self.fake.handed)  # released
        self.assertEqual(list(self.fake.handed), [self.client._handle])
        self.assertFalse(self.client._buffer.closed)
        self.assertEqual(set(self.client.tensors), {"a", "c"})

    def test_world_size_change_raises_warns_or_is_ignored(self):
        self.client.register({"w": (4,)})
        self.client.push_pull(1)
        self.fake.world_change = (3, [(2, "worker-2")])
        with self.assertRaises(WorldSizeChanged) as ctx:
            self.client.push_pull(2)
        e = ctx.exception
        self.assertEqual((e.previous_world_size, e.world_size), (3, 1))
        self.assertEqual(e.lost, [LostWorker(rank=2, name="worker-2", member_id="m12",
                                             node="node-2")])
        self.assertEqual(e.result.step, 2)  # the step itself completed
        self.assertIn("world size 3 -> 1; lost rank 2 (worker-2, m12 on node-2)", str(e))
        self.assertEqual(self.client.push_pull(3).previous_world_size, 0)  # said once
        self.client.on_world_size_change = "warn"
        self.fake.world_change = (2, [(1, "worker-1")])
        with self.assertWarns(WorldSizeChanged):
            r = self.client.push_pull(4)
        self.assertEqual(r.lost_members[0].name, "worker-1")
        self.client.on_world_size_change = "ignore"
        self.fake.world_change = (2, [])
        self.assertEqual(self.client.push_pull(5).previous_world_size, 2)
        with self.assertRaises(ValueError):
            WorkerClient(self.fake.address, on_world_size_change="crash")

    def test_async_calls_in_order(self):
        t = self.client.register({"a": (4,)})
        self.fake.gate.clear()
        futures = [self.client.push_pull_async(s) for s in (5, 6, 7)]
        self.assertFalse(any(f.done() for f in futures))
        self.fake.gate.set()
        self.assertEqual([f.result(timeout=30).step for f in futures], [5, 6, 7])
        self.assertEqual(self.fake.push_pull_calls, [5, 6, 7])
        self.assertTrue(torch.equal(t["a"], torch.full((4,), 1.75)))  # ((0*.5+1)*.5+1)*.5+1

    def test_activation_stats_and_info(self):
        self.client.register({"layer.weight": (3, 2)})
        gram = torch.tensor([[1.0, 2.0], [2.0, 5.0]])
        self.client.submit_activation_stats("layer.weight", 4, gram, 10)
        scratch = self.client.activation_buffer("layer.weight", 2)
        scratch.copy_(gram * 2)
        self.client.submit_activation_stats("layer.weight", 5, scratch, 11)
        (tid1, step1, n1, g1), (tid2, step2, n2, g2) = self.fake.stats
        self.assertEqual((tid1, step1, n1), (self.client.tensor_id("layer.weight"), 4, 10))
        self.assertEqual(list(g1), [1.0, 2.0, 2.0, 5.0])
        self.assertEqual((step2, n2), (5, 11))
        self.assertEqual(list(g2), [2.0, 4.0, 4.0, 10.0])
        with self.assertRaises(ValueError):
            self.client.submit_activation_stats("layer.weight", 6, torch.zeros(2, 3), 1)
        with self.assertRaises(KeyError):
            self.client.submit_activation_stats("nope", 6, gram, 1)
        info = self.client.info()
        self.assertEqual((info.member_id, info.epoch, info.world_size), ("fake-member", 7, 1))


class TinyNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)
        self.unused = nn.Linear(2, 2)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class GradientSyncFakeTest(unittest.TestCase):
    """GradientSync against the fake (scale 0.5: "average" = grad / 2)."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.fake = FakeWorker(os.path.join(self.dir.name, "w.sock"), scale=0.5)
        self.client = WorkerClient(self.fake.address)

    def tearDown(self):
        self.client.close()
        self.fake.stop()
        self.dir.cleanup()

    def run_steps(self, set_to_none: bool):
        torch.manual_seed(0)
        model = TinyNet()
        sync = GradientSync(model, self.client)
        self.assertEqual(set(sync.buffers), {n for n, _ in model.named_parameters()})
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            opt.zero_grad(set_to_none=set_to_none)
            x = torch.randn(5, 4)
            model(x).sum().backward()
            expected = {n: p.grad.clone() * 0.5 for n, p in model.named_parameters()
                        if p.grad is not None}
            sync.sync(step)
            for n, p in model.named_parameters():
                self.assertEqual(p.grad.data_ptr(), sync.buffers[n].data_ptr(), n)
                if n.startswith("unused"):
                    self.assertTrue(torch.equal(p.grad, torch.zeros_like(p)), n)
                else:
                    self.assertTrue(torch.equal(p.grad, expected[n]), n)
            opt.step()
        return model

    def test_zero_grad_keeps_shm(self):
        self.run_steps(set_to_none=False)

    def test_zero_grad_set_to_none(self):
        self.run_steps(set_to_none=True)

    def test_readmitted_worker_raises_rejoin_required_and_resumes_at_the_admit_step(self):
        torch.manual_seed(3)
        model = TinyNet()
        sync = GradientSync(model, self.client)
        model(torch.randn(5, 4)).sum().backward()
        sync.sync(0)
        self.fake.admit_step = 12  # the worker joined again, admitted at 12
        model(torch.randn(5, 4)).sum().backward()
        with self.assertRaises(RejoinRequired) as ctx:
            sync.sync(1)
        self.assertEqual(ctx.exception.admit_step, 12)
        self.assertIn("evicted at step 4", ctx.exception.message)
        self.assertEqual(sync._next_step, 12)  # the next passes belong to it
        # The loop resumes at the admit step (after loading a checkpoint).
        model.zero_grad(set_to_none=False)
        model(torch.randn(5, 4)).sum().backward()
        expected = {n: p.grad.clone() * 0.5 for n, p in model.named_parameters()}
        self.assertEqual(sync.sync(12).step, 12)
        for n, p in model.named_parameters():
            self.assertTrue(torch.equal(p.grad, expected[n]), n)

    def test_world_size_change_is_raised_after_the_average_is_in_place(self):
        torch.manual_seed(4)
        model = TinyNet()
        sync = GradientSync(model, self.client)
        model(torch.randn(5, 4)).sum().backward()
        expected = {n: p.grad.clone() * 0.5 for n, p in model.named_parameters()
                    if p.grad is not None}
        self.fake.world_change = (2, [(1, "worker-1")])
        with self.assertRaises(WorldSizeChanged) as ctx:
            sync.sync(0)
        self.assertEqual(ctx.exception.lost[0].rank, 1)
        for n, want in expected.items():
            self.assertTrue(torch.equal(dict(model.named_parameters())[n].grad, want), n)
        self.assertEqual(sync._next_step, 1)  # the loop may go on at the next step

    def test_rejects_fp64(self):
        model = TinyNet().to(torch.float64)
        with self.assertRaises(TypeError) as ctx:
            GradientSync(model, self.client)
        self.assertIn("FP32, BF16 and FP16", str(ctx.exception))

    def test_bf16_model_and_fp32_main_grads(self):
        torch.manual_seed(2)
        model = TinyNet().to(torch.bfloat16)
        sync = GradientSync(model, self.client)
        self.assertTrue(all(b.dtype == torch.bfloat16 for b in sync.buffers.values()))
        model(torch.randn(5, 4, dtype=torch.bfloat16)).sum().backward()
        expected = {n: (p.grad.float() * 0.5).to(torch.bfloat16)
                    for n, p in model.named_parameters() if p.grad is not None}
        sync.sync(0)
        for n, want in expected.items():
            p = dict(model.named_parameters())[n]
            self.assertEqual(p.grad.dtype, torch.bfloat16)
            self.assertTrue(torch.equal(p.grad, want), n)

        main = TinyNet().to(torch.bfloat16)
        for p in main.parameters():
            p.main_grad = torch.full(p.shape, 3.0)
        msync = GradientSync(main, self.client, main_grads=True)
        self.assertTrue(all(b.dtype == torch.float32 for b in msync.buffers.values()))
        msync.sync(1)
        for n, p in main.named_parameters():
            self.assertEqual(p.main_grad.data_ptr(), msync.buffers[n].data_ptr(), n)
            self.assertTrue(torch.equal(p.main_grad, torch.full(p.shape, 1.5)), n)

    def test_activation_stats(self):
        torch.manual_seed(1)
        model = TinyNet()
        sync = GradientSync(model, self.client, collect_activations_every=2,
                            activation_layers=["fc*"])
        with self.assertRaises(ValueError):
            GradientSync(TinyNet(), self.client, collect_activations_every=1,
                         activation_layers=["nope"])
        inputs = []
        for step in range(3):
            x = torch.randn(2, 3, 4)
            inputs.append(x)
            model.zero_grad()
            model(x).sum().backward()
            with torch.no_grad():
                model(torch.randn(7, 4))  # evaluation: not counted
            sync.sync(step)
        ids = {self.client.tensor_id("fc1.weight"): "fc1", self.client.tensor_id("fc2.weight"): "fc2"}
        got = {(ids[tid], step): (n, g) for tid, step, n, g in self.fake.stats}
        self.assertEqual(sorted(got), [("fc1", 0), ("fc1", 2), ("fc2", 0), ("fc2", 2)])
        x0 = inputs[0].reshape(-1, 4)
        n, g = got[("fc1", 0)]
        self.assertEqual(n, 6)
        torch.testing.assert_close(torch.from_numpy(g).view(4, 4), x0.t() @ x0)
        n, g = got[("fc2", 2)]
        self.assertEqual(n, 6)
        self.assertEqual(g.size, 64)
        sync.close()



class GradientSyncOverlapFakeTest(unittest.TestCase):
    """GradientSync(overlap=True) against the fake (scale 0.5): which gradients
    start when, and the refusals."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.fake = FakeWorker(os.path.join(self.dir.name, "w.sock"), scale=0.5)
        self.client = WorkerClient(self.fake.address)
        torch.manual_seed(0)
        self.model = TinyNet()

    def tearDown(self):
        self.client.close()
        self.fake.stop()
        self.dir.cleanup()

    def backward(self):
        self.model(torch.randn(5, 4)).sum().backward()

    def test_each_gradient_starts_in_backward_order(self):
        sync = GradientSync(self.model, self.client, overlap=True, bucket_bytes=0)
        for step in range(2):
            self.backward()
            expected = {n: p.grad.clone() * 0.5 for n, p in self.model.named_parameters()
                        if p.grad is not None}
            sync.sync(step)
            calls = [c for c in self.fake.start_calls if c[0] == step]
            self.assertEqual([len(names) for _, names in calls], [1, 1, 1, 1])
            started = [names[0] for _, names in calls]
            self.assertEqual(set(started[:2]), {"fc2.weight", "fc2.bias"})  # the last layer first
            self.assertEqual(set(started[2:]), {"fc1.weight", "fc1.bias"})
            for n, p in self.model.named_parameters():
                want = expected.get(n, torch.zeros_like(p))
                self.assertTrue(torch.equal(p.grad, want), n)  # "unused": zeros, by push_pull
            for p in self.model.parameters():
                p.grad.zero_()

    def test_buckets_fill_up_to_bucket_bytes(self):
        # fc2: 16 + 2 floats = 72 bytes; fc1: 32 + 8 floats = 160 bytes.
        sync = GradientSync(self.model, self.client, overlap=True, bucket_bytes=70)
        self.backward()
        sync.sync(0)
        self.assertEqual([sorted(names) for _, names in self.fake.start_calls],
                         [["fc2.bias", "fc2.weight"], ["fc1.bias", "fc1.weight"]])
        self.fake.start_calls.clear()
        sync.close()
        big = GradientSync(self.model, self.client, overlap=True, start_step=1)  # 25 MiB: none
        self.backward()
        big.sync(1)
        self.assertEqual(self.fake.start_calls, [])

    def test_accumulation_measured_steps_and_refusals(self):
        sync = GradientSync(self.model, self.client, overlap=True, bucket_bytes=0, start_step=3)
        with sync.no_sync():
            self.backward()
        self.assertEqual(self.fake.start_calls, [])
        first = {n: p.grad.clone() for n, p in self.model.named_parameters() if p.grad is not None}
        self.backward()
        total = {n: p.grad.clone() for n, p in self.model.named_parameters() if p.grad is not None}
        for n in first:
            self.assertFalse(torch.equal(first[n], total[n]), n)  # the second pass accumulated
        with self.assertRaises(RuntimeError):  # a third pass would write started buffers
            self.backward()
        with self.assertRaises(ValueError):
            sync.sync(4)  # the hooks started step 3
        with self.assertRaises(ValueError):
            sync.sync(3, measure_error=True)
        sync.sync(3)
        self.assertEqual([(step, len(names)) for step, names in self.fake.start_calls],
                         [(3, 1)] * 4)  # the second pass only
        for p in self.model.parameters():
            p.grad.zero_()
        # A measured step named before backward starts nothing early.
        self.fake.start_calls.clear()
        sync.begin_step(4, measure_error=True)
        self.backward()
        self.assertEqual(self.fake.start_calls, [])
        result = sync.sync(4, measure_error=True)
        self.assertEqual({t.rel_l2_error for t in result.tensors}, {0.25})
        with self.assertRaises(ValueError):
            GradientSync(self.model, self.client, overlap=True, main_grads=True)

if __name__ == "__main__":
    unittest.main()
