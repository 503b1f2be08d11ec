#!/usr/bin/env bash
# The fidelity target's choice per matrix and statistics source
# (docs/fidelity.md, "The fidelity target's choice per matrix"): runs
# `gift-bench fidelity --grads ... --target e4m3/block128` on each matrix of a
# gradient set written by scripts/real_gradients.py, with the policy's default
# family (both sides, powers 1/8 and 1/4, isotropic) at the given ranks, for
# the sources ema-mean (the policy default), ema-per-worker and activations,
# and writes OUT_DIR/<source>.<matrix>.{txt,json}; then
# scripts/fidelity_target_summary.py OUT_DIR prints the table.
#
#   scripts/fidelity_target_table.sh GRADS_DIR OUT_DIR "MATRIX ..." [RANKS] [BENCH]
#
# Environment: SOURCES narrows the sources (a space-separated subset of the
# three); EXTRA adds gift-bench arguments, e.g. the per-worker sketches'
# wire format: EXTRA="--sketch-size 128 --sketch-codec e4m3/block128/sr".
set -euo pipefail
if [ $# -lt 3 ]; then
  sed -n 2,16p "$0" >&2
  exit 64
fi
grads=$1 out=$2 matrices=$3 ranks=${4:-64} bench=${5:-build/bench/gift-bench}
read -r -a extra <<<"${EXTRA:-}"
mkdir -p "$out"
for src in ${SOURCES:-ema-mean ema-per-worker activations}; do
  case $src in activations) filter=/activations+ ;; *) filter=/$src/ ;; esac
  for m in $matrices; do
    d=$grads/$m
    workers=("$d"/w*.npy)
    "$bench" fidelity --grads "$(IFS=,; echo "${workers[*]}")" --factor "$d/factor.npy" \
      --gram-in "$d/gram_in_mean.npy" --gram-out "$d/gram_out_mean.npy" \
      --pw-gram-in "$d/gram_in_pw.npy" --pw-gram-out "$d/gram_out_pw.npy" \
      --specs e4m3/block128,nvfp4,nvfp4/mse --ranks "$ranks" --powers 0.125,0.25 \
      --filter family/both/ --filter "$filter" --filter /iso --target e4m3/block128 --threads 1 \
      "${extra[@]}" --json "$out/$src.$m.json" >"$out/$src.$m.txt" 2>&1
    echo "$src $m: $(grep -A1 '^target choice' "$out/$src.$m.txt" | tail -1)"
  done
done
