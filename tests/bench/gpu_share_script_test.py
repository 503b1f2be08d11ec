#!/usr/bin/python3
"""Tests of `gift-bench gpu-share` and scripts/gpu-share.sh without a GPU.

  no-device  the real gift-bench: both roles exit 2 with "no CUDA device" on
             stderr; bad options exit with another status; the script prints
             "skipped: no CUDA device" and exits 0 (the GPU bundle goes on).
  flow       the script's orchestration over a stand-in gift-bench (a Python
             script speaking the same JSON lines, whose trainer reports 10 ms
             alone and 12 ms beside a running worker) and a stand-in
             nvidia-cuda-mps-control: the table and JSON rows for every rate,
             the slowdowns computed from them, MPS started with the pipe and
             log directories and stopped with `quit`, the refusal and
             --no-mps paths, and no process left behind, also when the script
             is stopped by SIGTERM in the middle of a run.

Usage: gpu_share_script_test.py {no-device|flow} --script scripts/gpu-share.sh
           [--bench BUILD/bench/gift-bench]
Exit 0 pass, 1 fail, 77 skipped (no-device on a machine with a GPU).
"""

import argparse
import json
import os
import signal
import stat
import subprocess
import sys
import tempfile
import time

SKIP = 77

FAKE_BENCH = r'''#!/usr/bin/python3
import json, os, signal, sys, time
args = sys.argv[2:]
def opt(name, default=None):
    return args[args.index(name) + 1] if name in args else default
state = os.environ["FAKE_STATE"]
pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "")
mps = bool(pipe) and os.path.exists(os.path.join(pipe, "control"))
role = opt("--role")
def emit(d):
    d["unix_s"] = time.time()
    print(json.dumps(d, separators=(",", ":")), flush=True)
stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
if role == "worker" and opt("--shape") == "64x64":  # the script's device probe
    emit({"role": "worker", "event": "summary", "steps_per_s": 1.0})
    sys.exit(0)
if role == "worker":
    mark = os.path.join(state, "worker.%d" % os.getpid())
    open(mark, "w").close()
    emit({"role": "worker", "event": "ready", "device": "Fake GPU"})
    deadline = time.time() + float(opt("--seconds"))
    rate = float(opt("--rate", "0"))
    # Windows of 50 ms: 700 steps/s while a trainer measures, 900 otherwise,
    # so that only the windows within the trainer's measurement give 700.
    window_start = time.time()
    while not stop and time.time() < deadline:
        time.sleep(0.05)
        now = time.time()
        measuring = os.path.exists(os.path.join(state, "measuring"))
        emit({"role": "worker", "event": "window", "window_s": now - window_start,
              "steps": (700.0 if measuring else 900.0) * (now - window_start)})
        window_start = now
    os.remove(mark)
    emit({"role": "worker", "event": "summary", "steps_per_s": (900.0 if mps else 800.0) if rate == 0 else rate,
          "step_median_ms": 1.25})
    sys.exit(0)
worker = any(n.startswith("worker.") for n in os.listdir(state))
open(os.path.join(state, "trainer.%d%s" % (os.getpid(), ".mps" if mps else "")), "w").close()
measuring = os.path.join(state, "measuring")
open(measuring, "w").close()
emit({"role": "trainer", "event": "ready", "device": "Fake GPU"})
# FAKE_MPS_PAIR_S: how long a trainer beside a worker under MPS runs.
end = time.time() + (float(os.environ.get("FAKE_MPS_PAIR_S", "0.4")) if mps and worker else 0.4)
while not stop and time.time() < end:
    time.sleep(0.02)
median = 10.0 + (0.2 if mps else 0.0) + ((0.3 if mps else 2.0) if worker else 0.0)
emit({"role": "trainer", "event": "summary", "iterations": 40, "median_ms": median, "p90_ms": median + 1})
os.remove(measuring)
'''

FAKE_MPS = r'''#!/bin/bash
echo "$* pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY" >>"$FAKE_STATE/mps-calls"
if [ "$1" = "-d" ]; then
  if [ -n "${FAKE_MPS_REFUSE:-}" ]; then echo "cannot start: permission denied" >&2; exit 1; fi
  touch "$CUDA_MPS_PIPE_DIRECTORY/control"
  echo "control daemon started" >"$CUDA_MPS_LOG_DIRECTORY/control.log"
  exit 0
fi
read -r cmd
echo "stdin=$cmd" >>"$FAKE_STATE/mps-calls"
[ "$cmd" = quit ] && rm -f "$CUDA_MPS_PIPE_DIRECTORY/control"
exit 0
'''


class Failures:
    def __init__(self):
        self.count = 0

    def check(self, ok, message):
        if not ok:
            self.count += 1
            print("FAIL:", message, flush=True)
        return ok


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)


def run(cmd, env=None, timeout=60):
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=env, timeout=timeout)
    print(p.stdout + p.stderr)
    return p


def no_device(args, f):
    probe = run([args.bench, "gpu-share", "--role", "worker", "--shape", "64x64", "--rank", "4",
                 "--seconds", "0.05"])
    if probe.returncode == 0:
        print("SKIP: this machine has a CUDA device")
        return SKIP
    for role in ("trainer", "worker"):
        p = run([args.bench, "gpu-share", "--role", role, "--seconds", "1"])
        f.check(p.returncode == 2, f"{role}: exit {p.returncode}, want 2")
        f.check("no CUDA device" in p.stderr, f"{role}: no 'no CUDA device' on stderr")
    for bad in (["--role", "both"], ["--role", "worker", "--rate", "-1"],
                ["--role", "trainer", "--priority", "lowest"], ["--role", "worker", "--rank", "0"],
                ["--role", "worker", "--shape", "4096"]):
        p = run([args.bench, "gpu-share", *bad])
        f.check(p.returncode not in (0, 2), f"{bad}: exit {p.returncode}, want a failure other than 2")
    with tempfile.TemporaryDirectory(prefix="gpu-share-test-") as tmp:
        p = run(["bash", args.script, "--bench", args.bench], env=dict(os.environ, OUT=tmp))
        f.check(p.returncode == 0, f"script: exit {p.returncode}, want 0")
        f.check("skipped: no CUDA device" in p.stdout, "script: no 'skipped: no CUDA device' line")
        doc = json.load(open(os.path.join(tmp, "gpu_share.json")))
        f.check(doc.get("skipped") == "no CUDA device", f"script JSON: {doc}")
    return 0


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def flow_env(tmp, mps=True, **extra):
    state = os.path.join(tmp, "state")
    os.makedirs(state, exist_ok=True)
    fakebin = os.path.join(tmp, "bin")
    os.makedirs(fakebin, exist_ok=True)
    write_exe(os.path.join(fakebin, "gift-bench"), FAKE_BENCH)
    if mps:
        write_exe(os.path.join(fakebin, "nvidia-cuda-mps-control"), FAKE_MPS)
    out = os.path.join(tmp, "out")
    env = dict(os.environ, FAKE_STATE=state, OUT=out, PATH=fakebin + ":/usr/bin:/bin", **extra)
    env.pop("CUDA_MPS_PIPE_DIRECTORY", None)
    return env, state, out, os.path.join(fakebin, "gift-bench")


def left_behind(state):
    return [n for n in os.listdir(state) if n.startswith("worker.")]


def flow(args, f):
    if subprocess.run(["bash", "-c", "command -v nvidia-cuda-mps-control"],
                      env={"PATH": "/usr/bin:/bin"}, capture_output=True).returncode == 0:
        print("note: a real nvidia-cuda-mps-control is in /usr/bin; the stand-in comes first")
    # The whole flow with MPS.
    with tempfile.TemporaryDirectory(prefix="gpu-share-test-") as tmp:
        env, state, out, bench = flow_env(tmp)
        p = run(["bash", args.script, "--bench", bench, "--seconds", "1", "--rates", "0,50"], env=env)
        f.check(p.returncode == 0, f"flow: exit {p.returncode}")
        doc = json.load(open(os.path.join(out, "gpu_share.json")))
        f.check(doc["trainer_alone"]["median_ms"] == 10.0, f"trainer alone: {doc['trainer_alone']}")
        f.check(doc["trainer_alone_again"]["drift_pct"] == 0.0, f"again: {doc['trainer_alone_again']}")
        f.check(doc["trainer_alone_mps"]["median_ms"] == 10.2, f"mps alone: {doc['trainer_alone_mps']}")
        f.check(doc["worker_alone"]["steps_per_s"] == 800.0, f"worker alone: {doc['worker_alone']}")
        f.check(doc["mps"]["ran"] is True, f"mps: {doc['mps']}")
        rows = {(r["mode"], r["rate"]): r for r in doc["runs"]}
        f.check(sorted(rows) == [("mps", 0), ("mps", 50), ("no-mps", 0), ("no-mps", 50)],
                f"rows: {sorted(rows)}")
        for rate in (0, 50):
            r = rows.get(("no-mps", rate), {})
            f.check(r.get("trainer_median_ms") == 12.0 and r.get("slowdown_pct") == 20.0 and
                    r.get("trainer_p90_ms") == 13.0, f"no-mps rate {rate}: {r}")
            m = rows.get(("mps", rate), {})
            f.check(m.get("slowdown_pct") == 5.0 and m.get("slowdown_vs_mps_alone_pct") == 2.9,
                    f"mps rate {rate}: {m}")
        for key, r in rows.items():
            f.check(r.get("worker_steps_per_s_overlapped") == 700.0,
                    f"{key}: the worker's rate within the trainer's measurement: {r}")
        f.check(rows.get(("no-mps", 0), {}).get("worker_steps_per_s") == 800.0 and
                rows.get(("mps", 0), {}).get("worker_steps_per_s") == 900.0 and
                rows.get(("mps", 50), {}).get("worker_steps_per_s") == 50.0, "worker rates")
        table = open(os.path.join(out, "gpu_share.txt")).read()
        f.check("no-mps  50" in table and "mps     0" in table, "table rows missing")
        calls = open(os.path.join(state, "mps-calls")).read()
        f.check("-d pipe=" in calls and "mps-pipe" in calls, "mps -d not called in its pipe directory")
        f.check("stdin=quit" in calls, "mps not stopped with quit")
        f.check("log=" in calls and "log= " not in calls, "no CUDA_MPS_LOG_DIRECTORY")
        f.check(os.path.isfile(os.path.join(out, "mps-log", "control.log")), "mps log not kept")
        f.check(not left_behind(state), f"workers left running: {left_behind(state)}")
    # MPS refused, and --no-mps: (c) skipped with the reason, the rest reported.
    for extra, flag, reason in (({"FAKE_MPS_REFUSE": "1"}, [], "refused: cannot start"),
                                ({}, ["--no-mps"], "--no-mps was given")):
        with tempfile.TemporaryDirectory(prefix="gpu-share-test-") as tmp:
            env, state, out, bench = flow_env(tmp, **extra)
            p = run(["bash", args.script, "--bench", bench, "--seconds", "1", "--rates", "0", *flag],
                    env=env)
            f.check(p.returncode == 0, f"{reason}: exit {p.returncode}")
            doc = json.load(open(os.path.join(out, "gpu_share.json")))
            f.check(doc["mps"]["ran"] is False and reason in doc["mps"]["skipped_reason"],
                    f"{reason}: {doc['mps']}")
            f.check([r["mode"] for r in doc["runs"]] == ["no-mps"], f"{reason}: {doc['runs']}")
            f.check("skipped: " + reason.split(":")[0] in p.stdout or reason in p.stdout,
                    f"{reason}: not printed")
    # SIGTERM in the middle of an MPS run: the worker and trainer are stopped,
    # and MPS is told to quit.
    with tempfile.TemporaryDirectory(prefix="gpu-share-test-") as tmp:
        env, state, out, bench = flow_env(tmp, FAKE_MPS_PAIR_S="60")
        print("+ gpu-share.sh (stopped by SIGTERM under MPS)", flush=True)
        proc = subprocess.Popen(["bash", args.script, "--bench", bench, "--seconds", "30",
                                 "--rates", "0", "--budget", "600"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.time() + 120
        pids = []
        while time.time() < deadline:
            calls = os.path.join(state, "mps-calls")
            mps_trainers = [n for n in os.listdir(state)
                            if n.startswith("trainer.") and n.endswith(".mps")]
            if len(mps_trainers) >= 2 and left_behind(state):  # MPS alone, then the MPS pair
                pids = [int(n.split(".")[1]) for n in left_behind(state) + mps_trainers]
                break
            time.sleep(0.1)
        f.check(bool(pids), "the MPS pair never started")
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
        print(output)
        f.check(proc.returncode != 0, f"stopped script exited {proc.returncode}")
        time.sleep(0.5)
        f.check(not any(alive(pid) for pid in pids), f"processes left running: {pids}")
        f.check("stdin=quit" in open(os.path.join(state, "mps-calls")).read(),
                "MPS not stopped after SIGTERM")
    return 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["no-device", "flow"])
    p.add_argument("--script", required=True)
    p.add_argument("--bench")
    args = p.parse_args()
    f = Failures()
    if args.mode == "no-device":
        if not args.bench:
            print("FAIL: no-device needs --bench")
            return 1
        rc = no_device(args, f)
    else:
        rc = flow(args, f)
    if rc == SKIP:
        return SKIP
    print("PASS" if f.count == 0 else f"{f.count} failure(s)")
    return 0 if f.count == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
