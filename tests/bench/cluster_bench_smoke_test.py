#!/usr/bin/python3
"""Smoke test of `gift-bench cluster`: a tiny run through a real local cluster
(1 server, 2 workers, 2 timed steps, d_model 64, one layer; no gloo baseline,
a short ucx_perftest, a second cluster with data-plane authentication for the
--auth-compare ratio), checking that the JSON report has its fields and that
every worker got identical bits. No timing is checked: it is a benchmark.

Usage: cluster_bench_smoke_test.py --bench BUILD/bench/gift-bench
Exit 0 pass, 1 fail, 77 skipped (the daemons are not built next to it).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 77


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True)
    args = p.parse_args()
    build = os.path.dirname(os.path.dirname(os.path.abspath(args.bench)))
    for daemon in ("server/coordinator/gift-coordinator", "server/aggregator/gift-server",
                   "worker/gift-worker"):
        if not os.access(os.path.join(build, daemon), os.X_OK):
            print(f"SKIP: {daemon} is not built in {build}")
            return SKIP
    with tempfile.TemporaryDirectory(prefix="gift-bench-smoke-") as tmp:
        out = os.path.join(tmp, "cluster.json")
        cmd = [args.bench, "cluster", "--servers", "1", "--workers", "2", "--steps", "2",
               "--d-model", "64", "--layers", "1", "--no-gloo", "--perftest-iters", "20",
               "--reducer-reps", "2", "--auth-compare", "--json", out]
        print("+", " ".join(cmd), flush=True)
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=280)
        print(run.stdout)
        if run.returncode != 0:
            print(f"FAIL: gift-bench exited {run.returncode}")
            return 1
        with open(out) as f:
            doc = json.load(f)

    failures = []

    def need(obj, path):
        cur = obj
        for key in path.split("."):
            if not isinstance(cur, dict) or key not in cur:
                failures.append(f"missing field {path}")
                return None
            cur = cur[key]
        return cur

    for path in ("config.servers", "config.workers", "config.steps", "config.push_codec",
                 "config.fp32_bytes_per_worker_step", "push_pull.gbps_fp32",
                 "push_pull.bytes_pushed_per_step", "correctness.max_rel_l2_error",
                 "correctness.bound", "correctness.error_over_bound",
                 "correctness.identical_bits", "identical_bits", "cpu.workers_cpu_s_per_step",
                 "ucx_perftest.ran", "gloo.ran", "gloo.skipped", "reducer.ran"):
        need(doc, path)
    workers = need(doc, "workers") or []
    if len(workers) != 2:
        failures.append(f"{len(workers)} worker entries, want 2")
    for w in workers:
        for key in ("rank", "median_step_s", "p90_step_s", "gbps_fp32", "bytes_pushed_per_step"):
            if key not in w:
                failures.append(f"worker entry without {key}: {w}")
        if w.get("gbps_fp32", 0) <= 0 or w.get("bytes_pushed_per_step", 0) <= 0:
            failures.append(f"worker entry without throughput or bytes: {w}")
    if doc.get("identical_bits") is not True:
        failures.append(f"identical_bits is {doc.get('identical_bits')}")
    if doc.get("config", {}).get("mode") == "gift" and doc.get("config", {}).get("workers") != 2:
        failures.append("config does not echo the flags")
    auth = doc.get("auth", {})
    if auth.get("on") is not False or not auth.get("ratio_with_to_without", 0) > 0:
        failures.append(f"auth comparison without a ratio: {auth}")
    if auth.get("identical_bits_with_other") is not True:
        failures.append(f"the authenticated cluster's workers disagree: {auth}")
    reducer = doc.get("reducer", {})
    if reducer.get("ran") and not reducer.get("gbps_fp32_out", 0) > 0:
        failures.append(f"reducer ran without a throughput: {reducer}")
    perftest = doc.get("ucx_perftest", {})
    if not perftest.get("ran") and not (perftest.get("skipped") or perftest.get("results")):
        failures.append(f"ucx_perftest neither ran nor says why: {perftest}")
    err = doc.get("correctness", {}).get("max_rel_l2_error")
    if not isinstance(err, (int, float)) or not err >= 0:
        failures.append(f"max_rel_l2_error is {err}")

    # Measured selection under the step budget, on gradients a basis can use:
    # the run completes and reports the 2-D error the budget trades against.
    with tempfile.TemporaryDirectory(prefix="gift-bench-smoke-") as tmp:
        out = os.path.join(tmp, "measured.json")
        cmd = [args.bench, "cluster", "--servers", "1", "--workers", "2", "--steps", "2",
               "--warmup", "12", "--period", "5", "--d-model", "64", "--layers", "1",
               "--mode", "gift", "--selection", "measured", "--gift-budget", "0.5",
               "--gradients", "low-rank", "--no-gloo", "--no-perftest", "--no-reducer",
               "--json", out]
        print("+", " ".join(cmd), flush=True)
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=280)
        print(run.stdout)
        if run.returncode != 0:
            failures.append(f"measured selection: gift-bench exited {run.returncode}")
        else:
            with open(out) as f:
                measured = json.load(f)
            config = measured.get("config", {})
            if (config.get("selection"), config.get("gift_budget"), config.get("gradients")) != (
                    "measured", "0.5", "low-rank"):
                failures.append(f"measured selection: config does not echo the flags: {config}")
            err = measured.get("correctness", {}).get("gradient_error_2d")
            if not isinstance(err, (int, float)) or not err > 0:
                failures.append(f"measured selection: gradient_error_2d is {err}")
            if measured.get("identical_bits") is not True:
                failures.append("measured selection: the workers' results differ")

    for f in failures:
        print("FAIL:", f)
    if not failures:
        print("PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
