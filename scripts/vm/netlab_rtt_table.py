#!/usr/bin/env python3
"""One table of several netlab runs that differ in netem delay and loss.

    netlab_rtt_table.py RUN_DIR...

Each RUN_DIR holds a scripts/netlab.sh run's results.json; a row per
(run, mode): round trip (2 x the netem one-way delay), loss, median step,
the link ideal (busiest host's bytes / rate), their ratio, the step over
gloo-fp32's of the same run and over the same mode's without delay and loss.
"""
import json
import re
import sys


def millis(delay):
    """netem's one-way delay ('500us', '5ms', '') in ms."""
    if not delay:
        return 0.0
    m = re.fullmatch(r"([0-9.]+)(us|ms|s)", delay)
    if not m:
        raise ValueError(f"delay {delay!r}")
    return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]


def main(dirs):
    rows = []
    for d in dirs:
        try:
            with open(f"{d}/results.json") as f:
                res = json.load(f)
        except OSError as e:
            print(f"{d}: no results ({e.strerror})")
            continue
        man = res["manifest"]
        rtt = 2 * millis(man.get("delay", ""))
        loss = man.get("loss", "") or "-"
        gloo = {r["rate"]: r.get("median_step_s") for r in res["rows"] if r["mode"] == "gloo-fp32"}
        for r in res["rows"]:
            rows.append((rtt, loss, r, gloo.get(r["rate"])))
    base = {(r["mode"], r["rate"]): r.get("median_step_s")
            for rtt, loss, r, _ in rows if rtt == 0 and loss == "-"}
    head = (f"{'mode':<14}{'rate':>9}{'RTT ms':>8}{'loss':>7}{'median ms':>11}{'ideal ms':>10}"
            f"{'x ideal':>9}{'x gloo32':>10}{'x no-delay':>12}{'TCP retx':>10}")
    print(head)
    print("-" * len(head))
    for rtt, loss, r, gloo in rows:
        if "median_step_s" not in r:
            print(f"{r['mode']:<14}{r['rate']:>9}{rtt:>8g}{loss:>7}  {r.get('error', 'no result')}")
            continue
        med = r["median_step_s"]
        b = base.get((r["mode"], r["rate"]))
        print(f"{r['mode']:<14}{r['rate']:>9}{rtt:>8g}{loss:>7}{med * 1e3:>11.1f}"
              f"{r['ideal_step_s'] * 1e3:>10.1f}{r['ratio_to_ideal']:>9.2f}"
              f"{(med / gloo if gloo else float('nan')):>10.2f}"
              f"{(med / b if b else float('nan')):>12.2f}"
              f"{r.get('tcp_retrans_segs_per_step', float('nan')):>10.1f}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
