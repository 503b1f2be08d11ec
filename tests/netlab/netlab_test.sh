#!/usr/bin/env bash
# Tests of scripts/netlab.sh (the emulated multi-host network):
#
#   netlab_test.sh up-down SOURCE_DIR BUILD_DIR
#       the testbed comes up (namespaces, addresses only from 198.18.0.0/15,
#       tbf on both ends of every veth, no default route, hosts reach each
#       other) and goes down leaving no namespace, root-namespace link or
#       process behind, also a process started in a host namespace;
#   netlab_test.sh signal SOURCE_DIR BUILD_DIR
#       the same when netlab.sh gets SIGTERM while its command runs;
#   netlab_test.sh service SOURCE_DIR BUILD_DIR
#       a short gift-bench cluster run (fp32) and a gloo run on 2 worker
#       hosts and 1 server host at 5gbit; the bytes counted on every host's
#       veth match the bytes the workers report pushed within 2 %;
#   netlab_test.sh colocate SOURCE_DIR BUILD_DIR
#       a short direct run with the servers on the 2 worker hosts
#       (--colocate): no server host is created, each host runs a server and
#       a worker, and the hosts' links carry the same bytes within 5 %.
#
# Exit 77 (ctest: skipped) with the reason when it cannot run here: not
# root, no ip/tc, no network namespaces, the binaries not built, no torch.
set -euo pipefail

fail() {
  echo "FAIL: $*" >&2
  exit 1
}
skip() {
  echo "SKIP: $*" >&2
  exit 77
}

# Run inside the testbed by `netlab.sh exec`: checks it, starts a sleeper in
# a host namespace (the teardown must kill it), writes its pid.
if [[ ${1:-} == inside ]]; then
  pidfile=$2
  ns_c="$NETLAB_PREFIX-c"
  ns_w0="$NETLAB_PREFIX-w0"
  for ns in $NETLAB_NAMESPACES; do
    addrs=$(ip -n "$ns" -o -4 addr show | awk '{print $4}' | grep -v '^127\.' || true)
    for a in $addrs; do
      [[ $a == 198.18.* || $a == 198.19.* ]] || fail "$ns has address $a outside 198.18.0.0/15"
    done
    if ip -n "$ns" route show default | grep -q .; then fail "$ns has a default route"; fi
  done
  tc -n "$ns_w0" qdisc show dev lab0 | grep -q "tbf.*rate 1Gbit" || fail "no tbf on $ns_w0 lab0"
  tc -n "$NETLAB_PREFIX-br" qdisc show dev w0 | grep -q "tbf.*rate 1Gbit" ||
    fail "no tbf on the bridge's port w0"
  # w0 reaches the coordinator's host: a TCP connection to a closed port is
  # refused (an RST came back), not timed out.
  out=$(ip netns exec "$ns_w0" timeout 5 bash -c 'exec 3<>/dev/tcp/198.18.0.1/9' 2>&1 || true)
  [[ $out == *"Connection refused"* ]] || fail "w0 does not reach 198.18.0.1: $out"
  # ... and the root namespace got no address or route of the testbed.
  if ip -4 addr show | grep -q 'inet 198\.1[89]\.'; then
    fail "the root namespace has an address in 198.18.0.0/15"
  fi
  if ip -4 route show | grep -q '^198\.1[89]\.'; then
    fail "the root namespace has a route into 198.18.0.0/15"
  fi
  ip netns exec "$ns_c" true
  ip netns exec "$ns_w0" sleep 300 &
  echo $! >"$pidfile"
  if [[ ${3:-} == wait ]]; then sleep 60; fi
  exit 0
fi

MODE=${1:?usage: $0 up-down|signal|service|colocate SOURCE_DIR BUILD_DIR}
SRC=${2:?}
BUILD=${3:?}
NETLAB="$SRC/scripts/netlab.sh"
PREFIX="gnlt$$"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/netlab-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces, veths, tc)"
command -v ip >/dev/null || skip "no 'ip' (iproute2)"
command -v tc >/dev/null || skip "no 'tc' (iproute2)"

# Whether pid $1 runs (a zombie waiting for its reaper does not count),
# polling up to 3 s for it to end.
still_running() {
  local i state
  for ((i = 0; i < 30; i++)); do
    state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null || true)
    [[ -n $state && $state != Z ]] || return 1
    sleep 0.1
  done
  return 0
}

root_links() { ip -o link show | awk -F': ' '{print $2}' | sort; }

# Nothing of the run in OUT is left: no namespace of that name, no process
# in any of its namespaces (by inode), the root namespace's links as before.
check_gone() {
  local out=$1 links_before=$2 name inode pid
  [[ -s $out/namespaces ]] || fail "netlab wrote no $out/namespaces"
  while read -r name inode; do
    [[ ! -e /run/netns/$name ]] || fail "namespace $name is left behind"
    for pid in /proc/[0-9]*; do
      if [[ $(readlink "$pid/ns/net" 2>/dev/null || true) == "net:[$inode]" ]]; then
        fail "process ${pid#/proc/} is left in namespace $name: $(tr '\0' ' ' <"$pid/cmdline")"
      fi
    done
  done <"$out/namespaces"
  if ip netns list | grep -q "^$PREFIX-"; then fail "namespaces $PREFIX-* are left"; fi
  [[ $(root_links) == "$links_before" ]] ||
    fail "the root namespace's links changed: $(diff <(echo "$links_before") <(root_links) || true)"
}

links_before=$(root_links)
case $MODE in
  up-down)
    rc=0
    "$NETLAB" exec --prefix "$PREFIX" --workers 2 --servers 1 --rates 1gbit --out "$WORK/out" \
      -- "$0" inside "$WORK/sleeper.pid" || rc=$?
    [[ $rc -ne 77 ]] || skip "netlab.sh cannot run here (see above)"
    [[ $rc -eq 0 ]] || fail "netlab.sh exec exited $rc"
    check_gone "$WORK/out" "$links_before"
    sleeper=$(cat "$WORK/sleeper.pid")
    if still_running "$sleeper"; then fail "the sleeper $sleeper is still running"; fi
    echo "PASS: up and down, nothing left"
    ;;
  signal)
    "$NETLAB" exec --prefix "$PREFIX" --workers 1 --servers 1 --rates 1gbit --out "$WORK/out" \
      -- "$0" inside "$WORK/sleeper.pid" wait &
    netlab=$!
    for ((i = 0; i < 200; i++)); do
      [[ -s $WORK/sleeper.pid ]] && break
      if ! kill -0 "$netlab" 2>/dev/null; then break; fi
      sleep 0.1
    done
    if [[ ! -s $WORK/sleeper.pid ]]; then
      rc=0
      wait "$netlab" || rc=$?
      [[ $rc -ne 77 ]] || skip "netlab.sh cannot run here (see above)"
      fail "the testbed did not come up (netlab.sh exited $rc)"
    fi
    kill -TERM "$netlab"
    rc=0
    wait "$netlab" || rc=$?
    [[ $rc -eq 143 ]] || fail "netlab.sh exited $rc after SIGTERM, expected 143"
    check_gone "$WORK/out" "$links_before"
    if still_running "$(cat "$WORK/sleeper.pid")"; then fail "the sleeper is still running"; fi
    echo "PASS: SIGTERM tears everything down"
    ;;
  service)
    for b in bench/gift-bench server/coordinator/gift-coordinator server/aggregator/gift-server \
      worker/gift-worker; do
      [[ -x $BUILD/$b ]] || skip "$BUILD/$b is not built"
    done
    modes=fp32
    if /usr/bin/python3 -c 'import torch.distributed' 2>/dev/null; then
      modes=fp32,gloo-fp32
    else
      echo "note: /usr/bin/python3 has no torch; the gloo run is left out" >&2
    fi
    rc=0
    "$NETLAB" --prefix "$PREFIX" --workers 2 --servers 1 --rates 5gbit --modes "$modes" \
      --steps 4 --warmup 1 --d-model 128 --layers 1 --build "$BUILD" --run-timeout 120 \
      --out "$WORK/out" || rc=$?
    [[ $rc -ne 77 ]] || skip "netlab.sh cannot run here (see above)"
    [[ $rc -eq 0 ]] || fail "netlab.sh exited $rc"
    check_gone "$WORK/out" "$links_before"
    /usr/bin/python3 "$SRC/scripts/netlab/report.py" "$WORK/out" --check-bytes 0.02 >/dev/null ||
      fail "veth bytes and pushed bytes differ by more than 2 % (report above)"
    /usr/bin/python3 "$SRC/scripts/netlab/report.py" "$WORK/out" --check-bytes 0.02 |
      grep -E '^  |^fp32|^gloo'
    echo "PASS: service run, veth bytes match the daemons' within 2 %"
    ;;
  colocate)
    for b in bench/gift-bench server/coordinator/gift-coordinator server/aggregator/gift-server \
      worker/gift-worker; do
      [[ -x $BUILD/$b ]] || skip "$BUILD/$b is not built"
    done
    rc=0
    "$NETLAB" --prefix "$PREFIX" --workers 2 --colocate --rates 5gbit --modes direct \
      --steps 4 --warmup 1 --d-model 128 --layers 1 --build "$BUILD" --run-timeout 120 \
      --out "$WORK/out" || rc=$?
    [[ $rc -ne 77 ]] || skip "netlab.sh cannot run here (see above)"
    [[ $rc -eq 0 ]] || fail "netlab.sh exited $rc"
    check_gone "$WORK/out" "$links_before"
    if grep -q -- "-s[0-9]* " "$WORK/out/namespaces"; then fail "a server host was created"; fi
    /usr/bin/python3 - "$WORK/out/results.json" <<'EOF' || fail "co-located hosts (above)"
import json, sys
(row,) = [r for r in json.load(open(sys.argv[1]))["rows"] if r["mode"] == "direct"]
hosts = [l for l in row["links"] if l["kind"] != "coordinator"]
print("  " + ", ".join(f"{l['host']} {l['kind']} {l['tx_bytes_per_step']:.0f}/"
                       f"{l['rx_bytes_per_step']:.0f} B/step" for l in hosts))
assert len(hosts) == 2 and all(l["kind"] == "server+worker" for l in hosts), "kinds"
tx = [l["tx_bytes_per_step"] for l in hosts] + [l["rx_bytes_per_step"] for l in hosts]
assert min(tx) > 0 and max(tx) / min(tx) < 1.05, "links unbalanced"
EOF
    echo "PASS: co-located servers, one per worker host, links balanced"
    ;;
  *)
    fail "unknown mode $MODE"
    ;;
esac
