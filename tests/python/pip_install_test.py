"""The gift_ps package installs with pip and works from the installed copy.

Creates a fresh venv (--system-site-packages: Debian's torch, grpcio,
protobuf, numpy) in a temporary directory, installs a copy of python/ (with
the schemas of proto/ beside it, as in the repository) with
`pip install --no-build-isolation --no-index`, and runs the client unit tests
(test_client_unit.py with its fake worker) from another temporary directory
with the venv's interpreter: no PYTHONPATH, no GIFT_PY_GEN, nothing of the
source tree on the path. It also checks that gift_ps was imported from the
venv and found its generated protos inside the package, and that the
install wrote nothing into the source copy (no build/, no *.egg-info).

    python3 pip_install_test.py REPO
Exit 77 (skipped) when the venv or pip module is missing (Debian:
python3-venv, python3-pip).
"""

import os
import shutil
import subprocess
import sys
import tempfile


def main(repo: str) -> int:
    try:
        import ensurepip  # noqa: F401  (python3-venv)
        import pip  # noqa: F401  (python3-pip)
    except ImportError as e:
        print(f"SKIP: {e} (install python3-venv and python3-pip)")
        return 77
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="gift-pip-") as tmp:
        src = os.path.join(tmp, "src")
        shutil.copytree(os.path.join(repo, "python"), os.path.join(src, "python"),
                        ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        shutil.copytree(os.path.join(repo, "proto"), os.path.join(src, "proto"))
        def tree():
            return sorted(os.path.relpath(os.path.join(d, f), src)
                          for d, dirs, files in os.walk(src) for f in dirs + files)
        before = tree()
        venv = os.path.join(tmp, "venv")
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "GIFT_PY_GEN", "VIRTUAL_ENV", "PYTHONHOME")}
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv],
                       check=True, env=env)
        py = os.path.join(venv, "bin", "python")
        subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-index",
                        "--disable-pip-version-check", os.path.join(src, "python")],
                       check=True, env=env)
        written = sorted(set(tree()) - set(before))
        if written:  # pip builds in the source tree; setup.py keeps its output out of it
            print("FAIL: pip install wrote into the source tree:", " ".join(written[:10]))
            return 1
        run = os.path.join(tmp, "run")
        os.makedirs(run)
        for f in ("test_client_unit.py", "fake_worker.py"):
            shutil.copy(os.path.join(here, f), run)
        where = subprocess.run(
            [py, "-c", "import gift_ps, gift_ps._protos as p; p.load(); "
             "print(gift_ps.__file__); print(p.gen_dir())"],
            check=True, env=env, cwd=run, capture_output=True, text=True).stdout.split()
        print("gift_ps from", where[0], "protos from", where[1])
        site = os.path.realpath(venv)
        for path in where:
            if not os.path.realpath(path).startswith(site):
                print(f"FAIL: {path} is not inside the venv {venv}")
                return 1
        return subprocess.run([py, "-m", "unittest", "-v", "test_client_unit"], env=env,
                              cwd=run).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
