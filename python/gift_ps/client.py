"""WorkerClient: the training process's client of its local gift-worker.

Gradients never travel through gRPC: register() creates one sealed memfd
for the set (shm.SealedBuffer), hands it to the worker over its buffer
socket (shm.BufferChannel) and registers the tensors at offsets in it; the
caller writes gradients into the returned torch tensors (FP32, BF16 or FP16),
calls push_pull(step), and finds the average in the same tensors when it
returns.

    client = WorkerClient("/run/gift/worker.sock")   # or "unix:/p", "host:port"
    grads = client.register({"w": (1024, 512), "b": (1024,)})
    grads["w"].copy_(my_grad)                          # or write in place
    result = client.push_pull(step)                    # grads now hold the average
    client.close()

CUDA tensors register in place by CUDA IPC (cuda_ipc.py), in the same call:
register(host_specs, cuda_tensors={"w": grad_on_gpu}) when the worker opens
CUDA buffers (info().cuda_device_count above the tensor's device); the caller
synchronizes its stream before push_pull (cuda_ipc.sync_streams), and the
average is in the tensor when push_pull returns.

Threading: all methods may be called from any thread. push_pull,
push_pull_async and start_tensors calls go to the worker one at a time in the
order they were made (one background thread), because steps must strictly
increase; do not
write the registered tensors while a push_pull of theirs is in flight.
Errors from the worker raise GiftError (code name + the worker's message);
bad arguments caught locally raise ValueError / TypeError.
"""

import concurrent.futures
import math
import operator
import os
import stat
import threading
import warnings
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import grpc
import torch

from . import _protos, cuda_ipc
from .errors import GiftError, LostWorker, WorldSizeChanged
from .shm import BufferChannel, HandoffError, SealedBuffer

_ITEMSIZE = {torch.float32: 4, torch.bfloat16: 2, torch.float16: 2}
# Each tensor of a registered set starts at a multiple of this (a cache line).
TENSOR_ALIGNMENT = 64


@dataclass(frozen=True)
class TensorResult:
    name: str  # "" for a tensor this client did not register
    tensor_id: int
    basis_version: int
    transformed: bool
    bytes_sent: int
    rel_l2_error: Optional[float]  # None unless the step measured errors
    bytes_received: int = 0  # results, in the servers' pull codecs


@dataclass(frozen=True)
class PushPullResult:
    step: int
    epoch: int
    world_size: int
    seconds: float
    tensors: List[TensorResult] = field(default_factory=list)
    # Nonzero when the world changed since this worker's previous step: that
    # step's world size, and the workers of it that are gone.
    previous_world_size: int = 0
    lost_members: List[LostWorker] = field(default_factory=list)
    # The step's per-worker statistics (sketches for per-worker geometry
    # sources), counted in no tensor's bytes: payload bytes pushed / received.
    statistics_bytes_sent: int = 0
    statistics_bytes_received: int = 0

    def by_name(self) -> Dict[str, TensorResult]:
        return {t.name: t for t in self.tensors}

    @property
    def bytes_sent(self) -> int:
        return sum(t.bytes_sent for t in self.tensors)


@dataclass(frozen=True)
class WorkerInfo:
    member_id: str
    rank: int
    world_size: int
    epoch: int
    last_step: int
    bases: list  # gift.v1.TensorBasisState messages
    buffer_socket: str = ""  # where buffers are handed over ("" : none)
    # CUDA devices on which the worker opens CUDA IPC buffers (0: host only)
    cuda_device_count: int = 0


def worker_target(address: str) -> str:
    """gRPC target of an address: "unix:/p" and "host:port" as given, a
    socket path ("/p", "./p": anything with a '/') as "unix:<path>"."""
    if not isinstance(address, str) or not address:
        raise ValueError(f"worker address {address!r} is empty")
    for scheme in ("unix:", "unix-abstract:", "dns:", "ipv4:", "ipv6:"):
        if address.startswith(scheme):
            return address
    if "/" in address:
        return "unix:" + address
    if ":" not in address:
        raise ValueError(f"worker address {address!r} is neither a socket path (write "
                         f"./{address} for one in this directory) nor host:port")
    return address


def default_run_id() -> str:
    """The run id of this process's environment: $GIFT_RUN_ID; else, under
    torchrun (TORCHELASTIC_RUN_ID other than "none"), that id and
    TORCHELASTIC_RESTART_COUNT, so an elastic restart of the job is a new
    run; else "" (the cluster's current run)."""
    if os.environ.get("GIFT_RUN_ID"):
        return os.environ["GIFT_RUN_ID"]
    torchrun = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if torchrun and torchrun != "none":
        return f"{torchrun}-{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return ""


def _check_socket(target: str) -> None:
    """Names a wrong socket path at once: GiftError NOT_FOUND "no such socket",
    FAILED_PRECONDITION "... is not a socket" (nothing for a TCP target)."""
    if not target.startswith("unix:"):
        return
    path = target[len("unix://"):] if target.startswith("unix://") else target[len("unix:"):]
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        directory = os.path.dirname(path) or "."
        where = "" if os.path.isdir(directory) else f" (its directory {directory} does not exist)"
        raise GiftError("NOT_FOUND", f"no such socket: {path}{where}; is gift-worker running "
                        f"with --socket {path}?", "Connect") from None
    except OSError as e:
        raise GiftError("FAILED_PRECONDITION", f"socket {path}: {e.strerror}", "Connect") from None
    if not stat.S_ISSOCK(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else (
            "a regular file" if stat.S_ISREG(mode) else "a special file")
        raise GiftError("FAILED_PRECONDITION", f"{path} is not a socket ({kind})", "Connect")


def _check_name(name) -> None:
    if not isinstance(name, str) or not name or "\0" in name:
        raise ValueError(f"tensor name {name!r} must be a non-empty string")


def _check_shape(name: str, shape) -> Tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise ValueError(f"tensor {name!r}: shape {shape!r} is not a sequence of ints") from None
    if any(d < 1 for d in dims):
        raise ValueError(f"tensor {name!r}: shape {dims} has a dimension < 1")
    return dims


class WorkerClient:
    """A connection to the local gift-worker (gift.v1.Worker)."""

    def __init__(self, address: str, *, timeout: float = 60.0, connect_timeout: float = 10.0,
                 push_pull_timeout: Optional[float] = None,
                 on_world_size_change: str = "raise", run_id: Optional[str] = None):
        """Connects to `address` ("unix:/path", a socket path, or "host:port").

        timeout: deadline (s) of register / submit_activation_stats / info.
        connect_timeout: waits this long for the worker (0: no wait);
          GiftError UNAVAILABLE when it is not reachable. With a wait, a
          socket path is checked first: NOT_FOUND "no such socket",
          FAILED_PRECONDITION when the path is not a socket.
        push_pull_timeout: deadline (s) of a push_pull; None: no deadline (the
          worker's --step-timeout bounds a step).
        on_world_size_change: what push_pull (and GradientSync.sync, the DDP
          hook) do when a step completed in a world of another size than the
          previous step (a worker left or joined, policy on_member_loss
          continue): "raise" WorldSizeChanged (after the step: the buffers
          hold the new world's average; e.result is the step's result),
          "warn" (warnings.warn) or "ignore". Elastic jobs choose "warn".
        run_id: the training run this process belongs to (docs/operations.md
          "Runs"): every process of one run of the job passes the same id, and
          a run of another id starts afresh at step 0 (the old run's tensors
          are dropped). None: default_run_id() (GIFT_RUN_ID, or torchrun's run
          id and restart count); "": the cluster's current run, or a new one
          when every client of that run has disconnected (a script run
          again).
        """
        self.run_id = default_run_id() if run_id is None else run_id
        if on_world_size_change not in ("raise", "warn", "ignore"):
            raise ValueError(f"on_world_size_change {on_world_size_change!r} is not one of "
                             "raise|warn|ignore")
        self.on_world_size_change = on_world_size_change
        self._pb = _protos.load()
        self.target = worker_target(address)
        if connect_timeout and connect_timeout > 0:
            _check_socket(self.target)
        self._timeout = timeout
        self._push_pull_timeout = push_pull_timeout
        self._lock = threading.Lock()
        self._buffer: Optional[SealedBuffer] = None
        self._handle = ""  # the worker's handle of _buffer
        self._channel_lock = threading.Lock()
        self._buffer_channel: Optional[BufferChannel] = None
        self._tensors: Dict[str, torch.Tensor] = {}
        self._ids: Dict[str, int] = {}
        self._names: Dict[int, str] = {}
        self._stats: Dict[str, Tuple[SealedBuffer, str]] = {}  # name -> (buffer, handle)
        self._stats_lock = threading.Lock()
        self.rank: Optional[int] = None
        self.world_size: Optional[int] = None
        self._closed = False
        self._channel = grpc.insecure_channel(self.target, options=[
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 2000),
        ])
        if connect_timeout and connect_timeout > 0:
            try:
                grpc.channel_ready_future(self._channel).result(timeout=connect_timeout)
            except grpc.FutureTimeoutError:
                self._channel.close()
                raise GiftError("UNAVAILABLE", f"worker at {self.target} is not reachable "
                                f"within {connect_timeout} s", "Connect") from None
        self._stub = self._pb.worker_pb2_grpc.WorkerStub(self._channel)
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="gift-push-pull")

    # ---- registration -----------------------------------------------------

    def register(self, tensors: Mapping[str, Sequence[int]],
                 dtypes: Optional[Mapping[str, torch.dtype]] = None, *,
                 cuda_tensors: Optional[Mapping[str, torch.Tensor]] = None
                 ) -> Dict[str, torch.Tensor]:
        """Creates a zero-filled shared-memory tensor per name and registers
        the set with the worker (replacing any set registered before; the
        previous tensors stay readable but are no longer averaged). Every
        worker must register the same names and shapes. A shape () is
        registered as [1] and returned as a 0-dim tensor. dtypes: name ->
        torch.float32 (the default), torch.bfloat16 or torch.float16; the
        worker averages in FP32 and rounds the average back to the dtype.

        cuda_tensors: name -> a contiguous FP32 / BF16 / FP16 CUDA tensor,
        registered in place by CUDA IPC in the same call (the client keeps a
        reference while it is registered). GiftError FAILED_PRECONDITION,
        before anything is registered, when the worker takes host buffers
        only (info().cuda_device_count 0) or not on that tensor's device.

        Returns name -> tensor (zero copy into shared memory; the CUDA tensors
        themselves), host tensors first, each in its mapping's order.
        ValueError / TypeError for bad names, shapes, dtypes or CUDA tensors;
        GiftError with the worker's reason otherwise.
        """
        self._check_open()
        cuda_tensors = dict(cuda_tensors or {})
        if not tensors and not cuda_tensors:
            raise ValueError("register: no tensors")
        dtypes = dict(dtypes or {})
        pb = self._pb
        wire = {torch.float32: pb.cluster_pb2.DTYPE_FLOAT32,
                torch.bfloat16: pb.cluster_pb2.DTYPE_BFLOAT16,
                torch.float16: pb.cluster_pb2.DTYPE_FLOAT16}
        specs = []
        offset = 0
        for name, shape in tensors.items():
            _check_name(name)
            dims = _check_shape(name, shape)
            dtype = dtypes.pop(name, torch.float32)
            if dtype not in wire:
                raise TypeError(f"tensor {name!r}: dtype {dtype} is not one of "
                                "torch.float32, torch.bfloat16, torch.float16")
            reg_shape = dims if dims else (1,)
            size = math.prod(reg_shape) * _ITEMSIZE[dtype]
            specs.append((name, dims, reg_shape, dtype, offset, size))
            offset += -(-size // TENSOR_ALIGNMENT) * TENSOR_ALIGNMENT
        if dtypes:
            raise ValueError(f"register: dtypes for tensors not registered: {sorted(dtypes)}")
        cuda_specs = []  # (name, registered shape, tensor, CudaIpcBuffer)
        for name, t in cuda_tensors.items():
            _check_name(name)
            if name in tensors:
                raise ValueError(f"tensor {name!r} is both a host and a CUDA tensor")
            try:
                buffer = cuda_ipc.describe(t)
            except (ValueError, TypeError) as e:
                raise type(e)(f"CUDA tensor {name!r}: {e}") from None
            cuda_specs.append((name, tuple(t.shape) or (1,), t, buffer))
        if cuda_specs:
            self._check_cuda_devices(cuda_specs)
        buffer = SealedBuffer(offset) if specs else None
        handle = None
        try:
            if buffer is not None:
                handle = self._hand(buffer, "RegisterBuffers")
            request = pb.worker_pb2.RegisterBuffersRequest(run_id=self.run_id)
            for name, _, reg_shape, dtype, off, size in specs:
                spec = request.buffers.add(name=name, shape=reg_shape, dtype=wire[dtype])
                spec.buffer.handle = handle
                spec.buffer.offset_bytes = off
                spec.buffer.size_bytes = size
            for name, reg_shape, t, ipc in cuda_specs:
                spec = request.buffers.add(name=name, shape=reg_shape, dtype=wire[t.dtype])
                spec.buffer.cuda_ipc_handle = ipc.handle
                spec.buffer.cuda_device = ipc.device
                spec.buffer.offset_bytes = ipc.offset_bytes
                spec.buffer.size_bytes = ipc.size_bytes
            response = self._call("RegisterBuffers", self._stub.RegisterBuffers, request,
                                  self._timeout)
            count = len(specs) + len(cuda_specs)
            if len(response.buffers) != count:
                raise GiftError("INTERNAL", f"the worker replied with {len(response.buffers)} "
                                f"tensors for {count}", "RegisterBuffers")
        except BaseException:
            if buffer is not None:
                buffer.close()
            if handle is not None:
                self._release(handle)
            raise
        views = {name: buffer.tensor(dims, dtype, off, size // _ITEMSIZE[dtype])
                 for name, dims, _, dtype, off, size in specs}
        views.update({name: t for name, _, t, _ in cuda_specs})
        names = [s[0] for s in specs] + [s[0] for s in cuda_specs]
        with self._lock:
            old, old_handle = self._buffer, self._handle
            self._buffer, self._handle = buffer, handle or ""
            self._tensors = views  # holds the CUDA tensors while they are registered
            self._ids = {n: reg.tensor_id for n, reg in zip(names, response.buffers)}
            self._names = {i: n for n, i in self._ids.items()}
            self.rank = response.rank
            self.world_size = response.world_size
        if old is not None:
            old.close()
            self._release(old_handle)
        return dict(views)

    def _check_cuda_devices(self, cuda_specs) -> None:
        count = self.info().cuda_device_count
        if count <= 0:
            raise GiftError("FAILED_PRECONDITION", "the worker takes host buffers only "
                            "(cuda_device_count 0: no CUDA device, or a build without CUDA), so "
                            f"CUDA tensor {cuda_specs[0][0]!r} cannot be registered by CUDA IPC; "
                            "register it as a host tensor", "RegisterBuffers")
        for name, _, _, ipc in cuda_specs:
            if ipc.device >= count:
                raise GiftError("FAILED_PRECONDITION", f"CUDA tensor {name!r} is on device "
                                f"{ipc.device}, and the worker opens CUDA IPC buffers on devices "
                                f"below {count} only; register it as a host tensor",
                                "RegisterBuffers")

    def _release(self, handle: str) -> None:
        with self._channel_lock:
            if self._buffer_channel is not None:
                self._buffer_channel.release(handle)

    def _hand(self, buffer: SealedBuffer, method: str) -> str:
        """Hands `buffer` to the worker (connecting to its buffer socket on
        first use, and again after a broken connection); returns the handle."""
        with self._channel_lock:
            if self._buffer_channel is None:
                path = self._call("GetWorkerInfo", self._stub.GetWorkerInfo,
                                  self._pb.worker_pb2.GetWorkerInfoRequest(),
                                  self._timeout).buffer_socket
                if not path:
                    raise GiftError("FAILED_PRECONDITION", "the worker has no buffer socket (it "
                                    "serves no Unix socket), so it cannot take buffers", method)
                try:
                    self._buffer_channel = BufferChannel(path, timeout=self._timeout)
                except HandoffError as e:
                    raise GiftError(e.code, e.message, method) from None
            try:
                return self._buffer_channel.hand(buffer.fileno())
            except HandoffError as e:
                # A refusal of this buffer keeps the connection; anything else
                # (a broken connection, one the worker refused at its cap and
                # closed, a connection's handle cap) connects again next time.
                if e.code not in ("INVALID_ARGUMENT", "FAILED_PRECONDITION"):
                    self._buffer_channel.close()
                    self._buffer_channel = None
                raise GiftError(e.code, e.message, method) from None

    @property
    def tensors(self) -> Dict[str, torch.Tensor]:
        """The registered tensors (name -> shared-memory view)."""
        with self._lock:
            return dict(self._tensors)

    def tensor_id(self, name: str) -> int:
        with self._lock:
            if name not in self._ids:
                raise KeyError(f"tensor {name!r} is not registered")
            return self._ids[name]

    # ---- push_pull ----------------------------------------------------------

    def push_pull(self, step: int, measure_error: bool = False,
                  names: Optional[Iterable[str]] = None) -> PushPullResult:
        """Averages the registered tensors (or `names`) of `step` across all
        workers, in place, and returns the worker's report. A collective:
        every worker calls it with the same step and measure_error; steps
        strictly increase. GiftError FAILED_PRECONDITION (nothing registered),
        INVALID_ARGUMENT (step not above the last), DEADLINE_EXCEEDED (the
        message names the ranks the step waited for), UNAVAILABLE (worker
        draining / coordinator unreachable); MemberLost (policy
        on_member_loss fail); WorldSizeChanged as on_world_size_change says
        (push_pull_async's future does not raise it: see
        notice_world_change)."""
        result = self.push_pull_async(step, measure_error, names).result()
        self.notice_world_change(result)
        return result

    def notice_world_change(self, result: PushPullResult) -> None:
        """Raises or warns WorldSizeChanged for a result whose world changed
        since the previous step (on_world_size_change); nothing otherwise."""
        if not result.previous_world_size or self.on_world_size_change == "ignore":
            return
        change = WorldSizeChanged(result.previous_world_size, result.world_size,
                                  result.lost_members, result)
        if self.on_world_size_change == "raise":
            raise change
        warnings.warn(change, stacklevel=3)

    def push_pull_async(self, step: int, measure_error: bool = False,
                        names: Optional[Iterable[str]] = None
                        ) -> "concurrent.futures.Future[PushPullResult]":
        """push_pull on the client's thread; calls run in order, one at a time."""
        self._check_open()
        step = self._check_step(step)
        request = self._pb.worker_pb2.PushPullRequest(step=step, measure_error=bool(measure_error))
        if names is not None:
            request.tensor_ids.extend(self.tensor_id(n) for n in names)
        return self._executor.submit(self._push_pull, request)

    def start_tensors(self, step: int, names: Optional[Iterable[str]] = None
                      ) -> "concurrent.futures.Future[None]":
        """Starts `step` with the tensors `names` (None: every registered
        tensor not started yet), whose gradients are final: the worker
        encodes and pushes them at once, and the step's push_pull then only
        adds the rest and waits (results bit-identical to a push_pull
        alone). Returns at once; the call is queued in the same order as
        push_pull_async calls (so it reaches the worker before a push_pull
        made after it), and the future resolves once the worker pushed them
        (GiftError as push_pull's, INVALID_ARGUMENT for a tensor started twice
        in a step). Do not write those tensors until the step's push_pull
        returns; a measured step (measure_error) cannot be started early."""
        self._check_open()
        step = self._check_step(step)
        request = self._pb.worker_pb2.StartTensorsRequest(step=step)
        if names is not None:
            request.tensor_ids.extend(self.tensor_id(n) for n in names)
        return self._executor.submit(self._start_tensors, request)

    def _start_tensors(self, request) -> None:
        self._call("StartTensors", self._stub.StartTensors, request, self._push_pull_timeout)

    @staticmethod
    def _check_step(step) -> int:
        if isinstance(step, bool) or not hasattr(step, "__index__") or operator.index(step) < 0:
            raise ValueError(f"step {step!r} must be a non-negative integer")
        return operator.index(step)

    def _push_pull(self, request) -> PushPullResult:
        response = self._call("PushPull", self._stub.PushPull, request, self._push_pull_timeout)
        with self._lock:
            names = dict(self._names)
        return PushPullResult(
            step=response.step, epoch=response.epoch, world_size=response.world_size,
            seconds=response.seconds, previous_world_size=response.previous_world_size,
            statistics_bytes_sent=response.statistics_bytes_sent,
            statistics_bytes_received=response.statistics_bytes_received,
            lost_members=[LostWorker(rank=m.rank, name=m.name, member_id=m.member_id, node=m.node)
                          for m in response.lost_members],
            tensors=[TensorResult(
                name=names.get(t.tensor_id, ""), tensor_id=t.tensor_id,
                basis_version=t.basis_version, transformed=t.transformed,
                bytes_sent=t.bytes_sent,
                rel_l2_error=t.rel_l2_error if request.measure_error else None,
                bytes_received=t.bytes_received)
                for t in response.tensors])

    # ---- activation statistics ---------------------------------------------

    def activation_buffer(self, name: str, d_in: int) -> torch.Tensor:
        """The (d_in, d_in) FP32 sealed shared-memory scratch buffer that
        submit_activation_stats(name, ...) sends from; accumulating X^T X
        directly into it makes the submission zero-copy. Zero-filled when new."""
        self._check_open()
        self.tensor_id(name)  # must be registered
        if d_in < 1:
            raise ValueError(f"d_in {d_in} < 1")
        with self._stats_lock:
            return self._stats_buffer_locked(name, d_in)[0].tensor((d_in, d_in))

    def _stats_buffer_locked(self, name: str, d_in: int) -> Tuple[SealedBuffer, str]:
        entry = self._stats.get(name)
        if entry is None or entry[0].size_bytes != 4 * d_in * d_in:
            if entry is not None:
                entry[0].close()
                self._release(entry[1])
                del self._stats[name]
            buffer = SealedBuffer(4 * d_in * d_in, "gift-stats")
            try:
                handle = self._hand(buffer, "SubmitActivationStats")
            except BaseException:
                buffer.close()
                raise
            entry = self._stats[name] = (buffer, handle)
        return entry

    def submit_activation_stats(self, name: str, step: int, gram: torch.Tensor,
                                num_samples: int) -> None:
        """Hands in X^T X (d_in x d_in, unscaled) of `num_samples` input rows
        of the linear layer whose weight is the registered tensor `name`, for
        `step` (used when the policy's geometry source is activations). The
        values go through a shared-memory scratch buffer (zero copy when
        `gram` is activation_buffer(name, d_in)) that the worker reads during
        the call."""
        self._check_open()
        if gram.dim() != 2 or gram.shape[0] != gram.shape[1] or gram.shape[0] < 1:
            raise ValueError(f"gram of shape {tuple(gram.shape)} is not square")
        if num_samples < 1:
            raise ValueError(f"num_samples {num_samples} < 1")
        tensor_id = self.tensor_id(name)
        d_in = int(gram.shape[0])
        with self._stats_lock:
            buffer, handle = self._stats_buffer_locked(name, d_in)
            scratch = buffer.tensor((d_in, d_in))
            if scratch.data_ptr() != gram.data_ptr():
                scratch.copy_(gram.detach())
            del scratch
            request = self._pb.worker_pb2.SubmitActivationStatsRequest(
                tensor_id=tensor_id, step=step, num_samples=int(num_samples))
            request.gram.handle = handle
            request.gram.offset_bytes = 0
            request.gram.size_bytes = buffer.size_bytes
            self._call("SubmitActivationStats", self._stub.SubmitActivationStats, request,
                       self._timeout)

    # ---- info / lifetime ----------------------------------------------------

    def info(self) -> WorkerInfo:
        response = self._call("GetWorkerInfo", self._stub.GetWorkerInfo,
                              self._pb.worker_pb2.GetWorkerInfoRequest(), self._timeout)
        return WorkerInfo(member_id=response.member_id, rank=response.rank,
                          world_size=response.world_size, epoch=response.epoch,
                          last_step=response.last_step, bases=list(response.bases),
                          buffer_socket=response.buffer_socket,
                          cuda_device_count=response.cuda_device_count)

    def close(self) -> None:
        """Waits for queued push_pulls, closes the channels and this
        client's shared buffers (tensor views stay readable until dropped).
        Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._executor.shutdown(wait=True)
        self._channel.close()
        with self._lock:
            buffers = [self._buffer] if self._buffer is not None else []
            self._buffer = None
        with self._stats_lock:
            buffers += [b for b, _ in self._stats.values()]
            self._stats = {}
        with self._channel_lock:
            if self._buffer_channel is not None:
                self._buffer_channel.close()
                self._buffer_channel = None
        for buffer in buffers:
            buffer.close()

    def __enter__(self) -> "WorkerClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError("WorkerClient is closed")

    def _call(self, method: str, fn, request, timeout: Optional[float]):
        try:
            return fn(request, timeout=timeout)
        except grpc.RpcError as error:
            raise GiftError.from_rpc_error(error, method) from None
