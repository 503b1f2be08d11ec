"""Unit tests of the CUDA IPC registration of gift_ps (cuda_ipc.py, and
WorkerClient.register(cuda_tensors=...)): the share tuple -> buffer
conversion on synthetic tuples, and the registration against the in-process
fake worker (tests/python/fake_worker.py) with a stand-in for the CUDA
description, so that they run on a CPU-only torch. With a CUDA torch:
test_cuda_ipc_torch.py."""

import os
import tempfile
import unittest
from unittest import mock

import torch

from gift_ps import GiftError, WorkerClient, cuda_ipc

from fake_worker import FakeWorker

HANDLE = bytes(range(64))


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


if __name__ == "__main__":
    unittest.main()
