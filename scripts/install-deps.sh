#!/usr/bin/env bash
# Installs the Debian 12 packages GIFT-PS builds and runs with. Idempotent: it
# asks apt only for what is missing, and does nothing when all is present.
#
#   scripts/install-deps.sh            # install what is missing (needs root)
#   scripts/install-deps.sh --check    # list what is missing, install nothing
#   scripts/install-deps.sh --vm       # also what scripts/vm.sh needs
#
# The CUDA Toolkit is not a Debian package here: CMake finds it at
# /usr/local/cuda when present and builds the CUDA targets then.
set -euo pipefail

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config git
  # RPC, transport, base libraries
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc
  libucx-dev ucx-utils libabsl-dev
  # the CPU transform's SGEMMs (OpenBLAS through CBLAS, with its pkg-config file)
  libopenblas-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev libbenchmark-dev
  # make fuzz: clang with libFuzzer and the sanitizer runtimes (tests/fuzz)
  clang libclang-rt-14-dev
  # command lines, config, maths, state, metrics, service manager, data-plane MACs
  libcli11-dev nlohmann-json3-dev libeigen3-dev libsqlite3-dev sqlite3 libssl-dev
  prometheus-cpp-dev libmicrohttpd-dev libsystemd-dev
  # make demo: PyTorch (with a fast BLAS), the client's gRPC, the plot, and the
  # King James Bible (bible-kjv-text; its reader `bible` is in bible-kjv)
  python3-torch libopenblas0-pthread python3-grpcio python3-protobuf python3-numpy
  python3-matplotlib bible-kjv-text bible-kjv
  # the pip-installable gift_ps package (python/pyproject.toml) and its test
  # in a fresh venv: venv, pip and setuptools
  python3-venv python3-pip python3-setuptools
  # deployment checks (tests/deploy): python3-yaml for the manifests,
  # systemd for systemd-analyze (installs fine where systemd is not PID 1)
  python3-yaml systemd
  # mutual-TLS tests and benchmarks: certificates made with the openssl command
  openssl
)

# scripts/vm.sh (not part of make test): qemu, modprobe/depmod for the guest's
# kernel modules, and the RDMA user space the guests use (soft-RoCE's
# provider, the rdma tool is in iproute2, ibv_* checks).
VM_PACKAGES=(qemu-system-x86 kmod rdma-core ibverbs-providers ibverbs-utils)
if [ "${1:-}" = "--vm" ]; then
  PACKAGES+=("${VM_PACKAGES[@]}")
  shift
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${1:-}" = "--check" ]; then
  if [ ${#missing[@]} -eq 0 ]; then echo "all dependencies present"; exit 0; fi
  echo "missing: ${missing[*]}"; exit 1
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null; then SUDO=sudo; else
    echo "install-deps: missing ${missing[*]}; run as root to install them" >&2
    exit 1
  fi
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
