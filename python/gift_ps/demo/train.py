"""One data-parallel training process of the demo (started by gift_ps.demo, one per rank).

    python3 -m gift_ps.demo.train SPEC.json RANK

SPEC.json (written by the demo driver) holds the model, data, optimizer and
backend settings. The process trains the byte model on its shard of every
global batch, averages the gradients after each backward through the backend
(the GIFT-PS worker of its rank, with or without pushes overlapping
backward; DistributedDataParallel over gloo, FP32 or with the FP16
compression hook, as the baseline; or, for development, a plain gloo
all-reduce), applies AdamW,
and writes one JSON line per step to <run_dir>/rank<RANK>.jsonl; rank 0 also
evaluates the validation loss every `eval_every` steps and prints each
evaluation as a JSON line on stdout (the driver's progress). At the end every
rank writes a checksum of its parameters, so the driver can check that the
ranks stayed in step.
"""

import hashlib
import json
import math
import os
import sys
import time

_T_START = time.perf_counter()

import torch  # noqa: E402

from gift_ps.demo import model as model_lib  # noqa: E402
from gift_ps.demo.data import Corpus  # noqa: E402


class LocalBackend:
    """Exact FP32 averaging with torch.distributed (gloo): a stand-in for developing the demo."""

    name = "local"

    def __init__(self, model, rank, world, address):
        import torch.distributed as dist

        self.dist = dist
        dist.init_process_group("gloo", init_method=f"tcp://{address}", rank=rank, world_size=world)
        self.params = [p for p in model.parameters()]
        self.world = world

    def sync(self, step, measure_error):
        t0 = time.perf_counter()
        flat = torch.cat([p.grad.reshape(-1) for p in self.params])
        self.dist.all_reduce(flat)
        flat /= self.world
        offset = 0
        for p in self.params:
            n = p.numel()
            p.grad.copy_(flat[offset : offset + n].view_as(p.grad))
            offset += n
        return {"sync_s": time.perf_counter() - t0, "bytes": None, "bytes_pulled": None, "errors": None, "transformed": None}

    def close(self):
        self.dist.destroy_process_group()


class DDPBackend:
    """torch DistributedDataParallel over gloo (FP32 buckets, or the FP16 compression hook):
    the baseline the service is compared with. The all-reduces run inside backward."""

    name = "ddp"

    def __init__(self, model, rank, world, address, hook):
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel

        self.dist = dist
        dist.init_process_group("gloo", init_method=f"tcp://{address}", rank=rank, world_size=world)
        self.ddp = DistributedDataParallel(model)
        if hook == "fp16":
            from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

            self.ddp.register_comm_hook(None, fp16_compress_hook)

    def loss(self, x, y):
        return torch.nn.functional.cross_entropy(self.ddp(x).reshape(-1, model_lib.VOCAB), y.reshape(-1))

    def sync(self, step, measure_error):
        return {"sync_s": 0.0, "bytes": None, "bytes_pulled": None, "errors": None, "transformed": None}

    def close(self):
        self.dist.destroy_process_group()


class ServiceBackend:
    """Averaging through the rank's GIFT-PS worker (gift_ps.WorkerClient + GradientSync);
    with overlap, each bucket of gradients is pushed as soon as backward finished it."""

    name = "service"

    def __init__(self, model, socket, overlap=False, bucket_bytes=25 * 2**20, collect_activations_every=0):
        from gift_ps import GradientSync, WorkerClient

        self.client = WorkerClient(socket)
        self.sync_ = GradientSync(model, self.client, overlap=overlap, bucket_bytes=bucket_bytes, start_step=1,
                                  collect_activations_every=collect_activations_every)
        self.matrices = {name for name, p in model.named_parameters() if p.dim() == 2}

    def begin(self, step, measure_error):
        """Before the step's backward: a measured step is not started early."""
        self.sync_.begin_step(step, measure_error=measure_error)

    def sync(self, step, measure_error):
        t0 = time.perf_counter()
        res = self.sync_.sync(step, measure_error=measure_error)
        out = {
            "sync_s": time.perf_counter() - t0,
            # Statistics (per-worker sketches) counted in: they travel for the gradients' sake.
            "bytes": int(sum(t.bytes_sent for t in res.tensors)) + res.statistics_bytes_sent,
            "bytes_pulled": int(sum(t.bytes_received for t in res.tensors)) + res.statistics_bytes_received,
            "transformed": sum(1 for t in res.tensors if t.transformed),
            "errors": None,
        }
        if measure_error:
            out["errors"] = {t.name: _finite_or_none(t.rel_l2_error) for t in res.tensors}
        return out

    def close(self):
        for obj in (self.sync_, self.client):
            close = getattr(obj, "close", None)
            if close is not None:
                close()


def _finite_or_none(x):
    if x is None:
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def param_checksum(model):
    h = hashlib.sha256()
    for name, p in model.named_parameters():
        h.update(name.encode())
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def lr_at(spec, step):
    """Linear warm-up, then cosine decay to min_lr_frac of the peak at the last step."""
    lr, warmup, steps = spec["lr"], spec["warmup"], spec["steps"]
    if step <= warmup:
        return lr * step / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    lo = spec["min_lr_frac"]
    return lr * (lo + (1 - lo) * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))


@torch.no_grad()
def evaluate(model, batches):
    """[(summed loss, predictions)] per batch."""
    model.eval()
    out = [(model.loss(x, y).item() * y.numel(), y.numel()) for x, y in batches]
    model.train()
    return out


def mean_loss(parts):
    return sum(s for s, _ in parts) / sum(n for _, n in parts)


def main(argv):
    if len(argv) != 2 or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv and argv[0] in ("-h", "--help") else 64
    with open(argv[0]) as f:
        spec = json.load(f)
    rank = int(argv[1])
    world = spec["world"]
    torch.set_num_threads(1)
    torch.manual_seed(spec["seed"])  # the same initial parameters on every rank

    with open(spec["text"], "rb") as f:
        corpus = Corpus(f.read(), spec["model"]["context"], source=spec["text"])
    model = model_lib.ByteLM(model_lib.ModelConfig(**spec["model"]))
    opt = model_lib.adamw(model, spec["lr"], spec["weight_decay"])
    # Validation: a fixed list of windows; the evaluations during training use
    # its first val_windows, the final one all final_val_windows of them.
    eb = spec["eval_batch"]
    n_regular = -(-spec["val_windows"] // eb)
    final_val = corpus.validation(max(spec["final_val_windows"], n_regular * eb), eb) if rank == 0 else None
    val_batches = final_val[:n_regular] if rank == 0 else None

    # Every parameter gets a gradient buffer before the first backward (zeros,
    # cleared in place every step), so a backend can register them once.
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    if spec["backend"] == "local":
        backend = LocalBackend(model, rank, world, spec["local_address"])
    elif spec["backend"] == "ddp":
        backend = DDPBackend(model, rank, world, spec["local_address"], spec.get("ddp_hook"))
    else:
        backend = ServiceBackend(model, spec["sockets"][rank], overlap=spec.get("overlap", False),
                                 bucket_bytes=spec.get("bucket_bytes", 25 * 2**20),
                                 collect_activations_every=spec.get("collect_activations_every", 0))
    loss_of = getattr(backend, "loss", model.loss)

    setup_s = time.perf_counter() - _T_START
    log = open(os.path.join(spec["run_dir"], f"rank{rank}.jsonl"), "w")
    steps, eval_every, measure_every = spec["steps"], spec["eval_every"], spec["measure_every"]
    recent = []
    t_start = time.perf_counter()
    t_loop_wall = time.time()
    for step in range(1, steps + 1):
        t0 = time.perf_counter()
        x, y = corpus.shard(spec["seed"], step, spec["batch"], rank, world)
        for p in model.parameters():
            p.grad.zero_()
        measure = measure_every > 0 and step % measure_every == 0
        if hasattr(backend, "begin"):
            backend.begin(step, measure)
        loss = loss_of(x, y)
        loss.backward()
        t1 = time.perf_counter()
        res = backend.sync(step, measure)
        for g in opt.param_groups:
            g["lr"] = lr_at(spec, step)
        opt.step()
        t2 = time.perf_counter()
        rec = {
            "step": step,
            "loss": loss.item(),
            "step_s": t2 - t0,
            "compute_s": (t1 - t0) + (t2 - t1 - res["sync_s"]),
            "sync_s": res["sync_s"],
            "bytes": res["bytes"],
            "bytes_pulled": res["bytes_pulled"],
            "transformed": res["transformed"],
        }
        if res["errors"] is not None:
            rec["errors"] = res["errors"]
        recent.append(rec)
        if rank == 0 and (step % eval_every == 0 or step == steps):
            te = time.perf_counter()
            if step == steps:
                parts = evaluate(model, final_val)
                rec["val_loss"] = mean_loss(parts[:n_regular])
                rec["final_val_loss"] = mean_loss(parts)
            else:
                rec["val_loss"] = mean_loss(evaluate(model, val_batches))
            rec["eval_s"] = time.perf_counter() - te
            event = {
                "event": "eval",
                "step": step,
                # Means over the steps since the last evaluation (rank 0).
                "train_loss": sum(r["loss"] for r in recent) / len(recent),
                "val_loss": rec["val_loss"],
                "final_val_loss": rec.get("final_val_loss"),
                "step_s": sum(r["step_s"] for r in recent) / len(recent),
                "sync_s": sum(r["sync_s"] for r in recent) / len(recent),
                "elapsed_s": time.perf_counter() - t_start,
            }
            print(json.dumps(event), flush=True)
            recent = []
        log.write(json.dumps(rec) + "\n")
        log.flush()
    final = {
        "final": True,
        "checksum": param_checksum(model),
        "wall_s": time.perf_counter() - t_start,
        "setup_s": setup_s,
        "t_loop_start": t_loop_wall,
    }
    log.write(json.dumps(final) + "\n")
    log.close()
    backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
