"""An in-process fake gift.v1.Worker service for client unit tests.

It serves a buffer socket like the real daemon (sealed memfds handed over
with SCM_RIGHTS, answered with handles; unsealed ones refused), maps the
registered ranges and, on PushPull, replaces each buffer's values v by
v * scale + offset, computed in FP32 and rounded to the buffer's dtype (a stand-in
for "the average of all workers"), so tests see that the daemon's writes
land in the client's tensors without a copy. It enforces the documented
codes: FAILED_PRECONDITION before registration, INVALID_ARGUMENT for a step
not above the last one, an unknown tensor id or a tensor started twice in a
step; StartTensors calls are recorded (start_calls) and completed by the
step's PushPull. With cuda_device_count > 0 it reports that many devices
(WorkerInfo.cuda_device_count) and accepts cuda_ipc_handle buffers: it
records them (cuda_buffers: name -> SharedBuffer) without opening them, and
PushPull leaves them alone.
"""

import fcntl
import mmap
import os
import secrets
import socket
import threading
from concurrent import futures

import grpc
import numpy as np
import torch

from gift_ps import _protos
from gift_ps.shm import HANDOFF_MAGIC, RELEASE_PREFIX


class FakeWorker:
    def __init__(self, socket_path: str, *, scale: float = 1.0, offset: float = 0.0,
                 world_size: int = 1, cuda_device_count: int = 0):
        pb = _protos.load()
        self.pb = pb
        self.scale = np.float32(scale)
        self.offset = np.float32(offset)
        self.world_size = world_size
        self.cuda_device_count = cuda_device_count
        self.cuda_buffers = {}  # name -> SharedBuffer of the registered CUDA IPC buffers
        self.register_calls = 0
        self.lock = threading.Lock()
        self.buffers = {}  # tensor id -> (name, torch view, dtype)
        self.handed = {}  # handle -> mmap of the whole memfd
        self.buffer_socket = socket_path + ".buffers"
        self.ids = {}  # name -> id
        self.next_id = 100
        self.last_step = None
        self.stats = []  # (tensor_id, step, num_samples, gram copy)
        self.push_pull_calls = []
        # The next PushPull's response says the world changed (then reset):
        # (previous world size, [(rank, name), ...] lost).
        self.world_change = None
        self.start_calls = []  # (step, [tensor names]) per StartTensors
        self.started = set()  # tensor ids started for the open step
        # Set to make PushPull wait (tests of async ordering).
        self.gate = threading.Event()
        self.gate.set()
        # Steps below it are refused as the daemon refuses them after a
        # re-join (worker_core.h CheckAdmitted).
        self.admit_step = 0
        fake = self

        class Servicer(pb.worker_pb2_grpc.WorkerServicer):
            def RegisterBuffers(self, request, context):
                return fake._register(request, context)

            def PushPull(self, request, context):
                return fake._push_pull(request, context)

            def StartTensors(self, request, context):
                return fake._start(request, context)

            def SubmitActivationStats(self, request, context):
                return fake._stats(request, context)

            def GetWorkerInfo(self, request, context):
                with fake.lock:
                    return pb.worker_pb2.WorkerInfo(
                        member_id="fake-member", rank=0, world_size=fake.world_size, epoch=7,
                        last_step=fake.last_step or 0, buffer_socket=fake.buffer_socket,
                        cuda_device_count=fake.cuda_device_count)

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb.worker_pb2_grpc.add_WorkerServicer_to_server(Servicer(), self.server)
        self.address = "unix:" + socket_path
        self.server.add_insecure_port(self.address)
        self.server.start()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.listener.bind(self.buffer_socket)
        self.listener.listen(8)
        self.handoffs = threading.Thread(target=self._serve_buffers, daemon=True)
        self.handoffs.start()

    def _serve_buffers(self):
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve_connection, args=(conn,), daemon=True).start()

    def _serve_connection(self, conn):
        with conn:
            while True:
                try:
                    msg, fds, _, _ = socket.recv_fds(conn, 64, 4)
                except OSError:
                    return
                if not msg:
                    return
                try:
                    if msg.startswith(RELEASE_PREFIX) and not fds:
                        with self.lock:
                            self.handed.pop(msg[len(RELEASE_PREFIX):].decode(), None)
                        conn.send(b"OK")
                        continue
                    if msg != HANDOFF_MAGIC or len(fds) != 1:
                        conn.send(b"ERR INVALID_ARGUMENT one memfd per handoff")
                        continue
                    if not fcntl.fcntl(fds[0], fcntl.F_GET_SEALS) & fcntl.F_SEAL_SHRINK:
                        conn.send(b"ERR FAILED_PRECONDITION not sealed against shrinking")
                        continue
                    m = mmap.mmap(fds[0], os.fstat(fds[0]).st_size)
                    handle = secrets.token_hex(16)
                    with self.lock:
                        self.handed[handle] = m
                    conn.send(b"OK " + handle.encode())
                except OSError as e:
                    conn.send(f"ERR FAILED_PRECONDITION {e}".encode())
                finally:
                    for fd in fds:
                        os.close(fd)

    def stop(self):
        self.gate.set()
        self.server.stop(grace=None).wait()
        self.listener.close()
        try:
            os.unlink(self.buffer_socket)
        except FileNotFoundError:
            pass
        with self.lock:
            self.buffers = {}
            self.handed = {}

    def _view(self, buffer, dtype, context):
        with self.lock:
            m = self.handed.get(buffer.handle)
        if m is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"unknown buffer handle {buffer.handle!r}")
        itemsize = torch.empty((), dtype=dtype).element_size()
        if buffer.offset_bytes + buffer.size_bytes > len(m):
            context.abort(grpc.StatusCode.OUT_OF_RANGE, "range past the buffer")
        return torch.frombuffer(m, dtype=dtype, count=buffer.size_bytes // itemsize,
                                offset=buffer.offset_bytes)

    def _register(self, request, context):
        dtypes = {self.pb.cluster_pb2.DTYPE_FLOAT32: (torch.float32, 4),
                  self.pb.cluster_pb2.DTYPE_BFLOAT16: (torch.bfloat16, 2),
                  self.pb.cluster_pb2.DTYPE_FLOAT16: (torch.float16, 2)}
        buffers = {}
        cuda_buffers = {}
        ids = []
        with self.lock:
            self.register_calls += 1
        for spec in request.buffers:
            if spec.dtype not in dtypes:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{spec.name}: bad dtype")
            location = spec.buffer.WhichOneof("location")
            cuda = location == "cuda_ipc_handle" and spec.buffer.cuda_device < self.cuda_device_count
            if location != "handle" and not cuda:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{spec.name}: not a handle")
            dtype, size = dtypes[spec.dtype]
            n = int(np.prod(spec.shape))
            if spec.buffer.size_bytes != size * n:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"{spec.name}: size_bytes {spec.buffer.size_bytes} != {size * n}")
            if cuda:
                cuda_buffers[spec.name] = spec.buffer
                view = None
            else:
                view = self._view(spec.buffer, dtype, context)
            with self.lock:
                if spec.name not in self.ids:
                    self.ids[spec.name] = self.next_id
                    self.next_id += 1
                tid = self.ids[spec.name]
            buffers[tid] = (spec.name, view, dtype)
            ids.append((spec.name, tid))
        with self.lock:
            self.buffers = buffers
            self.cuda_buffers = cuda_buffers
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
            if request.step < self.admit_step:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                              f"worker m9 is admitted at step {self.admit_step}; step "
                              f"{request.step} is below it (member m3 was evicted at step 4 (its "
                              "lease expired), cluster at step 30; join again): resynchronise "
                              f"the parameters and resume at step {self.admit_step}")
            ids = list(request.tensor_ids) or list(self.buffers)
            for tid in ids:
                if tid not in self.buffers:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown tensor id {tid}")
            self.last_step = request.step
            self.started = set()
            results = []
            for tid in ids:
                _, view, _ = self.buffers[tid]
                if view is not None:  # a CUDA IPC buffer is not opened here
                    view.copy_(view.float() * float(self.scale) + float(self.offset))
                results.append(self.pb.worker_pb2.TensorResult(
                    tensor_id=tid, basis_version=0, transformed=False,
                    bytes_sent=view.numel() if view is not None else 0, rel_l2_error=0.25 if request.measure_error else 0.0))
            change, self.world_change = self.world_change, None
        response = self.pb.worker_pb2.PushPullResponse(step=request.step, epoch=7,
                                                       world_size=self.world_size,
                                                       tensors=results, seconds=0.001,
                                                       statistics_bytes_sent=100,
                                                       statistics_bytes_received=60)
        if change is not None:
            response.previous_world_size = change[0]
            for rank, name in change[1]:
                response.lost_members.add(rank=rank, name=name, member_id=f"m{rank + 10}",
                                          node=f"node-{rank}")
        return response

    def _start(self, request, context):
        with self.lock:
            if not self.buffers:
                context.abort(grpc.StatusCode.FAILED_PRECONDITION, "no buffers are registered")
            if self.last_step is not None and request.step <= self.last_step:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"step {request.step} is not above the last step {self.last_step}")
            ids = list(request.tensor_ids) or [t for t in self.buffers if t not in self.started]
            for tid in ids:
                if tid not in self.buffers:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"unknown tensor id {tid}")
                if tid in self.started:
                    context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"tensor id {tid} started twice")
            self.started.update(ids)
            self.start_calls.append((request.step, [self.buffers[t][0] for t in ids]))
        return self.pb.worker_pb2.StartTensorsResponse()

    def _stats(self, request, context):
        with self.lock:
            if request.tensor_id not in self.buffers:
                context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                              f"unknown tensor id {request.tensor_id}")
        gram = self._view(request.gram, torch.float32, context).numpy().copy()
        with self.lock:
            self.stats.append((request.tensor_id, request.step, request.num_samples, gram))
        return self.pb.worker_pb2.SubmitActivationStatsResponse()
