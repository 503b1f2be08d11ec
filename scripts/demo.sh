#!/usr/bin/env bash
# The main job of `make demo`: trains a small byte-level language model on the
# King James Bible with 4 data-parallel processes through a local GIFT-PS
# cluster, once per communication mode (FP32, BF16, direct FP8 in the published
# baseline's format and in GIFT's, GIFT FP8), and
# writes a table, out/demo/results.json and out/demo/loss.png.
#
#   scripts/demo.sh BUILD_DIR [--quick] [--steps N] [--configs fp32,gift] ... [--help]
#
# The demo itself is python/gift_ps/demo (python3 -m gift_ps.demo --help).
# PYTHON (default /usr/bin/python3) must have torch, grpcio and protobuf.
set -euo pipefail
build_dir=${1:-build}
shift || true
case "$build_dir" in
  -h|--help) set -- --help; build_dir=build ;;
esac
build_dir=$(cd "$build_dir" 2>/dev/null && pwd || echo "$build_dir")
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$repo"

PYTHON=${PYTHON:-/usr/bin/python3}
if ! "$PYTHON" -c 'import torch, grpc, google.protobuf, numpy, matplotlib' 2>/dev/null; then
  echo "demo: $PYTHON lacks torch, grpcio, protobuf, numpy or matplotlib (Debian: python3-torch" \
       "python3-grpcio python3-protobuf python3-numpy python3-matplotlib; scripts/install-deps.sh)" >&2
  exit 1
fi
export PYTHONPATH="$repo/python${PYTHONPATH:+:$PYTHONPATH}"
if [ -z "${GIFT_PY_GEN:-}" ] && [ -d "$build_dir/python/gen" ]; then
  export GIFT_PY_GEN="$build_dir/python/gen"
fi
exec "$PYTHON" -m gift_ps.demo --build-dir "$build_dir" "$@"
