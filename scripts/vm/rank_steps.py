#!/usr/bin/env python3
"""One of two training ranks (rank 0 or 1) of the VM checks: one per guest in
scripts/vm/rdma-cluster.sh, both on one host in scripts/vm/systemd-check.sh.
Averages a 4 MiB FP32 tensor (chunks above any eager threshold: the
rendezvous path) and a small one with the other rank through its gift-worker
at SOCKET, and checks each step's average bit for bit against the exact FP32
average (codecs FP32 both ways), or within --max-error for a quantized codec.

    rank_steps.py SOCKET RANK --steps N [--first S] [--max-error E]
"""
import argparse
import sys
import time

import torch

from gift_ps.client import WorkerClient

SHAPES = {"w": (1024, 1024), "b": (1000,)}


def values(step, rank):
    g = torch.Generator().manual_seed(1000 * step + rank)
    return {name: torch.randn(shape, generator=g) for name, shape in SHAPES.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("rank", type=int)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--max-error", type=float, default=0.0)
    args = ap.parse_args()
    worst = 0.0
    with WorkerClient(args.socket, timeout=300) as client:
        grads = client.register(SHAPES)
        for step in range(args.first, args.first + args.steps):
            mine = values(step, args.rank)
            other = values(step, 1 - args.rank)
            for name in SHAPES:
                grads[name].copy_(mine[name])
            t0 = time.monotonic()
            result = client.push_pull(step)
            took = time.monotonic() - t0
            for name in SHAPES:
                want = (mine[name] + other[name]) * 0.5
                err = float((grads[name] - want).norm() / want.norm())
                worst = max(worst, err)
                exact = torch.equal(grads[name], want)
                if args.max_error == 0.0 and not exact:
                    print(f"rank {args.rank} step {step} {name}: not bit-exact (error {err:.3g})")
                    return 1
                if err > args.max_error and not exact:
                    print(f"rank {args.rank} step {step} {name}: error {err:.3g} > {args.max_error}")
                    return 1
            print(f"rank {args.rank} step {step}: {took:.2f} s, {result.bytes_sent} B pushed, "
                  f"{'bit-exact' if args.max_error == 0.0 else f'worst error {worst:.3g}'}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
