"""The demo's results: per-configuration summaries of the ranks' logs, the table, the plain-language summary and the plot."""

import json
import os
import statistics

from gift_ps.demo.configs import CONFIGS, OVERLAP
from gift_ps.demo.processes import DemoError


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
    pulled = [rec["bytes_pulled"] for rec in r0 if rec.get("bytes_pulled") is not None]
    timed = [rec for rec in r0 if "errors" not in rec] or r0
    # Tensors the service ran in a GIFT basis, per step of rank 0 (every rank
    # reports the same: a step's basis versions are the cluster's).
    per_step = [[rec["step"], rec["transformed"]] for rec in r0 if rec.get("transformed") is not None]
    first = next((i for i, (_, t) in enumerate(per_step) if t), None)
    after = [t for _, t in per_step[first:]] if first is not None else []
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
        "pull_bytes_per_step": statistics.fmean(pulled) if pulled else None,
        # Timed over the steps that did not measure errors (a measured step
        # also exchanges an exact FP32 copy of every gradient).
        "step_s": statistics.fmean(rec["step_s"] for rec in timed),
        "sync_s": statistics.fmean(rec["sync_s"] for rec in timed),
        "compute_s": statistics.fmean(rec["compute_s"] for rec in timed),
        "rel_err_mean": _mean(e["mean"] for e in second_half),
        "rel_err_matrices_mean": _mean(e["matrices_mean"] for e in second_half),
        "rel_err_steps": [e["step"] for e in second_half],
        "transformed_tensors_last": per_step[-1][1] if per_step else None,
        "transformed_per_step": per_step,
        # From the first step with a basis active on: the step, and the mean
        # number of tensors transformed per step.
        "transformed_first_step": per_step[first][0] if first is not None else None,
        "transformed_mean": statistics.fmean(after) if after else None,
        "matrices": len(matrices),
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


def _in_basis(r):
    if r.get("transformed_mean") is None:
        return "0" if r["gift"] else "-"
    return f"{r['transformed_mean']:.1f}/{r['matrices']} @{r['transformed_first_step']}"


# The kinds of an owner's last choice (TensorErrorRatio.choice), in the order choice_lines lists them.
CHOICE_KINDS = (
    ("target-fewer", "fewer bytes within the fidelity target's error (codecs push / pull in brackets)"),
    ("target-direct", "direct in the fidelity target's codecs: no cheaper way met its error"),
    ("target-fallback", "direct in the target's codecs: a measure step found the cheaper choice above the target"),
    ("basis", "in a basis at the policy's rank"),
    ("lower", "in a basis at a lower rank (the step budget cut it)"),
    ("skipped", "direct: the step budget skipped a basis that won"),
    ("direct", "direct: no basis won by the selection margin"),
    ("unmeasured", "not measured (no refresh yet)"),
)


def choice_kind(choice):
    """The CHOICE_KINDS key of one owner's choice text (None: never measured)."""
    if not choice:
        return "unmeasured"
    if choice.startswith("direct (above target"):
        return "target-fallback"
    if choice.endswith("]"):  # the fidelity target's choice names its codecs: "... [push / pull]"
        return "target-direct" if "[target: " in choice else "target-fewer"
    if choice.startswith("direct"):
        return "skipped" if "(budget)" in choice else "direct"
    return "lower" if "(budget)" in choice else "basis"


def _budget_cell(r):
    if not r.get("choices"):
        return "-"
    kinds = [choice_kind(c) for c in r["choices"].values()]
    return f"{kinds.count('skipped')} skip, {kinds.count('lower')} lower"


def choice_lines(results):
    """Per GIFT configuration, which weight matrices ran in a basis and which the budget cut or skipped (the owners'
    last choices, read with giftctl tensors before the cluster stopped)."""
    lines = []
    for r in results:
        if not r.get("choices"):
            continue
        by_kind = {}
        for m, c in sorted(r["choices"].items()):
            by_kind.setdefault(choice_kind(c), []).append(f"{m} ({c})" if c else m)
        parts = [f"{what}: {len(by_kind[k])} [{', '.join(by_kind[k])}]" for k, what in CHOICE_KINDS if k in by_kind]
        lines.append(f"{r['name']} matrices at the end: " + "; ".join(parts))
    return lines


def table(results, args):
    head = ["config", "push / pull", "train loss", "val loss", "gap to fp32", "push KiB", "pull KiB", "step s", "sync s", "grad err", "err 2-D",
            "in basis", "budget"]
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
                fmt(None if r.get("pull_bytes_per_step") is None else r["pull_bytes_per_step"] / 1024, ".1f"),
                fmt(r["step_s"], ".3f"),
                fmt(r["sync_s"], ".3f"),
                fmt(r["rel_err_mean"], ".2e"),
                fmt(r["rel_err_matrices_mean"], ".2e"),
                _in_basis(r),
                _budget_cell(r),
            ]
        )
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(head)]
    line = lambda cells: "  ".join(c.rjust(w) if i > 1 else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    out = [line(head), line(["-" * w for w in widths])] + [line(row) for row in rows]
    notes = [
        f"train loss: mean over the 4 ranks and the last {results[0]['final_train_loss_window']} steps; val loss: "
        f"{args.final_val_windows} held-out windows after the last step (nats/byte)",
        "push KiB / pull KiB: payload bytes one worker pushes / receives per step (sums of its tensors' bytes_sent / "
        "bytes_received, plus the per-worker statistics of per-worker geometry sources); step s: mean wall time of a "
        "training step on rank 0 (sync s: of it, the gradient averaging), over the steps that do not measure errors",
        ("grad err: relative L2 error of the averaged gradient against the exact average, measured by the service every "
         f"{args.measure_every} steps, mean over the second half of the run and over all tensors; err 2-D: over the weight "
         "matrices only") if args.measure_every > 0 else "grad err, err 2-D: not measured (--measure-every 0)",
        "in basis: tensors the service ran in a GIFT basis per step (TensorResult.transformed), mean over the steps from "
        "the first one with a basis active (@ step) on, of the model's weight matrices (per step: results.json "
        "transformed_per_step)",
        "budget: of the weight matrices at the end, how many the step budget (selection.gift_budget) skipped (sent "
        "direct though a basis won) and how many it put at a lower rank; the lines below name them (the owners' "
        "choices, giftctl tensors CHOICE)",
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
        ("gift-fp8-both", "fp8-both", "FP8 both ways: what the transform buys"),
        ("gift-nvfp4", "nvfp4", "NVFP4 push, FP8 pull: what the transform buys"),
    ]
    for g, base, what in pairs:
        if base in rows and g in rows and rows[base]["rel_err_matrices_mean"] and rows[g]["rel_err_matrices_mean"]:
            ratio = rows[base]["rel_err_matrices_mean"] / rows[g]["rel_err_matrices_mean"]
            word = f"{ratio:.2f}x lower" if ratio >= 1 else f"{1 / ratio:.2f}x higher"
            lines.append(f"{g} vs {base}: gradient error {word} ({what})")
    return lines


def overlap_rows(results):
    """For each overlapped configuration run beside its sequential twin: its step against the twin's compute and
    sync seconds measured separately (the twin syncs after backward, so the two add up to its step).

    Returns [{name, twin, step_s, compute_s, sync_s, sum_s, hidden_s}]: hidden_s = sum_s - step_s, the seconds of
    communication the overlap hid per step (negative when the overlapped step is slower)."""
    rows = {r["name"]: r for r in results}
    out = []
    for name, twin in OVERLAP.items():
        if name in rows and twin in rows:
            o, t = rows[name], rows[twin]
            total = t["compute_s"] + t["sync_s"]
            out.append({"name": name, "twin": twin, "step_s": o["step_s"], "compute_s": t["compute_s"], "sync_s": t["sync_s"],
                        "sum_s": total, "hidden_s": total - o["step_s"]})
    return out


def overlap_lines(rows):
    """One plain line per overlap_rows() row."""
    lines = []
    for o in rows:
        if o["hidden_s"] < 0:
            verdict = f"{-o['hidden_s']:.3f} s slower, nothing hidden"
        else:
            share = f" ({100 * o['hidden_s'] / o['sync_s']:.0f} % of the sync)" if o["sync_s"] > 0 else ""
            verdict = f"{o['hidden_s']:.3f} s{share} hidden"
        lines.append(f"overlap: {o['name']} step {o['step_s']:.3f} s against {o['twin']}'s compute {o['compute_s']:.3f} s + "
                     f"sync {o['sync_s']:.3f} s = {o['sum_s']:.3f} s measured separately: {verdict}")
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
