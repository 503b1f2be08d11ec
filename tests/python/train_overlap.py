"""The training processes of test_overlap_cluster: a small MLP, two
micro-batches per step (gradient accumulation), the gradients averaged
through GIFT in one of three ways.

    /usr/bin/python3 train_overlap.py SOCKET MODE FIRST_STEP STEPS OUT.pt [PORT]

MODE: "sequential" (GradientSync, sync after backward), "overlap"
(GradientSync(overlap=True): rank 0 starts every gradient on its own, rank 1
in buckets of 3000 bytes, so the two workers start the step's tensors in
different batches; the first micro-batch under no_sync()), "ddp"
(DistributedDataParallel over gloo on 127.0.0.1:PORT with gift_hook, small
buckets, the first micro-batch under DDP's no_sync()). The data of a process
depends on its GIFT rank, so runs on different clusters see the same
gradients per rank. Saves the final parameters, every step's averaged
gradients and the rank to OUT.pt.
"""

import sys

import torch
from torch import nn

LR = 0.05


def make_model() -> nn.Module:
    torch.manual_seed(99)
    return nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 48), nn.Tanh(),
                         nn.Linear(48, 8))


def loss_of(model, rank: int, step: int, micro: int):
    g = torch.Generator().manual_seed(10000 * step + 100 * rank + micro)
    x = torch.randn(32, 16, generator=g)
    y = torch.randn(32, 8, generator=g)
    return nn.functional.mse_loss(model(x), y)


def main(argv):
    socket, mode, first_step, steps, out = argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5]
    torch.set_num_threads(1)
    from gift_ps import GiftHookState, GradientSync, WorkerClient, gift_hook

    client = WorkerClient(socket, connect_timeout=30)
    model = make_model()
    grads = []
    if mode == "ddp":
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel
        state = GiftHookState(model, client, start_step=first_step)
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{int(argv[6])}",
                                rank=client.rank, world_size=2)
        trained = DistributedDataParallel(model, bucket_cap_mb=0.004)
        trained.register_comm_hook(state, gift_hook)
        no_sync = trained.no_sync
    else:
        overlap = mode == "overlap"
        sync = GradientSync(model, client, overlap=overlap, start_step=first_step,
                            bucket_bytes=0 if client.rank == 0 else 3000)
        trained = model
        no_sync = sync.no_sync
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for i in range(steps):
        step = first_step + i
        opt.zero_grad()
        with no_sync():
            loss_of(trained, client.rank, step, 0).backward()
        loss_of(trained, client.rank, step, 1).backward()
        if mode != "ddp":
            sync.sync(step)
        grads.append({n: p.grad.detach().clone() for n, p in model.named_parameters()})
        opt.step()
    torch.save({"params": {n: p.detach().clone() for n, p in model.named_parameters()},
                "grads": grads, "rank": client.rank}, out)
    client.close()


if __name__ == "__main__":
    main(sys.argv)
