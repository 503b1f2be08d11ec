#!/usr/bin/env python3
"""Checks deploy/grafana/gift-ps.json against the metrics live daemons serve.

  grafana_check.py --source S --bin gift-cluster=PATH

Starts a local cluster (gift-cluster --metrics: a coordinator, one server, one
worker on loopback), scrapes every daemon's Prometheus page, and checks that
  - the dashboard is well formed (unique panel ids, every query panel has a
    datasource and at least one PromQL target),
  - every gift_* metric a query names exists on a live daemon's page
    (histogram series `_bucket`, `_sum`, `_count` count as their family),
  - every gift_* family a daemon serves is shown by some panel, so a metric
    added to a daemon without a panel fails here.
Exit 0: pass, 1: fail, 77: skipped (gift-cluster not built).
"""
import argparse
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77
READY_TIMEOUT_S = 120
METRIC = re.compile(r"\bgift_[a-z0-9_]+\b")
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def read_ready(proc, deadline):
    """The launcher's one JSON `ready` line (or None if it exits or times out)."""
    buffered = b""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return None
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if not ready:
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            return None
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("event") == "ready":
                return record
    return None


def scrape(address):
    """{family name: type} from one /metrics page (TYPE lines and samples)."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text = response.read().decode()
    families = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(maxsplit=3)
            families[name] = kind
    return families


def dashboard_queries(dashboard, failures):
    """Every PromQL expression of the dashboard; structural problems appended."""
    ids = set()
    exprs = []
    panels = list(dashboard.get("panels", []))
    if not panels:
        failures.append("the dashboard has no panels")
    for panel in panels:
        panels.extend(panel.get("panels", []))  # panels inside collapsed rows
        pid = panel.get("id")
        if pid in ids:
            failures.append(f"panel id {pid} is used twice")
        ids.add(pid)
        if panel.get("type") == "row":
            continue
        title = panel.get("title", f"panel {pid}")
        if "uid" not in panel.get("datasource", {}):
            failures.append(f"panel '{title}' has no datasource")
        targets = [t.get("expr", "") for t in panel.get("targets", [])]
        if not targets or not all(targets):
            failures.append(f"panel '{title}' has a target without a PromQL expression")
        exprs += [(title, e) for e in targets]
    if not any(v.get("name") == "datasource" for v in
               dashboard.get("templating", {}).get("list", [])):
        failures.append("no `datasource` template variable (panels use ${datasource})")
    return exprs


def family_of(name, served):
    if name in served:
        return name
    for suffix in HISTOGRAM_SUFFIXES:
        base = name[: -len(suffix)]
        if name.endswith(suffix) and served.get(base) in ("histogram", "summary"):
            return base
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    parser.add_argument("--source", required=True, help="repository root")
    parser.add_argument("--bin", action="append", default=[], help="gift-cluster=PATH")
    args = parser.parse_args()
    bins = dict(b.partition("=")[::2] for b in args.bin)
    launcher = bins.get("gift-cluster", "")
    if not os.access(launcher, os.X_OK):
        print(f"skipped: gift-cluster not built ({launcher or 'no --bin gift-cluster=PATH'})")
        return SKIP

    with open(os.path.join(args.source, "deploy", "grafana", "gift-ps.json")) as f:
        dashboard = json.load(f)
    failures = []
    exprs = dashboard_queries(dashboard, failures)

    with tempfile.TemporaryDirectory(prefix="gift-grafana-") as tmp:
        proc = subprocess.Popen(
            [launcher, "--metrics", "--servers", "1", "--workers", "1", "--dir",
             os.path.join(tmp, "cluster"), "--stop-on-stdin-eof"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(os.path.join(tmp, "launcher.err"), "w"))
        try:
            ready = read_ready(proc, time.monotonic() + READY_TIMEOUT_S)
            if ready is None:
                with open(os.path.join(tmp, "launcher.err")) as f:
                    print(f"FAIL gift-cluster gave no ready line:\n{f.read()[-3000:]}")
                return 1
            served = {}   # family -> type, over all daemons
            owners = {}   # family -> daemon names serving it
            for daemon, address in sorted(ready["metrics"].items()):
                for name, kind in scrape(address).items():
                    served[name] = kind
                    owners.setdefault(name, []).append(daemon)
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    shown = set()
    for title, expr in exprs:
        for name in METRIC.findall(expr):
            family = family_of(name, served)
            if family is None:
                failures.append(f"panel '{title}': {name} is on no daemon's page")
            else:
                shown.add(family)
    for name in sorted(n for n in served if n.startswith("gift_") and n not in shown):
        failures.append(f"{name} (served by {', '.join(owners[name])}) is on no panel")

    gift_families = sum(1 for n in served if n.startswith("gift_"))
    if failures:
        print(f"grafana dashboard: {len(failures)} problem(s)")
        for item in failures:
            print("  FAIL", item)
        return 1
    print(f"grafana dashboard: ok ({len(exprs)} queries over {len(shown)} of {gift_families} "
          f"gift_* families served by {len(ready['metrics'])} daemons)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
