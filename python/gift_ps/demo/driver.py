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
of the loss curves.
"""

import argparse
import json
import os
import queue
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

from gift_ps.demo.data import Corpus, DataError, load_bytes

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PYTHON_DIR = os.path.join(REPO, "python")

# name -> (push codec, pull codec, GIFT transform on, description)
CONFIGS = {
    "fp32": ("fp32", "fp32", False, "FP32 push and pull, every tensor direct: the exact reference"),
    "bf16": ("bf16", "bf16", False, "BF16 push and pull, every tensor direct"),
    "fp8": ("e5m2/tensor", "bf16", False, "direct FP8: E5M2 with one scale per tensor (the published baseline), BF16 pull"),
    "fp8-block": ("e4m3/block128", "bf16", False, "direct FP8 in GIFT's format: E4M3, a scale per 128 values, no transform, BF16 pull"),
    "gift": (
        "e4m3/block128",
        "bf16",
        True,
        "GIFT FP8: E4M3 with a scale per 128 values after the GIFT transform (default policy: "
        "tensors chosen by measured error), BF16 pull",
    ),
    "gift-e5m2": ("e5m2/tensor", "bf16", True, "GIFT in the baseline's format: E5M2 per tensor after the GIFT transform, BF16 pull"),
}
# fp8-block is a default row because GIFT's FP8 format (E4M3, a scale per 128
# values) alone already halves the error of the baseline's (E5M2, one scale
# per tensor) on this model: without it, the gift row would mix the format's
# gain with the transform's. Measured through the service (d_model 128, 4
# layers, 100 steps, mean rel. error of the averaged weight-matrix gradients
# over steps 55-100): fp8 0.040, fp8-block 0.019, gift 0.0089, and gift-e5m2
# 0.019 (the transform halves the error in either format).
DEFAULT_CONFIGS = "fp32,bf16,fp8,fp8-block,gift"

# Sizes: a full run of the 5 default configurations in < 15 minutes on 2 cores
# (about 1200 CPU seconds in all, most of them the 4 training processes;
# measured: 610 CPU s for 100 steps of each configuration).
FULL = dict(steps=200, d_model=128, layers=4, heads=4, mlp_hidden=344, context=128, batch=32, eval_every=20, measure_every=10)
QUICK = dict(steps=60, d_model=64, layers=2, heads=4, mlp_hidden=172, context=64, batch=16, eval_every=10, measure_every=5)


class DemoError(RuntimeError):
    pass


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
    if args.batch % args.workers:
        p.error(f"--batch ({args.batch}) must be a multiple of --workers ({args.workers})")
    if args.d_model % args.heads or (args.d_model // args.heads) % 2:
        p.error("--d-model must be a multiple of --heads with an even head size")
    return args


# ---- processes -----------------------------------------------------------------


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path, n=20):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return ""


def _reader(stream, q, tag):
    for line in iter(stream.readline, ""):
        q.put((tag, line))
    q.put((tag, None))


class Cluster:
    """A gift-cluster process and the ready line it printed."""

    def __init__(self, binary, servers, workers, directory, bin_dir=None):
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        self.dir = directory
        self.stderr_path = os.path.join(directory, "gift-cluster.stderr")
        self.stderr = open(self.stderr_path, "w")
        # --stop-on-stdin-eof: the cluster also stops when this process goes away.
        # --metrics: every daemon serves its Prometheus page on a loopback port
        # (listed in DIR/ready.json), so a run can be watched while it trains.
        cmd = [binary, "--servers", str(servers), "--workers", str(workers), "--dir", directory, "--stop-on-stdin-eof",
               "--metrics"]
        if bin_dir:
            cmd += ["--bin-dir", bin_dir]
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, text=True, start_new_session=True
        )
        q = queue.Queue()
        threading.Thread(target=_reader, args=(self.proc.stdout, q, "out"), daemon=True).start()
        deadline = time.monotonic() + 120
        self.ready = None
        while self.ready is None:
            try:
                _, line = q.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                self.stop()
                raise DemoError(f"gift-cluster printed no ready line within 120 s; see {self.stderr_path}:\n{_tail(self.stderr_path)}")
            if line is None:
                code = self.proc.wait()
                raise DemoError(f"gift-cluster exited ({code}) before it was ready; see {self.stderr_path}:\n{_tail(self.stderr_path)}")
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") == "ready":
                self.ready = ev
        self.coordinator = self.ready["coordinator"]
        self.sockets = [w["socket"] for w in self.ready["workers"]]
        with open(os.path.join(directory, "ready.json"), "w") as f:
            json.dump(self.ready, f, indent=1)
        if len(self.sockets) != workers:
            self.stop()
            raise DemoError(f"gift-cluster started {len(self.sockets)} workers, not {workers}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.stderr.close()
        return self.proc.returncode


def policy_args(name):
    push, pull, gift, _ = CONFIGS[name]
    a = ["policy", "set", "--push-codec", push, "--pull-codec", pull]
    if gift:
        a += ["--selection", "measured"]
    else:
        a += ["--selection", "list", "--exclude", "*"]  # every tensor direct
    return a


def set_policy(giftctl, coordinator, name):
    cmd = [giftctl, "--coordinator", coordinator] + policy_args(name)
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise DemoError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip() or res.stdout.strip()}")
    return " ".join(cmd[3:])


def child_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = PYTHON_DIR + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[k] = "1"
    return env


def run_ranks(args, spec, run_dir, progress):
    """Starts the training processes, streams rank 0's evaluations to `progress`, waits for all."""
    spec_path = os.path.join(run_dir, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f, indent=1)
    env = child_env()
    procs, logs = [], []
    q = queue.Queue()
    spec["t_spawn"] = time.time()
    try:
        for r in range(args.workers):
            log = open(os.path.join(run_dir, f"rank{r}.log"), "w")
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    [args.python, "-m", "gift_ps.demo.train", spec_path, str(r)],
                    stdout=subprocess.PIPE if r == 0 else log,
                    stderr=log,
                    env=env,
                    text=True,
                )
            )
        threading.Thread(target=_reader, args=(procs[0].stdout, q, 0), daemon=True).start()
        failed = None
        while True:
            try:
                _, line = q.get(timeout=0.2)
                if line:
                    try:
                        ev = json.loads(line)
                    except ValueError:
                        logs[0].write(line)
                        continue
                    progress(ev)
            except queue.Empty:
                pass
            codes = [p.poll() for p in procs]
            bad = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if bad:
                failed = bad[0]
                break
            if all(c == 0 for c in codes):
                while not q.empty():  # the last evaluations
                    _, line = q.get()
                    if line:
                        try:
                            progress(json.loads(line))
                        except ValueError:
                            pass
                break
        if failed is not None:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
            for log in logs:
                log.flush()
            path = os.path.join(run_dir, f"rank{failed}.log")
            raise DemoError(f"training process {failed} failed (exit {procs[failed].returncode}); see {path}:\n{_tail(path)}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for log in logs:
            log.close()


# ---- results ---------------------------------------------------------------------


def _mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def summarize(name, args, run_dir, matrices, wall_s, policy, t_spawn):
    ranks = []
    for r in range(args.workers):
        with open(os.path.join(run_dir, f"rank{r}.jsonl")) as f:
            ranks.append([json.loads(line) for line in f if line.strip()])
    finals = [recs[-1] for recs in ranks]
    if not all(f.get("final") for f in finals):
        raise DemoError(f"{name}: a rank's log {run_dir}/rank*.jsonl is incomplete")
    steps = [[rec for rec in recs if "step" in rec] for recs in ranks]
    n = len(steps[0])
    train = [statistics.fmean(steps[r][i]["loss"] for r in range(args.workers)) for i in range(n)]
    r0 = steps[0]
    val = [[rec["step"], rec["val_loss"]] for rec in r0 if "val_loss" in rec]
    tail = max(1, n // 10)
    errors = []
    for rec in r0:
        if rec.get("errors"):
            e = rec["errors"]
            errors.append(
                {
                    "step": rec["step"],
                    "mean": _mean(e.values()),
                    "matrices_mean": _mean(v for k, v in e.items() if k in matrices),
                    "per_tensor": e,
                }
            )
    second_half = [e for e in errors if e["step"] > n // 2] or errors
    bytes_ = [rec["bytes"] for rec in r0 if rec.get("bytes") is not None]
    timed = [rec for rec in r0 if "errors" not in rec] or r0
    transformed = [rec["transformed"] for rec in r0 if rec.get("transformed") is not None]
    push, pull, gift, desc = CONFIGS[name]
    return {
        "name": name,
        "description": desc,
        "push_codec": push,
        "pull_codec": pull,
        "gift": gift,
        "policy": policy,
        "steps": n,
        "final_train_loss": statistics.fmean(train[-tail:]),
        "final_train_loss_window": tail,
        "final_val_loss": r0[-1].get("final_val_loss"),
        "val_gap_to_fp32": None,
        "bytes_per_step": statistics.fmean(bytes_) if bytes_ else None,
        # Timed over the steps that did not measure errors (a measured step
        # also exchanges an exact FP32 copy of every gradient).
        "step_s": statistics.fmean(rec["step_s"] for rec in timed),
        "sync_s": statistics.fmean(rec["sync_s"] for rec in timed),
        "compute_s": statistics.fmean(rec["compute_s"] for rec in timed),
        "rel_err_mean": _mean(e["mean"] for e in second_half),
        "rel_err_matrices_mean": _mean(e["matrices_mean"] for e in second_half),
        "rel_err_steps": [e["step"] for e in second_half],
        "transformed_tensors_last": transformed[-1] if transformed else None,
        "ranks_identical": len({f["checksum"] for f in finals}) == 1,
        "checksums": [f["checksum"] for f in finals],
        "wall_s": wall_s,
        "loop_s": finals[0]["wall_s"],
        "setup_s": max(f["t_loop_start"] for f in finals) - t_spawn,
        "train_curve": train,
        "val_curve": val,
        "errors": errors,
    }


def fmt(x, spec, none="-"):
    return none if x is None else format(x, spec)


def table(results, args):
    head = ["config", "push / pull", "train loss", "val loss", "gap to fp32", "KiB/step", "step s", "sync s", "grad err", "err 2-D"]
    rows = []
    for r in results:
        rows.append(
            [
                r["name"],
                "exact (gloo)" if args.backend == "local" else f"{r['push_codec']}{' +GIFT' if r['gift'] else ''} / {r['pull_codec']}",
                fmt(r["final_train_loss"], ".4f"),
                fmt(r["final_val_loss"], ".4f"),
                fmt(r["val_gap_to_fp32"], "+.4f"),
                fmt(None if r["bytes_per_step"] is None else r["bytes_per_step"] / 1024, ".1f"),
                fmt(r["step_s"], ".3f"),
                fmt(r["sync_s"], ".3f"),
                fmt(r["rel_err_mean"], ".2e"),
                fmt(r["rel_err_matrices_mean"], ".2e"),
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    out = [line(head), line(["-" * w for w in widths])] + [line(row) for row in rows]
    notes = [
        f"train loss: mean over the 4 ranks and the last {results[0]['final_train_loss_window']} steps; val loss: "
        f"{args.final_val_windows} held-out windows after the last step (nats/byte)",
        "KiB/step: bytes one worker pushes per step (sum of its tensors' bytes_sent); step s: mean wall time of a "
        "training step on rank 0 (sync s: of it, the gradient averaging), over the steps that do not measure errors",
        "grad err: relative L2 error of the averaged gradient against the exact average, measured by the service every "
        f"{args.measure_every} steps, mean over the second half of the run and over all tensors; err 2-D: over the weight "
        "matrices only",
    ]
    if args.backend == "local":
        notes.insert(0, "--backend local: every row averaged exactly with gloo (no service, no codecs): a development aid")
    return "\n".join(out), notes


def summary_lines(results):
    """Plain statements comparing the FP8 rows with FP32 and BF16, from the numbers."""
    rows = {r["name"]: r for r in results}
    lines = []
    gaps = [(n, rows[n]["val_gap_to_fp32"]) for n in CONFIGS if n in rows and n != "fp32" and rows[n]["val_gap_to_fp32"] is not None]
    if gaps:
        lines.append("validation-loss gap to fp32: " + ", ".join(f"{n} {g:+.4f}" for n, g in gaps))
    errs = [(n, rows[n]["rel_err_matrices_mean"]) for n in CONFIGS if n in rows and rows[n]["rel_err_matrices_mean"] is not None]
    if errs:
        lines.append("gradient error (weight matrices): " + ", ".join(f"{n} {e:.2e}" for n, e in errs))
    pairs = [
        ("gift", "fp8-block", "the same FP8 format, E4M3/block128: what the transform buys"),
        ("gift-e5m2", "fp8", "the same FP8 format, E5M2/tensor: what the transform buys"),
        ("gift", "fp8", "GIFT against the published baseline: format and transform together"),
    ]
    for g, base, what in pairs:
        if base in rows and g in rows and rows[base]["rel_err_matrices_mean"] and rows[g]["rel_err_matrices_mean"]:
            ratio = rows[base]["rel_err_matrices_mean"] / rows[g]["rel_err_matrices_mean"]
            word = f"{ratio:.2f}x lower" if ratio >= 1 else f"{1 / ratio:.2f}x higher"
            lines.append(f"{g} vs {base}: gradient error {word} ({what})")
    return lines


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_err = any(r["errors"] for r in results)
    fig, axes = plt.subplots(1, 3 if has_err else 2, figsize=(16 if has_err else 11, 4.5))
    colors = {r["name"]: f"C{i}" for i, r in enumerate(results)}  # the same in every panel
    for r in results:
        c = colors[r["name"]]
        tr = r["train_curve"]
        w = max(1, len(tr) // 30)
        smooth = [statistics.fmean(tr[max(0, i - w + 1) : i + 1]) for i in range(len(tr))]
        axes[0].plot(range(1, len(tr) + 1), smooth, label=r["name"], lw=1.2, color=c)
        if r["val_curve"]:
            axes[1].plot([s for s, _ in r["val_curve"]], [v for _, v in r["val_curve"]], marker="o", ms=3, label=r["name"], lw=1.2, color=c)
        if has_err and r["errors"]:
            pts = [(e["step"], e["matrices_mean"]) for e in r["errors"] if e["matrices_mean"]]
            if pts:
                axes[2].semilogy([s for s, _ in pts], [v for _, v in pts], marker=".", label=r["name"], lw=1, color=c)
    tops = [max(statistics.fmean(r["train_curve"][max(0, i - 9) : i + 1]) for i in range(len(r["train_curve"]) // 10, len(r["train_curve"]))) for r in results if len(r["train_curve"]) >= 20]
    if tops:
        lo = min(min(r["train_curve"]) for r in results)
        axes[0].set_ylim(lo - 0.05, max(tops) + 0.05)
    axes[0].set_title("training loss (moving average)")
    axes[1].set_title("validation loss")
    for ax in axes[:2]:
        ax.set_xlabel("step")
        ax.set_ylabel("nats / byte")
        ax.grid(alpha=0.3)
        ax.legend()
    if has_err:
        axes[2].set_title("averaged-gradient rel. L2 error, weight matrices\n(measured by the service; exact rows are 0, not drawn)", fontsize=10)
        axes[2].set_xlabel("step")
        axes[2].grid(alpha=0.3, which="both")
        axes[2].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- main ---------------------------------------------------------------------------


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
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
    print(f"GIFT-PS demo: {', '.join(args.configs)}; backend {args.backend}", flush=True)
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
        f"validation every {args.eval_every} steps, gradient error measured every {args.measure_every} steps",
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
        cluster, policy = None, None
        t0 = time.monotonic()
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            if args.backend == "service":
                print(f"[{name}] starting gift-cluster ({args.servers} servers, {args.workers} workers)", flush=True)
                cluster = Cluster(cluster_bin, args.servers, args.workers, os.path.join(run_dir, "cluster"), bin_dir)
                policy = set_policy(giftctl, cluster.coordinator, name)
                print(f"[{name}] cluster at {cluster.coordinator}; giftctl {policy}", flush=True)
                spec["sockets"] = cluster.sockets
            else:
                spec["local_address"] = f"127.0.0.1:{_free_port()}"
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
