"""A tiny data-parallel training run, shared by the PyTorch integration test
(the worker processes) and its local reference.

    /usr/bin/python3 train_tiny.py SOCKET RANK FIRST_STEP STEPS OUT.pt [DTYPE]

trains TinyModel (in DTYPE: float32, the default, bfloat16 or float16) for
STEPS SGD steps through GradientSync on the worker at SOCKET (steps
FIRST_STEP, FIRST_STEP + 1, ...) and saves the final parameters (and the
per-step reports) to OUT.pt.
"""

import sys

import torch
from torch import nn

WORLD = 2
LR = 0.1


class TinyModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        # Computes in x's dtype: torch 1.13 has no FP16 matmul on the CPU, so
        # an FP16 model computes in FP32 (its parameters and gradients stay
        # FP16); .to() of the same dtype is the parameter itself.
        def linear(layer, h):
            return nn.functional.linear(h, layer.weight.to(h.dtype), layer.bias.to(h.dtype))
        return linear(self.fc2, torch.tanh(linear(self.fc1, x)))


def make_model(dtype: torch.dtype = torch.float32) -> TinyModel:
    torch.manual_seed(1234)
    return TinyModel().to(dtype)


def batch(rank: int, step: int, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(16, 8, generator=g)
    y = torch.randn(16, 4, generator=g)
    return x.to(dtype), y.to(dtype)


def loss_of(model, rank, step):
    dtype = next(model.parameters()).dtype
    x, y = batch(rank, step, torch.float32 if dtype == torch.float16 else dtype)
    # The loss in FP32 (no BF16 mse_loss on the CPU in torch 1.13).
    return nn.functional.mse_loss(model(x).float(), y.float())


def reference(steps: int, dtype: torch.dtype = torch.float32):
    """Parameters after `steps` SGD steps on the FP32 average (g0+g1)*0.5 of
    the two ranks' gradients, rounded to `dtype` (what the worker does with
    16-bit buffers: widen, average in FP32, round to nearest even)."""
    torch.set_num_threads(1)
    model = make_model(dtype)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for i in range(steps):
        grads = []
        for rank in range(WORLD):
            opt.zero_grad(set_to_none=True)
            loss_of(model, rank, i).backward()
            grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
        for n, p in model.named_parameters():
            p.grad = ((grads[0][n].float() + grads[1][n].float()) * 0.5).to(dtype)
        opt.step()
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def initial():
    return {n: p.detach().clone() for n, p in make_model().named_parameters()}


def main(argv):
    socket, rank, first_step, steps, out = argv[1], int(argv[2]), int(argv[3]), int(argv[4]), argv[5]
    dtype = getattr(torch, argv[6]) if len(argv) > 6 else torch.float32
    torch.set_num_threads(1)
    from gift_ps import GradientSync, WorkerClient

    client = WorkerClient(socket, connect_timeout=30)
    model = make_model(dtype)
    # Activation statistics every 2 steps exercise the real submission path
    # (they feed only bases; the tensors here go direct).
    sync = GradientSync(model, client, collect_activations_every=2)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    reports = []
    for i in range(steps):
        opt.zero_grad()  # torch 1.13: keeps the (shared-memory) gradient tensors
        loss_of(model, rank, i).backward()
        result = sync.sync(first_step + i, measure_error=True)
        reports.append({t.name: t.rel_l2_error for t in result.tensors})
        opt.step()
    torch.save({"params": {n: p.detach().clone() for n, p in model.named_parameters()},
                "rank": client.rank, "reports": reports}, out)
    client.close()


if __name__ == "__main__":
    main(sys.argv)
