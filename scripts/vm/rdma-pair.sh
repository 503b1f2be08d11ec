#!/bin/bash
# Two scripts/vm.sh guests joined by one link (qemu's socket netdev on
# loopback), each running CMD with its role appended (a, then b):
#
#   scripts/vm/rdma-pair.sh [--port P] [--out DIR] -- CMD [ARG...]
#   scripts/vm/rdma-pair.sh -- scripts/vm/rdma-cluster.sh     # the data plane over verbs
#
# Guest a listens, guest b connects (1 vCPU and 3 GiB each); their /out are
# DIR/a and DIR/b (default build/vm/pair). Exit status: 0 when both
# commands exited 0.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PORT=47001
OUT=$REPO/build/vm/pair
while (($#)); do
  case $1 in
    --port) PORT=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --) shift; break ;;
    *) echo "rdma-pair: unknown option $1" >&2; exit 64 ;;
  esac
done
(($#)) || { echo "rdma-pair: no command" >&2; exit 64; }
mkdir -p "$OUT/a" "$OUT/b"
"$REPO/scripts/vm.sh" run --cpus 1 --mem 3072 --link "listen:$PORT" --mac 52:54:00:00:02:01 \
  --out "$OUT/a" -- "$@" a >"$OUT/a.console" 2>&1 &
a=$!
sleep 2 # a listens before b connects
rc_b=0
"$REPO/scripts/vm.sh" run --cpus 1 --mem 3072 --link "connect:$PORT" --mac 52:54:00:00:02:02 \
  --out "$OUT/b" -- "$@" b >"$OUT/b.console" 2>&1 || rc_b=$?
rc_a=0
wait "$a" || rc_a=$?
echo "rdma-pair: a exited $rc_a, b exited $rc_b (output: $OUT/a/output.log, $OUT/b/output.log)"
((rc_a == 0 && rc_b == 0))
