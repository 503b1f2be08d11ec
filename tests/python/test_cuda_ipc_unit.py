"""Unit tests of the CUDA IPC registration of gift_ps (cuda_ipc.py, and
WorkerClient.register(cuda_tensors=...)): the share tuple -> buffer
conversion on synthetic tuples, and the registration against the in-process
fake worker (tests/python/fake_worker.py) with a stand-in for the CUDA
description, since this torch may have no CUDA. The tests that need a CUDA
torch skip, saying so."""

import logging
import os
import tempfile
import unittest
from unittest import mock

import torch
from torch import nn

from gift_ps import GiftError, GradientSync, WorkerClient, cuda_ipc

from fake_worker import FakeWorker

HANDLE = bytes(range(64))
NO_CUDA = "needs a CUDA build of torch and a CUDA device (torch.cuda.is_available() is False)"


def share(device=0, handle=HANDLE, storage_bytes=4096, storage_offset_bytes=512):
    # (device, handle, storage bytes, storage offset bytes, ref counter handle,
    #  ref counter offset, event handle, event sync required): _share_cuda_'s tuple.
    return (device, handle, storage_bytes, storage_offset_bytes, b"ref", 0, b"event", True)


class BufferFromShareTest(unittest.TestCase):
    def test_offset_is_the_storages_plus_the_tensors(self):
        b = cuda_ipc.buffer_from_share(share(), storage_offset=10, element_size=4, numel=100)
        self.assertEqual(b, cuda_ipc.CudaIpcBuffer(device=0, handle=HANDLE,
                                                   offset_bytes=512 + 40, size_bytes=400))
        half = cuda_ipc.buffer_from_share(share(device=3, storage_offset_bytes=0), 7, 2, 5)
        self.assertEqual((half.device, half.offset_bytes, half.size_bytes), (3, 14, 10))
        # The whole storage fits exactly.
        self.assertEqual(cuda_ipc.buffer_from_share(share(), 0, 4, 1024).size_bytes, 4096)

    def test_refusals(self):
        with self.assertRaisesRegex(ValueError, "past its storage"):
            cuda_ipc.buffer_from_share(share(), 1, 4, 1024)
        with self.assertRaisesRegex(ValueError, "not 64 bytes"):
            cuda_ipc.buffer_from_share(share(handle=b"short"), 0, 4, 1)
        with self.assertRaisesRegex(ValueError, "not 64 bytes"):
            cuda_ipc.buffer_from_share(share(handle=None), 0, 4, 1)
        with self.assertRaisesRegex(ValueError, "device -1"):
            cuda_ipc.buffer_from_share(share(device=-1), 0, 4, 1)
        with self.assertRaisesRegex(ValueError, "at least 4"):
            cuda_ipc.buffer_from_share((0, HANDLE), 0, 4, 1)
        with self.assertRaisesRegex(ValueError, "geometry"):
            cuda_ipc.buffer_from_share(share(), 0, 4, 0)

    def test_describe_refuses_a_cpu_tensor(self):
        with self.assertRaisesRegex(ValueError, "not a CUDA tensor"):
            cuda_ipc.describe(torch.zeros(4))


def fake_describe(t):
    """Stands in for cuda_ipc.describe on CPU tensors: device 0, or the
    tensor's first element as the device."""
    return cuda_ipc.CudaIpcBuffer(device=int(t.reshape(-1)[0]), handle=HANDLE, offset_bytes=256,
                                  size_bytes=t.numel() * t.element_size())


class RegisterCudaTensorsTest(unittest.TestCase):
    def start(self, cuda_device_count):
        self.dir = tempfile.TemporaryDirectory()
        self.fake = FakeWorker(os.path.join(self.dir.name, "w.sock"),
                               cuda_device_count=cuda_device_count)
        self.client = WorkerClient(self.fake.address)

    def tearDown(self):
        self.client.close()
        self.fake.stop()
        self.dir.cleanup()

    @mock.patch.object(cuda_ipc, "describe", fake_describe)
    def test_host_and_cuda_tensors_in_one_call(self):
        self.start(cuda_device_count=2)
        self.assertEqual(self.client.info().cuda_device_count, 2)
        stand_in = torch.zeros(3, 5, dtype=torch.bfloat16)
        stand_in[0, 0] = 1  # "device 1"
        tensors = self.client.register({"h": (4,)}, cuda_tensors={"d": stand_in})
        self.assertEqual(self.fake.register_calls, 1)
        self.assertEqual(list(tensors), ["h", "d"])
        self.assertIs(tensors["d"], stand_in)  # the tensor itself: registered in place
        self.assertEqual(set(self.fake.cuda_buffers), {"d"})
        b = self.fake.cuda_buffers["d"]
        self.assertEqual((b.cuda_ipc_handle, b.cuda_device, b.offset_bytes, b.size_bytes),
                         (HANDLE, 1, 256, 30))
        self.assertEqual({self.client.tensor_id("h"), self.client.tensor_id("d")}, {100, 101})
        tensors["h"].fill_(2.0)
        self.client.push_pull(0)
        self.assertTrue(torch.equal(tensors["h"], torch.full((4,), 2.0)))  # scale 1, offset 0
        # CUDA tensors alone need no host buffer.
        only = self.client.register({}, cuda_tensors={"d": torch.zeros(2)})
        self.assertEqual(list(only), ["d"])

    @mock.patch.object(cuda_ipc, "describe", fake_describe)
    def test_a_host_only_worker_refuses_before_registering(self):
        self.start(cuda_device_count=0)
        with self.assertRaises(GiftError) as ctx:
            self.client.register({"h": (4,)}, cuda_tensors={"d": torch.zeros(2)})
        self.assertEqual(ctx.exception.code, "FAILED_PRECONDITION")
        self.assertIn("host buffers only", ctx.exception.message)
        self.assertEqual(self.fake.register_calls, 0)

    @mock.patch.object(cuda_ipc, "describe", fake_describe)
    def test_a_device_the_worker_does_not_open_is_refused(self):
        self.start(cuda_device_count=1)
        with self.assertRaises(GiftError) as ctx:
            self.client.register({}, cuda_tensors={"d": torch.ones(2)})  # "device 1"
        self.assertEqual(ctx.exception.code, "FAILED_PRECONDITION")
        self.assertIn("devices below 1", ctx.exception.message)
        self.assertEqual(self.fake.register_calls, 0)

    def test_local_refusals(self):
        self.start(cuda_device_count=1)
        with self.assertRaisesRegex(ValueError, "not a CUDA tensor"):
            self.client.register({}, cuda_tensors={"d": torch.zeros(2)})
        with mock.patch.object(cuda_ipc, "describe", fake_describe):
            with self.assertRaisesRegex(ValueError, "both a host and a CUDA tensor"):
                self.client.register({"d": (2,)}, cuda_tensors={"d": torch.zeros(2)})
        with self.assertRaisesRegex(ValueError, "no tensors"):
            self.client.register({}, cuda_tensors={})
        self.assertEqual(self.fake.register_calls, 0)


class TinyNet(nn.Module):
    def __init__(self, device):
        super().__init__()
        self.fc = nn.Linear(4, 3).to(device)

    def forward(self, x):
        return self.fc(x)


@unittest.skipUnless(torch.cuda.is_available(), NO_CUDA)
class CudaTorchTest(unittest.TestCase):
    def test_describe_a_view_from_its_allocation(self):
        base = torch.zeros(1000, device="cuda")
        whole = cuda_ipc.describe(base)
        view = cuda_ipc.describe(base[100:200])
        self.assertEqual(view.handle, whole.handle)
        self.assertEqual(view.offset_bytes - whole.offset_bytes, 400)
        self.assertEqual(view.size_bytes, 400)
        self.assertEqual(view.device, torch.cuda.current_device())
        with self.assertRaises(ValueError):
            cuda_ipc.describe(base.reshape(10, 100).t())  # not contiguous

    def run_sync(self, cuda_device_count):
        with tempfile.TemporaryDirectory() as d:
            fake = FakeWorker(os.path.join(d, "w.sock"), cuda_device_count=cuda_device_count)
            client = WorkerClient(fake.address)
            try:
                model = TinyNet("cuda")
                with self.assertLogs("gift_ps", logging.INFO) as logs:
                    sync = GradientSync(model, client)
                model(torch.randn(2, 4, device="cuda")).sum().backward()
                sync.sync(0)
                bound = all(p.grad.data_ptr() == sync.buffers[n].data_ptr()
                            for n, p in model.named_parameters())
                return sync, bound, "\n".join(logs.output)
            finally:
                client.close()
                fake.stop()

    def test_gradient_sync_registers_cuda_gradients_by_ipc(self):
        sync, bound, log = self.run_sync(cuda_device_count=1)
        self.assertEqual(sync.cuda_ipc_names, ["fc.bias", "fc.weight"])
        self.assertTrue(bound)  # p.grad is the registered CUDA buffer
        self.assertTrue(all(b.is_cuda for b in sync.buffers.values()))
        self.assertIn("by CUDA IPC", log)

    def test_gradient_sync_copies_through_host_memory_for_a_host_only_worker(self):
        sync, bound, log = self.run_sync(cuda_device_count=0)
        self.assertEqual(sync.cuda_ipc_names, [])
        self.assertFalse(bound)  # host buffers, copied back into p.grad
        self.assertIn("copied through host shared memory", log)


if __name__ == "__main__":
    unittest.main()
