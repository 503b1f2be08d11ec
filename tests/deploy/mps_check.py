"""The CUDA MPS parts of deploy_check.py (docs/gpu.md, "Sharing the GPU"):
gift-mps.service against gift-worker@.service, and the MPS overlay
(deploy/k8s/overlays/mps) merged onto the base the way kustomize merges it.
Python 3 standard library only; `failures` is deploy_check.Failures."""

import os

MPS_CONTROL = "/usr/bin/nvidia-cuda-mps-control"
MPS_PIPE = "/run/nvidia-mps"


def unit_values(text, key):
    """The values of every `key=` line of a unit (comments skipped)."""
    return [line.split("=", 1)[1] for line in text.splitlines()
            if line.startswith(key + "=")]


def check_mps_unit(source, failures):
    """gift-mps.service runs the MPS control daemon in the pipe directory
    gift-worker@ points CUDA at, stops it with `quit`, and the worker is only
    ordered after it: it must start without MPS."""
    systemd = os.path.join(source, "deploy", "systemd")
    mps = open(os.path.join(systemd, "gift-mps.service")).read()
    worker = open(os.path.join(systemd, "gift-worker@.service")).read()
    env = " ".join(unit_values(mps, "Environment"))
    failures.check(f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE}" in env,
                   f"gift-mps.service: pipe directory is not {MPS_PIPE}")
    failures.check("CUDA_MPS_LOG_DIRECTORY=" in env, "gift-mps.service: no CUDA_MPS_LOG_DIRECTORY")
    failures.check(unit_values(mps, "RuntimeDirectory") == [os.path.basename(MPS_PIPE)],
                   f"gift-mps.service: RuntimeDirectory is not {os.path.basename(MPS_PIPE)}")
    failures.check(unit_values(mps, "ExecStart") == [f"{MPS_CONTROL} -d"] and
                   unit_values(mps, "Type") == ["forking"],
                   "gift-mps.service: not a forking `nvidia-cuda-mps-control -d`")
    failures.check(any("echo quit" in v and MPS_CONTROL in v for v in unit_values(mps, "ExecStop")),
                   "gift-mps.service: ExecStop does not send quit")
    failures.check("NoNewPrivileges=yes" in mps and "ProtectSystem=strict" in mps and
                   "CapabilityBoundingSet=\n" in mps, "gift-mps.service: not hardened")
    failures.check(unit_values(mps, "User") == ["gift"],
                   "gift-mps.service: does not run as the workers' user gift")
    failures.check(f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE}" in " ".join(unit_values(worker, "Environment")),
                   f"gift-worker@.service: CUDA_MPS_PIPE_DIRECTORY is not {MPS_PIPE}")
    failures.check("gift-mps.service" in " ".join(unit_values(worker, "After")),
                   "gift-worker@.service: not ordered after gift-mps.service")
    for key in ("Requires", "Wants", "BindsTo", "Requisite", "PartOf"):
        failures.check("gift-mps" not in " ".join(unit_values(worker, key)),
                       f"gift-worker@.service: {key}= gift-mps (the worker must start without MPS)")
    failures.check(f"-{MPS_PIPE}" in unit_values(worker, "ReadWritePaths"),
                   f"gift-worker@.service: no ReadWritePaths=-{MPS_PIPE}")


def strategic_merge(base, patch):
    """The strategic merge of `patch` into `base` as kustomize does it for
    what the overlays use: maps merged key by key (null deletes a key), lists
    of maps with a `name` merged by name (new names appended), other values
    replaced."""
    if isinstance(base, dict) and isinstance(patch, dict):
        merged = dict(base)
        for key, value in patch.items():
            if value is None:
                merged.pop(key, None)
            elif key in merged:
                merged[key] = strategic_merge(merged[key], value)
            else:
                merged[key] = value
        return merged
    if (isinstance(base, list) and isinstance(patch, list) and
            all(isinstance(x, dict) and "name" in x for x in base + patch)):
        merged = list(base)
        for item in patch:
            at = [i for i, x in enumerate(merged) if x["name"] == item["name"]]
            if at:
                merged[at[0]] = strategic_merge(merged[at[0]], item)
            else:
                merged.append(item)
        return merged
    return patch


def apply_merges(directory, k, documents, load_yaml, failures):
    """Applies the overlay's strategic-merge patches (documents with kind and
    name, not `$patch: delete`) to the documents they name; load_yaml(path,
    failures) reads a patch file."""
    docs = list(documents)
    for patch in k.get("patches", []):
        path = patch.get("path") if isinstance(patch, dict) else None
        if not path or not failures.check(os.path.isfile(os.path.join(directory, path)),
                                          f"{directory}: patch {path} missing"):
            continue
        for doc in load_yaml(os.path.join(directory, path), failures):
            if not isinstance(doc, dict) or doc.get("$patch") == "delete":
                continue
            at = [i for i, d in enumerate(docs) if d.get("kind") == doc.get("kind") and
                  d["metadata"].get("name") == doc["metadata"].get("name")]
            if failures.check(bool(at), f"{directory}: {path} patches nothing"):
                docs[at[0]] = strategic_merge(docs[at[0]], doc)
    return docs


def env_of(container):
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def check_mps(name, documents, failures):
    """The MPS overlay: the control daemon beside the worker in the worker's
    pod, both pointed at one pipe directory on the host, the daemon stopped
    with `quit`, /dev/shm shared with the host, and no device-plugin GPU for
    the worker (it would not be the training pods' GPU)."""
    ds = [d for d in documents if d["kind"] == "DaemonSet" and d["metadata"]["name"] == "gift-worker"]
    if not failures.check(len(ds) == 1, f"{name}: no DaemonSet/gift-worker"):
        return
    pod = ds[0]["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in pod["containers"]}
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    worker, mps = containers.get("worker"), containers.get("mps-control")
    if not failures.check(worker is not None and mps is not None,
                          f"{name}: gift-worker has no worker and mps-control containers"):
        return
    failures.check(mps.get("command") == ["nvidia-cuda-mps-control", "-f"],
                   f"{name}: mps-control runs {mps.get('command')}, not the daemon in the foreground")
    pipe = env_of(mps).get("CUDA_MPS_PIPE_DIRECTORY")
    failures.check(bool(pipe) and env_of(worker).get("CUDA_MPS_PIPE_DIRECTORY") == pipe,
                   f"{name}: the worker's CUDA_MPS_PIPE_DIRECTORY is not mps-control's ({pipe})")
    failures.check("CUDA_MPS_LOG_DIRECTORY" in env_of(mps), f"{name}: mps-control has no log directory")
    for c in (worker, mps):
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        vol = volumes.get(mounts.get(pipe), {})
        failures.check(vol.get("hostPath", {}).get("path") == pipe,
                       f"{name}: {c['name']} does not mount the host's {pipe} at {pipe}")
        shm = volumes.get(mounts.get("/dev/shm"), {})
        failures.check(shm.get("hostPath", {}).get("path") == "/dev/shm",
                       f"{name}: {c['name']} does not share the host's /dev/shm")
        failures.check("runAsUser" not in c.get("securityContext", {}),
                       f"{name}: {c['name']} overrides the pod's user (MPS serves one user)")
        for part in ("requests", "limits"):
            if c is worker:
                failures.check("nvidia.com/gpu" not in c.get("resources", {}).get(part, {}),
                               f"{name}: the worker still takes a GPU from the device plugin ({part})")
    stop = " ".join(mps.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", []))
    failures.check("echo quit" in stop and "nvidia-cuda-mps-control" in stop,
                   f"{name}: mps-control is not stopped with quit")
