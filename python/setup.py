"""Build step of the gift_ps package (metadata: pyproject.toml).

build_py also generates the protobuf and gRPC modules of ../proto (the
repository's schemas, plus grpc.health.v1) into gift_ps/_gen in the build
tree, so that an installed gift_ps finds them without the CMake build
(_protos.py looks there first). Tools: protoc and grpc_python_plugin, found
on PATH or named by PROTOC / GRPC_PYTHON_PLUGIN; the schemas' directory is
../proto or GIFT_PROTO_DIR.
"""

import atexit
import os
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build import build
from setuptools.command.build_py import build_py
from setuptools.command.egg_info import egg_info

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOS = [
    "gift/v1/codec.proto",
    "gift/v1/policy.proto",
    "gift/v1/cluster.proto",
    "gift/v1/coordinator.proto",
    "gift/v1/worker.proto",
    "grpc/health/v1/health.proto",
]


def _tool(env: str, name: str) -> str:
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise RuntimeError(f"gift_ps build: {name} not found (Debian: protobuf-compiler, "
                           f"protobuf-compiler-grpc), or set {env}")
    return path


class BuildPyWithProtos(build_py):
    def run(self):
        super().run()
        proto_dir = os.environ.get("GIFT_PROTO_DIR") or os.path.join(HERE, os.pardir, "proto")
        proto_dir = os.path.abspath(proto_dir)
        if not os.path.isfile(os.path.join(proto_dir, PROTOS[0])):
            raise RuntimeError(f"gift_ps build: the schemas are not in {proto_dir} (build "
                               "from the repository's python/ folder, or set GIFT_PROTO_DIR)")
        out = os.path.join(self.build_lib, "gift_ps", "_gen")
        os.makedirs(out, exist_ok=True)
        subprocess.run([_tool("PROTOC", "protoc"), f"--proto_path={proto_dir}",
                        f"--python_out={out}", f"--grpc_out={out}",
                        f"--plugin=protoc-gen-grpc={_tool('GRPC_PYTHON_PLUGIN', 'grpc_python_plugin')}"]
                       + [os.path.join(proto_dir, p) for p in PROTOS], check=True)


# `pip install ./python` builds in the source tree; its build/ and
# *.egg-info go to a scratch directory instead, removed when the build ends,
# so that installing leaves the checkout as it was.
_SCRATCH = tempfile.mkdtemp(prefix="gift-ps-build-")
atexit.register(shutil.rmtree, _SCRATCH, ignore_errors=True)


class BuildOutOfTree(build):
    def initialize_options(self):
        super().initialize_options()
        self.build_base = os.path.join(_SCRATCH, "build")


class EggInfoOutOfTree(egg_info):
    def initialize_options(self):
        super().initialize_options()
        self.egg_base = _SCRATCH


setup(cmdclass={"build": BuildOutOfTree, "build_py": BuildPyWithProtos,
                "egg_info": EggInfoOutOfTree})
