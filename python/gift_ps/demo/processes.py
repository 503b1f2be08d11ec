"""The demo's processes: the gift-cluster it trains through, and the data-parallel training ranks."""

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import threading
import time

from gift_ps.demo.configs import policy_args

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
PYTHON_DIR = os.path.join(REPO, "python")


class DemoError(RuntimeError):
    pass


def free_port():
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

    def __init__(self, binary, servers, workers, directory, bin_dir=None, placement=None):
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
        if placement:  # the daemons in the netlab testbed's namespaces (scripts/netlab.sh exec)
            # TCP only: UCX's shared-memory transports would bypass the emulated links.
            cmd += ["--placement", placement, "--ucx-tls", "tcp"]
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


def set_policy(giftctl, coordinator, name, prefix=()):
    """giftctl policy set for configuration `name`; `prefix` runs giftctl in the coordinator's netlab namespace
    (plaintext gRPC to its testbed address, which is not loopback: --insecure)."""
    cmd = [giftctl, "--coordinator", coordinator] + (["--insecure"] if prefix else []) + policy_args(name)
    res = subprocess.run(list(prefix) + cmd, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise DemoError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip() or res.stdout.strip()}")
    return " ".join(a for a in cmd[3:] if a != "--insecure")


def tensor_choices(giftctl, coordinator, prefix=()):
    """What each tensor's owner chose at its last refresh, and why, by tensor name (giftctl tensors --json:
    TensorErrorRatio.choice, e.g. "p=0.25 r=64", "p=0.25 r=16 (budget)", "direct (budget)", "direct"); tensors
    never measured are left out. Raises DemoError when giftctl fails."""
    cmd = [giftctl, "--coordinator", coordinator] + (["--insecure"] if prefix else []) + ["--json", "tensors"]
    res = subprocess.run(list(prefix) + cmd, capture_output=True, text=True, timeout=60)
    if res.returncode != 0:
        raise DemoError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip() or res.stdout.strip()}")
    choices = {}
    for t in json.loads(res.stdout):
        choice = ((t.get("basis") or {}).get("error_ratio") or {}).get("choice")
        if choice:
            choices[t["name"]] = choice
    return choices


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
    env.update(spec.get("rank_env", {}))
    # Per rank, a command prefix (netlab: `ip netns exec HOST ...`, so that a gloo
    # rank's traffic crosses its host's emulated link).
    prefixes = spec.get("rank_prefix") or [[] for _ in range(args.workers)]
    procs, logs = [], []
    q = queue.Queue()
    spec["t_spawn"] = time.time()
    try:
        for r in range(args.workers):
            log = open(os.path.join(run_dir, f"rank{r}.log"), "w")
            logs.append(log)
            procs.append(
                subprocess.Popen(
                    prefixes[r] + [args.python, "-m", "gift_ps.demo.train", spec_path, str(r)],
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
