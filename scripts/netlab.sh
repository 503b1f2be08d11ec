#!/usr/bin/env bash
# netlab.sh: an emulated multi-host network on one machine, to measure the
# service and its baselines over real bandwidth limits (on loopback
# compression can never pay).
#
#   scripts/netlab.sh [run] --rates 200mbit,1gbit --workers 4 --servers 2 \
#       --modes direct,fp32,gloo-fp32,gloo-fp16 --out out/netlab
#   scripts/netlab.sh exec [options] -- CMD [ARG...]   (testbed up, CMD, down)
#
# The testbed: one network namespace per host (PREFIX-c for the coordinator,
# PREFIX-s<i> per server, PREFIX-w<i> per worker) and one for a bridge
# (PREFIX-br); a veth pair joins each host (device lab0) to a bridge port in
# PREFIX-br. Every veth end shapes what it sends with tbf at the link rate:
# the host end the host's egress, the bridge end the host's ingress.
# Optional netem (--delay, one-way at each host's egress; --loss). Addresses
# come only from the benchmarking range 198.18.0.0/15 (198.18.0.0/24: the
# coordinator .1, servers .10+i, workers .100+i); there is no default route
# and nothing is created in the root namespace. PREFIX is unique per run
# (gnl<pid>), so parallel runs cannot collide. On exit, an error, SIGINT or
# SIGTERM every process started (and any left in the namespaces) is killed
# by pid and every namespace deleted, which deletes every link.
# --colocate: no server hosts; server i runs on worker host i mod P (one per
# worker host by default, as BytePS runs without spare machines).
#
# run: for each rate, for each mode:
#   direct | fp32 | gift  `gift-bench cluster --mode M --placement FILE` in the
#                         coordinator's namespace (its gRPC to the
#                         coordinator stays there; the Worker API is a Unix
#                         socket), daemons in their namespaces, UCX over TCP
#                         on lab0 (UCX_TLS=tcp, UCX_NET_DEVICES=lab0);
#   direct-CODEC          direct with pull codec CODEC (bf16, e4m3, e5m2, fp16;
#                         block128 scales for the FP8 ones);
#   gift-measured         gift with the owners' measured selection under the
#                         default step budget (--selection measured, refresh
#                         every 10 steps, at least 30 warm-up steps);
#   gift-unbudgeted       the same with the budget off (--gift-budget off);
#   gloo-fp32 | gloo-fp16 | gloo-bf16
#                         bench/gloo_allreduce.py --placement FILE: torch
#                         gloo all-reduce of the same tensors, one rank per
#                         worker host, master = worker 0's address.
# Each reports the bytes that crossed every host's lab0 during its timed
# steps (/proc/PID/net/dev). scripts/netlab/report.py then writes
# OUT/table.txt (method x rate: median step, link ideal = busiest host's
# bytes / rate, ratio, CPU per step), OUT/results.json and OUT/netlab.png.
#
# Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN for `ip netns`), ip and tc
# (iproute2), the tbf qdisc (and netem for --delay/--loss); exits 77 saying
# why when any is missing. Exit codes: 0 ok, 1 a run failed, 64 usage, 77
# cannot run here.
set -euo pipefail

SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SELF_DIR/.." && pwd)

usage() {
  cat <<EOF
usage: $0 [run] [options]
       $0 exec [options] -- CMD [ARG...]

testbed:
  --workers N        worker hosts (default 4, 1..64)
  --servers N        server hosts (default 2, 1..32; with --colocate, servers,
                     default one per worker host)
  --colocate         servers run on the worker hosts (server i on worker host
                     i mod P), no server hosts
  --rates LIST       link rates, tc units (kbit, mbit, gbit), comma-separated
                     (default 1gbit; exec uses the first)
  --mtu N            MTU of every veth (default 9000)
  --delay D          netem one-way delay at each host's egress, e.g. 1ms
  --loss P           netem loss at each host's egress, e.g. 0.1%
  --prefix NAME      namespace prefix (default gnl<pid>; [a-z0-9], <= 10 chars)
run:
  --modes LIST       of direct, direct-bf16, direct-e4m3, direct-e5m2,
                     direct-fp16 (direct with that pull codec), fp32, gift,
                     gift-measured, gift-unbudgeted,
                     gloo-fp32, gloo-fp16, gloo-bf16
                     (default direct,fp32,gloo-fp32,gloo-fp16)
  --chunk-bytes N    the coordinator's chunk size in FP32 bytes (default
                     1048576: at 200mbit 1 MiB chunks pipeline better than the
                     coordinator's 4 MiB default, see docs/netlab.md)
  --steps N          timed steps (default 10)
  --warmup N         untimed steps first (default 2)
  --d-model N        model width (default 512)
  --gradients SHAPE  gift-bench's synthetic gradients: field (default) or
                     low-rank (a shared 16-dimensional subspace per matrix,
                     which GIFT's basis can use)
  --layers N         Llama-style blocks (default 2)
  --build DIR        build tree with gift-bench and the daemons (default build)
  --python PATH      Python with torch and matplotlib (default /usr/bin/python3)
  --run-timeout S    limit per run in seconds (default 900)
  --out DIR          results (default out/netlab)
exec: CMD runs in the root namespace with NETLAB_PREFIX, NETLAB_PLACEMENT
  (the placement JSON), NETLAB_NAMESPACES (space-separated) and NETLAB_RATE
  in its environment; it may start processes in the namespaces with
  'ip netns exec'. Its exit code is the script's.
EOF
}

die() {
  echo "netlab: $*" >&2
  exit 1
}
usage_error() {
  echo "netlab: $*" >&2
  echo "(see $0 --help)" >&2
  exit 64
}
cannot_run() {
  echo "netlab: cannot run here: $*" >&2
  exit 77
}

# ---- options ------------------------------------------------------------------------------------

COMMAND=run
WORKERS=4
SERVERS=""
COLOCATE=0
CHUNK_BYTES=1048576
RATES=1gbit
MTU=9000
DELAY=""
LOSS=""
PREFIX="gnl$$"
MODES=direct,fp32,gloo-fp32,gloo-fp16
STEPS=10
WARMUP=2
D_MODEL=512
GRADIENTS=field
LAYERS=2
BUILD="$REPO/build"
PYTHON=/usr/bin/python3
RUN_TIMEOUT=900
OUT="$REPO/out/netlab"
EXEC_ARGS=()

if [[ $# -gt 0 && ( $1 == run || $1 == exec ) ]]; then
  COMMAND=$1
  shift
fi
while [[ $# -gt 0 ]]; do
  case $1 in
    -h | --help) usage; exit 0 ;;
    --workers) WORKERS=${2:?}; shift 2 ;;
    --servers) SERVERS=${2:?}; shift 2 ;;
    --colocate) COLOCATE=1; shift ;;
    --chunk-bytes) CHUNK_BYTES=${2:?}; shift 2 ;;
    --rates) RATES=${2:?}; shift 2 ;;
    --mtu) MTU=${2:?}; shift 2 ;;
    --delay) DELAY=${2:?}; shift 2 ;;
    --loss) LOSS=${2:?}; shift 2 ;;
    --prefix) PREFIX=${2:?}; shift 2 ;;
    --modes) MODES=${2:?}; shift 2 ;;
    --steps) STEPS=${2:?}; shift 2 ;;
    --warmup) WARMUP=${2:?}; shift 2 ;;
    --d-model) D_MODEL=${2:?}; shift 2 ;;
    --gradients) GRADIENTS=${2:?}; shift 2 ;;
    --layers) LAYERS=${2:?}; shift 2 ;;
    --build) BUILD=${2:?}; shift 2 ;;
    --python) PYTHON=${2:?}; shift 2 ;;
    --run-timeout) RUN_TIMEOUT=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --) shift; EXEC_ARGS=("$@"); break ;;
    *) usage_error "unknown argument '$1'" ;;
  esac
done

is_int() { [[ $1 =~ ^[0-9]+$ ]]; }
in_range() { is_int "$1" && ((10#$1 >= $2 && 10#$1 <= $3)); }
in_range "$WORKERS" 1 64 || usage_error "--workers: 1..64"
if [[ -z $SERVERS ]]; then
  if ((COLOCATE)); then SERVERS=$WORKERS; else SERVERS=2; fi
fi
in_range "$SERVERS" 1 32 || usage_error "--servers: 1..32"
in_range "$MTU" 1280 65000 || usage_error "--mtu: 1280..65000"
in_range "$STEPS" 1 100000 || usage_error "--steps: 1..100000"
in_range "$WARMUP" 0 1000 || usage_error "--warmup: 0..1000"
in_range "$D_MODEL" 2 65536 || usage_error "--d-model: 2..65536"
in_range "$LAYERS" 1 1000 || usage_error "--layers: 1..1000"
in_range "$CHUNK_BYTES" 4096 1073741824 ||
  usage_error "--chunk-bytes: 4096..1073741824"
in_range "$RUN_TIMEOUT" 10 86400 || usage_error "--run-timeout: 10..86400 seconds"
[[ $PREFIX =~ ^[a-z][a-z0-9]{0,9}$ ]] || usage_error "--prefix: [a-z][a-z0-9]{0,9}"
[[ -z $DELAY || $DELAY =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || usage_error "--delay: e.g. 1ms"
[[ -z $LOSS || $LOSS =~ ^[0-9]+(\.[0-9]+)?%$ ]] || usage_error "--loss: e.g. 0.1%"
if [[ $COMMAND == exec && ${#EXEC_ARGS[@]} -eq 0 ]]; then
  usage_error "exec: no command after --"
fi

# Bits per second of a tc rate (integer with kbit, mbit or gbit; SI units, as tc).
rate_bits() {
  local r=$1
  [[ $r =~ ^([0-9]+)(kbit|mbit|gbit)$ ]] || return 1
  local n=$((10#${BASH_REMATCH[1]}))
  case ${BASH_REMATCH[2]} in
    kbit) echo $((n * 1000)) ;;
    mbit) echo $((n * 1000000)) ;;
    gbit) echo $((n * 1000000000)) ;;
  esac
}
IFS=, read -r -a RATE_LIST <<<"$RATES"
[[ ${#RATE_LIST[@]} -ge 1 && ${#RATE_LIST[@]} -le 16 ]] || usage_error "--rates: 1..16 rates"
for r in "${RATE_LIST[@]}"; do
  bits=$(rate_bits "$r") || usage_error "--rates: '$r' is not like 200mbit, 1gbit"
  ((bits >= 1000000)) || usage_error "--rates: '$r' is below 1mbit"
done
IFS=, read -r -a MODE_LIST <<<"$MODES"
[[ ${#MODE_LIST[@]} -ge 1 && ${#MODE_LIST[@]} -le 16 ]] || usage_error "--modes: 1..16 modes"
[[ $GRADIENTS == field || $GRADIENTS == low-rank ]] || usage_error "--gradients: field or low-rank"
for m in "${MODE_LIST[@]}"; do
  case $m in
    direct | direct-bf16 | direct-e4m3 | direct-e5m2 | direct-fp16 | fp32 | gift) ;;
    gift-measured | gift-unbudgeted) ;;
    gloo-fp32 | gloo-fp16 | gloo-bf16) ;;
    *) usage_error "--modes: unknown mode '$m'" ;;
  esac
done

# ---- can it run here? ---------------------------------------------------------------------------

IP=$(command -v ip || true)
TC=$(command -v tc || true)
[[ -n $IP ]] || cannot_run "no 'ip' (Debian: iproute2)"
[[ -n $TC ]] || cannot_run "no 'tc' (Debian: iproute2)"
ENV_BIN=$(command -v env)
# CAP_NET_ADMIN (12) for links and qdiscs, CAP_SYS_ADMIN (21) for `ip netns`.
cap_eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
has_cap() { (((16#$cap_eff >> $1) & 1)); }
has_cap 12 || cannot_run "needs CAP_NET_ADMIN (run as root) to create namespaces, veths and qdiscs"
has_cap 21 || cannot_run "needs CAP_SYS_ADMIN (run as root) for 'ip netns'"
if "$IP" netns list 2>/dev/null | grep -q "^$PREFIX-"; then
  die "namespaces named $PREFIX-* exist already; choose another --prefix"
fi

# ---- the testbed --------------------------------------------------------------------------------

BR_NS="$PREFIX-br"
HOSTS=()      # namespace of every host, coordinator first, then servers, then workers
HOST_ADDR=()  # its address
HOST_PORT=()  # its port's name in the bridge namespace
HOSTS+=("$PREFIX-c")
HOST_ADDR+=("198.18.0.1")
HOST_PORT+=("c")
SERVER_HOSTS=0  # server hosts (none with --colocate)
((COLOCATE)) || SERVER_HOSTS=$SERVERS
for ((i = 0; i < SERVER_HOSTS; i++)); do
  HOSTS+=("$PREFIX-s$i")
  HOST_ADDR+=("198.18.0.$((10 + i))")
  HOST_PORT+=("s$i")
done
for ((i = 0; i < WORKERS; i++)); do
  HOSTS+=("$PREFIX-w$i")
  HOST_ADDR+=("198.18.0.$((100 + i))")
  HOST_PORT+=("w$i")
done
DEV=lab0

CREATED_NS=()  # namespaces this run created, to delete
STARTED=()     # pids this run started, to kill
CLEANED=0

# shellcheck disable=SC2317 # reached through the traps
# Kills `pids` with TERM, waits up to 5 s, then KILL (bounded: 50 polls).
kill_pids() {
  local pid alive i
  [[ $# -gt 0 ]] || return 0
  for pid in "$@"; do kill -TERM "$pid" 2>/dev/null || true; done
  for ((i = 0; i < 50; i++)); do
    alive=0
    for pid in "$@"; do
      if kill -0 "$pid" 2>/dev/null; then alive=1; fi
    done
    ((alive)) || return 0
    sleep 0.1
  done
  for pid in "$@"; do kill -KILL "$pid" 2>/dev/null || true; done
}

# shellcheck disable=SC2317 # reached through the traps
cleanup() {
  ((CLEANED)) && return 0
  CLEANED=1
  set +e
  local ns pids=() i
  if [[ ${#STARTED[@]} -gt 0 ]]; then kill_pids "${STARTED[@]}"; fi
  # Anything still running in our namespaces (a daemon whose parent died).
  for ns in "${CREATED_NS[@]}"; do
    mapfile -t pids < <("$IP" netns pids "$ns" 2>/dev/null)
    if [[ ${#pids[@]} -gt 0 ]]; then kill_pids "${pids[@]}"; fi
  done
  for ((i = ${#CREATED_NS[@]} - 1; i >= 0; i--)); do
    "$IP" netns del "${CREATED_NS[i]}" 2>/dev/null ||
      echo "netlab: could not delete namespace ${CREATED_NS[i]}" >&2
  done
  if "$IP" netns list 2>/dev/null | grep -q "^$PREFIX-"; then
    echo "netlab: namespaces $PREFIX-* are left behind" >&2
  fi
  return 0
}
# shellcheck disable=SC2317 # reached through the traps
on_signal() {
  echo "netlab: $1, tearing down" >&2
  cleanup
  trap - EXIT
  exit "$2"
}
trap cleanup EXIT
trap 'cleanup' ERR
trap 'on_signal SIGINT 130' INT
trap 'on_signal SIGTERM 143' TERM

# Creates namespace $1 (fails when it cannot) and records it for the
# teardown, and its inode in OUT/namespaces (tests check that no process is
# left in it).
add_ns() {
  "$IP" netns add "$1" || return 1
  CREATED_NS+=("$1")
  echo "$1 $(stat -L -c %i "/run/netns/$1")" >>"$OUT/namespaces"
  "$IP" -n "$1" link set lo up
  # No IPv6 (router solicitations and MLD would be counted as traffic).
  "$IP" netns exec "$1" sh -c \
    'if [ -d /proc/sys/net/ipv6 ]; then
       echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6
       echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6
     fi'
}

# The qdisc of one device: tbf at `rate`, under netem when `netem` is given.
shape() {
  local ns=$1 dev=$2 rate=$3 netem=$4
  local bits burst
  bits=$(rate_bits "$rate")
  # Two jumbo frames, or 2 ms at the rate, whichever is more.
  burst=$((bits / 8 / 500))
  ((burst >= 2 * MTU + 2048)) || burst=$((2 * MTU + 2048))
  "$TC" -n "$ns" qdisc del dev "$dev" root 2>/dev/null || true
  if [[ -n $netem ]]; then
    # shellcheck disable=SC2086 # $netem holds netem's words
    "$TC" -n "$ns" qdisc add dev "$dev" root handle 1: netem $netem
    "$TC" -n "$ns" qdisc add dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst "$burst" \
      latency 20ms
  else
    "$TC" -n "$ns" qdisc add dev "$dev" root handle 10: tbf rate "$rate" burst "$burst" \
      latency 20ms
  fi
}

NETEM=""
[[ -z $DELAY ]] || NETEM="delay $DELAY"
[[ -z $LOSS ]] || NETEM="${NETEM:+$NETEM }loss $LOSS"

set_rate() {
  local i
  for ((i = 0; i < ${#HOSTS[@]}; i++)); do
    shape "${HOSTS[i]}" "$DEV" "$1" "$NETEM"
    shape "$BR_NS" "${HOST_PORT[i]}" "$1" ""
  done
}

testbed_up() {
  local i ns
  # The first namespace doubles as the probe: can this machine do it at all?
  add_ns "$BR_NS" 2>/dev/null || cannot_run "'ip netns add' failed (no network namespaces here?)"
  "$IP" -n "$BR_NS" link add br0 type bridge stp_state 0 forward_delay 0
  "$IP" -n "$BR_NS" link set br0 up
  for ((i = 0; i < ${#HOSTS[@]}; i++)); do
    ns=${HOSTS[i]}
    add_ns "$ns"
    # Created in the bridge namespace with its peer straight in the host's:
    # no end is ever in the root namespace.
    "$IP" -n "$BR_NS" link add "${HOST_PORT[i]}" mtu "$MTU" type veth peer name "$DEV" \
      netns "$ns" mtu "$MTU"
    "$IP" -n "$BR_NS" link set "${HOST_PORT[i]}" master br0 up
    "$IP" -n "$ns" addr add "${HOST_ADDR[i]}/24" dev "$DEV"
    "$IP" -n "$ns" link set "$DEV" up
  done
  if ! "$TC" -n "$BR_NS" qdisc add dev c root handle 10: tbf rate 1gbit burst 65536 \
    latency 20ms 2>/dev/null; then
    cannot_run "the tbf qdisc is not available (kernel module sch_tbf)"
  fi
  if [[ -n $NETEM ]] && ! "$TC" -n "$BR_NS" qdisc add dev c parent 10:1 netem delay 1ms \
    2>/dev/null; then
    cannot_run "--delay/--loss need the netem qdisc (kernel module sch_netem)"
  fi
  set_rate "${RATE_LIST[0]}"
}

# The placement file of LocalCluster (tools/gift-cluster/local_cluster.h).
write_placement() {
  local file=$1 i
  {
    entry() {
      printf '{"host":"%s","address":"%s","device":"%s",' "${HOSTS[$1]}" "${HOST_ADDR[$1]}" "$DEV"
      printf '"prefix":["%s","netns","exec","%s","%s","UCX_NET_DEVICES=%s"]}' \
        "$IP" "${HOSTS[$1]}" "$ENV_BIN" "$DEV"
    }
    printf '{"coordinator":'
    entry 0
    printf ',\n"servers":['
    for ((i = 0; i < SERVERS; i++)); do
      ((i == 0)) || printf ','
      if ((COLOCATE)); then
        entry $((1 + i % WORKERS))  # on worker host i mod P
      else
        entry $((1 + i))
      fi
    done
    printf '],\n"workers":['
    for ((i = 0; i < WORKERS; i++)); do
      ((i == 0)) || printf ','
      entry $((1 + SERVER_HOSTS + i))
    done
    printf ']}\n'
  } >"$file"
}

# Runs "$@" in the background (bounded by --run-timeout), records its pid
# for the teardown, and waits for it; returns its exit code.
run_bounded() {
  local pid rc=0
  timeout --kill-after=10 "$RUN_TIMEOUT" "$@" &
  pid=$!
  STARTED+=("$pid")
  wait "$pid" || rc=$?
  return "$rc"
}

# The pull codec spec of a direct-CODEC mode (FP8 with block scales, as the
# push codec).
pull_codec() {
  case $1 in
    e4m3 | e5m2) echo "$1/block128" ;;
    *) echo "$1" ;;
  esac
}

# ---- main ---------------------------------------------------------------------------------------

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
PLACEMENT="$OUT/placement.json"
: >"$OUT/namespaces"

echo "netlab: testbed $PREFIX: coordinator, $SERVERS servers$( ((COLOCATE)) && echo " (on the worker hosts)")," \
  "$WORKERS workers on a bridge;" \
  "rates ${RATES}, MTU $MTU${NETEM:+, netem $NETEM}" >&2
testbed_up
write_placement "$PLACEMENT"

if [[ $COMMAND == exec ]]; then
  rc=0
  NETLAB_PREFIX=$PREFIX NETLAB_PLACEMENT=$PLACEMENT NETLAB_RATE=${RATE_LIST[0]} \
    NETLAB_NAMESPACES="$BR_NS ${HOSTS[*]}" run_bounded "${EXEC_ARGS[@]}" || rc=$?
  exit "$rc"
fi

BENCH="$BUILD/bench/gift-bench"
[[ -x $BENCH ]] ||
  cannot_run "$BENCH is not built (ninja -C $BUILD gift-bench gift-coordinator gift-server gift-worker)"
for m in "${MODE_LIST[@]}"; do
  if [[ $m == gloo-* ]] && ! "$PYTHON" -c 'import torch.distributed' 2>/dev/null; then
    cannot_run "$PYTHON has no torch (Debian: python3-torch) for mode $m"
  fi
done
SHAPES=$("$BENCH" cluster --d-model "$D_MODEL" --layers "$LAYERS" --list-tensors |
  "$PYTHON" -c 'import json, sys; print(json.dumps([t["shape"] for t in json.load(sys.stdin)]))')

mkdir -p "$OUT/raw" "$OUT/logs"
failed=0
for rate in "${RATE_LIST[@]}"; do
  set_rate "$rate"
  for mode in "${MODE_LIST[@]}"; do
    json="$OUT/raw/$rate-$mode.json"
    log="$OUT/logs/$rate-$mode.log"
    rm -f "$json"
    echo "netlab: $rate $mode ..." >&2
    rc=0
    case $mode in
      gloo-*)
        run_bounded "$PYTHON" "$REPO/bench/gloo_allreduce.py" --placement "$PLACEMENT" \
          --world "$WORKERS" --port 29500 --steps "$STEPS" --warmup "$((WARMUP > 0 ? WARMUP : 1))" \
          --mode buckets --dtype "${mode#gloo-}" --shapes "$SHAPES" \
          --timeout "$RUN_TIMEOUT" >"$json.tmp" 2>"$log" || rc=$?
        ;;
      *)
        rm -rf "$OUT/run/$rate-$mode"
        mkdir -p "$OUT/run/$rate-$mode"
        bench_args=(--mode "${mode%%-*}")
        [[ $mode != direct-* ]] || bench_args+=(--pull-codec "$(pull_codec "${mode#direct-}")")
        bench_args+=(--chunk-bytes "$CHUNK_BYTES" --gradients "$GRADIENTS")
        warmup=$WARMUP
        if [[ $mode == gift-measured || $mode == gift-unbudgeted ]]; then
          bench_args+=(--selection measured --period 10)
          [[ $mode != gift-unbudgeted ]] || bench_args+=(--gift-budget off)
          warmup=$((WARMUP > 30 ? WARMUP : 30))
        fi
        run_bounded "$IP" netns exec "${HOSTS[0]}" "$BENCH" cluster --placement "$PLACEMENT" \
          --servers "$SERVERS" --workers "$WORKERS" "${bench_args[@]}" --steps "$STEPS" \
          --warmup "$warmup" --d-model "$D_MODEL" --layers "$LAYERS" --ucx-tls tcp \
          --no-perftest --no-gloo --no-reducer --dir "$OUT/run/$rate-$mode" \
          --json "$json.tmp" >"$log" 2>&1 || rc=$?
        ;;
    esac
    if ((rc == 0)) && [[ -s $json.tmp ]]; then
      mv "$json.tmp" "$json"
    else
      echo "netlab: $rate $mode failed (exit $rc); log: $log" >&2
      tail -n 20 "$log" >&2 || true
      failed=1
    fi
  done
done

{
  printf '{"prefix":"%s","workers":%d,"servers":%d,"colocate":%s,"chunk_bytes":%s,' \
    "$PREFIX" "$WORKERS" "$SERVERS" "$( ((COLOCATE)) && echo true || echo false)" \
    "$CHUNK_BYTES"
  printf '"mtu":%d,"delay":"%s","loss":"%s",' "$MTU" "$DELAY" "$LOSS"
  printf '"steps":%d,"warmup":%d,"d_model":%d,"layers":%d,"rates":[' \
    "$STEPS" "$WARMUP" "$D_MODEL" "$LAYERS"
  for ((i = 0; i < ${#RATE_LIST[@]}; i++)); do
    ((i == 0)) || printf ','
    printf '{"name":"%s","bits_per_s":%s}' "${RATE_LIST[i]}" "$(rate_bits "${RATE_LIST[i]}")"
  done
  printf '],"modes":['
  for ((i = 0; i < ${#MODE_LIST[@]}; i++)); do
    ((i == 0)) || printf ','
    printf '"%s"' "${MODE_LIST[i]}"
  done
  printf ']}\n'
} >"$OUT/manifest.json"
"$PYTHON" "$SELF_DIR/netlab/report.py" "$OUT" || failed=1
exit "$failed"
