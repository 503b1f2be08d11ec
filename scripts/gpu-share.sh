#!/usr/bin/env bash
# Measures the worker's GPU work beside a training process's on one GPU
# (issue 14, item 3; docs/gpu.md, "Sharing the GPU"): gift-bench gpu-share
# --role trainer (a backward pass's SGEMMs) and --role worker (forward +
# encode, decode + inverse of one tensor on a lowest-priority stream) as two
# processes,
#   (a) the trainer alone, and the worker alone (back to back),
#   (b) trainer + worker at each worker rate, without MPS (time-slicing),
#   (c) the same under CUDA MPS (nvidia-cuda-mps-control -d in a temporary
#       pipe directory), with the trainer alone under MPS too;
# and prints, per rate, the trainer's median / p90 iteration time, its
# slowdown in % against (a), and the worker's steps per second, as a table
# and as JSON in $OUT/gpu_share.json (each process's JSON lines beside it).
#
#   scripts/gpu-share.sh [--bench PATH] [--seconds S] [--rates R,R,...]
#                        [--shape RxC] [--rank R] [--budget S] [--no-mps]
#
# --rates: worker steps per second, 0 = back to back (default 0,200,50);
# --seconds: the trainer's measured time per run (default 3); --budget: the
# whole script's wall-clock limit (default 80 s): a run that would pass it
# is skipped and said so. Without a CUDA device: prints "skipped: no CUDA
# device" and exits 0. Every process it starts runs under `timeout` and is
# stopped by PID on exit; the MPS daemon by `echo quit`.
set -euo pipefail

bench="$(cd "$(dirname "$0")/.." && pwd)/build/bench/gift-bench"
seconds=3
rates="0,200,50"
shape="4096x4096"
rank=32
budget=80
use_mps=1
while [ $# -gt 0 ]; do
  case "$1" in
    --bench) bench=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --rates) rates=$2; shift 2 ;;
    --shape) shape=$2; shift 2 ;;
    --rank) rank=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    --no-mps) use_mps=0; shift ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "gpu-share: unknown argument $1 (see --help)" >&2; exit 64 ;;
  esac
done
for n in "$seconds" "$rank" "$budget"; do
  case "$n" in ''|*[!0-9]*) echo "gpu-share: --seconds, --rank, --budget take whole numbers" >&2; exit 64 ;; esac
done
IFS=, read -r -a rate_list <<<"$rates"
for r in "${rate_list[@]}"; do
  case "$r" in ''|*[!0-9]*) echo "gpu-share: --rates takes whole numbers (0 = back to back)" >&2; exit 64 ;; esac
done
if [ ! -x "$bench" ]; then
  echo "gpu-share: no gift-bench at $bench (--bench PATH)" >&2
  exit 1
fi

out=${OUT:-out/gpu-share}
mkdir -p "$out"
tmp=$(mktemp -d)
pids=()
mps_pipe=""
stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  pids=()
  if [ -n "$mps_pipe" ]; then
    echo quit | CUDA_MPS_PIPE_DIRECTORY="$mps_pipe" timeout -k 2 10 nvidia-cuda-mps-control >/dev/null 2>&1 || true
    # The control daemon removes its pipes once it has quit.
    for _ in $(seq 50); do [ -e "$mps_pipe/control" ] || break; sleep 0.1; done
    cp -r "$tmp/mps-log" "$out/mps-log" 2>/dev/null || true
    mps_pipe=""
  fi
}
trap 'stop_all; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
trap 'echo "gpu-share: failed at line $LINENO" >&2' ERR

# field FILE EVENT KEY: the number KEY holds on FILE's line with "event":"EVENT".
field() {
  [ -f "$1" ] || return 0
  awk -v ev="\"event\":\"$2\"" -v key="\"$3\":" '
    index($0, ev) { i = index($0, key)
      if (i) { s = substr($0, i + length(key)); if (match(s, /^[-0-9.eE+]+/)) v = substr(s, 1, RLENGTH) } }
    END { if (v != "") print v }' "$1" || true
}
# overlapped WORKER_JSONL TRAINER_JSONL: the worker's steps per second over
# its windows that lie wholly within the trainer's measurement (from its ready
# line to its summary; both processes stamp lines with the same wall clock).
overlapped() {
  local t0 t1
  t0=$(field "$2" ready unix_s)
  t1=$(field "$2" summary unix_s)
  if [ -z "$t0" ] || [ -z "$t1" ] || [ ! -f "$1" ]; then return 0; fi
  awk -v t0="$t0" -v t1="$t1" '
    function num(key,   i, s) {
      i = index($0, "\"" key "\":"); if (!i) return ""
      s = substr($0, i + length(key) + 3)
      return match(s, /^[-0-9.eE+]+/) ? substr(s, 1, RLENGTH) : ""
    }
    index($0, "\"event\":\"window\"") { u = num("unix_s"); w = num("window_s"); n = num("steps")
      if (u != "" && w != "" && n != "" && u - w >= t0 + 0 && u + 0 <= t1 + 0) { steps += n; secs += w } }
    END { if (secs > 0) printf "%.1f\n", steps / secs }' "$1" || true
}
# pct NEW BASE: (NEW / BASE - 1) * 100 with one decimal, "null" without numbers.
pct() {
  awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b + 0 == 0) print "null"; else printf "%.1f\n", (a / b - 1) * 100 }'
}
or_null() { if [ -n "$1" ]; then echo "$1"; else echo null; fi; }

# The no-device check: exit status 2 is gift-bench's "no CUDA device".
probe_rc=0
timeout -k 5 30 "$bench" gpu-share --role worker --shape 64x64 --rank 4 --seconds 0.05 >"$tmp/probe.txt" 2>&1 || probe_rc=$?
if [ "$probe_rc" -eq 2 ]; then
  echo "skipped: no CUDA device ($(tail -1 "$tmp/probe.txt"))"
  printf '{"skipped": "no CUDA device"}\n' >"$out/gpu_share.json"
  exit 0
elif [ "$probe_rc" -ne 0 ]; then
  echo "gpu-share: gift-bench gpu-share failed (exit $probe_rc):" >&2
  cat "$tmp/probe.txt" >&2
  exit 1
fi

over_budget() {  # over_budget SECONDS_NEEDED
  [ $((SECONDS + $1)) -gt "$budget" ]
}
skipped_runs=()
# untrack PID: drops PID from the processes the exit trap stops.
untrack() {
  local kept=() pid
  for pid in "${pids[@]}"; do [ "$pid" = "$1" ] || kept+=("$pid"); done
  pids=("${kept[@]}")
}
# run_trainer LABEL: the trainer into $out/LABEL.trainer.jsonl; its exit
# status. In the background and waited for, so that a signal to this script
# runs the trap at once.
run_trainer() {
  local tpid rc=0
  timeout -k 5 $((seconds + 30)) "$bench" gpu-share --role trainer --seconds "$seconds" \
    >"$out/$1.trainer.jsonl" 2>"$out/$1.trainer.err" &
  tpid=$!
  pids+=("$tpid")
  wait "$tpid" || rc=$?
  untrack "$tpid"
  return "$rc"
}
# run_pair LABEL RATE: the worker at RATE, and the trainer once the worker
# is ready; the worker is stopped (SIGTERM) when the trainer has finished.
run_pair() {
  local label=$1 rate=$2 wpid ready=0
  timeout -k 5 $((seconds + 40)) "$bench" gpu-share --role worker --shape "$shape" --rank "$rank" \
    --rate "$rate" --seconds $((seconds + 30)) --report-every 0.25 >"$out/$label.worker.jsonl" 2>"$out/$label.worker.err" &
  wpid=$!
  pids+=("$wpid")
  for _ in $(seq 300); do
    if grep -q '"event":"ready"' "$out/$label.worker.jsonl" 2>/dev/null; then ready=1; break; fi
    kill -0 "$wpid" 2>/dev/null || break
    sleep 0.1
  done
  if [ "$ready" -ne 1 ]; then
    echo "gpu-share: the worker of $label did not get ready:" >&2
    cat "$out/$label.worker.err" >&2
    return 1
  fi
  local rc=0
  run_trainer "$label" || rc=$?
  kill -TERM "$wpid" 2>/dev/null || true
  wait "$wpid" || true
  untrack "$wpid"
  if [ "$rc" -ne 0 ]; then
    echo "gpu-share: the trainer of $label exited $rc:" >&2
    cat "$out/$label.trainer.err" >&2
    return 1
  fi
}

rows_json=()
table=()
# report MODE LABEL RATE BASE_MEDIAN [MPS_ALONE_MEDIAN]: one row of the table and of the JSON.
report() {
  local mode=$1 label=$2 rate=$3 base=$4 mps_alone=${5:-}
  local tm tp ws wo wm slow slow_mps
  tm=$(field "$out/$label.trainer.jsonl" summary median_ms)
  tp=$(field "$out/$label.trainer.jsonl" summary p90_ms)
  ws=$(field "$out/$label.worker.jsonl" summary steps_per_s)
  wo=$(overlapped "$out/$label.worker.jsonl" "$out/$label.trainer.jsonl")
  wm=$(field "$out/$label.worker.jsonl" summary step_median_ms)
  slow=$(pct "$tm" "$base")
  slow_mps=$(pct "$tm" "$mps_alone")
  table+=("$(printf '%-7s %-6s %10s %10s %9s %12s %14s %14s' "$mode" "$rate" "${tm:-?}" "${tp:-?}" \
    "$slow" "$([ -n "$mps_alone" ] && echo "$slow_mps" || echo -)" "${wo:-?}" "${ws:-?}")")
  rows_json+=("{\"mode\": \"$mode\", \"rate\": $rate, \"trainer_median_ms\": $(or_null "$tm"), \"trainer_p90_ms\": $(or_null "$tp"), \"slowdown_pct\": $slow, \"slowdown_vs_mps_alone_pct\": $([ -n "$mps_alone" ] && echo "$slow_mps" || echo null), \"worker_steps_per_s_overlapped\": $(or_null "$wo"), \"worker_steps_per_s\": $(or_null "$ws"), \"worker_step_median_ms\": $(or_null "$wm")}")
}

export CUDA_MPS_PIPE_DIRECTORY="$tmp/no-mps"  # no daemon here: the runs of (a) and (b) use no MPS
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY"
echo "gpu-share: trainer alone ($seconds s)"
run_trainer alone || { echo "gpu-share: the trainer alone failed:" >&2; cat "$out/alone.trainer.err" >&2; exit 1; }
base=$(field "$out/alone.trainer.jsonl" summary median_ms)
base_p90=$(field "$out/alone.trainer.jsonl" summary p90_ms)
if [ -z "$base" ]; then
  echo "gpu-share: the trainer printed no summary:" >&2
  cat "$out/alone.trainer.err" >&2
  exit 1
fi
echo "gpu-share: worker alone, back to back (2 s)"
timeout -k 5 40 "$bench" gpu-share --role worker --shape "$shape" --rank "$rank" --seconds 2 \
  >"$out/alone.worker.jsonl" 2>"$out/alone.worker.err" || echo "gpu-share: the worker alone failed (see $out/alone.worker.err)"
worker_alone=$(field "$out/alone.worker.jsonl" summary steps_per_s)
worker_alone_ms=$(field "$out/alone.worker.jsonl" summary step_median_ms)

for rate in "${rate_list[@]}"; do
  if over_budget $((seconds + 8)); then skipped_runs+=("no-mps rate $rate: over the ${budget} s budget"); continue; fi
  echo "gpu-share: trainer + worker at rate $rate, no MPS"
  run_pair "nomps-r$rate" "$rate" || { skipped_runs+=("no-mps rate $rate: failed (logs in $out)"); continue; }
  report no-mps "nomps-r$rate" "$rate" "$base"
done

# The baseline again, to see how much it drifts within the run (clocks, heat).
base2=""
if ! over_budget $((seconds + 6)); then
  echo "gpu-share: trainer alone again ($seconds s)"
  run_trainer alone2 && base2=$(field "$out/alone2.trainer.jsonl" summary median_ms)
fi

mps_reason=""
mps_alone=""
if [ "$use_mps" -ne 1 ]; then
  mps_reason="--no-mps was given"
elif ! command -v nvidia-cuda-mps-control >/dev/null; then
  mps_reason="nvidia-cuda-mps-control is not installed"
elif over_budget $((seconds + 10)); then
  mps_reason="over the ${budget} s budget"
else
  mkdir -p "$tmp/mps-pipe" "$tmp/mps-log"
  export CUDA_MPS_PIPE_DIRECTORY="$tmp/mps-pipe" CUDA_MPS_LOG_DIRECTORY="$tmp/mps-log"
  if ! timeout -k 2 20 nvidia-cuda-mps-control -d >"$tmp/mps-start.txt" 2>&1; then
    mps_reason="nvidia-cuda-mps-control -d refused: $(tr '\n' ' ' <"$tmp/mps-start.txt")"
  else
    mps_pipe="$tmp/mps-pipe"
    # The first client starts the MPS server; a refusal shows here.
    probe_rc=0
    timeout -k 5 30 "$bench" gpu-share --role worker --shape 64x64 --rank 4 --seconds 0.05 >"$tmp/probe.txt" 2>&1 || probe_rc=$?
    if [ "$probe_rc" -ne 0 ]; then
      mps_reason="a client under MPS failed (exit $probe_rc): $(tail -2 "$tmp/probe.txt" | tr '\n' ' ') $(tail -3 "$tmp/mps-log/control.log" 2>/dev/null | tr '\n' ' ')"
    fi
  fi
fi
if [ -z "$mps_reason" ]; then
  echo "gpu-share: under MPS: trainer alone"
  run_trainer mps-alone || echo "gpu-share: the trainer alone under MPS failed (see $out/mps-alone.trainer.err)"
  mps_alone=$(field "$out/mps-alone.trainer.jsonl" summary median_ms)
  for rate in "${rate_list[@]}"; do
    if over_budget $((seconds + 8)); then skipped_runs+=("mps rate $rate: over the ${budget} s budget"); continue; fi
    echo "gpu-share: trainer + worker at rate $rate, under MPS"
    run_pair "mps-r$rate" "$rate" || { skipped_runs+=("mps rate $rate: failed (logs in $out)"); continue; }
    report mps "mps-r$rate" "$rate" "$base" "$mps_alone"
  done
  stop_all
else
  echo "gpu-share: (c) under MPS skipped: $mps_reason"
fi

load=$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo "?")
device=$(grep -o '"device":"[^"]*"' "$out/alone.trainer.jsonl" | head -1 | cut -d'"' -f4 || true)
{
  echo "gift-bench gpu-share on ${device:-?}: trainer ${seconds} s per run, worker ${shape} rank ${rank} (lowest-priority stream); load average ${load}"
  echo "trainer alone: median ${base} ms, p90 ${base_p90} ms (again after the no-MPS runs: ${base2:-not run} ms, $(pct "$base2" "$base") %); under MPS alone: ${mps_alone:+$mps_alone ms}${mps_alone:-not run}; worker alone (back to back): ${worker_alone:-?} steps/s, ${worker_alone_ms:-?} ms/step"
  printf '%-7s %-6s %10s %10s %9s %12s %14s %14s\n' mode rate "median ms" "p90 ms" "slow %" "slow % (MPS)" "wk step/s ovl" "wk step/s all"
  for row in "${table[@]}"; do echo "$row"; done
  [ -n "$mps_reason" ] && echo "under MPS: skipped: $mps_reason"
  for s in "${skipped_runs[@]}"; do echo "skipped: $s"; done
  echo "rate: worker steps per second asked (0: back to back); slow %: trainer median against the trainer alone without MPS; slow % (MPS): against the trainer alone under MPS; wk step/s ovl: the worker's rate while the trainer measured, all: over the worker's whole run"
} | tee "$out/gpu_share.txt"

json_str() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g'; }
{
  echo "{"
  echo "  \"device\": \"$(json_str "${device:-}")\", \"load_average\": \"$load\","
  echo "  \"config\": {\"seconds\": $seconds, \"rates\": [$(IFS=,; echo "${rate_list[*]}")], \"shape\": \"$shape\", \"rank\": $rank, \"budget_s\": $budget},"
  echo "  \"trainer_alone\": {\"median_ms\": $base, \"p90_ms\": $(or_null "$base_p90")},"
  echo "  \"trainer_alone_again\": {\"median_ms\": $(or_null "$base2"), \"drift_pct\": $(pct "$base2" "$base")},"
  echo "  \"trainer_alone_mps\": {\"median_ms\": $(or_null "$mps_alone")},"
  echo "  \"worker_alone\": {\"steps_per_s\": $(or_null "$worker_alone"), \"step_median_ms\": $(or_null "$worker_alone_ms")},"
  echo "  \"mps\": {\"ran\": $([ -z "$mps_reason" ] && echo true || echo false), \"skipped_reason\": \"$(json_str "$mps_reason")\"},"
  echo "  \"skipped_runs\": [$(first=1; for s in "${skipped_runs[@]}"; do [ $first -eq 1 ] || printf ', '; first=0; printf '"%s"' "$(json_str "$s")"; done)],"
  echo "  \"decision_threshold_pct\": 5,"
  echo "  \"runs\": ["
  n=${#rows_json[@]}
  for i in "${!rows_json[@]}"; do
    if [ "$i" -lt $((n - 1)) ]; then echo "    ${rows_json[$i]},"; else echo "    ${rows_json[$i]}"; fi
  done
  echo "  ]"
  echo "}"
} >"$out/gpu_share.json"
echo "gpu-share: wrote $out/gpu_share.json in ${SECONDS} s"
