#!/usr/bin/env python3
"""Real per-worker gradients and their second-moment statistics for `gift-bench fidelity`.

Trains a small Llama-style byte-level language model (RMSNorm, rotary position
embeddings, SwiGLU MLP, causal multi-head attention, untied output layer) on the
King James Bible with P simulated data-parallel workers: every step each worker
computes the FP32 gradient of its own micro-batch, the gradients are averaged in
FP32 and AdamW applies the average.

For four matrices (an attention projection, the MLP up and down projections and
the output layer) it keeps, every training step, exponential moving averages
(decay --ema, first value taken as is) of

  gram_in_mean   = Gbar^T Gbar / d_out          (Gbar: the averaged gradient)
  gram_out_mean  = Gbar Gbar^T / d_in
  gram_in_pw     = mean_i G_i^T G_i / d_out     (G_i: worker i's gradient)
  gram_out_pw    = mean_i G_i G_i^T / d_in
  factor         = X^T X / N                    (X: the layer's input rows, all workers)

and, for each collect period c of --collect-periods, gram_in_mean_c<c>,
gram_out_mean_c<c>, gram_in_pw_c<c> and gram_out_pw_c<c>: the same EMAs
folded only on steps that are multiples of c
(the policy's transform.collect_period; the decay stays per fold, as the
owner's EMA keeps it).

At the held-out step S (--step) it computes the P per-worker gradients but does
not fold them into the statistics, and writes, per matrix, into --out/<matrix>/:

  w0.npy .. w{P-1}.npy   float32, d_out x d_in, the per-worker gradients of step S
  gram_in_mean.npy, gram_out_mean.npy, gram_in_pw.npy, gram_out_pw.npy, factor.npy
                         float64, the EMAs over steps 0 .. S-1 (causal: step S unseen)

and --out/meta.json with the configuration, the loss curve and the run's wall
and CPU seconds. The statistics
feed `gift-bench fidelity --grads ... --gram-in ... --gram-out ... --pw-gram-in
... --pw-gram-out ... --factor ...` (docs/fidelity.md).

Text: --text names a plain-text file. Without it the script runs the `bible`
reader of Debian's bible-kjv package (--bible, default `bible` on PATH) on the
compressed text of bible-kjv-text (/usr/lib/bible.data) to print every verse.

Sizes: the defaults are the d_model 128 model of docs/fidelity.md; its d_model
512 set is `--d-model 512 --mlp-hidden 1376 --heads 8 --layers 2 --step 100
--stats-dtype float32` (about 4.6 CPU-minutes, 155 MB of output).

CPU only, seeded (torch.manual_seed, per-worker batch generators), so a rerun with
the same arguments and thread count writes the same gradients up to the
nondeterminism of the BLAS library.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import importlib.util

import numpy as np
import torch
import torch.nn.functional as F


def _load_model_module():
    """python/gift_ps/demo/model.py, loaded by path (it imports only torch, so this
    script needs neither the rest of gift_ps nor its gRPC dependencies)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "gift_ps", "demo", "model.py")
    spec = importlib.util.spec_from_file_location("gift_demo_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_model = _load_model_module()
ByteLM = _model.ByteLM  # RMSNorm, RoPE, SwiGLU MLP, causal attention, untied output layer


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--out", default="out/real-grads", help="output directory")
    p.add_argument("--text", default=None, help="plain-text training corpus (default: the KJV via `bible`)")
    p.add_argument("--bible", default="bible", help="the bible-kjv reader binary")
    p.add_argument("--bible-data", default="/usr/lib", help="directory holding bible.data")
    p.add_argument("--workers", type=int, default=8, help="simulated data-parallel workers P")
    p.add_argument("--micro-batch", type=int, default=2, help="sequences per worker per step")
    p.add_argument("--context", type=int, default=128, help="sequence length in bytes")
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--mlp-hidden", type=int, default=344, help="SwiGLU hidden width")
    p.add_argument("--step", type=int, default=200, help="held-out step S (training runs steps 0..S-1)")
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--warmup", type=int, default=20, help="linear learning-rate warm-up steps")
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--ema", type=float, default=0.95, help="decay of the statistics' EMAs")
    p.add_argument("--layer", type=int, default=None, help="block whose matrices are recorded (default: the middle one)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--stats-dtype",
        choices=("float64", "float32"),
        default="float64",
        help="precision of the per-step moment products (the EMAs are always kept and written in float64); "
        "float32 halves their cost on the d_model 512 model",
    )
    p.add_argument(
        "--collect-periods",
        default="",
        help="comma-separated collect periods > 1: also write gram_{in,out}_mean_c<c>, the EMAs folded every c steps",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (more than one is much slower on a loaded machine: OpenMP spins)",
    )
    args = p.parse_args(argv)
    for name in ("workers", "micro_batch", "context", "d_model", "layers", "heads", "mlp_hidden", "step", "threads"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.d_model % args.heads or (args.d_model // args.heads) % 2:
        p.error("--d-model must be a multiple of --heads with an even head size")
    if not 0.0 <= args.ema < 1.0:
        p.error("--ema must be in [0, 1)")
    try:
        args.collect_periods = [int(c) for c in args.collect_periods.split(",") if c]
    except ValueError:
        p.error("--collect-periods must be comma-separated integers")
    if any(c < 2 for c in args.collect_periods):
        p.error("--collect-periods must each be at least 2 (period 1 is gram_*_mean)")
    if args.layer is None:
        args.layer = args.layers // 2
    if not 0 <= args.layer < args.layers:
        p.error(f"--layer must be in [0, {args.layers - 1}]")
    return args


def load_text(args):
    if args.text is not None:
        with open(args.text, "rb") as f:
            data = f.read()
        source = args.text
    else:
        exe = shutil.which(args.bible)
        if exe is None:
            sys.exit(
                f"error: the bible reader '{args.bible}' was not found. Install Debian's bible-kjv "
                "(it reads bible-kjv-text's /usr/lib/bible.data), pass --bible PATH, or give a plain "
                "text file with --text"
            )
        cmd = [exe, "-p", args.bible_data, "gen1:1-rev22:21"]
        res = subprocess.run(cmd, capture_output=True, check=False)
        if res.returncode != 0 or len(res.stdout) < 1_000_000:
            sys.exit(f"error: {' '.join(cmd)} failed (exit {res.returncode}): {res.stderr.decode(errors='replace')[:400]}")
        data = res.stdout
        source = " ".join(cmd)
    if len(data) < 10 * args.context:
        sys.exit(f"error: the text from {source} has only {len(data)} bytes")
    return np.frombuffer(data, dtype=np.uint8).copy(), source


class Recorder:
    """EMAs of the second moments of one nn.Linear's gradient and input."""

    def __init__(self, name, linear, decay, dtype, collect_periods=()):
        self.name, self.linear, self.decay, self.dtype = name, linear, decay, dtype
        self.collect_periods = tuple(collect_periods)
        self.d_out, self.d_in = linear.weight.shape
        self.ema = {}
        self.xtx = None  # X^T X summed over this step's workers
        self.rows = 0
        self.capture = False
        linear.register_forward_hook(self._hook)

    def _hook(self, module, inputs, output):
        if not self.capture:
            return
        x = inputs[0].detach().reshape(-1, self.d_in).to(self.dtype)
        xtx = (x.T @ x).double()
        self.xtx = xtx if self.xtx is None else self.xtx + xtx
        self.rows += x.shape[0]

    def begin_step(self):
        self.xtx, self.rows, self.capture = None, 0, True

    def end_forward(self):
        self.capture = False

    def update(self, step, worker_grads, mean_grad):
        g = mean_grad.to(self.dtype)
        rows = torch.cat([w.to(self.dtype) for w in worker_grads], 0)  # (P d_out) x d_in
        cols = torch.cat([w.to(self.dtype) for w in worker_grads], 1)  # d_out x (P d_in)
        p = len(worker_grads)
        stats = {
            "gram_in_mean": (g.T @ g).double() / self.d_out,
            "gram_out_mean": (g @ g.T).double() / self.d_in,
            "gram_in_pw": (rows.T @ rows).double() / (p * self.d_out),  # sum_i G_i^T G_i
            "gram_out_pw": (cols @ cols.T).double() / (p * self.d_in),  # sum_i G_i G_i^T
            "factor": self.xtx / self.rows,
        }
        for c in self.collect_periods:
            if step % c == 0:
                for name in ("gram_in_mean", "gram_out_mean", "gram_in_pw", "gram_out_pw"):
                    stats[f"{name}_c{c}"] = stats[name]
        for k, v in stats.items():
            self.ema[k] = v.clone() if k not in self.ema else self.decay * self.ema[k] + (1 - self.decay) * v


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    text, source = load_text(args)
    print(f"text: {len(text)} bytes from {source}", flush=True)

    model = ByteLM(args)
    blk = model.blocks[args.layer]
    dtype = getattr(torch, args.stats_dtype)
    recorders = [
        Recorder(f"layer{args.layer}.attn.q", blk.q, args.ema, dtype, args.collect_periods),
        Recorder(f"layer{args.layer}.mlp.up", blk.up, args.ema, dtype, args.collect_periods),
        Recorder(f"layer{args.layer}.mlp.down", blk.down, args.ema, dtype, args.collect_periods),
        Recorder("head", model.head, args.ema, dtype, args.collect_periods),
    ]
    params = [p for p in model.parameters()]
    decay_params = [p for p in params if p.dim() == 2]
    other_params = [p for p in params if p.dim() != 2]
    opt = torch.optim.AdamW(
        [{"params": decay_params, "weight_decay": args.weight_decay}, {"params": other_params, "weight_decay": 0.0}],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    gens = [np.random.default_rng([args.seed, w]) for w in range(args.workers)]
    n_params = sum(p.numel() for p in params)
    print(
        f"model: d_model {args.d_model}, {args.layers} layers, {args.heads} heads, MLP {args.mlp_hidden}, "
        f"context {args.context}, {n_params} parameters; P = {args.workers} workers x {args.micro_batch} "
        f"sequences; held-out step {args.step}",
        flush=True,
    )

    def batch(w):
        starts = gens[w].integers(0, len(text) - args.context - 1, size=args.micro_batch)
        chunk = np.stack([text[s : s + args.context + 1] for s in starts]).astype(np.int64)
        t = torch.from_numpy(chunk)
        return t[:, :-1], t[:, 1:]

    def worker_gradients():
        """Per-worker gradients of every parameter, and the mean loss."""
        grads, losses = [], []
        for r in recorders:
            r.begin_step()
        for w in range(args.workers):
            x, y = batch(w)
            model.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
            loss.backward()
            grads.append([p.grad.detach().clone() for p in params])
            losses.append(loss.item())
        for r in recorders:
            r.end_forward()
        return grads, float(np.mean(losses))

    losses = []
    t0 = time.time()
    for step in range(args.step):
        grads, loss = worker_gradients()
        mean = [torch.stack([g[i] for g in grads]).mean(0) for i in range(len(params))]
        for r in recorders:
            i = next(j for j, p in enumerate(params) if p is r.linear.weight)
            r.update(step, [g[i] for g in grads], mean[i])
        for p, g in zip(params, mean):
            p.grad = g
        for group in opt.param_groups:
            group["lr"] = args.lr * min(1.0, (step + 1) / args.warmup)
        opt.step()
        losses.append(loss)
        if step % 20 == 0 or step == args.step - 1:
            print(f"step {step:4d}  loss {loss:.4f} nats/byte  {time.time() - t0:6.1f} s", flush=True)

    # The held-out step: gradients written, statistics not updated.
    grads, loss = worker_gradients()
    print(f"held-out step {args.step}: loss {loss:.4f}", flush=True)
    os.makedirs(args.out, exist_ok=True)
    meta = {
        "args": vars(args),
        "text_source": source,
        "text_bytes": int(len(text)),
        "parameters": int(n_params),
        "torch": torch.__version__,
        "losses": losses,
        "held_out_loss": loss,
        "matrices": {},
    }
    for r in recorders:
        i = next(j for j, p in enumerate(params) if p is r.linear.weight)
        d = os.path.join(args.out, r.name)
        os.makedirs(d, exist_ok=True)
        for w, g in enumerate(grads):
            np.save(os.path.join(d, f"w{w}.npy"), g[i].numpy().astype(np.float32))
        for k, v in r.ema.items():
            np.save(os.path.join(d, f"{k}.npy"), v.numpy().astype(np.float64))
        meta["matrices"][r.name] = {"d_out": r.d_out, "d_in": r.d_in}
        print(f"wrote {d}: {args.workers} gradients {r.d_out}x{r.d_in} and {len(r.ema)} statistics", flush=True)
    meta["seconds"] = time.time() - t0
    meta["cpu_seconds"] = time.process_time()
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(f"done in {time.time() - t0:.1f} s wall, {time.process_time():.1f} s CPU", flush=True)


if __name__ == "__main__":
    main()
