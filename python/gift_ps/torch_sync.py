"""GradientSync: data-parallel gradient averaging through GIFT, with no change
to the model or the optimizer.

    client = WorkerClient("/run/gift/worker.sock")
    sync = GradientSync(model, client)
    for step, batch in enumerate(loader):
        optimizer.zero_grad()
        loss_fn(model(batch)).backward()
        sync.sync(step)          # p.grad now holds the average over all workers
        optimizer.step()

Every parameter that requires grad is registered under its
model.named_parameters() name, in the parameter's dtype: FP32, BF16 or FP16
(the worker averages in FP32 and rounds back to the dtype). With
main_grads=True (Megatron style: BF16/FP16 parameters whose gradients
accumulate into an FP32 `p.main_grad`), the FP32 main_grad is what is
registered and averaged instead of p.grad. sync() puts each gradient into
its shared-memory buffer and rebinds p.grad to that buffer (CPU parameters),
so that later backward passes accumulate straight into shared memory while
the optimizer's zero_grad keeps the tensor (set_to_none=False); with
set_to_none=True, each step's fresh gradient is copied in. A parameter
without a gradient in a step contributes zeros, and gets the average too.
CUDA parameters: when the worker opens CUDA buffers on the parameter's
device (WorkerInfo.cuda_device_count above its index), the gradient buffer
is a CUDA tensor registered by CUDA IPC (cuda_ipc.py) and p.grad is rebound
to it like a host buffer (zero copy: the worker reads and writes it in
device memory; torch's current stream of each such device is synchronized
before every push_pull and early start); otherwise (a worker without a
device, or another device) the gradient is copied to a host buffer and the
average copied back into p.grad. Which path runs is logged once
(logging.getLogger("gift_ps"), INFO); `cuda_ipc_names` lists the gradients
registered by IPC.

Activation statistics: with collect_activations_every=K > 0, forward
pre-hooks on the selected nn.Linear layers accumulate X^T X and the number of
rows N of their inputs (X flattened to (-1, d_in), FP32) during the training
forward passes of collect steps (steps divisible by K; a forward pass belongs
to the step after the last synced one, or to the one named by begin_step),
and sync() hands them to the worker for the layer's weight before averaging.
Forward passes in eval mode or under torch.no_grad() are not counted.

Communication hidden behind backward (overlap=True): a hook on each
parameter's AccumulateGrad node (the autograd node that adds the incoming
gradient into p.grad; its post hook runs once the gradient is in p.grad)
marks the gradient final as soon as backward produced it, which happens in
roughly reverse layer order. Ready gradients are collected into buckets of
bucket_bytes (25 MiB by default, like DDP's) and each full bucket is handed to
the worker at once (WorkerClient.start_tensors), which transforms, encodes and
pushes it while backward goes on; sync(step) then hands in the rest and only
waits for what is left. The averages are bit-identical to overlap=False (same
step, same codecs, same stochastic-rounding keys). Gradient accumulation:
run the backward passes of all micro-batches but the last under
`with sync.no_sync():` (as with DDP), so that only the last one starts
pushes; a second backward pass in a step outside no_sync() raises. A
measured step (measure_error=True) is not started early: name it before its
backward with begin_step(step, measure_error=True). Not with main_grads.

Threading: one GradientSync per process and model; call sync() from the
training thread (the AccumulateGrad hooks run on autograd's thread for the
backward pass, CPU: the caller's).
"""

import contextlib

import fnmatch
from typing import Dict, Iterable, List, Optional

import torch
from torch import nn

from . import cuda_ipc
from .client import PushPullResult, WorkerClient
from .errors import RejoinRequired


class GradientSync:
    def __init__(self, model: nn.Module, client: WorkerClient, *,
                 collect_activations_every: int = 0,
                 activation_layers: Optional[Iterable[str]] = None,
                 start_step: int = 0, main_grads: bool = False,
                 overlap: bool = False, bucket_bytes: int = 25 * 2 ** 20):
        """Registers the gradients of `model` with `client`'s worker.

        collect_activations_every: K > 0 collects input statistics of the
          selected linear layers on steps divisible by K; 0: never.
        activation_layers: module names (or fnmatch globs) of the nn.Linear
          layers to collect; None: every nn.Linear whose weight is trained.
        start_step: the step of the first forward pass (for collection).
        main_grads: average each parameter's FP32 `main_grad` (created
          zero-filled when missing) rather than its `grad`.
        overlap: start each bucket of gradients on the worker as soon as
          backward finished it (see the module's documentation).
        bucket_bytes: the size at which a bucket of ready gradients is
          started (overlap only); 0 starts every gradient on its own.
        """
        if collect_activations_every < 0:
            raise ValueError("collect_activations_every must be >= 0")
        if overlap and main_grads:
            raise ValueError("GradientSync: overlap needs gradients in p.grad, not main_grads")
        if bucket_bytes < 0:
            raise ValueError("bucket_bytes must be >= 0")
        self.model = model
        self.client = client
        self.params: List = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("GradientSync: the model has no parameter that requires grad")
        self._attr = "main_grad" if main_grads else "grad"
        supported = (torch.float32, torch.bfloat16, torch.float16)
        for name, p in self.params:
            if p.dtype not in supported:
                raise TypeError(f"GradientSync supports FP32, BF16 and FP16 parameters: "
                                f"'{name}' is {p.dtype}")
            if p.is_sparse:
                raise TypeError(f"GradientSync: parameter '{name}' is sparse")
        self.buffers: Dict[str, torch.Tensor]
        self.buffers, self._cuda_devices = cuda_ipc.register_gradients(
            client, self.params,
            {n: torch.float32 if main_grads else p.dtype for n, p in self.params}, "GradientSync")
        self.cuda_ipc_names = sorted(n for n, b in self.buffers.items() if b.is_cuda)
        self._every = collect_activations_every
        self._hooks = []
        self._stats: Dict[str, dict] = {}  # weight name -> {module, gram, count}
        self._next_step = start_step
        if collect_activations_every > 0:
            self._install_hooks(activation_layers)
        # Early pushes (overlap): the step being started, the gradients
        # copied in and not started yet, those started, the start calls.
        self._bucket_bytes = bucket_bytes
        self._no_sync = False
        self._measure_step: Optional[int] = None
        self._started_step: Optional[int] = None
        self._pending: List[str] = []
        self._pending_bytes = 0
        self._started: set = set()
        self._starts: list = []
        self._accumulators = []  # the AccumulateGrad nodes (kept alive: they hold the hooks)
        if overlap:
            for name, p in self.params:
                node = p.expand_as(p).grad_fn.next_functions[0][0]
                self._accumulators.append(node)
                self._hooks.append(node.register_hook(self._make_grad_hook(name, p)))

    # ---- gradients ------------------------------------------------------------

    def sync(self, step: int, measure_error: bool = False) -> PushPullResult:
        """After backward: averages every registered gradient across all
        workers for `step` (a collective; steps strictly increase) and leaves
        the average in p.grad. Returns the worker's report.

        Raises RejoinRequired (with admit_step) when the worker was admitted
        again at a later step (its lease expired while the process was
        stopped, or it joined a running cluster): p.grad is then not an
        average. Load the newest checkpoint (resynchronise the parameters
        and the optimizer), and continue the loop at e.admit_step (the next
        forward passes already belong to it).

        A step that completed in a world of another size than the previous
        one (a worker left or joined) raises or warns WorldSizeChanged, as the
        client's on_world_size_change says, after p.grad holds the average;
        under the policy on_member_loss fail it raises MemberLost instead."""
        if self._started_step is not None and self._started_step != step:
            raise ValueError(f"GradientSync: backward started step {self._started_step}, not "
                             f"{step}: name non-consecutive steps with begin_step(step)")
        if measure_error and self._started:
            raise ValueError(f"GradientSync: step {step} was started early, so it cannot measure "
                             "errors: call begin_step(step, measure_error=True) before backward")
        copied = set(self._pending) | self._started
        with torch.no_grad():
            for name, p in self.params:
                if name not in copied:
                    self._copy_in(name, p)
        self._submit_stats(step)
        cuda_ipc.sync_streams(self._cuda_devices)  # the gradients' writes, before the worker reads
        starts, self._starts = self._starts, []
        self._pending, self._pending_bytes, self._started = [], 0, set()
        self._started_step = None
        try:
            # Not push_pull: a WorldSizeChanged is raised after the averages
            # are in place (below).
            result = self.client.push_pull_async(step, measure_error=measure_error).result()
        except RejoinRequired as e:
            # Readmitted at a later step: the early starts of this step were
            # refused too, and the next passes belong to the admit step.
            self._next_step = e.admit_step
            raise
        for start in starts:
            start.result()  # raises the worker's refusal of an early start
        with torch.no_grad():
            for name, p in self.params:
                buffer = self.buffers[name]
                grad = getattr(p, self._attr, None)
                if p.device == buffer.device:
                    if grad is None or grad.data_ptr() != buffer.data_ptr():
                        setattr(p, self._attr, buffer)
                elif grad is None:
                    setattr(p, self._attr, buffer.to(p.device))
                else:
                    grad.copy_(buffer)
        self._next_step = step + 1
        self.client.notice_world_change(result)  # the client's on_world_size_change
        return result

    def _copy_in(self, name: str, p) -> None:
        buffer = self.buffers[name]
        grad = getattr(p, self._attr, None)
        if grad is None:
            buffer.zero_()
        elif grad.data_ptr() != buffer.data_ptr() or grad.shape != buffer.shape:
            if grad.is_sparse:
                grad = grad.to_dense()
            buffer.copy_(grad)

    @contextlib.contextmanager
    def no_sync(self):
        """Backward passes inside accumulate gradients without starting
        pushes (overlap): all micro-batches of a step but the last."""
        before, self._no_sync = self._no_sync, True
        try:
            yield
        finally:
            self._no_sync = before

    def _make_grad_hook(self, name: str, p):
        nbytes = self.buffers[name].numel() * self.buffers[name].element_size()

        def hook(*_):
            step = self._next_step
            if self._no_sync or step == self._measure_step:
                return
            if name in self._started or name in self._pending:
                raise RuntimeError(f"GradientSync: a second backward pass reached '{name}' in "
                                   f"step {step} after its gradient was final; run the "
                                   "micro-batches but the last under sync.no_sync()")
            with torch.no_grad():
                self._copy_in(name, p)
            self._started_step = step
            self._pending.append(name)
            self._pending_bytes += nbytes
            if self._pending_bytes >= self._bucket_bytes:
                cuda_ipc.sync_streams(self._cuda_devices)
                self._starts.append(self.client.start_tensors(step, self._pending))
                self._started.update(self._pending)
                self._pending, self._pending_bytes = [], 0
        return hook

    # ---- activation statistics ----------------------------------------------

    def begin_step(self, step: int, measure_error: bool = False) -> None:
        """Names the step the next forward and backward passes belong to
        (needed when steps are not consecutive and activations are collected
        or gradients start early); measure_error: the step will be synced
        with measure_error=True, so its gradients must not start early."""
        self._next_step = step
        if measure_error:
            self._measure_step = step

    @property
    def collecting(self) -> bool:
        """Whether forward passes now count towards activation statistics."""
        return self._every > 0 and self._next_step % self._every == 0

    def _install_hooks(self, layers: Optional[Iterable[str]]) -> None:
        trained = {n for n, _ in self.params}
        linears = {n: m for n, m in self.model.named_modules() if isinstance(m, nn.Linear)}
        if layers is None:
            selected = [n for n in linears if f"{n}.weight" in trained or
                        (n == "" and "weight" in trained)]
        else:
            selected = []
            for pattern in layers:
                matches = [n for n in linears if fnmatch.fnmatchcase(n, pattern)]
                if not matches:
                    raise ValueError(f"activation_layers: no nn.Linear module matches "
                                     f"{pattern!r} (linear layers: {sorted(linears)})")
                selected += [n for n in matches if n not in selected]
        for module_name in selected:
            weight = f"{module_name}.weight" if module_name else "weight"
            if weight not in trained:
                raise ValueError(f"activation_layers: the weight of '{module_name}' is not "
                                 "trained, so it is not registered")
            module = linears[module_name]
            gram = self.client.activation_buffer(weight, module.in_features)
            gram.zero_()
            entry = {"module": module, "gram": gram, "count": 0}
            self._stats[weight] = entry
            self._hooks.append(module.register_forward_pre_hook(self._make_hook(entry)))

    def _make_hook(self, entry: dict):
        def hook(module, inputs):
            if not self.collecting or not module.training or not torch.is_grad_enabled():
                return
            if not inputs or not torch.is_tensor(inputs[0]):
                return
            with torch.no_grad():
                x = inputs[0].detach()
                x = x.reshape(-1, x.shape[-1]).to(torch.float32)
                gram = entry["gram"]
                if x.device == gram.device:
                    gram.addmm_(x.t(), x)
                else:
                    gram.add_((x.t() @ x).to(gram.device))
                entry["count"] += x.shape[0]
        return hook

    def _submit_stats(self, step: int) -> None:
        for weight, entry in self._stats.items():
            if entry["count"] == 0:
                continue
            self.client.submit_activation_stats(weight, step, entry["gram"], entry["count"])
            entry["gram"].zero_()
            entry["count"] = 0

    def close(self) -> None:
        """Removes the forward and gradient hooks (the client stays open)."""
        for handle in self._hooks:
            handle.remove()
        self._hooks = []
        self._accumulators = []
