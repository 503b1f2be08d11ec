#!/bin/bash
# The netlab with round-trip delay and loss (netem), in a scripts/vm.sh guest
# (this machine's kernel has no sch_netem):
#
#   scripts/vm.sh run --mem 8192 -- scripts/vm/netlab-rtt.sh [options]
#
#   --rate R        the link rate of every run (default 100mbit)
#   --modes LIST    netlab modes (default direct-e4m3,gloo-fp32)
#   --links LIST    RTT[/LOSS] per netlab run, RTT in ms (default
#                   0,1,10,50,10/0.1%): netem adds RTT/2 at each host's egress
#   --steps N       timed steps per row (default 5)
#   --out DIR       results (default /out/netlab-rtt)
#   more options after -- go to every scripts/netlab.sh run
#
# Each link setting is one netlab run (its own testbed: netem is set when the
# links are made), all in this one guest; the runs work in the guest's /tmp
# (9p, which /out is, cannot hold Unix sockets) and are copied to OUT, with
# OUT/table.txt: every row of every run.
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
RATE=100mbit
MODES=direct-e4m3,gloo-fp32
LINKS=0,1,10,50,10/0.1%
STEPS=5
OUT=/out/netlab-rtt
EXTRA=()
while (($#)); do
  case $1 in
    --rate) RATE=${2:?}; shift 2 ;;
    --modes) MODES=${2:?}; shift 2 ;;
    --links) LINKS=${2:?}; shift 2 ;;
    --steps) STEPS=${2:?}; shift 2 ;;
    --out) OUT=${2:?}; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    *) echo "netlab-rtt: unknown option $1" >&2; exit 64 ;;
  esac
done
modprobe sch_netem 2>/dev/null || { echo "netlab-rtt: no sch_netem here" >&2; exit 77; }
work=$(mktemp -d /tmp/netlab-rtt.XXXXXX)
rc=0
IFS=, read -ra links <<<"$LINKS"
runs=()
for link in "${links[@]}"; do
  rtt=${link%%/*}
  loss=""
  [[ $link == */* ]] && loss=${link#*/}
  args=()
  if [[ $rtt != 0 ]]; then
    args+=(--delay "$(awk -v r="$rtt" 'BEGIN{printf "%gus", r * 500}')")
  fi
  [[ -z $loss ]] || args+=(--loss "$loss")
  name=rtt${rtt}ms${loss:+-loss$loss}
  echo "netlab-rtt: $name (${args[*]:-no netem}) ..." >&2
  if ! "$REPO/scripts/netlab.sh" run --rates "$RATE" --modes "$MODES" --steps "$STEPS" \
       "${args[@]}" --out "$work/$name" "${EXTRA[@]}"; then
    rc=1
  fi
  runs+=("$work/$name")
done
mkdir -p "$OUT"
python3 "$REPO/scripts/vm/netlab_rtt_table.py" "${runs[@]}" | tee "$work/table.txt"
cp -r "$work"/. "$OUT"/
exit "$rc"
