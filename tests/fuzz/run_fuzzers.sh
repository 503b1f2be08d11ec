#!/usr/bin/env bash
# Runs every fuzzer (or the ones named) of a GIFT_FUZZ build for a set time
# each, over a working corpus that starts from the checked-in seeds
# (tests/fuzz/corpus/<name>, never written to). Fails at the first fuzzer
# that crashes; its crash input is kept under BUILD_DIR/fuzz-artifacts/<name>/.
#
#   tests/fuzz/run_fuzzers.sh BUILD_DIR SECONDS [NAME...]
#
# Environment: FUZZ_JOBS (default 1) runs that many fuzzers at a time;
# FUZZ_NICE (default 19) is their nice level; FUZZ_ARGS adds libFuzzer flags.
# Each fuzzer's summary line (executions, exec/s, cov, corpus) is printed,
# and its whole log is BUILD_DIR/fuzz-logs/<name>.log.
set -euo pipefail

if [ $# -lt 2 ]; then
  sed -n '2,13p' "$0" >&2
  exit 64
fi
build=$(cd "$1" && pwd)
seconds=$2
shift 2
src=$(cd "$(dirname "$0")" && pwd)
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in "$src"/*_fuzzer.cc; do names+=("$(basename "$f" .cc)"); done
fi
jobs=${FUZZ_JOBS:-1}
nice_level=${FUZZ_NICE:-19}

mkdir -p "$build/fuzz-logs" "$build/fuzz-artifacts" "$build/fuzz-corpus"
# The fuzzers' temporary files (state databases, config files): on tmpfs
# where there is one, since the coordinator's store syncs every commit (on a
# disk that halved the coordinator harness's rate), else in the build tree.
# Removed at the end.
if [ -d /dev/shm ] && tmp=$(mktemp -d /dev/shm/gift-fuzz.XXXXXX 2>/dev/null); then
  trap 'rm -rf "$tmp"' EXIT
else
  tmp="$build/fuzz-tmp"
  mkdir -p "$tmp"
fi
export GIFT_FUZZ_TMPDIR="$tmp" TMPDIR="$tmp"

run_one() {
  local name=$1
  local bin="$build/tests/fuzz/$name"
  local work="$build/fuzz-corpus/$name" art="$build/fuzz-artifacts/$name/"
  local log="$build/fuzz-logs/$name.log"
  if [ ! -x "$bin" ]; then
    echo "fuzz: $bin is missing (build the 'fuzzers' target of a GIFT_FUZZ=ON build)" >&2
    return 1
  fi
  mkdir -p "$work" "$art"
  local rc=0
  # -close_fd_mask=3: the code under test prints usage errors and logs;
  # libFuzzer's own output and the sanitizer reports still go to the log.
  nice -n "$nice_level" "$bin" -max_total_time="$seconds" -timeout=30 -rss_limit_mb=4096 \
    -print_final_stats=1 -close_fd_mask=3 -artifact_prefix="$art" ${FUZZ_ARGS:-} \
    "$work" "$src/corpus/$name" >"$log" 2>&1 || rc=$?
  local last
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  local execs rate
  execs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' || true)
  rate=$(grep -E '^stat::average_exec_per_sec' "$log" | awk '{print $2}' || true)
  printf 'fuzz: %-22s rc=%d execs=%s exec/s=%s | %s\n' "$name" "$rc" "${execs:-?}" "${rate:-?}" "$last"
  if [ "$rc" -ne 0 ]; then
    echo "fuzz: $name FAILED; log $log, inputs in $art" >&2
    grep -E 'ERROR|SUMMARY|fuzz property|Test unit written' "$log" | head -20 >&2 || true
  fi
  return "$rc"
}

status=0
pids=()
for name in "${names[@]}"; do
  run_one "$name" &
  pids+=($!)
  if [ ${#pids[@]} -ge "$jobs" ]; then
    wait "${pids[0]}" || status=1
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
