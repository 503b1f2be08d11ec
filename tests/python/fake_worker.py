"""An in-process fake gift.v1.Worker service for client unit tests.

It maps the registered shared-memory buffers like the real daemon and, on
PushPull, replaces each buffer's values v by v * scale + offset (a stand-in
for "the average of all workers"), so tests see that the daemon's writes
land in the client's tensors without a copy. It enforces the documented
codes: FAILED_PRECONDITION before registration, INVALID_ARGUMENT for a step
not above the last one or an unknown tensor id.
"""

import mmap
import os
import threading
from concurrent import futures

import grpc
import numpy as np

from gift_ps import _protos


class FakeWorker:
    def __init__(self, socket_path: str, *, scale: float = 1.0, offset: float = 0.0,
                 world_size: int = 1):
        pb = _protos.load()
        self.pb = pb
        self.scale = np.float32(scale)
        self.offset = np.float32(offset)
        self.world_size = world_size
        self.lock = threading.Lock()
        self.buffers = {}  # tensor id -> (name, np array view, mmap)
        self.ids = {}  # name -> id
        self.next_id = 100
        self.last_step = None
        self.stats = []  # (tensor_id, step, num_samples, gram copy)
        self.push_pull_calls = []
        # Set to make PushPull wait (tests of async ordering).
        self.gate = threading.Event()
        self.gate.set()
        fake = self

        class Servicer(pb.worker_pb2_grpc.WorkerServicer):
            def RegisterBuffers(self, request, context):
                return fake._register(request, context)

            def PushPull(self, request, context):
                return fake._push_pull(request, context)

            def SubmitActivationStats(self, request, context):
                return fake._stats(request, context)

            def GetWorkerInfo(self, request, context):
                with fake.lock:
                    return pb.worker_pb2.WorkerInfo(
                        member_id="fake-member", rank=0, world_size=fake.world_size, epoch=7,
                        last_step=fake.last_step or 0)

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb.worker_pb2_grpc.add_WorkerServicer_to_server(Servicer(), self.server)
        self.address = "unix:" + socket_path
        self.server.add_insecure_port(self.address)
        self.server.start()

    def stop(self):
        self.gate.set()
        self.server.stop(grace=None).wait()
        with self.lock:
            for _, array, m in self.buffers.values():
                del array
                try:
                    m.close()
                except BufferError:
                    pass
            self.buffers = {}

    @staticmethod
    def _map(shm):
        path = "/dev/shm/" + shm.shm_name.lstrip("/")
        fd = os.open(path, os.O_RDWR)
        try:
            size = shm.offset_bytes + shm.size_bytes
            if os.fstat(fd).st_size < size:
                raise ValueError(f"{shm.shm_name} is smaller than {size} bytes")
            m = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        array = np.frombuffer(m, dtype=np.float32, count=shm.size_bytes // 4,
                              offset=shm.offset_bytes)
        return array, m

    def _register(self, request, context):
        buffers = {}
        ids = []
        try:
            for spec in request.buffers:
                if spec.dtype != self.pb.cluster_pb2.DTYPE_FLOAT32:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{spec.name}: not FP32")
                n = int(np.prod(spec.shape))
                if spec.buffer.size_bytes != 4 * n:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                  f"{spec.name}: size_bytes {spec.buffer.size_bytes} != {4 * n}")
                array, m = self._map(spec.buffer)
                with self.lock:
                    if spec.name not in self.ids:
                        self.ids[spec.name] = self.next_id
                        self.next_id += 1
                    tid = self.ids[spec.name]
                buffers[tid] = (spec.name, array, m)
                ids.append((spec.name, tid))
        except FileNotFoundError as e:
            context.abort(grpc.StatusCode.NOT_FOUND, str(e))
        with self.lock:
            self.buffers = buffers
        return self.pb.worker_pb2.RegisterBuffersResponse(
            buffers=[self.pb.worker_pb2.RegisteredBuffer(name=n, tensor_id=t) for n, t in ids],
            rank=0, world_size=self.world_size)

    def _push_pull(self, request, context):
        self.gate.wait()
        with self.lock:
            self.push_pull_calls.append(request.step)
            if not self.buffers:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no buffers are registered")
            if self.last_step is not None and request.step <= self.last_step:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"step {request.step} is not above the last step {self.last_step}")
            ids = list(request.tensor_ids) or list(self.buffers)
            for tid in ids:
                if tid not in self.buffers:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown tensor id {tid}")
            self.last_step = request.step
            results = []
            for tid in ids:
                _, array, _ = self.buffers[tid]
                array *= self.scale
                array += self.offset
                results.append(self.pb.worker_pb2.TensorResult(
                    tensor_id=tid, basis_version=0, transformed=False,
                    bytes_sent=array.size, rel_l2_error=0.25 if request.measure_error else 0.0))
        return self.pb.worker_pb2.PushPullResponse(step=request.step, epoch=7,
                                                   world_size=self.world_size,
                                                   tensors=results, seconds=0.001)

    def _stats(self, request, context):
        with self.lock:
            if request.tensor_id not in self.buffers:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"unknown tensor id {request.tensor_id}")
        array, m = self._map(request.gram)
        gram = array.copy()
        del array
        m.close()
        with self.lock:
            self.stats.append((request.tensor_id, request.step, request.num_samples, gram))
        return self.pb.worker_pb2.SubmitActivationStatsResponse()
