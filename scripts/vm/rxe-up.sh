#!/bin/bash
# In a scripts/vm.sh guest: gives Ethernet device DEV (default eth0, the NIC
# of --link) ADDR (a /24 of 198.18.0.0/15) and MTU, and puts a soft-RoCE
# device rxe0 on it.
#
#   scripts/vm/rxe-up.sh ADDR [MTU [DEV]]
set -euo pipefail
addr=${1:?usage: rxe-up.sh ADDR [MTU [DEV]]}
mtu=${2:-9000}
dev=${3:-eth0}
[[ $addr == 198.1[89].* ]] || { echo "rxe-up: $addr is not in 198.18.0.0/15" >&2; exit 64; }
ip link set "$dev" mtu "$mtu"
ip addr add "$addr/24" dev "$dev"
ip link set "$dev" up
modprobe rdma_rxe
rdma link add rxe0 type rxe netdev "$dev"
# The IPv4 GID appears once the address is on the device.
for _ in $(seq 50); do
  ibv_devinfo -d rxe0 -v 2>/dev/null | grep -q "GID\[  1\]" && break
  sleep 0.1
done
ibv_devinfo -d rxe0 | grep -E "state|active_mtu" | tr -s ' \t' ' '
