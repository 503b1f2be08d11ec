"""GIFT-PS demo: train one byte-level language model with FP32, BF16, direct FP8 and GIFT FP8 communication.

Run as `make demo ARGS="..."`, scripts/demo.sh BUILD_DIR ..., or
PYTHONPATH=python /usr/bin/python3 -m gift_ps.demo ...

For each configuration it starts a fresh local cluster (gift-cluster: a
coordinator, 2 aggregator shards and 4 workers on loopback), sets the
configuration's policy with giftctl, and trains the same model from the same
seed on the same data order with 4 data-parallel processes, each averaging its
gradients through its own worker after every backward. The service measures
the relative L2 error of the averaged gradient against the exact average on
sampled steps. At the end it prints a table and writes it as JSON, with a plot
of the loss curves, and each configuration's time to the FP32 run's final
validation loss.

Configurations without the service (ddp-fp32, ddp-fp16) train with
DistributedDataParallel over gloo instead. With --netlab-rate RATE (root
only) the demo runs itself again inside scripts/netlab.sh exec: the daemons
on the testbed's hosts (gift-cluster --placement, UCX over TCP), each gloo
rank on its worker host, every host's link shaped to RATE each way; the
GIFT training processes reach their workers over Unix sockets.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time

from gift_ps.demo.configs import CONFIGS, DDP_HOOKS, DEFAULT_CONFIGS, FULL, OVERLAP, QUICK, collects_activations
from gift_ps.demo.data import Corpus, DataError, load_bytes
from gift_ps.demo.processes import REPO, Cluster, DemoError, free_port, run_ranks, set_policy, tensor_choices
from gift_ps.demo.report import choice_lines, fmt, overlap_lines, overlap_rows, plot, summarize, summary_lines, table


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="gift_ps.demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="Configurations (--configs):\n"
        + "\n".join(f"  {k:10s} {v[3]}" for k, v in CONFIGS.items())
        + f"\n\nDefaults: {FULL}\n--quick:  {QUICK}",
    )
    p.add_argument("--build-dir", default="build", help="the CMake build tree with gift-cluster and giftctl (default: build)")
    p.add_argument(
        "--bin-dir",
        default=None,
        help="a directory holding gift-cluster, giftctl, gift-coordinator, gift-server and gift-worker "
        "(instead of the build tree's)",
    )
    p.add_argument("--out", default="out/demo", help="output directory (default: out/demo)")
    p.add_argument("--quick", action="store_true", help="a short run of a minute or two (smaller model, fewer steps)")
    p.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"comma list of configurations (default: {DEFAULT_CONFIGS})")
    what = {
        "steps": "training steps",
        "d_model": "model width",
        "layers": "transformer blocks",
        "heads": "attention heads",
        "mlp_hidden": "SwiGLU hidden width",
        "context": "sequence length in bytes",
        "batch": "global batch in sequences (split over the processes)",
        "eval_every": "validation loss every N steps (rank 0)",
        "measure_every": "the service measures the gradient error every N steps (0: never)",
    }
    for k in FULL:
        p.add_argument("--" + k.replace("_", "-"), type=int, default=None, metavar="N", help=f"{what[k]} (default {FULL[k]}, --quick {QUICK[k]})")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate of AdamW (default 3e-3)")
    p.add_argument("--warmup", type=int, default=None, help="learning-rate warm-up steps (default: steps/10)")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--val-windows", type=int, default=None, help="validation windows per evaluation (default 64)")
    p.add_argument("--final-val-windows", type=int, default=None, help="validation windows of the final evaluation (default 512)")
    p.add_argument("--workers", type=int, default=4, help="data-parallel processes (default 4)")
    p.add_argument("--servers", type=int, default=2, help="aggregator shards (default 2)")
    p.add_argument("--text", default=None, help="plain-text corpus instead of the KJV")
    p.add_argument(
        "--backend",
        choices=("service", "local"),
        default="service",
        help="service (default): average through a GIFT-PS cluster; local: a development aid that "
        "averages exactly with torch.distributed (gloo), without the service (no codecs, no errors)",
    )
    p.add_argument("--python", default=sys.executable, help="the Python that runs the training processes")
    p.add_argument(
        "--netlab-rate",
        default=None,
        metavar="RATE",
        help="run every configuration through the netlab testbed (scripts/netlab.sh exec: one network namespace per "
        "host, links shaped to RATE each way with tc tbf, e.g. 200mbit; needs root) instead of loopback",
    )
    p.add_argument(
        "--target-tolerance",
        type=float,
        default=0.002,
        metavar="X",
        help="a configuration reaches the FP32 run's final validation loss when an evaluation is at most X above it "
        "(nats/byte, default 0.002: exact runs differ in summation order)",
    )
    p.add_argument(
        "--overlap-bucket-kib",
        type=int,
        default=1024,
        metavar="N",
        help="gift-overlap: start gradients on the worker in buckets of N KiB (default 1024, DDP's first bucket)",
    )
    args = p.parse_args(argv)
    size = QUICK if args.quick else FULL
    for k, v in size.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.warmup is None:
        args.warmup = max(1, args.steps // 10)
    if args.val_windows is None:
        args.val_windows = 32 if args.quick else 64
    if args.final_val_windows is None:
        args.final_val_windows = 128 if args.quick else 512
    args.configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    for c in args.configs:
        if c not in CONFIGS:
            p.error(f"unknown configuration '{c}' (known: {', '.join(CONFIGS)})")
    if len(set(args.configs)) != len(args.configs):
        p.error("--configs names a configuration twice")
    for k in ("steps", "d_model", "layers", "heads", "mlp_hidden", "context", "batch", "eval_every", "workers", "servers", "val_windows", "final_val_windows"):
        if getattr(args, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be at least 1")
    if args.measure_every < 0:
        p.error("--measure-every must be >= 0 (0: never)")
    if args.overlap_bucket_kib < 0:
        p.error("--overlap-bucket-kib must be >= 0")
    if args.batch % args.workers:
        p.error(f"--batch ({args.batch}) must be a multiple of --workers ({args.workers})")
    if args.d_model % args.heads or (args.d_model // args.heads) % 2:
        p.error("--d-model must be a multiple of --heads with an even head size")
    return args


# ---- main ---------------------------------------------------------------------------


def run_in_netlab(args, argv):
    """Runs this demo again inside a netlab testbed (scripts/netlab.sh exec), which tears it down at the end."""
    if os.geteuid() != 0:
        print(
            "demo: --netlab-rate needs root: the netlab testbed creates network namespaces, veth links and tc qdiscs "
            "(CAP_NET_ADMIN, CAP_SYS_ADMIN); run it as root, or without --netlab-rate on loopback",
            file=sys.stderr,
        )
        return 77
    script = os.path.join(REPO, "scripts", "netlab.sh")
    cmd = [script, "exec", "--workers", str(args.workers), "--servers", str(args.servers), "--rates", args.netlab_rate,
           "--run-timeout", "7200", "--", sys.executable, "-m", "gift_ps.demo"] + argv
    print(f"demo: through netlab at {args.netlab_rate}: {' '.join(cmd[:8])} ...", flush=True)
    return subprocess.call(cmd)


def netlab_placement():
    """The testbed's placement inside `netlab.sh exec` (NETLAB_PLACEMENT), else None."""
    path = os.environ.get("NETLAB_PLACEMENT")
    if not path:
        return None, None
    with open(path) as f:
        return path, json.load(f)


def time_to_loss(run_dir, target):
    """(training seconds, step) at rank 0's first evaluation at or below `target`: the sum of its step times up to
    that step, evaluations excluded; (None, None) when no evaluation reached it."""
    seconds = 0.0
    with open(os.path.join(run_dir, "rank0.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if "step" not in rec:
                continue
            seconds += rec["step_s"]
            value = rec.get("final_val_loss", rec.get("val_loss"))
            if value is not None and value <= target:
                return seconds, rec["step"]
    return None, None


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    placement_path, placement = netlab_placement()
    if args.netlab_rate and placement is None:
        return run_in_netlab(args, argv)
    t_begin = time.monotonic()
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    build = os.path.abspath(args.build_dir)
    cluster_bin = os.path.join(build, "tools", "gift-cluster", "gift-cluster")
    giftctl = os.path.join(build, "tools", "giftctl", "giftctl")
    bin_dir = os.path.abspath(args.bin_dir) if args.bin_dir else None
    if bin_dir:
        cluster_bin, giftctl = os.path.join(bin_dir, "gift-cluster"), os.path.join(bin_dir, "giftctl")
    if args.backend == "service":
        missing = [b for b in (cluster_bin, giftctl) if not os.access(b, os.X_OK)]
        if missing:
            print(f"demo: {', '.join(missing)} not built (make build, or ninja -C {args.build_dir} gift-cluster giftctl "
                  "gift-coordinator gift-server gift-worker)", file=sys.stderr)
            return 1
        gen = os.path.join(build, "python", "gen")
        if "GIFT_PY_GEN" not in os.environ and os.path.isdir(gen):
            os.environ["GIFT_PY_GEN"] = gen
    try:
        data, source = load_bytes(args.text)
        corpus = Corpus(data, args.context, source=source)
    except (DataError, OSError) as e:
        print(f"demo: {e}", file=sys.stderr)
        return 1
    text_path = os.path.join(out, "corpus.txt")
    with open(text_path, "wb") as f:
        f.write(data)
    del data

    from gift_ps.demo.model import ByteLM, ModelConfig

    mcfg = ModelConfig.of(args)
    m = ByteLM(mcfg)
    n_params = sum(p.numel() for p in m.parameters())
    matrices = sorted(n for n, p in m.named_parameters() if p.dim() == 2)
    n_tensors = len(list(m.parameters()))
    del m
    link = f"netlab at {args.netlab_rate} each way per host" if placement else "loopback"
    print(f"GIFT-PS demo: {', '.join(args.configs)}; backend {args.backend}; {link}", flush=True)
    print(f"  data:  {corpus.describe()}", flush=True)
    print(
        f"  model: byte-level Llama-style LM, d_model {args.d_model}, {args.layers} layers, {args.heads} heads, "
        f"SwiGLU {args.mlp_hidden}, context {args.context}: {n_params} parameters in {n_tensors} tensors "
        f"({len(matrices)} matrices)",
        flush=True,
    )
    print(
        f"  train: {args.workers} processes x {args.batch // args.workers} sequences (global batch {args.batch}), "
        f"{args.steps} steps, AdamW lr {args.lr:g} (warm-up {args.warmup}, cosine), seed {args.seed}; "
        f"validation every {args.eval_every} steps, "
        + (f"gradient error measured every {args.measure_every} steps" if args.measure_every > 0 else "gradient error not measured"),
        flush=True,
    )
    for c in args.configs:
        print(f"  {c:10s} {CONFIGS[c][3]}", flush=True)

    results, timings = [], {}
    for name in args.configs:
        run_dir = os.path.join(out, name)
        shutil.rmtree(run_dir, ignore_errors=True)
        os.makedirs(run_dir)
        spec = {
            "backend": args.backend,
            "world": args.workers,
            "seed": args.seed,
            "text": text_path,
            "model": {k: getattr(mcfg, k) for k in ("d_model", "layers", "heads", "mlp_hidden", "context")},
            "steps": args.steps,
            "batch": args.batch,
            "lr": args.lr,
            "warmup": args.warmup,
            "min_lr_frac": 0.1,
            "weight_decay": args.weight_decay,
            "eval_every": args.eval_every,
            "measure_every": args.measure_every if args.backend == "service" else 0,
            "val_windows": args.val_windows,
            "final_val_windows": args.final_val_windows,
            "eval_batch": 32,
            "run_dir": run_dir,
        }
        if name in DDP_HOOKS:
            spec["backend"], spec["ddp_hook"], spec["measure_every"] = "ddp", DDP_HOOKS[name], 0
        elif args.backend == "service":
            spec["overlap"] = name in OVERLAP
            spec["bucket_bytes"] = args.overlap_bucket_kib * 1024
            spec["collect_activations_every"] = 1 if collects_activations(name) else 0
        cluster, policy = None, None
        t0 = time.monotonic()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            if spec["backend"] == "service":
                print(f"[{name}] starting gift-cluster ({args.servers} servers, {args.workers} workers)", flush=True)
                cluster = Cluster(cluster_bin, args.servers, args.workers, os.path.join(run_dir, "cluster"), bin_dir,
                                  placement_path)
                policy = set_policy(giftctl, cluster.coordinator, name, placement["coordinator"]["prefix"] if placement else ())
                print(f"[{name}] cluster at {cluster.coordinator}; giftctl {policy}", flush=True)
                spec["sockets"] = cluster.sockets
            elif placement is not None:  # gloo ranks on the worker hosts, across their links
                workers = placement["workers"]
                spec["local_address"] = f"{workers[0]['address']}:{free_port()}"
                spec["rank_prefix"] = [w["prefix"] for w in workers]
                spec["rank_env"] = {"GLOO_SOCKET_IFNAME": workers[0]["device"]}
            else:
                spec["local_address"] = f"127.0.0.1:{free_port()}"
            t_start = time.monotonic()

            def progress(ev, name=name):
                if ev.get("event") == "eval":
                    print(
                        f"[{name}] step {ev['step']:5d}/{args.steps}  train {ev['train_loss']:.4f}  val {ev['val_loss']:.4f}  "
                        f"{ev['step_s']:.3f} s/step (sync {ev['sync_s']:.3f})  {ev['elapsed_s']:6.1f} s",
                        flush=True,
                    )
                    if ev.get("final_val_loss") is not None:
                        print(f"[{name}] final validation loss {ev['final_val_loss']:.4f} ({args.final_val_windows} windows)", flush=True)

            run_ranks(args, spec, run_dir, progress)
            train_s = time.monotonic() - t_start
            choices = None
            if cluster is not None and CONFIGS[name][2]:  # what each GIFT owner chose, before the cluster stops
                choices = tensor_choices(giftctl, cluster.coordinator, placement["coordinator"]["prefix"] if placement else ())
        except DemoError as e:
            print(f"demo: {name}: {e}", file=sys.stderr)
            if cluster is not None:
                cluster.stop()
            return 1
        except KeyboardInterrupt:
            if cluster is not None:
                cluster.stop()
            raise
        if cluster is not None:
            code = cluster.stop()
            if code != 0:
                print(f"[{name}] warning: gift-cluster exited {code}; see {cluster.stderr_path}", flush=True)
        total = time.monotonic() - t0
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu_s = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
        res = summarize(name, args, run_dir, set(matrices), train_s, policy, spec["t_spawn"])
        res["choices"] = None if choices is None else {m: choices.get(m) for m in matrices}
        res["config_s"] = total
        res["cpu_s"] = cpu_s
        results.append(res)
        timings[name] = {"train_s": train_s, "total_s": total, "loop_s": res["loop_s"], "setup_s": res["setup_s"], "cpu_s": cpu_s}
        print(
            f"[{name}] done in {total:.1f} s ({res['setup_s']:.1f} s process start-up, {res['loop_s']:.1f} s training "
            f"loop; {cpu_s:.0f} CPU s in all)",
            flush=True,
        )

    ref = next((r for r in results if r["name"] == "fp32"), None)
    if ref is not None and ref["final_val_loss"] is not None:
        for r in results:
            if r["final_val_loss"] is not None:
                r["val_gap_to_fp32"] = r["final_val_loss"] - ref["final_val_loss"]
    text, notes = table(results, args)
    print()
    print(text)
    for n in notes:
        print("  " + n)
    for line in choice_lines(results):
        print("  " + line)
    reach = []
    if ref is not None and ref["final_val_loss"] is not None:
        target = ref["final_val_loss"] + args.target_tolerance
        print()
        print(f"time to fp32's final validation loss {ref['final_val_loss']:.4f} + {args.target_tolerance:g} ({link}; "
              f"rank 0's training seconds, evaluations excluded; checked at each evaluation, every {args.eval_every} "
              "steps):")
        print(f"  {'config':14s} {'seconds':>8s} {'at step':>8s} {'step s':>7s} {'compute s':>9s} {'sync s':>7s}")
        for r in results:
            seconds, at = time_to_loss(os.path.join(out, r["name"]), target)
            reach.append({"name": r["name"], "seconds": seconds, "step": at, "step_s": r["step_s"],
                          "compute_s": r["compute_s"], "sync_s": r["sync_s"]})
            print(f"  {r['name']:14s} {fmt(seconds, '8.1f'):>8s} {fmt(at, '8d'):>8s} {r['step_s']:7.3f} "
                  f"{r['compute_s']:9.3f} {r['sync_s']:7.3f}")
        print("  compute s: forward, backward and optimizer (DDP: its all-reduces run inside backward, so they are "
              "counted here); sync s: the wait for the averages after backward")
        if args.measure_every > 0:
            print(f"  the seconds include the steps that measured the gradient error (every {args.measure_every}): they "
                  "also average an exact FP32 copy (--measure-every 0 for times without them)")
    overlap = overlap_rows(results)
    if overlap:
        print()
        for line in overlap_lines(overlap):
            print("  " + line)
    summary = summary_lines(results)
    if summary:
        print()
        for line in summary:
            print("  " + line)
    for r in results:
        if not r["ranks_identical"]:
            print(f"  warning: {r['name']}: the ranks' parameters differ at the end", flush=True)
    json_path = os.path.join(out, "results.json")
    png_path = os.path.join(out, "loss.png")
    doc = {
        "backend": args.backend,
        "data": {"source": corpus.source, "sha256_16": corpus.digest, "train_bytes": int(len(corpus.train)), "val_bytes": int(len(corpus.val))},
        "model": dict(spec["model"], parameters=n_params, tensors=n_tensors, matrices=len(matrices)),
        "training": {k: spec[k] for k in ("world", "seed", "steps", "batch", "lr", "warmup", "min_lr_frac", "weight_decay", "eval_every", "measure_every", "val_windows", "final_val_windows")},
        "columns": {
            "final_train_loss": notes[0],
            "bytes_per_step": notes[1],
            "rel_err_mean": notes[2],
        },
        "table": text,
        "summary": summary,
        "link": link,
        "time_to_fp32_loss": reach,
        "overlap": overlap,
        "configs": results,
        "timings": dict(timings, total_s=time.monotonic() - t_begin),
    }
    with open(json_path, "w") as f:
        json.dump(doc, f, indent=1)
    try:
        plot(results, png_path)
    except Exception as e:  # noqa: BLE001 - the plot is optional; say why it is missing
        png_path = None
        print(f"demo: no plot: {e}", file=sys.stderr)
    print()
    print(f"Results: {json_path}" + (f", plot: {png_path}" if png_path else "") + f", logs: {out}/<config>/")
    print(f"Total {time.monotonic() - t_begin:.0f} s", flush=True)
    return 0
