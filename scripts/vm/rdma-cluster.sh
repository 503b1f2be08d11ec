#!/bin/bash
# The data plane over RDMA verbs between two guests, each with a soft-RoCE
# device (scripts/vm/rxe-up.sh) on a NIC joined to the other's (vm.sh
# --link). Run by scripts/vm/rdma-pair.sh, one role per guest:
#
#   a (198.18.2.1): the coordinator, a server and worker a, rank 0's client
#   b (198.18.2.2): worker b, rank 1's client
#
# The coordinator runs with --dataplane-auth: every chunk carries a MAC
# (chacha20-poly1305), checked by its receiver.
#
# Workers and the server use only UCX's verbs transports (--ucx-tls
# rc_verbs,ud_verbs,self: no tcp). The policy's codecs are FP32 both ways,
# so every step's average is checked bit for bit (scripts/vm/rank_steps.py);
# then E4M3 both ways, within its error bound. The rxe devices' counters
# (rdma statistic) before and after go to /out: RDMA reads are the rendezvous.
set -uo pipefail
ROLE=${1:?usage: rdma-cluster.sh a|b [STEPS]}
STEPS=${2:-5}
BUILD=${BUILD:-build}
A=198.18.2.1
B=198.18.2.2
TLS=rc_verbs,ud_verbs,self
COORD=$A:7070
export PYTHONPATH=$PWD/python
run_dir=/tmp/gift-rdma
mkdir -p "$run_dir"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; }
trap cleanup EXIT
giftctl() { "$BUILD/tools/giftctl/giftctl" --coordinator "$COORD" --insecure "$@"; }
wait_ready() { # LOG: until the daemon logs its ready event
  for _ in $(seq 600); do grep -q -E '"event":"(ready|serving)"' "$1" 2>/dev/null && return 0; sleep 0.2; done
  echo "not ready: $1" >&2; tail -5 "$1" >&2; return 1
}
wait_coordinator() { # up to $1 tries, 0.2 s apart
  for _ in $(seq "$1"); do giftctl status >/dev/null 2>&1 && return 0; sleep 0.2; done
  return 1
}
counters() { rdma statistic show link rxe0/1 >"/out/rxe-$ROLE-$1.txt" 2>&1; }

case $ROLE in a) addr=$A ;; b) addr=$B ;; *) echo "role a or b" >&2; exit 64 ;; esac
scripts/vm/rxe-up.sh "$addr" || exit 1
counters before
if [[ $ROLE == a ]]; then
  "$BUILD/server/coordinator/gift-coordinator" --listen "$COORD" --insecure \
    --state "$run_dir/coordinator.db" --lease-ttl 5s --dataplane-auth \
    2>/out/coordinator.log & pids+=($!)
  wait_coordinator 300
  giftctl policy set --push-codec fp32 --pull-codec fp32 --target off >/dev/null || exit 1
  "$BUILD/server/aggregator/gift-server" --coordinator "$COORD" --insecure --name server-a \
    --ucx-tls "$TLS" --listen "$A:7071" 2>/out/server.log & pids+=($!)
  wait_ready /out/server.log || exit 1
else
  wait_coordinator 600
fi
"$BUILD/worker/gift-worker" --coordinator "$COORD" --insecure --name "worker-$ROLE" \
  --ucx-tls "$TLS" --socket "$run_dir/worker.sock" --min-workers 2 \
  2>"/out/worker-$ROLE.log" & pids+=($!)
wait_ready "/out/worker-$ROLE.log" || exit 1
rank=0; [[ $ROLE == b ]] && rank=1
rc=0
python3 scripts/vm/rank_steps.py "$run_dir/worker.sock" "$rank" --steps "$STEPS" || rc=1
# The same over E4M3 both ways (rank 0 changes the policy between the runs;
# a step's codecs come with its plan, so both ranks see the change together).
[[ $ROLE == a ]] && giftctl policy set --push-codec e4m3/block128 --pull-codec e4m3/block128 >/dev/null
python3 scripts/vm/rank_steps.py "$run_dir/worker.sock" "$rank" --steps "$STEPS" \
  --first 100 --max-error 0.1 || rc=1
counters after
[[ $ROLE == a ]] && giftctl members >/out/members.txt 2>&1
[[ $ROLE == a ]] && giftctl status >/out/status.txt 2>&1
sleep 5 # the other rank's last pull
exit "$rc"
