"""A real local GIFT cluster for the Python integration tests.

Binaries come from GIFT_BUILD_DIR (set by CMake; default <repo>/build). The
cluster is started with the gift-cluster launcher when it is built (its one
JSON `ready` line on stdout names the coordinator and the worker sockets),
else from the daemons directly (gift-coordinator, gift-server, gift-worker).
`skip_reason()` says why the integration tests cannot run, or None.

The fixtures the cluster tests share: `start_cluster` (a cluster with
direct tensors on the given codecs), `ClusterFixture` (one cluster per test
class, started in setUpClass and stopped in tearDownClass, with a
WorkerClient per worker when CLIENTS is set), and `run_trainers` (training
processes side by side, their output and the cluster's logs in the failure).
Every cluster lives in its own tempfile.TemporaryDirectory; its daemons are
children of this process, stopped (SIGTERM, then SIGKILL) by Cluster.stop.
"""

import itertools
import json
import os
import queue
import signal
import subprocess
import tempfile
import threading
import time
from typing import List, Optional

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build_dir() -> str:
    return os.environ.get("GIFT_BUILD_DIR") or os.path.join(REPO, "build")


def binary(*parts: str) -> str:
    return os.path.join(build_dir(), *parts)


LAUNCHER = ("tools", "gift-cluster", "gift-cluster")
COORDINATOR = ("server", "coordinator", "gift-coordinator")
SERVER = ("server", "aggregator", "gift-server")
WORKER = ("worker", "gift-worker")
GIFTCTL = ("tools", "giftctl", "giftctl")


def _exists(parts) -> bool:
    return os.access(binary(*parts), os.X_OK)


def skip_reason() -> Optional[str]:
    missing = [os.path.join(*p) for p in (WORKER, GIFTCTL) if not _exists(p)]
    if not _exists(LAUNCHER):
        missing += [os.path.join(*p) for p in (COORDINATOR, SERVER) if not _exists(p)]
    if missing:
        return f"daemon binaries not built in {build_dir()}: {', '.join(missing)}"
    return None


class _Daemon:
    """A child process whose stdout/stderr lines are collected by threads."""

    def __init__(self, argv: List[str], log_path: str, stdin=subprocess.DEVNULL):
        self.argv = argv
        self.log = open(log_path, "w")
        self.lines: "queue.Queue[str]" = queue.Queue()
        self.proc = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.threads = [threading.Thread(target=self._drain, args=(s,), daemon=True)
                        for s in (self.proc.stdout, self.proc.stderr)]
        for t in self.threads:
            t.start()

    def _drain(self, stream):
        for line in stream:
            self.log.write(line)
            self.log.flush()
            self.lines.put(line)

    def wait_for_event(self, event: str, timeout: float = 60.0) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"{self.argv[0]}: no `{event}` within {timeout} s "
                                   f"(log {self.log.name})")
            try:
                line = self.lines.get(timeout=min(remaining, 0.5))
            except queue.Empty:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{self.argv[0]} exited with {self.proc.returncode} "
                                       f"before `{event}` (log {self.log.name})")
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("event") == event:
                return record

    def stop(self, timeout: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for t in self.threads:
            t.join(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()
        self.log.close()
        return self.proc.returncode


class Cluster:
    """coordinator + `servers` aggregator shards + `workers` gift-workers."""

    def __init__(self, servers: int = 2, workers: int = 2, lease_ttl: str = ""):
        self.tmp = tempfile.TemporaryDirectory(prefix="gift-pytest-")
        self.dir = self.tmp.name
        self.daemons: List[_Daemon] = []
        self.coordinator = ""
        self.sockets: List[str] = []
        self.worker_pids: List[int] = []  # to kill one
        self._lease = ["--lease-ttl", lease_ttl] if lease_ttl else []
        try:
            if _exists(LAUNCHER):
                self._start_launcher(servers, workers)
            else:
                self._start_daemons(servers, workers)
        except BaseException:
            self.stop()
            raise

    def _start_launcher(self, servers: int, workers: int):
        launcher = _Daemon([binary(*LAUNCHER), "--servers", str(servers), "--workers",
                            str(workers), "--dir", os.path.join(self.dir, "cluster")]
                           + self._lease, os.path.join(self.dir, "gift-cluster.log"))
        self.daemons.append(launcher)
        ready = launcher.wait_for_event("ready", timeout=120)
        self.coordinator = ready["coordinator"]
        self.sockets = [w["socket"] for w in ready["workers"]]
        self.worker_pids = [w["pid"] for w in ready["workers"]]

    def _start_daemons(self, servers: int, workers: int):
        no_metrics = ["--metrics-listen", ""]
        coordinator = _Daemon([binary(*COORDINATOR), "--listen", "127.0.0.1:0", "--state",
                               os.path.join(self.dir, "state.db")] + no_metrics + self._lease,
                              os.path.join(self.dir, "coordinator.log"))
        self.daemons.append(coordinator)
        self.coordinator = coordinator.wait_for_event("listening")["address"]
        for s in range(servers):
            d = _Daemon([binary(*SERVER), "--coordinator", self.coordinator, "--name",
                         f"server-{s}", "--threads", "1", "--listen", "127.0.0.1:0"] + no_metrics,
                        os.path.join(self.dir, f"server-{s}.log"))
            self.daemons.append(d)
        for w in range(workers):
            sock = os.path.join(self.dir, f"worker-{w}.sock")
            d = _Daemon([binary(*WORKER), "--coordinator", self.coordinator, "--socket", sock,
                         "--name", f"worker-{w}", "--threads", "1", "--min-workers",
                         str(workers)] + no_metrics,
                        os.path.join(self.dir, f"worker-{w}.log"))
            self.daemons.append(d)
            self.sockets.append(sock)
            self.worker_pids.append(d.proc.pid)
        for d in self.daemons[1:1 + servers]:
            d.wait_for_event("joined", timeout=120)
        for d in self.daemons[1 + servers:]:
            d.wait_for_event("ready", timeout=120)

    def giftctl(self, *args: str) -> str:
        out = subprocess.run([binary(*GIFTCTL), "--coordinator", self.coordinator, *args],
                             capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"giftctl {' '.join(args)}: exit {out.returncode}: "
                               f"{out.stderr}{out.stdout}")
        return out.stdout

    def set_codecs(self, push: str, pull: str) -> None:
        """Direct (untransformed) tensors with these codecs."""
        self.giftctl("policy", "set", "--push-codec", push, "--pull-codec", pull,
                     "--selection", "list")

    def logs(self) -> str:
        text = []
        for root, _, files in os.walk(self.dir):
            for f in files:
                if f.endswith(".log"):
                    with open(os.path.join(root, f), errors="replace") as fh:
                        text.append(f"== {f}\n{fh.read()[-3000:]}")
        return "\n".join(text)

    def stop(self) -> None:
        for d in reversed(self.daemons):
            d.stop()
        self.daemons = []
        self.tmp.cleanup()


def start_cluster(servers: int = 2, workers: int = 2, push: str = "fp32",
                  pull: str = "fp32") -> Cluster:
    """A running cluster whose tensors are direct with these codecs; it is
    stopped again when the policy cannot be set."""
    cluster = Cluster(servers=servers, workers=workers)
    try:
        cluster.set_codecs(push, pull)
    except BaseException:
        cluster.stop()
        raise
    return cluster


class ClusterFixture:
    """Mixin for a unittest.TestCase class sharing one cluster: SERVERS,
    WORKERS, PUSH, PULL as in start_cluster; with CLIENTS, cls.clients holds
    a WorkerClient per worker socket (closed in tearDownClass) and
    cls.steps counts the clients' steps from 1. A subclass that extends
    setUpClass calls super().setUpClass() first."""

    SERVERS = 2
    WORKERS = 2
    PUSH = PULL = "fp32"
    CLIENTS = False

    @classmethod
    def setUpClass(cls):
        cls.cluster = start_cluster(cls.SERVERS, cls.WORKERS, cls.PUSH, cls.PULL)
        cls.clients = []
        cls.steps = itertools.count(1)
        if cls.CLIENTS:
            from gift_ps import WorkerClient
            try:
                cls.clients = [WorkerClient(s, connect_timeout=30) for s in cls.cluster.sockets]
            except BaseException:
                cls.cluster.stop()
                raise

    @classmethod
    def tearDownClass(cls):
        for c in cls.clients:
            c.close()
        cls.cluster.stop()


def run_trainers(argvs: List[List[str]], timeout: float, cluster: Cluster,
                 label: str = "", env: Optional[dict] = None) -> None:
    """Runs one training process per argv side by side and waits up to
    `timeout` s for each (then kills it); raises AssertionError with its
    output and the cluster's logs when one exits nonzero."""
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env)
             for argv in argvs]
    logs = []
    for p in procs:
        try:
            logs.append(p.communicate(timeout=timeout)[0])
        except subprocess.TimeoutExpired:
            p.kill()
            logs.append(p.communicate()[0])
    prefix = f"{label}: " if label else ""
    for p, log in zip(procs, logs):
        if p.returncode != 0:
            raise AssertionError(f"{prefix}training process exited {p.returncode}:\n{log}\n"
                                 f"{cluster.logs()}")
