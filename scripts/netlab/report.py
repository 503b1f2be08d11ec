#!/usr/bin/python3
"""The report of scripts/netlab.sh: a table, JSON and a plot from its runs.

  report.py OUT [--check-bytes TOL]

Reads OUT/manifest.json and OUT/raw/RATE-MODE.json (gift-bench cluster
JSON for direct/fp32/gift, bench/gloo_allreduce.py JSON for gloo-*), writes

  OUT/results.json  one row per (mode, rate): median step, bytes per step
                    tx/rx of every host, the busiest host's bytes, the link
                    ideal (those bytes / rate), the ratio step / ideal, the
                    ideal if sending and receiving did not overlap, TCP
                    segments retransmitted per step (all hosts), CPU
                    seconds per step per process kind, and the step
                    against gloo-fp32's at the same rate when that mode
                    ran (x_gloo_fp32);
  OUT/table.txt     the same as a table (also printed);
  OUT/netlab.png    step time against link rate, one line per method, its
                    ideal dashed (when matplotlib is there).

--check-bytes TOL: also compares, for the gift-bench runs, the bytes each
worker host sent on its device with the bytes its daemon reports pushed
(and the server hosts' received bytes with the sum of pushes), and exits 1
when any differs by more than TOL (a fraction, e.g. 0.02).
"""

import argparse
import json
import os
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def gloo_row(doc):
    """(median step s, links, cpu dict) of a gloo_allreduce.py report."""
    per_step = []
    for rank_times in doc["step_seconds"]:
        if not per_step:
            per_step = [0.0] * len(rank_times)
        for i, t in enumerate(rank_times[: len(per_step)]):
            per_step[i] = max(per_step[i], t)
    cpu = doc.get("cpu_s_per_step", [])
    return (
        statistics.median(per_step),
        doc.get("links", []),
        {"rank": statistics.mean(cpu) if cpu else None},
    )


def bench_row(doc):
    """(median step s, links, cpu dict) of a gift-bench cluster report."""
    cpu = doc.get("cpu", {})
    return (
        doc["push_pull"]["slowest_median_step_s"],
        doc.get("links", []),
        {
            "worker": cpu.get("worker_cpu_s_per_step_each"),
            "server": cpu.get("server_cpu_s_per_step_each"),
            "coordinator": cpu.get("coordinator_cpu_s_per_step"),
        },
    )


def check_bytes(doc, tol):
    """Problems (strings) comparing device bytes with the daemons' counts."""
    problems = []
    links = doc.get("links", [])
    workers = [l for l in links if l["kind"] == "worker"]
    servers = [l for l in links if l["kind"] == "server"]
    pushed = [w["bytes_pushed_per_step"] for w in doc["workers"]]
    if len(workers) != len(pushed) or not servers:
        return [f"links of {len(workers)} worker hosts, {len(servers)} server hosts; "
                f"{len(pushed)} workers pushed"]
    for i, (link, p) in enumerate(zip(workers, pushed)):
        rel = (link["tx_bytes_per_step"] - p) / p if p else float("inf")
        line = (f"worker {i} ({link['host']}): {link['tx_bytes_per_step']:.0f} B/step sent on "
                f"{link['device']}, daemon pushed {p} B/step: {100 * rel:+.2f} %")
        print("  " + line)
        if abs(rel) > tol:
            problems.append(line)
    total_rx = sum(s["rx_bytes_per_step"] for s in servers)
    total = sum(pushed)
    rel = (total_rx - total) / total if total else float("inf")
    line = (f"servers: {total_rx:.0f} B/step received, workers pushed {total} B/step: "
            f"{100 * rel:+.2f} %")
    print("  " + line)
    if abs(rel) > tol:
        problems.append(line)
    return problems


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("out")
    p.add_argument("--check-bytes", type=float, default=None)
    args = p.parse_args()
    manifest = load(os.path.join(args.out, "manifest.json"))
    rows, problems = [], []
    for mode in manifest["modes"]:
        for rate in manifest["rates"]:
            path = os.path.join(args.out, "raw", f"{rate['name']}-{mode}.json")
            row = {"mode": mode, "rate": rate["name"], "bits_per_s": rate["bits_per_s"]}
            if not os.path.exists(path):
                row["error"] = "no result (see the log)"
                rows.append(row)
                continue
            doc = load(path)
            median, links, cpu = gloo_row(doc) if mode.startswith("gloo-") else bench_row(doc)
            busiest = max(
                (max(l["tx_bytes_per_step"], l["rx_bytes_per_step"]) for l in links), default=None
            )
            ideal = busiest * 8 / rate["bits_per_s"] if busiest else None
            # Were pushes and pulls not overlapped: the busiest host's tx + rx.
            serial = max((l["tx_bytes_per_step"] + l["rx_bytes_per_step"] for l in links),
                         default=None)
            retrans = sum(l.get("tcp_retrans_segs_per_step", 0) for l in links)
            row.update(
                {
                    "median_step_s": median,
                    "busiest_host_bytes_per_step": busiest,
                    "ideal_step_s": ideal,
                    "ratio_to_ideal": median / ideal if ideal else None,
                    "serial_ideal_step_s": serial * 8 / rate["bits_per_s"] if serial else None,
                    "tcp_retrans_segs_per_step": retrans,
                    "cpu_s_per_step_per_process": cpu,
                    "links": links,
                }
            )
            if not mode.startswith("gloo-"):
                row["bytes_pushed_per_worker_step"] = doc["push_pull"]["bytes_pushed_per_step"]
                # The largest relative L2 error of a tensor's average (gift-bench's check).
                row["rel_l2_error"] = doc.get("correctness", {}).get("max_rel_l2_error")
                # The measured step's 2-D gradients together (what GIFT lowers).
                row["gradient_error_2d"] = doc.get("correctness", {}).get("gradient_error_2d")
                row["transformed_tensors"] = doc.get("correctness", {}).get("transformed_tensors")
                if args.check_bytes is not None:
                    print(f"bytes check, {mode} at {rate['name']}:")
                    problems += [f"{mode} {rate['name']}: {x}" for x in
                                 check_bytes(doc, args.check_bytes)]
            rows.append(row)
    # The step against gloo's FP32 ring at the same rate, measured in the same run.
    gloo = {r["rate"]: r["median_step_s"] for r in rows
            if r["mode"] == "gloo-fp32" and "error" not in r}
    direct = {r["rate"]: r for r in rows if r["mode"] == "direct" and "error" not in r}
    for r in rows:
        if "error" not in r:
            r["x_gloo_fp32"] = r["median_step_s"] / gloo[r["rate"]] if r["rate"] in gloo else None
            d = direct.get(r["rate"])
            r["x_direct"] = r["median_step_s"] / d["median_step_s"] if d else None
    # The step budget: the part of the unbudgeted error reduction that the
    # budgeted selection keeps, 1 - err / err_direct against the same of
    # gift-unbudgeted, at each rate where all three ran.
    budget_lines = []
    for rate, d in direct.items():
        m = next((r for r in rows if r["mode"] == "gift-measured" and r["rate"] == rate
                  and "error" not in r), None)
        u = next((r for r in rows if r["mode"] == "gift-unbudgeted" and r["rate"] == rate
                  and "error" not in r), None)
        ed = d.get("gradient_error_2d")
        if not (m and u and ed and m.get("gradient_error_2d") and u.get("gradient_error_2d")):
            continue
        full = 1 - u["gradient_error_2d"] / ed
        kept = (1 - m["gradient_error_2d"] / ed) / full if full > 0 else None
        m["budget_kept"] = kept
        budget_lines.append(
            f"  {rate}: direct {ed:.4e}, gift-measured {m['gradient_error_2d']:.4e} "
            f"({m['x_direct']:.2f}x direct's step), gift-unbudgeted {u['gradient_error_2d']:.4e} "
            f"({u['x_direct']:.2f}x): kept {fmt(kept, '.2f')} of the error reduction")

    header = (f"{'method':<15} {'rate':>8} {'median ms':>10} {'busiest B/step':>15} "
              f"{'ideal ms':>9} {'x ideal':>8} {'tx+rx ms':>9} {'x gloo32':>8} {'x direct':>8} "
              f"{'TCP retx':>9} {'rel err':>7} {'2-D err':>9}  CPU s/step per process")
    lines = [
        f"netlab: {manifest['workers']} worker hosts, {manifest['servers']} "
        + ("servers on the worker hosts, " if manifest.get("colocate") else "server hosts, ")
        + (f"chunks of {manifest['chunk_bytes']} B FP32, " if manifest.get("chunk_bytes") else "")
        + f"d_model {manifest['d_model']} x {manifest['layers']} layers, {manifest['steps']} timed "
        f"steps, MTU {manifest['mtu']}"
        + (f", netem delay {manifest['delay']}" if manifest.get("delay") else "")
        + (f" loss {manifest['loss']}" if manifest.get("loss") else ""),
        header,
        "-" * len(header),
    ]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['mode']:<15} {r['rate']:>8}  {r['error']}")
            continue
        cpu = ", ".join(f"{k} {v:.3f}" for k, v in r["cpu_s_per_step_per_process"].items()
                        if v is not None)
        lines.append(
            f"{r['mode']:<15} {r['rate']:>8} {1e3 * r['median_step_s']:>10.1f} "
            f"{fmt(r['busiest_host_bytes_per_step'], '>15.0f')} "
            f"{fmt(r['ideal_step_s'] and 1e3 * r['ideal_step_s'], '>9.1f')} "
            f"{fmt(r['ratio_to_ideal'], '>8.2f')} "
            f"{fmt(r['serial_ideal_step_s'] and 1e3 * r['serial_ideal_step_s'], '>9.1f')} "
            f"{fmt(r['x_gloo_fp32'], '>8.2f')} {fmt(r['x_direct'], '>8.2f')} "
            f"{r['tcp_retrans_segs_per_step']:>9.0f} {fmt(r.get('rel_l2_error'), '>7.4f')} "
            f"{fmt(r.get('gradient_error_2d'), '>9.3e')}  {cpu}"
        )
    lines.append("ideal: the busiest host's bytes per step (max of tx and rx on its device) / "
                 "the link rate; tx+rx: the same with the host's tx and rx added (what a step "
                 "takes when sending and receiving do not overlap); x gloo32: the median step "
                 "over gloo-fp32's at the same rate; TCP retx: segments "
                 "retransmitted per step, all hosts; rel err: the largest relative L2 error "
                 "of a tensor's average against the exact FP32 average; 2-D err: that of "
                 "the step's weight matrices together; x direct: the median step over "
                 "direct's at the same rate")
    if budget_lines:
        lines.append("")
        lines.append("step budget (gift-measured against gift-unbudgeted, the measured step's "
                     "2-D gradient error):")
        lines += budget_lines
    lines.append("")
    lines.append("MB per step on each host's device, tx/rx (hosts: c = coordinator, s = servers, "
                 "w = workers):")
    for r in rows:
        if "error" in r or not r["links"]:
            continue
        hosts = ", ".join(
            f"{l['host'].rsplit('-', 1)[-1]} {l['tx_bytes_per_step'] / 1e6:.2f}/"
            f"{l['rx_bytes_per_step'] / 1e6:.2f}"
            for l in r["links"]
        )
        lines.append(f"  {r['mode']:<15} {r['rate']:>8}: {hosts}")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    with open(os.path.join(args.out, "table.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump({"manifest": manifest, "rows": rows}, f, indent=1)

    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError as e:
        print(f"no plot: {e}", file=sys.stderr)
    else:
        fig, ax = plt.subplots(figsize=(9, 4.5))
        for mode in manifest["modes"]:
            got = [r for r in rows if r["mode"] == mode and "error" not in r]
            if not got:
                continue
            xs = [r["bits_per_s"] / 1e9 for r in got]
            (line,) = ax.plot(xs, [1e3 * r["median_step_s"] for r in got], "o-", label=mode)
            ideal = [(x, 1e3 * r["ideal_step_s"]) for x, r in zip(xs, got) if r["ideal_step_s"]]
            if ideal:
                ax.plot(*zip(*ideal), "--", color=line.get_color(), alpha=0.7,
                        label=f"{mode} link ideal")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xticks([r["bits_per_s"] / 1e9 for r in manifest["rates"]])
        ax.set_xticklabels([r["name"] for r in manifest["rates"]])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.yaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
        ax.yaxis.set_minor_formatter(matplotlib.ticker.ScalarFormatter())
        ax.set_xlabel("link rate (tbf, each direction)")
        ax.set_ylabel("median step (ms)")
        ax.set_title(f"netlab: {manifest['workers']} workers, {manifest['servers']} servers")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0))
        fig.tight_layout()
        fig.savefig(os.path.join(args.out, "netlab.png"), dpi=120)
    if problems:
        print("bytes check FAILED:\n  " + "\n  ".join(problems), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
