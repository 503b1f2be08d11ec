#!/usr/bin/python3
"""The gloo all-reduce baseline of `gift-bench cluster`.

Averages tensors of the given shapes (as --dtype: fp32, or bf16/fp16 for a
2-byte all-reduce) across --world processes on loopback with
torch.distributed (backend gloo, init tcp://127.0.0.1:PORT, one intra-op
thread per process), --warmup untimed then --steps timed steps, and prints
one JSON line on stdout:

  {"backend": "gloo", "world": P, "mode": M, "dtype": T,
   "collectives_per_step": K, "fp32_bytes": B, "wire_bytes": B2,
   "torch": VERSION, "step_seconds": [[rank 0 times], ...],
   "cpu_s_per_step": [rank 0, ...], "links": [...]}

With --placement FILE (the JSON of tools/gift-cluster/local_cluster.h, as
scripts/netlab.sh writes it) rank r runs under the prefix of workers[r]
(e.g. `ip netns exec NS`), the master is rank 0's address, gloo uses the
worker's device (GLOO_SOCKET_IFNAME), and each rank reports the bytes that
crossed that device during the timed steps ("links": one entry per rank,
per step, from /proc/self/net/dev). This launcher itself opens no socket.

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
DTYPES = {"fp32": ("float32", 4), "bf16": ("bfloat16", 2), "fp16": ("float16", 2)}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--mode", choices=["buckets", "flat", "per-tensor"], default="buckets")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    p.add_argument("--placement", default="", help="JSON placement file: one rank per worker")
    p.add_argument("--master-addr", default="127.0.0.1", help="internal: rank 0's address")
    p.add_argument("--device", default="", help="internal: the device whose bytes are counted")
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


def net_dev(device):
    """(rx_bytes, tx_bytes, rx_packets, tx_packets, TCP RetransSegs) of
    `device` in this process's network namespace, or None."""
    if not device:
        return None
    counters = None
    with open("/proc/self/net/dev") as f:
        for line in f:
            name, sep, rest = line.partition(":")
            if sep and name.strip() == device:
                v = [int(x) for x in rest.split()]
                counters = [v[0], v[8], v[1], v[9]]
    if counters is None:
        return None
    with open("/proc/self/net/snmp") as f:
        tcp = [line.split() for line in f if line.startswith("Tcp:")]
    counters.append(int(dict(zip(tcp[0], tcp[1]))["RetransSegs"]))
    return counters


def run_rank(args, shapes):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://{args.master_addr}:{args.port}",
        rank=args.rank,
        world_size=args.world,
    )
    dtype = getattr(torch, DTYPES[args.dtype][0])
    gen = torch.Generator().manual_seed(1000 + args.rank)
    buffers = []
    for group in groups(shapes, args.mode):
        n = sum(numel(shapes[i]) for i in group)
        buffers.append(torch.randn(n, generator=gen).to(dtype))
    times = []
    counters = [None, None]
    cpu = [0.0, 0.0]
    for step in range(args.warmup + args.steps + 1):
        dist.barrier()
        if step == args.warmup:  # the timed steps begin (after the barrier)
            counters[0], cpu[0] = net_dev(args.device), time.process_time()
        if step == args.warmup + args.steps:  # ... and ended before this barrier
            counters[1], cpu[1] = net_dev(args.device), time.process_time()
            break
        start = time.perf_counter()
        for b in buffers:
            dist.all_reduce(b, op=dist.ReduceOp.SUM)
            b.div_(args.world)
        elapsed = time.perf_counter() - start
        if step >= args.warmup:
            times.append(elapsed)
    dist.barrier()
    dist.destroy_process_group()
    report = {
        "rank": args.rank,
        "step_seconds": times,
        "collectives": len(buffers),
        "cpu_s_per_step": (cpu[1] - cpu[0]) / max(1, args.steps),
    }
    if counters[0] is not None and counters[1] is not None:
        d = [(b - a) / max(1, args.steps) for a, b in zip(counters[0], counters[1])]
        report["link"] = {
            "device": args.device,
            "rx_bytes_per_step": d[0],
            "tx_bytes_per_step": d[1],
            "rx_packets_per_step": d[2],
            "tx_packets_per_step": d[3],
            "tcp_retrans_segs_per_step": d[4],
        }
    print(json.dumps(report))
    return 0


def rank_commands(args):
    """(argv, extra environment, host label) of every rank."""
    base = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:]
    if not args.placement:
        return [(base + ["--rank", str(r)], {}, "127.0.0.1") for r in range(args.world)]
    with open(args.placement) as f:
        workers = json.load(f).get("workers", [])
    if len(workers) < args.world:
        raise ValueError(f"{args.placement} places {len(workers)} workers, --world is {args.world}")
    master = workers[0].get("address", "")
    if not master:
        raise ValueError(f"{args.placement}: workers[0] has no address")
    out = []
    for r in range(args.world):
        w = workers[r]
        argv = list(w.get("prefix", [])) + base + ["--rank", str(r), "--master-addr", master]
        env = {}
        if w.get("device"):
            argv += ["--device", w["device"]]
            env["GLOO_SOCKET_IFNAME"] = w["device"]
        out.append((argv, env, w.get("host", w.get("address", ""))))
    return out


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
    try:
        commands = rank_commands(args)
    except (OSError, ValueError) as e:
        print(json.dumps({"error": f"placement: {e}"}))
        return 1
    children = []
    for argv, extra, _ in commands:
        env = dict(os.environ)
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        env.update(extra)
        env["OMP_NUM_THREADS"] = "1"
        children.append(
            subprocess.Popen(
                argv,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                text=True,
            )
        )
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
                "dtype": args.dtype,
                "collectives_per_step": reports[0]["collectives"],
                "fp32_bytes": sum(numel(s) for s in shapes) * 4,
                "wire_bytes": sum(numel(s) for s in shapes) * DTYPES[args.dtype][1],
                "threads_per_process": 1,
                "torch": torch.__version__,
                "step_seconds": [reports[r]["step_seconds"] for r in range(args.world)],
                "cpu_s_per_step": [reports[r]["cpu_s_per_step"] for r in range(args.world)],
                "links": [
                    dict(reports[r]["link"], host=commands[r][2], kind="worker")
                    for r in range(args.world)
                    if "link" in reports[r]
                ],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
