"""A DDP communication hook that averages gradient buckets through GIFT, for
training loops that keep torch.nn.parallel.DistributedDataParallel.

    client = WorkerClient("/run/gift/worker.sock")
    state = GiftHookState(model, client)        # registers the parameters, before DDP
    dist.init_process_group("gloo", rank=..., world_size=...)
    ddp = DistributedDataParallel(model)
    ddp.register_comm_hook(state, gift_hook)
    for batch in loader:
        opt.zero_grad(); loss_fn(ddp(batch)).backward(); opt.step()   # p.grad: the average

Each trainable parameter of `model` is registered with the worker under its
model.named_parameters() name (the same names and tensor ids GradientSync
uses, so both give the same bits). DDP calls the hook once per bucket as
backward finishes it: the hook copies the bucket's gradients into their
shared-memory buffers and starts them on the worker at once
(WorkerClient.start_tensors), so their transform, encode and push overlap the
rest of backward. The bucket that completes the set (every registered
parameter seen once) ends the GIFT step (push_pull); its completion sets
every bucket's future of the step to its averaged flat buffer (which DDP
copies into p.grad). All futures of a step thus complete together, with
the step's last result: a GIFT step is one collective over all tensors, and
DDP waits for every bucket's future at the end of backward anyway. Bucket
order and composition may differ between ranks and iterations (DDP rebuilds
its buckets after the first one).

CUDA gradients: when the worker opens CUDA buffers on their device
(WorkerInfo.cuda_device_count), the registered buffers are CUDA tensors
(cuda_ipc.py, zero copy through host memory): the hook's copies are
device-to-device, torch's current stream is synchronized before each
start_tensors and push_pull, and the averages are copied back into the
bucket (stream synchronized) before its future completes. Otherwise the
buffers are host shared memory, as for CPU gradients. Which path runs is
logged once (logging.getLogger("gift_ps"), INFO).

One GIFT step per backward pass that reaches the hook (DDP's no_sync() skips
it), counted from start_step on every rank. The process group carries only
DDP's own broadcasts; gradients go through GIFT. Not handled: parameters that
receive no gradient in a backward pass (find_unused_parameters) still reach
the hook in DDP; a model whose parameters change after registration does not.

Threading: the hook runs on autograd's thread; the futures complete on the
client's background thread.
"""

import threading
from typing import Dict, List, Optional

import torch
from torch import nn

from . import cuda_ipc
from .client import PushPullResult, WorkerClient


class GiftHookState:
    """What gift_hook needs: the client, the registered buffers, the step."""

    def __init__(self, module: nn.Module, client: WorkerClient, *, start_step: int = 0):
        """Registers every parameter of `module` (the model before wrapping
        it in DDP) that requires grad, in its dtype (FP32, BF16 or FP16)."""
        params = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not params:
            raise ValueError("GiftHookState: the module has no parameter that requires grad")
        self.client = client
        self.buffers: Dict[str, torch.Tensor]
        self.buffers, self._cuda_devices = cuda_ipc.register_gradients(
            client, params, {n: p.dtype for n, p in params}, "GiftHookState")
        # DDP hands the hook its parameters (the same storage as the module's).
        self._names = {p.data_ptr(): n for n, p in params}
        self.step = start_step
        self.last_result: Optional[PushPullResult] = None
        self._lock = threading.Lock()
        self._seen: set = set()
        self._waiting: list = []  # (names, future, the bucket's flat buffer)
        self._starts: list = []


def gift_hook(state: GiftHookState, bucket) -> torch.futures.Future[torch.Tensor]:
    """The communication hook (DistributedDataParallel.register_comm_hook)."""
    params = bucket.parameters()
    grads = bucket.gradients()  # in parameter order, laid out back to back in bucket.buffer()
    names: List[str] = []
    for p in params:
        name = state._names.get(p.data_ptr())
        if name is None:
            raise RuntimeError("gift_hook: a bucket holds a parameter that GiftHookState did not "
                               "register (create the state from the model DDP wraps)")
        names.append(name)
    with torch.no_grad():
        for name, g in zip(names, grads):
            state.buffers[name].copy_(g)
    cuda_ipc.sync_streams(state._cuda_devices)  # the copies, before the worker reads them
    future: torch.futures.Future = torch.futures.Future()
    with state._lock:
        step = state.step
        if any(n in state._seen for n in names):
            raise RuntimeError(f"gift_hook: step {step} saw a parameter twice")
        state._seen.update(names)
        state._waiting.append((names, future, bucket.buffer()))
        if len(state._seen) < len(state.buffers):
            state._starts.append(state.client.start_tensors(step, names))
            return future
        waiting, starts = state._waiting, state._starts
        state._waiting, state._starts, state._seen = [], [], set()
        state.step += 1
    done = state.client.push_pull_async(step)
    done.add_done_callback(lambda f: _complete(state, f, starts, waiting))
    return future


def _complete(state: GiftHookState, done, starts, waiting) -> None:
    try:
        result = done.result()
        for start in starts:
            start.result()
    except BaseException as error:  # handed to DDP through the futures
        for _, future, _ in waiting:
            future.set_exception(error)
        return
    state.last_result = result
    try:
        # The client's on_world_size_change: "raise" fails the step's
        # futures (DDP raises it from backward), "warn" warns.
        state.client.notice_world_change(result)
    except BaseException as error:
        for _, future, _ in waiting:
            future.set_exception(error)
        return
    with torch.no_grad():
        for names, future, buffer in waiting:
            offset = 0
            for name in names:
                average = state.buffers[name].reshape(-1)
                buffer[offset:offset + average.numel()].copy_(average)
                offset += average.numel()
            if buffer.is_cuda:
                torch.cuda.current_stream(buffer.device).synchronize()
            future.set_result(buffer)
