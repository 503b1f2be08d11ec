#!/bin/bash
# The shipped systemd units under a real systemd (PID 1 of a scripts/vm.sh
# guest, --init systemd): install, readiness, a step, the watchdog, a crash,
# a clean stop, and systemd-analyze security of each unit.
#
#   scripts/vm.sh run --init systemd -- scripts/vm/systemd-check.sh [BUILD]
#
# BUILD (default build) is the configured build tree to install from. It
# runs `cmake --install BUILD` into the guest's /usr/local (the overlay: the
# host's files are untouched), creates the gift user with systemd-sysusers,
# a CA and the daemons' certificates under /etc/gift/tls, then checks, each
# as one line `ok: ...` or `FAILED: ...`:
#   1. gift-coordinator, gift-server@shard-a, gift-worker@0 and @1 start
#      through gift.target; `systemctl start` returns once each sent READY=1
#      (Type=notify), with the time it took;
#   2. a training process (python, the gift_ps client) averages a tensor
#      through both workers' sockets;
#   3. SIGSTOP of the server: the watchdog (WatchdogSec) aborts it and
#      Restart=on-failure starts it again; the time it took;
#   4. SIGKILL of worker 0: restarted, and it rejoins (the coordinator lists
#      it again, a step passes);
#   5. systemctl stop: every daemon drains and exits 0 (STOPPING=1, no
#      SIGKILL);
# and writes systemd-analyze security of each unit and the daemons' journal
# to /out. Exit status: the number of failed checks.
set -uo pipefail
BUILD=${1:-build}
OUT=/out
FAILED=0
ok() { echo "ok: $*"; }
failed() { echo "FAILED: $*"; FAILED=$((FAILED + 1)); }
mono() { awk '{printf "%.1f", $1}' /proc/uptime; }
# The value of property $2 of unit $1.
prop() { systemctl show -p "$2" --value "$1"; }
# Waits up to $1 s for the command after it to succeed.
wait_for() {
  local limit=$1 i
  shift
  for ((i = 0; i < limit * 2; i++)); do
    "$@" >/dev/null 2>&1 && return 0
    sleep 0.5
  done
  return 1
}

UNITS=(gift-coordinator.service gift-server@shard-a.service gift-worker@0.service gift-worker@1.service)

# ---- install -----------------------------------------------------------------------------------
cmake --install "$BUILD" >/dev/null || { failed "cmake --install $BUILD"; exit 1; }
systemd-sysusers || { failed "systemd-sysusers"; exit 1; }
tls=/etc/gift/tls
mkdir -p "$tls"
(
  set -e
  cd "$tls"
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout ca.key \
    -out ca.crt -days 2 -subj /CN=gift-vm-ca -addext basicConstraints=critical,CA:TRUE \
    -addext keyUsage=critical,keyCertSign,cRLSign 2>/dev/null
  for who in coordinator:gift-coordinator server:gift/server worker:gift/worker \
             operator:gift/operator; do
    name=${who%%:*}
    printf '%s\n' basicConstraints=CA:FALSE keyUsage=critical,digitalSignature,keyEncipherment \
      extendedKeyUsage=serverAuth,clientAuth \
      "subjectAltName=DNS:localhost,IP:127.0.0.1,URI:spiffe://${who#*:}" >"$name.ext"
    openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -keyout "$name.key" \
      -out "$name.csr" -subj "/CN=$name" 2>/dev/null
    openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
      -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  done
  chmod 0600 ./*.key
) || { failed "the certificates"; exit 1; }
GIFTCTL=(giftctl --coordinator localhost:7070 --cert "$tls/operator.crt" --key "$tls/operator.key"
         --ca "$tls/ca.crt")
systemctl daemon-reload
systemctl enable gift-coordinator.service gift-server@shard-a.service gift-worker@0.service \
  gift-worker@1.service >/dev/null 2>&1
ok "installed: $(ls /usr/local/lib/systemd/system | tr '\n' ' ')"

# ---- 1. readiness ---------------------------------------------------------------------------------
for unit in "${UNITS[@]}"; do
  t0=$(mono)
  if systemctl start "$unit"; then
    t1=$(mono)
    if [[ $(prop "$unit" ActiveState) == active ]]; then
      ok "1. $unit active after READY=1, $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s" \
         "(MainPID $(prop "$unit" MainPID), status: $(prop "$unit" StatusText))"
    else
      failed "1. $unit: started but $(prop "$unit" ActiveState)"
    fi
  else
    failed "1. $unit did not start"
    journalctl -u "$unit" -o cat --no-pager | tail -20
  fi
done
"${GIFTCTL[@]}" status >"$OUT/giftctl-status.txt" 2>&1 \
  && ok "1. giftctl status: $(grep -c . "$OUT/giftctl-status.txt") lines" \
  || failed "1. giftctl status: $(tail -3 "$OUT/giftctl-status.txt")"

# ---- 2. a step through both workers --------------------------------------------------------------
step() { # $1: the first step number; both ranks' lines, failing when either failed
  local dir=$PWD/scripts/vm rc=0
  PYTHONPATH=$PWD/python timeout 600 python3 "$dir/rank_steps.py" /run/gift/worker-0.sock 0 \
    --steps 2 --first "$1" --max-error 0.1 & local rank0=$!
  PYTHONPATH=$PWD/python timeout 600 python3 "$dir/rank_steps.py" /run/gift/worker-1.sock 1 \
    --steps 2 --first "$1" --max-error 0.1 || rc=1
  wait "$rank0" || rc=1
  return "$rc"
}
if out=$(step 0 2>&1); then
  ok "2. two steps averaged through both workers: ${out##*$'\n'}"
else
  failed "2. the steps: $(echo "$out" | tail -5)"
fi

# ---- 3. the watchdog --------------------------------------------------------------------------------
unit=gift-server@shard-a.service
pid=$(prop "$unit" MainPID)
restarts=$(prop "$unit" NRestarts)
watchdog=$(prop "$unit" WatchdogUSec)
t0=$(mono)
kill -STOP "$pid"
if wait_for 240 bash -c "[[ \$(systemctl show -p MainPID --value $unit) != $pid &&
                            \$(systemctl show -p ActiveState --value $unit) == active ]]"; then
  ok "3. $unit stopped with SIGSTOP (watchdog $watchdog): restarted by systemd after" \
     "$(awk -v a="$t0" -v b="$(mono)" 'BEGIN{printf "%.1f", b-a}') s, NRestarts" \
     "$restarts -> $(prop "$unit" NRestarts), result of the stopped one:" \
     "$(journalctl -u "$unit" -o cat --no-pager | grep -m1 -i -E 'watchdog timeout' || echo '?')"
else
  failed "3. $unit not restarted after SIGSTOP (state $(prop "$unit" ActiveState))"
  kill -CONT "$pid" 2>/dev/null
fi

# ---- 4. a crash ------------------------------------------------------------------------------------
unit=gift-worker@0.service
pid=$(prop "$unit" MainPID)
kill -KILL "$pid"
if wait_for 60 bash -c "[[ \$(systemctl show -p MainPID --value $unit) != $pid &&
                           \$(systemctl show -p ActiveState --value $unit) == active ]]"; then
  ok "4. $unit killed (SIGKILL): restarted, MainPID $pid -> $(prop "$unit" MainPID)"
  if out=$(step 10 2>&1); then
    ok "4. the restarted worker rejoined: two more steps: ${out##*$'\n'}"
  else
    failed "4. steps after the restart: $(echo "$out" | tail -5)"
  fi
else
  failed "4. $unit not restarted after SIGKILL"
fi
"${GIFTCTL[@]}" status >"$OUT/giftctl-status-after.txt" 2>&1

# ---- 5. a clean stop -----------------------------------------------------------------------------
for ((i = ${#UNITS[@]} - 1; i >= 0; i--)); do
  unit=${UNITS[i]}
  t0=$(mono)
  systemctl stop "$unit"
  status=$(prop "$unit" ExecMainStatus)
  result=$(prop "$unit" Result)
  if [[ $status == 0 && $result == success ]]; then
    ok "5. $unit stopped (SIGTERM, drain) in $(awk -v a="$t0" -v b="$(mono)" 'BEGIN{printf "%.1f", b-a}') s, exit 0"
  else
    failed "5. $unit stop: exit status $status, result $result"
  fi
done

# ---- the record ----------------------------------------------------------------------------------
for unit in gift-coordinator.service gift-server@.service gift-worker@.service; do
  inst=${unit/@./@x.}
  systemd-analyze security --no-pager "$inst" >"$OUT/security-${unit%.service}.txt" 2>&1
  echo "security: $unit $(grep -o 'Overall exposure level for .*' "$OUT/security-${unit%.service}.txt")"
done
journalctl -o short-monotonic --no-pager -u 'gift-*' >"$OUT/journal.txt"
echo "$FAILED check(s) failed"
exit "$FAILED"
