#!/usr/bin/python3
"""The gloo all-reduce baseline of `gift-bench cluster`.

Averages FP32 tensors of the given shapes across --world processes on
loopback with torch.distributed (backend gloo, init tcp://127.0.0.1:PORT,
one intra-op thread per process), --warmup untimed then --steps timed steps,
and prints one JSON line on stdout:

  {"backend": "gloo", "world": P, "mode": M, "collectives_per_step": K,
   "fp32_bytes": B, "torch": VERSION, "step_seconds": [[rank 0 times], ...]}

A step is: a barrier (so every rank starts together, as the cluster bench's
workers do), then all_reduce(SUM) of every buffer and a division by P (the
average), timed on each rank until its last collective returns. --mode:
  buckets     the tensors packed into flat buffers of at most 25 MiB, in
              order, as DDP's default gradient buckets (bucket_cap_mb=25);
  flat        one flat buffer of all tensors;
  per-tensor  one all_reduce per tensor.
The buffers are packed once before the timed loop (DDP's gradients are views
of its buckets), so no copy is timed.

Run it with a Python that has torch (Debian python3-torch: /usr/bin/python3).
Without torch it prints {"skipped": REASON} and exits 0.
"""

import argparse
import json
import os
import subprocess
import sys
import time

BUCKET_BYTES = 25 * 1024 * 1024


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--mode", choices=["buckets", "flat", "per-tensor"], default="buckets")
    p.add_argument("--shapes", required=True, help='JSON list of shapes, e.g. "[[512,512],[512]]"')
    p.add_argument("--rank", type=int, default=-1, help="internal: run one rank")
    p.add_argument("--timeout", type=float, default=300.0)
    return p.parse_args()


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def groups(shapes, mode):
    """Lists of tensor indices, one list per collective."""
    if mode == "per-tensor":
        return [[i] for i in range(len(shapes))]
    if mode == "flat":
        return [list(range(len(shapes)))]
    out, current, size = [], [], 0
    for i, s in enumerate(shapes):
        b = numel(s) * 4
        if current and size + b > BUCKET_BYTES:
            out.append(current)
            current, size = [], 0
        current.append(i)
        size += b
    if current:
        out.append(current)
    return out


def run_rank(args, shapes):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{args.port}",
        rank=args.rank,
        world_size=args.world,
    )
    gen = torch.Generator().manual_seed(1000 + args.rank)
    buffers = []
    for group in groups(shapes, args.mode):
        buffers.append(torch.randn(sum(numel(shapes[i]) for i in group), generator=gen))
    times = []
    for step in range(args.warmup + args.steps):
        dist.barrier()
        start = time.perf_counter()
        for b in buffers:
            dist.all_reduce(b, op=dist.ReduceOp.SUM)
            b.div_(args.world)
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            times.append(elapsed)
    dist.barrier()
    dist.destroy_process_group()
    print(json.dumps({"rank": args.rank, "step_seconds": times, "collectives": len(buffers)}))
    return 0


def main():
    args = parse_args()
    shapes = json.loads(args.shapes)
    if args.rank >= 0:
        return run_rank(args, shapes)
    try:
        import torch  # noqa: F401 (only checks it is there)
        import torch.distributed as dist
    except ImportError as e:
        print(json.dumps({"skipped": f"{sys.executable} has no torch: {e}"}))
        return 0
    if not dist.is_available() or not dist.is_gloo_available():
        print(json.dumps({"skipped": "torch.distributed with gloo is not available"}))
        return 0
    env = dict(os.environ)
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    env["OMP_NUM_THREADS"] = "1"
    children = [
        subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--rank", str(r)] + sys.argv[1:],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for r in range(args.world)
    ]
    reports, errors = {}, []
    deadline = time.monotonic() + args.timeout
    for r, child in enumerate(children):
        try:
            out, err = child.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for c in children:
                c.kill()
            print(json.dumps({"error": f"rank {r} did not finish within {args.timeout} s"}))
            return 1
        if child.returncode != 0:
            errors.append(f"rank {r} exited {child.returncode}: {err.strip()[-400:]}")
            continue
        lines = [l for l in out.splitlines() if l.strip()]
        reports[r] = json.loads(lines[-1])
    if errors:
        print(json.dumps({"error": "; ".join(errors)}))
        return 1
    import torch

    print(
        json.dumps(
            {
                "backend": "gloo",
                "world": args.world,
                "mode": args.mode,
                "collectives_per_step": reports[0]["collectives"],
                "fp32_bytes": sum(numel(s) for s in shapes) * 4,
                "threads_per_process": 1,
                "torch": torch.__version__,
                "step_seconds": [reports[r]["step_seconds"] for r in range(args.world)],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
