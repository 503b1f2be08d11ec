"""The training study (issue 29): the demo's model trained with each codec over several seeds through the real
service, and what each codec did to the model against FP32.

    python3 -m gift_ps.demo.study --out out/study [--runs-only | --report-only] [options]

It runs the demo (python/gift_ps/demo) once per seed with every configuration (out/study/seedS/results.json), then,
with --netlab-rate (root only), once more through the emulated network with every configuration (or those of
--netlab-configs; "best-4bit" names the 4-bit configuration that ended closest to FP32) at the first seed
(out/study/netlab), and reports per configuration: the final validation loss
over the seeds (mean and sample standard deviation), its gap to FP32 (paired by seed: mean and a 95 % Student-t
interval), whether that gap lies within FP32's own seed-to-seed spread, bytes pushed per step, the measured gradient
error, and the time to FP32's final validation loss on the emulated network. Writes out/study/study.json, study.md
(the table) and study.png (mean validation curves)."""

import argparse
import json
import math
import os
import subprocess
import sys

from gift_ps.demo.configs import CONFIGS

DEFAULT_CONFIGS = "fp32,bf16,fp8,fp8-block,gift,nvfp4,gift-nvfp4,gift-nvfp4-rot"
# The configurations that push four bits (their push codec is NVFP4).
FOUR_BIT = tuple(name for name, (push, _, _, _) in CONFIGS.items() if push == "nvfp4")
# Two-sided 95 % Student-t quantiles by degrees of freedom (n - 1 seeds).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="gift_ps.demo.study", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default="build", help="the CMake build tree (default: build)")
    p.add_argument("--bin-dir", default="", help="a directory holding gift-cluster, giftctl and the daemons, instead of "
                   "the build tree's (so that a rebuild during the study does not change them)")
    p.add_argument("--out", default="out/study", help="output directory (default: out/study)")
    p.add_argument("--configs", default=DEFAULT_CONFIGS, help=f"comma list (default: {DEFAULT_CONFIGS})")
    p.add_argument("--seeds", default="1,2,3", help="comma list of seeds (default: 1,2,3)")
    p.add_argument("--steps", type=int, default=500, help="training steps per run (default 500)")
    p.add_argument("--measure-every", type=int, default=25, help="the service measures the gradient error every N steps "
                   "(default 25)")
    p.add_argument("--netlab-rate", default="", help="also run the configurations through scripts/netlab.sh at this "
                   "rate each way, at the first seed, for their time to fp32's loss (e.g. 200mbit; root only)")
    p.add_argument("--netlab-configs", default="all", help="which configurations the netlab run times: 'all' (default: "
                   "every one of --configs, about 5 minutes each at 200mbit) or a comma list, where 'best-4bit' is the "
                   "4-bit configuration that ended closest to fp32; fp32 always runs (it sets the loss to reach)")
    p.add_argument("--netlab-only", action="store_true", help="run only the netlab run (the seed runs already in --out), "
                   "then report")
    p.add_argument("--runs-only", action="store_true", help="run, do not report")
    p.add_argument("--report-only", action="store_true", help="report the runs already in --out")
    p.add_argument("--python", default=sys.executable, help="the interpreter that runs the demo")
    args = p.parse_args(argv)
    args.configs = [c for c in args.configs.split(",") if c]
    unknown = [c for c in args.configs if c not in CONFIGS]
    if unknown:
        p.error(f"unknown configuration(s) {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    if "fp32" not in args.configs:
        p.error("the study compares with fp32: include it in --configs")
    try:
        args.seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        p.error(f"--seeds {args.seeds}: a comma list of integers")
    if not args.seeds:
        p.error("--seeds: at least one")
    if args.netlab_only and not args.netlab_rate:
        p.error("--netlab-only needs --netlab-rate")
    if args.netlab_only and (args.runs_only or args.report_only):
        p.error("--netlab-only runs the netlab run and reports: not with --runs-only or --report-only")
    if args.netlab_configs == "all":
        args.netlab_configs = list(args.configs)
    else:
        args.netlab_configs = [c for c in args.netlab_configs.split(",") if c]
        unknown = [c for c in args.netlab_configs if c != "best-4bit" and c not in args.configs]
        if unknown:
            p.error(f"--netlab-configs: {', '.join(unknown)} not in --configs (or 'best-4bit')")
    if args.steps < 1:
        p.error("--steps must be >= 1")
    return args


def run_demo(args, configs, seed, out, extra=()):
    """One demo run (every configuration of `configs` at `seed`) into `out`; returns its exit code."""
    cmd = [args.python, "-m", "gift_ps.demo", "--build-dir", args.build_dir, "--out", out, "--configs", ",".join(configs),
           "--seed", str(seed), "--steps", str(args.steps), "--measure-every", str(args.measure_every), *extra]
    if args.bin_dir:
        cmd += ["--bin-dir", args.bin_dir]
    print("study: " + " ".join(cmd), flush=True)
    return subprocess.call(cmd)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def mean_sd(xs):
    if not xs:
        return None, None
    m = sum(xs) / len(xs)
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else None
    return m, sd


def summarize(args):
    """Per configuration, over the seeds that ran it: losses, paired gaps to fp32, bytes, errors, curves."""
    seeds = {}
    for s in args.seeds:
        doc = load(os.path.join(args.out, f"seed{s}", "results.json"))
        if doc is not None:
            seeds[s] = {c["name"]: c for c in doc["configs"]}
    rows = []
    fp32_losses = [seeds[s]["fp32"]["final_val_loss"] for s in seeds if "fp32" in seeds[s]]
    _, fp32_sd = mean_sd(fp32_losses)
    for name in args.configs:
        runs = {s: seeds[s][name] for s in seeds if name in seeds[s] and seeds[s][name]["final_val_loss"] is not None}
        losses = [r["final_val_loss"] for r in runs.values()]
        gaps = [runs[s]["final_val_loss"] - seeds[s]["fp32"]["final_val_loss"] for s in runs if "fp32" in seeds[s]]
        loss_mean, loss_sd = mean_sd(losses)
        gap_mean, gap_sd = mean_sd(gaps)
        half = T95[len(gaps) - 1] * gap_sd / math.sqrt(len(gaps)) if gap_sd is not None and len(gaps) - 1 in T95 else None
        errs = [r["rel_err_matrices_mean"] for r in runs.values() if r.get("rel_err_matrices_mean") is not None]
        curves = [r["val_curve"] for r in runs.values() if r.get("val_curve")]
        mean_curve = []
        if curves and all(len(c) == len(curves[0]) for c in curves):
            for points in zip(*curves):
                mean_curve.append([points[0][0], sum(p[1] for p in points) / len(points)])
        rows.append({
            "name": name,
            "description": CONFIGS[name][3],
            "seeds": sorted(runs),
            "final_val_loss": losses,
            "val_loss_mean": loss_mean,
            "val_loss_sd": loss_sd,
            "gap_to_fp32": gaps,
            "gap_mean": gap_mean,
            "gap_ci95": half,
            "within_fp32_spread": (abs(gap_mean) <= fp32_sd) if gap_mean is not None and fp32_sd is not None else None,
            "bytes_per_step": mean_sd([r["bytes_per_step"] for r in runs.values()])[0],
            "rel_err_matrices_mean": mean_sd(errs)[0],
            "step_s": mean_sd([r["step_s"] for r in runs.values()])[0],
            "val_curve_mean": mean_curve,
        })
    return rows, fp32_sd


def best_four_bit(rows):
    cands = [r for r in rows if r["name"] in FOUR_BIT and r["gap_mean"] is not None]
    return min(cands, key=lambda r: r["gap_mean"])["name"] if cands else None


def netlab_configs(args, rows):
    """The configurations of the netlab run, in --configs order: fp32 first, 'best-4bit' resolved (dropped when no
    4-bit configuration has a gap), each once."""
    best = best_four_bit(rows)
    wanted = {best if c == "best-4bit" else c for c in args.netlab_configs} | {"fp32"}
    return [c for c in args.configs if c in wanted]


def f(x, spec):
    return "-" if x is None else format(x, spec)


def table(rows, fp32_sd, netlab):
    reach = {r["name"]: r for r in (netlab or {}).get("time_to_fp32_loss", [])}
    lines = [
        "| config | seeds | final val loss, mean (sd) | gap to fp32, mean [95 % CI] | within fp32's spread | push bytes/step "
        "| rel. err. of averaged matrices | time to fp32's loss (netlab) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        t = reach.get(r["name"])
        tt = "-" if t is None else ("not reached" if t["seconds"] is None else f"{t['seconds']:.1f} s (step {t['step']})")
        ci = "-" if r["gap_ci95"] is None else f"[{r['gap_mean'] - r['gap_ci95']:+.4f}, {r['gap_mean'] + r['gap_ci95']:+.4f}]"
        within = "-" if r["within_fp32_spread"] is None else ("yes" if r["within_fp32_spread"] else "no")
        lines.append(
            f"| {r['name']} | {len(r['seeds'])} | {f(r['val_loss_mean'], '.4f')} ({f(r['val_loss_sd'], '.4f')}) | "
            f"{f(r['gap_mean'], '+.4f')} {ci} | {within} | {f(r['bytes_per_step'], ',.0f')} | "
            f"{f(r['rel_err_matrices_mean'], '.4f')} | {tt} |")
    lines.append("")
    lines.append(f"fp32's seed-to-seed standard deviation of the final validation loss: {f(fp32_sd, '.4f')} nats/byte")
    if netlab:
        lines.append(f"netlab: {netlab.get('link')}; time = rank 0's training seconds to the first evaluation at or below "
                     "fp32's final validation loss (+ the demo's tolerance) in that run")
    return "\n".join(lines)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for r in rows:
        if r["val_curve_mean"]:
            xs, ys = zip(*r["val_curve_mean"])
            ax.plot(xs, ys, label=f"{r['name']} ({len(r['seeds'])} seeds)")
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/byte), mean over seeds")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    failed = []
    if not args.report_only and not args.netlab_only:
        for s in args.seeds:
            if run_demo(args, args.configs, s, os.path.join(args.out, f"seed{s}")) != 0:
                failed.append(f"seed {s}")
    rows, fp32_sd = summarize(args)
    netlab_dir = os.path.join(args.out, "netlab")
    if args.netlab_rate and not args.report_only:
        configs = netlab_configs(args, rows)
        if run_demo(args, configs, args.seeds[0], netlab_dir, ("--netlab-rate", args.netlab_rate)) != 0:
            failed.append("netlab")
    if args.runs_only:
        return 1 if failed else 0
    netlab = load(os.path.join(netlab_dir, "results.json"))
    text = table(rows, fp32_sd, netlab)
    print()
    print(text)
    doc = {"configs": rows, "fp32_seed_sd": fp32_sd, "steps": args.steps, "seeds": args.seeds,
           "netlab": None if netlab is None else {"link": netlab.get("link"), "time_to_fp32_loss": netlab.get("time_to_fp32_loss")},
           "failed": failed}
    with open(os.path.join(args.out, "study.json"), "w") as out:
        json.dump(doc, out, indent=1)
    with open(os.path.join(args.out, "study.md"), "w") as out:
        out.write(text + "\n")
    try:
        plot(rows, os.path.join(args.out, "study.png"))
    except Exception as e:  # noqa: BLE001 - the plot is optional; say why it is missing
        print(f"study: no plot: {e}", file=sys.stderr)
    if failed:
        print(f"study: failed runs: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
