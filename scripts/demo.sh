#!/usr/bin/env bash
# The main job of `make demo`. Until the service's training demo exists it
# runs the codec benchmark and the round-trip fidelity report on synthetic
# gradients, and writes both as JSON under out/demo/.
#
#   scripts/demo.sh BUILD_DIR [--quick]
set -euo pipefail
build_dir=${1:-build}
shift || true
quick=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "demo: unknown argument '$a' (try --quick)" >&2; exit 2 ;;
  esac
done
bench="$build_dir/bench/gift-bench"
[ -x "$bench" ] || { echo "demo: $bench not built; run make demo" >&2; exit 1; }
out=out/demo
mkdir -p "$out"
if [ "$quick" = 1 ]; then mib=16; reps=3; else mib=64; reps=5; fi

echo "== GIFT-PS codec benchmark (${mib} MiB of FP32 per tensor, median of ${reps}) =="
"$bench" codec --mib "$mib" --reps "$reps" --json "$out/codec_bench.json"
echo
echo "== Round-trip fidelity of each format on synthetic anisotropic gradients =="
"$bench" fidelity --json "$out/fidelity.json"
echo
echo "Results: $out/codec_bench.json and $out/fidelity.json"
