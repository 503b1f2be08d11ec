"""gift_ps's CUDA IPC registration with a CUDA build of torch and a device
(skipped otherwise, saying so): cuda_ipc.describe of a real CUDA tensor and
of a view into it, and GradientSync against the in-process fake worker
(tests/python/fake_worker.py), which records CUDA IPC buffers without opening
them: CUDA gradients registered by IPC when the worker reports a device, the
host-copy path when it reports none, and the log line saying which."""

import logging
import os
import tempfile
import unittest

import torch
from torch import nn

from gift_ps import GiftHookState, GradientSync, WorkerClient, cuda_ipc

from fake_worker import FakeWorker

NO_CUDA = "needs a CUDA build of torch and a CUDA device (torch.cuda.is_available() is False)"


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

    def test_ddp_hook_state_registers_cuda_gradients_by_ipc(self):
        with tempfile.TemporaryDirectory() as d:
            fake = FakeWorker(os.path.join(d, "w.sock"), cuda_device_count=1)
            client = WorkerClient(fake.address)
            try:
                state = GiftHookState(TinyNet("cuda"), client)
                self.assertTrue(all(b.is_cuda for b in state.buffers.values()))
                self.assertEqual(set(fake.cuda_buffers), {"fc.weight", "fc.bias"})
            finally:
                client.close()
                fake.stop()


if __name__ == "__main__":
    unittest.main()
