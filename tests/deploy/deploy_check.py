#!/usr/bin/env python3
"""Checks of the deployment artifacts under deploy/ (run by ctest).

  deploy_check.py units       --source S --bin NAME=PATH ...   systemd-analyze verify
  deploy_check.py security    --source S                         exposure scores (report)
  deploy_check.py manifests   --source S                         Kubernetes structure
  deploy_check.py config-keys --source S --bin NAME=PATH ...   TOML keys are daemon flags
  deploy_check.py dockerfile  --source S                         container image structure

Exit 0: pass, 1: fail, 77: skipped (ctest SKIP_RETURN_CODE), with the reason
on stdout. Needs only the Python standard library and python3-yaml.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib

from mps_check import MPS_CONTROL, apply_merges, check_mps, check_mps_unit, env_of

SKIP = 77
DAEMONS = ["gift-coordinator", "gift-server", "gift-worker"]
BINARIES = DAEMONS + ["giftctl", "gift-cluster"]
UNITS = ["gift.target", "gift-coordinator.service", "gift-server@.service",
         "gift-worker@.service", "gift-mps.service"]
# The daemons' units (the hardening and TLS rules); gift-mps.service runs
# NVIDIA's MPS control daemon (checked by check_mps_unit).
DAEMON_UNITS = ["gift-coordinator.service", "gift-server@.service", "gift-worker@.service"]


class Failures:
    def __init__(self):
        self.items = []

    def check(self, ok, message):
        if not ok:
            self.items.append(message)
        return ok

    def finish(self, what):
        if self.items:
            print(f"{what}: {len(self.items)} problem(s)")
            for item in self.items:
                print("  FAIL", item)
            return 1
        print(f"{what}: ok")
        return 0


def binaries(args):
    """NAME=PATH pairs given on the command line, only those that exist."""
    found = {}
    for pair in args.bin or []:
        name, _, path = pair.partition("=")
        if path and os.access(path, os.X_OK):
            found[name] = path
    return found


# ---- systemd -----------------------------------------------------------------------
def stage_units(source, bins, directory):
    """Copies the units into `directory`, pointing ExecStart at the built
    binaries (or /bin/true for one not built) and --config at copies of
    deploy/config. Returns the notes about stand-ins."""
    notes = []
    confdir = os.path.join(directory, "etc-gift")
    os.makedirs(confdir)
    for name in os.listdir(os.path.join(source, "deploy", "config")):
        shutil.copy(os.path.join(source, "deploy", "config", name), confdir)
    for unit in UNITS:
        text = open(os.path.join(source, "deploy", "systemd", unit)).read()

        def exe(match):
            name = match.group(1)
            if name in bins:
                return os.path.abspath(bins[name])
            notes.append(f"{unit}: {name} is not built; ExecStart verified with /bin/true")
            return "/bin/true"

        text = re.sub(r"/usr/local/bin/([A-Za-z0-9_-]+)", exe, text)
        if MPS_CONTROL in text and not os.access(MPS_CONTROL, os.X_OK):
            notes.append(f"{unit}: {MPS_CONTROL} is not installed; verified with /bin/true")
            text = text.replace(MPS_CONTROL, "/bin/true")
        text = text.replace("/etc/gift/", confdir + "/")
        with open(os.path.join(directory, unit), "w") as f:
            f.write(text)
    return notes


def cmd_units(args):
    if shutil.which("systemd-analyze") is None:
        print("SKIP: systemd-analyze is not installed (Debian: the systemd package)")
        return SKIP
    failures = Failures()
    with tempfile.TemporaryDirectory() as directory:
        for note in stage_units(args.source, binaries(args), directory):
            print("note:", note)
        # Templates are verified through an instance, as systemd would run them.
        targets = [os.path.join(directory, u.replace("@.", "@0.")) for u in UNITS]
        proc = subprocess.run(["systemd-analyze", "verify", *targets], capture_output=True,
                              text=True, env=dict(os.environ, SYSTEMD_LOG_LEVEL="notice"))
        output = (proc.stdout + proc.stderr).strip()
        print(output or "(no output)")
        failures.check(proc.returncode == 0, f"systemd-analyze verify exited {proc.returncode}")
        # Warnings (unknown keys, bad values) do not change the exit status.
        for line in output.splitlines():
            if "gift" in line:
                failures.check(False, f"systemd-analyze: {line}")
        # The structure the deployment relies on.
        check_mps_unit(args.source, failures)
        for unit in DAEMON_UNITS:
            text = open(os.path.join(args.source, "deploy", "systemd", unit)).read()
            for key in ["Type=notify", "NotifyAccess=main", "WatchdogSec=", "Restart=on-failure",
                        "KillSignal=SIGTERM", "TimeoutStopSec=", "NoNewPrivileges=yes",
                        "ProtectSystem=strict", "PrivateTmp=yes", "ProtectHome=yes",
                        "CapabilityBoundingSet=\n", "SystemCallFilter=@system-service",
                        "SystemCallArchitectures=native", "RestrictAddressFamilies=",
                        "--config /etc/gift/", "LoadCredential=tls.crt:/etc/gift/tls/",
                        "LoadCredential=tls.key:/etc/gift/tls/", "LoadCredential=ca.crt:/etc/gift/tls/",
                        "--tls-cert %d/tls.crt --tls-key %d/tls.key --tls-ca %d/ca.crt"]:
                failures.check(key in text, f"{unit}: no {key.strip()}")
                failures.check("--insecure" not in text, f"{unit}: runs with --insecure")
    return failures.finish("units")


def cmd_security(args):
    if shutil.which("systemd-analyze") is None:
        print("SKIP: systemd-analyze is not installed")
        return SKIP
    failures = Failures()
    with tempfile.TemporaryDirectory() as directory:
        stage_units(args.source, {}, directory)
        for unit in DAEMON_UNITS + ["gift-mps.service"]:
            proc = subprocess.run(["systemd-analyze", "security", "--offline=true",
                                   os.path.join(directory, unit)], capture_output=True, text=True)
            last = [l for l in proc.stdout.splitlines() if "Overall exposure" in l]
            print(last[0] if last else proc.stdout + proc.stderr)
            score = re.search(r": ([0-9.]+) ", last[0]) if last else None
            # A regression guard: every unit stays in the "OK" band (< 2.0).
            failures.check(score is not None and float(score.group(1)) < 2.0,
                           f"{unit}: exposure {score.group(1) if score else '?'}")
    return failures.finish("security")


# ---- Kubernetes ------------------------------------------------------------------------
def load_yaml(path, failures):
    import yaml
    try:
        with open(path) as f:
            return [d for d in yaml.safe_load_all(f) if d is not None]
    except yaml.YAMLError as e:
        failures.check(False, f"{path}: does not parse: {e}")
        return []


def kustomization(directory, failures):
    path = os.path.join(directory, "kustomization.yaml")
    docs = load_yaml(path, failures)
    failures.check(len(docs) == 1, f"{path}: one document expected")
    return docs[0] if docs else {}


def resolve(directory, failures, seen=None):
    """Resources of a kustomization without kustomize: (documents, generated
    ConfigMaps {name: {key: text}}, the kustomization)."""
    k = kustomization(directory, failures)
    documents, configmaps = [], {}
    for resource in k.get("resources", []):
        path = os.path.normpath(os.path.join(directory, resource))
        if not failures.check(os.path.exists(path), f"{directory}: resource {resource} missing"):
            continue
        if os.path.isdir(path):
            docs, cms, _ = resolve(path, failures)
            documents += docs
            configmaps.update(cms)
        else:
            documents += load_yaml(path, failures)
    for gen in k.get("configMapGenerator", []):
        data = dict(configmaps.get(gen["name"], {})) if gen.get("behavior") in ("merge",
                                                                              "replace") else {}
        if gen.get("behavior") == "replace":
            data = {}
        failures.check(gen.get("behavior", "create") == "create" or gen["name"] in configmaps,
                       f"{directory}: configMapGenerator {gen['name']} merges into nothing")
        for file in gen.get("files", []):
            key, _, rel = file.rpartition("=") if "=" in file else (os.path.basename(file), "", file)
            path = os.path.join(directory, rel)
            if failures.check(os.path.isfile(path), f"{directory}: config file {rel} missing"):
                data[key] = open(path).read()
        configmaps[gen["name"]] = data
    return documents, configmaps, k


WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")


def labels_match(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


TLS_KEYS = ("tls-cert", "tls-key", "tls-ca")


def check_tls(what, settings, secret_mounts, failures):
    """Every shipped daemon config turns mutual TLS on, never --insecure, and
    (Kubernetes) reads its files from a mounted Secret."""
    for k in TLS_KEYS:
        value = settings.get(k, "")
        if failures.check(bool(value), f"{what}: no {k} (mutual TLS off)"):
            failures.check(secret_mounts is None or os.path.dirname(value) in secret_mounts,
                           f"{what}: {k}={value} is not on a mounted Secret {sorted(secret_mounts or [])}")
    failures.check(settings.get("insecure") is not True, f"{what}: insecure = true")


def check_probe(what, probe, settings, ports, secret_mounts, failures):
    """A probe of the daemon's gRPC health: the kubelet's own (plaintext, so
    only for a plaintext endpoint) or `giftctl health TARGET` with the pod's
    certificate (TLS endpoints) or through the worker's Unix socket."""
    listen_port = int(settings.get("listen", ":0").rsplit(":", 1)[1] or 0) \
        if settings.get("listen") else None
    grpc = probe.get("grpc")
    if grpc is not None:
        failures.check(not settings.get("tls-cert"),
                       f"{what}: a kubelet gRPC probe cannot speak TLS to a mutual-TLS endpoint")
        failures.check(grpc["port"] in ports.values(), f"{what}: port {grpc['port']} not a container port")
        failures.check(grpc["port"] == listen_port,
                       f"{what}: port {grpc['port']} is not the gRPC listen port {listen_port}")
        return
    command = probe.get("exec", {}).get("command", [])
    if not failures.check(command[:1] == ["giftctl"] and "health" in command,
                          f"{what}: neither a gRPC probe nor `giftctl health`: {command}"):
        return
    rest = command[command.index("health") + 1:]
    target = rest[0] if rest else ""
    if target.startswith("unix:"):
        failures.check(target == "unix:" + settings.get("socket", ""),
                       f"{what}: probes {target}, not the socket {settings.get('socket')}")
        return
    failures.check(target.rsplit(":", 1)[-1].isdigit() and int(target.rsplit(":", 1)[1]) == listen_port,
                   f"{what}: probes {target}, not the gRPC listen port {listen_port}")
    for flag in ("--cert=", "--key=", "--ca="):
        given = [a for a in command if a.startswith(flag)]
        if failures.check(given, f"{what}: giftctl health without {flag.rstrip('=')}"):
            failures.check(os.path.dirname(given[0].split("=", 1)[1]) in secret_mounts,
                           f"{what}: {given[0]} is not on a mounted Secret")


def check_tree(name, documents, configmaps, failures, colocated=False):
    """The structure of a tree of manifests; colocated: the servers are a
    DaemonSet beside the workers' instead of a StatefulSet."""
    by_kind = {}
    for d in documents:
        failures.check("kind" in d and "metadata" in d and "name" in d["metadata"],
                       f"{name}: a document without kind/metadata.name")
        by_kind.setdefault(d.get("kind"), {})[d["metadata"].get("name")] = d
        failures.check("namespace" not in d["metadata"] or d["kind"] == "Namespace",
                       f"{name}: {d['kind']}/{d['metadata']['name']} hard-codes a namespace")
    expected = {"Deployment": ["gift-coordinator"], "StatefulSet": ["gift-server"],
                "DaemonSet": ["gift-worker"], "PersistentVolumeClaim": ["gift-coordinator-state"],
                "Service": ["gift-coordinator", "gift-server"],
                "PodDisruptionBudget": ["gift-server"]}
    if colocated:
        expected.update({"StatefulSet": [], "DaemonSet": ["gift-worker", "gift-server"],
                         "PodDisruptionBudget": []})
        for kind in ("StatefulSet", "PodDisruptionBudget"):
            failures.check("gift-server" not in by_kind.get(kind, {}),
                           f"{name}: {kind}/gift-server left beside the server DaemonSet")
    for kind, names in expected.items():
        for n in names:
            failures.check(n in by_kind.get(kind, {}), f"{name}: no {kind}/{n}")
    failures.check("gift-config" in configmaps, f"{name}: no gift-config ConfigMap")
    config = configmaps.get("gift-config", {})
    for key in ("coordinator.toml", "server.toml", "worker.toml"):
        failures.check(key in config, f"{name}: gift-config has no {key}")
    tomls = {}
    for key, text in config.items():
        try:
            tomls[key] = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            failures.check(False, f"{name}: gift-config {key} is not TOML: {e}")

    images = set()
    pods = []  # (workload, template labels, container ports {name: port}, served ports)
    for kind in WORKLOADS:
        for wname, w in by_kind.get(kind, {}).items():
            spec = w["spec"]
            template = spec["template"]
            labels = template["metadata"].get("labels", {})
            selector = spec["selector"]["matchLabels"]
            failures.check(labels_match(selector, labels),
                           f"{name}: {kind}/{wname} selector {selector} misses its pod labels")
            pod = template["spec"]
            sc = pod.get("securityContext", {})
            failures.check(sc.get("runAsNonRoot") is True, f"{name}: {wname} not runAsNonRoot")
            volumes = {v["name"]: v for v in pod.get("volumes", [])}
            claims = [v["persistentVolumeClaim"]["claimName"] for v in volumes.values()
                      if "persistentVolumeClaim" in v]
            for claim in claims:
                failures.check(claim in by_kind.get("PersistentVolumeClaim", {}),
                               f"{name}: {wname} claims missing PVC {claim}")
            for c in pod["containers"]:
                images.add(c["image"])
                csc = c.get("securityContext", {})
                failures.check(csc.get("readOnlyRootFilesystem") is True,
                               f"{name}: {wname}/{c['name']} root filesystem writable")
                failures.check(csc.get("allowPrivilegeEscalation") is False,
                               f"{name}: {wname}/{c['name']} allows privilege escalation")
                failures.check(csc.get("capabilities", {}).get("drop") == ["ALL"],
                               f"{name}: {wname}/{c['name']} does not drop ALL capabilities")
                res = c.get("resources", {})
                failures.check("requests" in res and "limits" in res
                               and "memory" in res["limits"],
                               f"{name}: {wname}/{c['name']} lacks requests/memory limit")
                ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
                # The ConfigMap volume and the config file the daemon is told to read.
                mounts = {m["name"]: m["mountPath"] for m in c.get("volumeMounts", [])}
                if c.get("command", [""])[0] not in DAEMONS:
                    # A helper beside a daemon (the MPS control daemon): no
                    # config, TLS or served ports; it must be watched.
                    for vname in mounts:
                        failures.check(vname in volumes,
                                       f"{name}: {wname}/{c['name']} mounts missing volume {vname}")
                    failures.check(not ports, f"{name}: {wname}/{c['name']} declares ports")
                    failures.check("livenessProbe" in c,
                                   f"{name}: {wname}/{c['name']} has no livenessProbe")
                    continue
                config_file = None
                for arg in c.get("args", []) + c.get("command", []):
                    if arg.startswith("--config="):
                        config_file = arg.split("=", 1)[1]
                for vname, path in mounts.items():
                    failures.check(vname in volumes,
                                   f"{name}: {wname}/{c['name']} mounts missing volume {vname}")
                cm_mount = [p for v, p in mounts.items()
                            if v in volumes and "configMap" in volumes[v]]
                for v in volumes.values():
                    if "configMap" in v:
                        failures.check(v["configMap"]["name"] in configmaps,
                                       f"{name}: {wname} mounts unknown ConfigMap "
                                       f"{v['configMap']['name']}")
                failures.check(config_file is not None,
                               f"{name}: {wname}/{c['name']} passes no --config")
                served = set()
                if config_file:
                    directory, key = os.path.split(config_file)
                    failures.check(directory in cm_mount,
                                   f"{name}: {wname} reads {config_file} but gift-config is "
                                   f"mounted at {cm_mount}")
                    failures.check(key in config, f"{name}: {wname} reads {key}, not in gift-config")
                    settings = tomls.get(key, {})
                    for flag in ("listen", "metrics-listen"):
                        value = settings.get(flag, "")
                        if value:
                            served.add(int(value.rsplit(":", 1)[1]))
                    # Addresses must be reachable from the kubelet and Prometheus.
                    for flag in ("listen", "metrics-listen"):
                        value = settings.get(flag, "")
                        failures.check(not value.startswith("127.") and
                                       not value.startswith("localhost"),
                                       f"{name}: {key} {flag}={value} only on loopback")
                for port in ports.values():
                    failures.check(port in served, f"{name}: {wname} declares port {port} that "
                                   f"its config ({config_file}) does not serve ({sorted(served)})")
                settings = tomls.get(key, {}) if config_file else {}
                secret_mounts = {p for v, p in mounts.items()
                                 if v in volumes and "secret" in volumes[v]}
                check_tls(f"{name}: {wname} ({key if config_file else '?'})", settings,
                          secret_mounts, failures)
                if c["name"] == "worker":
                    failures.check(not settings.get("listen"),
                                   f"{name}: {wname} serves the Worker API on TCP "
                                   f"(listen={settings.get('listen')})")
                for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                    if probe not in c:
                        failures.check(probe == "startupProbe",
                                       f"{name}: {wname}/{c['name']} has no {probe}")
                        continue
                    check_probe(f"{name}: {wname} {probe}", c[probe], settings, ports,
                                secret_mounts, failures)
                pods.append((f"{kind}/{wname}", labels, ports))
    failures.check(len(images) == 1, f"{name}: workloads use different images {sorted(images)}")
    if colocated:
        check_colocated(name, by_kind, failures)

    for sname, s in by_kind.get("Service", {}).items():
        selector = s["spec"].get("selector", {})
        matched = [p for p in pods if labels_match(selector, p[1])]
        failures.check(len(matched) >= 1, f"{name}: Service/{sname} selects no pods")
        for port in s["spec"].get("ports", []):
            target = port.get("targetPort", port["port"])
            for workload, _, ports in matched:
                ok = target in ports if isinstance(target, str) else target in ports.values()
                failures.check(ok, f"{name}: Service/{sname} port {port.get('name')} targets "
                               f"{target}, not served by {workload}")
    for pname, p in by_kind.get("PodDisruptionBudget", {}).items():
        selector = p["spec"]["selector"]["matchLabels"]
        matched = [w for w, labels, _ in pods if labels_match(selector, labels)]
        failures.check(matched == ["StatefulSet/gift-server"],
                       f"{name}: PodDisruptionBudget/{pname} selects {matched}")
    sts = by_kind.get("StatefulSet", {}).get("gift-server")
    if sts:
        headless = by_kind.get("Service", {}).get(sts["spec"]["serviceName"])
        failures.check(headless is not None and headless["spec"].get("clusterIP") == "None",
                       f"{name}: StatefulSet serviceName is not a headless Service")
        args = sts["spec"]["template"]["spec"]["containers"][0].get("args", [])
        failures.check("--name=$(POD_NAME)" in args, f"{name}: shard name is not the pod name")
    dep = by_kind.get("Deployment", {}).get("gift-coordinator")
    if dep:
        failures.check(dep["spec"].get("replicas") == 1, f"{name}: coordinator replicas != 1")
        failures.check(dep["spec"].get("strategy", {}).get("type") == "Recreate",
                       f"{name}: coordinator strategy is not Recreate")
        state = tomls.get("coordinator.toml", {}).get("state", "")
        mounts = {m["mountPath"] for m in
                  dep["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
        failures.check(os.path.dirname(state) in mounts,
                       f"{name}: coordinator state {state} is not on a mounted volume")
    ds = by_kind.get("DaemonSet", {}).get("gift-worker")
    if ds:
        pod = ds["spec"]["template"]["spec"]
        c = pod["containers"][0]
        # Its own GPU from the device plugin, or (the MPS overlay, CUDA IPC
        # buffers) the node's GPUs that the training pods were given.
        failures.check("nvidia.com/gpu" in c["resources"].get("limits", {}) or
                       env_of(c).get("NVIDIA_VISIBLE_DEVICES") == "all",
                       f"{name}: worker requests no GPU and does not see the node's")
        failures.check(bool(pod.get("nodeSelector")), f"{name}: worker has no nodeSelector")
        host_paths = {v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
        socket = tomls.get("worker.toml", {}).get("socket", "")
        failures.check(os.path.dirname(socket) in host_paths,
                       f"{name}: worker socket {socket} is not on a hostPath")
        failures.check(pod.get("hostIPC") is True or "/dev/shm" in host_paths,
                       f"{name}: worker shares no /dev/shm with training pods")
    return by_kind


def check_colocated(name, by_kind, failures):
    """A server DaemonSet on exactly the worker DaemonSet's nodes, one shard
    per node with a member name of its own."""
    daemonsets = by_kind.get("DaemonSet", {})
    server, worker = daemonsets.get("gift-server"), daemonsets.get("gift-worker")
    if not server or not worker:
        return
    spod, wpod = server["spec"]["template"]["spec"], worker["spec"]["template"]["spec"]
    failures.check(spod.get("nodeSelector") == wpod.get("nodeSelector"),
                   f"{name}: server DaemonSet nodeSelector {spod.get('nodeSelector')} is not "
                   f"the worker's {wpod.get('nodeSelector')}")
    failures.check(spod.get("tolerations") == wpod.get("tolerations"),
                   f"{name}: server DaemonSet tolerations differ from the worker's")
    args = spod["containers"][0].get("args", [])
    names = [a for a in args if a.startswith("--name=")]
    wnames = [a for a in wpod["containers"][0].get("args", []) if a.startswith("--name=")]
    failures.check(len(names) == 1 and "$(NODE_NAME)" in names[0] and names != wnames,
                   f"{name}: server shard name {names} is not per node and distinct from the "
                   f"worker's {wnames}")
    env = {e["name"]: e for e in spod["containers"][0].get("env", [])}
    failures.check(env.get("NODE_NAME", {}).get("valueFrom", {}).get("fieldRef", {})
                   .get("fieldPath") == "spec.nodeName",
                   f"{name}: server NODE_NAME is not the node's name")
    failures.check(server["spec"].get("updateStrategy", {}).get("rollingUpdate", {})
                   .get("maxUnavailable") == 1,
                   f"{name}: server DaemonSet may replace more than one shard at a time")


def apply_deletes(directory, k, documents, failures):
    """Drops the documents the overlay's `$patch: delete` patches remove."""
    kept = list(documents)
    for patch in k.get("patches", []):
        path = patch.get("path") if isinstance(patch, dict) else None
        if not path or not os.path.isfile(os.path.join(directory, path)):
            continue
        for doc in load_yaml(os.path.join(directory, path), failures):
            if isinstance(doc, dict) and doc.get("$patch") == "delete":
                match = [d for d in kept if d.get("kind") == doc.get("kind") and
                         d["metadata"].get("name") == doc["metadata"].get("name")]
                failures.check(bool(match), f"{directory}: {path} deletes nothing")
                kept = [d for d in kept if not any(d is m for m in match)]
    return kept


def cmd_manifests(args):
    failures = Failures()
    base = os.path.join(args.source, "deploy", "k8s", "base")
    docs, cms, _ = resolve(base, failures)
    base_kinds = check_tree("base", docs, cms, failures)
    overlay = os.path.join(args.source, "deploy", "k8s", "overlays", "example")
    odocs, ocms, k = resolve(overlay, failures)
    failures.check(bool(k.get("namespace")), "overlay sets no namespace")
    # Apply what the overlay changes that the structure depends on, then check
    # the result the same way.
    for rep in k.get("replicas", []):
        found = [d for d in odocs if d["metadata"]["name"] == rep["name"]
                 and d["kind"] in WORKLOADS]
        if failures.check(found, f"overlay replicas: no workload {rep['name']}"):
            found[0]["spec"]["replicas"] = rep["count"]
    for img in k.get("images", []):
        for d in odocs:
            if d["kind"] in WORKLOADS:
                for c in d["spec"]["template"]["spec"]["containers"]:
                    if c["image"].split(":")[0] == img["name"]:
                        c["image"] = f"{img.get('newName', img['name'])}:{img.get('newTag', '')}"
    for patch in k.get("patches", []) + k.get("patchesStrategicMerge", []):
        target = patch.get("target", {}) if isinstance(patch, dict) else {}
        path = patch.get("path") if isinstance(patch, dict) else patch
        if path:
            failures.check(os.path.isfile(os.path.join(overlay, path)), f"overlay patch {path} missing")
            for doc in load_yaml(os.path.join(overlay, path), failures):
                if isinstance(doc, dict) and "kind" in doc and not target:
                    target = {"kind": doc["kind"], "name": doc["metadata"]["name"]}
        failures.check(target.get("name") in base_kinds.get(target.get("kind"), {}),
                       f"overlay patch {path} targets missing {target}")
    check_tree("overlay", odocs, ocms, failures)
    # The co-located overlay: the servers as a DaemonSet on the worker nodes.
    colocated = os.path.join(args.source, "deploy", "k8s", "overlays", "colocated")
    cdocs, ccms, ck = resolve(colocated, failures)
    failures.check(bool(ck.get("namespace")), "colocated overlay sets no namespace")
    cdocs = apply_deletes(colocated, ck, cdocs, failures)
    check_tree("colocated", cdocs, ccms, failures, colocated=True)
    # The MPS overlay: the MPS control daemon as a sidecar of the worker.
    mps_dir = os.path.join(args.source, "deploy", "k8s", "overlays", "mps")
    mdocs, mcms, mk = resolve(mps_dir, failures)
    failures.check(bool(mk.get("namespace")), "mps overlay sets no namespace")
    mdocs = apply_merges(mps_dir, mk, mdocs, load_yaml, failures)
    check_tree("mps", mdocs, mcms, failures)
    check_mps("mps", mdocs, failures)
    # And as kustomize itself builds it, where kubectl is installed.
    kubectl = shutil.which("kubectl")
    if kubectl:
        import yaml
        proc = subprocess.run([kubectl, "kustomize", mps_dir], capture_output=True, text=True,
                              timeout=60)
        if failures.check(proc.returncode == 0, f"kubectl kustomize {mps_dir}: {proc.stderr}"):
            check_mps("mps (kubectl kustomize)",
                      [d for d in yaml.safe_load_all(proc.stdout) if d], failures)
    else:
        print("note: no kubectl; the MPS overlay is checked through the merge above only")
    return failures.finish("manifests")


# ---- config keys --------------------------------------------------------------------------
def flags_of(binary):
    proc = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=30)
    return set(re.findall(r"--([a-z][a-z0-9-]*)", proc.stdout + proc.stderr))


def cmd_config_keys(args):
    failures = Failures()
    bins = binaries(args)
    files = {d: [] for d in DAEMONS}
    for directory in ["deploy/config", "deploy/k8s/base/config",
                      "deploy/k8s/overlays/example/config"]:
        full = os.path.join(args.source, directory)
        for name in sorted(os.listdir(full)):
            daemon = "gift-" + name.removesuffix(".toml")
            if failures.check(daemon in files, f"{directory}/{name}: which daemon?"):
                files[daemon].append(os.path.join(full, name))
    checked = 0
    for daemon, paths in files.items():
        if daemon not in bins:
            print(f"note: {daemon} is not built; its {len(paths)} config file(s) not checked")
            continue
        flags = flags_of(bins[daemon])
        failures.check("config" in flags, f"{daemon} --help lists no --config")
        for path in paths:
            with open(path, "rb") as f:
                settings = tomllib.load(f)
            if "/deploy/config/" in path:  # host (systemd) configs; Kubernetes: manifests
                check_tls(path, settings, None, failures)
                for k in TLS_KEYS:
                    failures.check(settings.get(k, "").startswith("/etc/gift/tls/"),
                                   f"{path}: {k} is not under /etc/gift/tls/")
                if daemon == "gift-worker":
                    failures.check(not settings.get("listen"),
                                   f"{path}: the worker's TCP API is on by default")
            for key, value in settings.items():
                checked += 1
                failures.check(not isinstance(value, dict), f"{path}: section [{key}] unexpected")
                failures.check(key in flags, f"{path}: key '{key}' is not a flag of {daemon}")
    if checked == 0:
        print("SKIP: no daemon binary built")
        return SKIP
    return failures.finish(f"config-keys ({checked} keys)")


# ---- container image ----------------------------------------------------------------------
def cmd_dockerfile(args):
    failures = Failures()
    path = os.path.join(args.source, "deploy", "container", "Dockerfile")
    lines = []
    for line in open(path).read().replace("\\\n", " ").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            lines.append(line.strip())
    froms = [l for l in lines if l.upper().startswith("FROM ")]
    failures.check(len(froms) >= 2, "Dockerfile is not multi-stage")
    failures.check(all(f.split()[1] == "debian:bookworm" for f in froms),
                   f"base images are not all debian:bookworm: {froms}")
    runtime = lines[lines.index(froms[-1]):] if froms else []
    users = [l.split()[1] for l in runtime if l.upper().startswith("USER ")]
    failures.check(users and users[-1].split(":")[0] not in ("root", "0"),
                   f"runtime stage runs as {users[-1] if users else 'root'}")
    text = " ".join(lines)
    failures.check("scripts/install-deps.sh" in text, "build stage does not use install-deps.sh")
    for option in ("-DGIFT_BUILD_TESTS=OFF", "-DGIFT_BUILD_BENCH=OFF", "cmake --install"):
        failures.check(option in text, f"build stage lacks {option}")
    root = open(os.path.join(args.source, "CMakeLists.txt")).read()
    for option in ("GIFT_BUILD_TESTS", "GIFT_BUILD_BENCH"):
        failures.check(f"option({option}" in root, f"root CMakeLists.txt has no option {option}")
    for binary in BINARIES:
        failures.check(f"/usr/local/bin/{binary}" in text,
                       f"Dockerfile does not check that {binary} is installed")
    failures.check(any("COPY --from=" in l and "/usr/local/bin" in l for l in runtime),
                   "runtime stage does not copy the binaries")
    failures.check(not any(l.upper().startswith("ENTRYPOINT") for l in runtime),
                   "runtime stage sets an ENTRYPOINT")
    ignore = os.path.join(args.source, ".dockerignore")
    if failures.check(os.path.isfile(ignore), ".dockerignore missing"):
        patterns = open(ignore).read().split()
        for p in ("build-*/", ".git/", "out/"):
            failures.check(p in patterns, f".dockerignore does not exclude {p}")
    return failures.finish("dockerfile")


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command",
                        choices=["units", "security", "manifests", "config-keys", "dockerfile"])
    parser.add_argument("--source", required=True, help="the repository root")
    parser.add_argument("--bin", action="append", help="NAME=PATH of a built binary")
    args = parser.parse_args()
    return {"units": cmd_units, "security": cmd_security, "manifests": cmd_manifests,
            "config-keys": cmd_config_keys, "dockerfile": cmd_dockerfile}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
