#!/usr/bin/env python3
"""Smoke test of the training demo (python/gift_ps/demo, `make demo`).

    demo_smoke_test.py service --build-dir BUILD   # a real local cluster: fp32 and gift
    demo_smoke_test.py local                       # the gloo stand-in (torch only)

Runs a tiny, few-step version of the demo into a temporary directory and
checks results.json: the expected rows, finite losses, the fp32 run's ranks
ending with bit-identical parameters, and (service) bytes and measured
gradient errors reported by the service, exact for fp32. Exit 77 (skipped by
ctest) when torch or the cluster's binaries are missing.
"""

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

SKIP = 77
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
TINY = ["--steps", "3", "--d-model", "32", "--layers", "1", "--heads", "2", "--mlp-hidden", "64", "--context", "32",
        "--batch", "8", "--eval-every", "3", "--measure-every", "1", "--val-windows", "8", "--final-val-windows", "8"]


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("backend", choices=("service", "local"))
    p.add_argument("--build-dir", default=os.path.join(REPO, "build"))
    args = p.parse_args()

    try:
        import torch  # noqa: F401
        import grpc  # noqa: F401
        import matplotlib  # noqa: F401
    except ImportError as e:
        print(f"SKIP: {sys.executable} cannot import {e.name}", file=sys.stderr)
        return SKIP
    if subprocess.run(["sh", "-c", "command -v bible"], capture_output=True).returncode != 0:
        print("SKIP: the KJV reader `bible` (Debian bible-kjv) is not installed", file=sys.stderr)
        return SKIP
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(REPO, "python") + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    build = os.path.abspath(args.build_dir)
    if args.backend == "service":
        needed = ["tools/gift-cluster/gift-cluster", "tools/giftctl/giftctl", "python/gen/gift/v1/worker_pb2.py"]
        missing = [n for n in needed if not os.path.exists(os.path.join(build, n))]
        if missing:
            print(f"SKIP: not built in {build}: {', '.join(missing)}", file=sys.stderr)
            return SKIP
        env["GIFT_PY_GEN"] = os.path.join(build, "python", "gen")
        configs = "fp32,gift"
    else:
        configs = "fp32,fp8"

    with tempfile.TemporaryDirectory(prefix="gift-demo-") as out:
        cmd = [sys.executable, "-m", "gift_ps.demo", "--build-dir", build, "--backend", args.backend, "--quick",
               "--configs", configs, "--out", out] + TINY
        print("+ " + " ".join(cmd), flush=True)
        res = subprocess.run(cmd, env=env, cwd=REPO, timeout=900)
        if res.returncode != 0:
            fail(f"the demo exited {res.returncode}")
        with open(os.path.join(out, "results.json")) as f:
            doc = json.load(f)
        if not os.path.getsize(os.path.join(out, "loss.png")):
            fail("loss.png is empty")
        rows = {r["name"]: r for r in doc["configs"]}
        if [r["name"] for r in doc["configs"]] != configs.split(","):
            fail(f"rows {list(rows)}, expected {configs}")
        for name, r in rows.items():
            if r["steps"] != 3 or len(r["train_curve"]) != 3:
                fail(f"{name}: {r['steps']} steps recorded, expected 3")
            for key in ("final_train_loss", "final_val_loss"):
                if r[key] is None or not math.isfinite(r[key]):
                    fail(f"{name}: {key} = {r[key]}")
            if not all(math.isfinite(x) for x in r["train_curve"]):
                fail(f"{name}: non-finite training loss {r['train_curve']}")
        if not rows["fp32"]["ranks_identical"]:
            fail(f"fp32: the ranks' parameters differ: {rows['fp32']['checksums']}")
        if rows["fp32"]["val_gap_to_fp32"] != 0:
            fail(f"fp32: gap to itself {rows['fp32']['val_gap_to_fp32']}")
        if args.backend == "service":
            n_tensors = doc["model"]["tensors"]
            for name, r in rows.items():
                if not r["bytes_per_step"] or r["bytes_per_step"] <= 0:
                    fail(f"{name}: bytes per step {r['bytes_per_step']}")
                if not r["pull_bytes_per_step"] or r["pull_bytes_per_step"] <= 0:
                    fail(f"{name}: pulled bytes per step {r['pull_bytes_per_step']}")
                counts = [t for _, t in r["transformed_per_step"]]
                if len(counts) != 3 or not all(0 <= t <= r["matrices"] for t in counts):
                    fail(f"{name}: transformed tensors per step {r['transformed_per_step']}")
                if len(r["errors"]) != 3:
                    fail(f"{name}: {len(r['errors'])} steps with measured errors, expected 3")
                for e in r["errors"]:
                    vals = [v for v in e["per_tensor"].values() if v is not None]
                    if len(vals) != n_tensors or not all(math.isfinite(v) and v >= 0 for v in vals):
                        fail(f"{name}: step {e['step']}: measured errors {e['per_tensor']}")
            fp32_err = max(v for e in rows["fp32"]["errors"] for v in e["per_tensor"].values())
            if fp32_err > 1e-5:
                fail(f"fp32: the averaged gradient differs from the exact average (rel. error {fp32_err})")
            n_params = doc["model"]["parameters"]
            if rows["fp32"]["bytes_per_step"] < 4 * n_params:
                fail(f"fp32: {rows['fp32']['bytes_per_step']} bytes per step for {n_params} FP32 parameters")
            if rows["gift"]["bytes_per_step"] >= rows["fp32"]["bytes_per_step"] / 2:
                fail(f"gift: {rows['gift']['bytes_per_step']} bytes per step, not under half of fp32's")
            # The owners' choices, one per weight matrix (None until a refresh measured it), for GIFT rows only.
            choices = rows["gift"]["choices"]
            if choices is None or len(choices) != rows["gift"]["matrices"]:
                fail(f"gift: choices {choices} for {rows['gift']['matrices']} matrices")
            if rows["fp32"]["choices"] is not None:
                fail(f"fp32: choices {rows['fp32']['choices']}")
        print(f"OK: {configs} via {args.backend}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
