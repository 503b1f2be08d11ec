#!/bin/bash
# The transport tests and the exact-once cluster suite with UCX on RDMA
# verbs only, in one scripts/vm.sh guest: a soft-RoCE device on a dummy
# Ethernet device (rdma_rxe's loopback path: real verbs, queue pairs, memory
# registration and RDMA reads, no wire), every daemon with
# UCX_TLS=rc_verbs,ud_verbs,self (no tcp).
#
#   scripts/vm.sh run --mem 4096 --timeout 3600 -- scripts/vm/verbs-suite.sh [GTEST_FILTER]
#
# Writes each test binary's output to /out/<test>.log; exit status: the
# number of binaries that failed.
set -uo pipefail
BUILD=${BUILD:-build}
FILTER=${1:-*}
ip link add d0 type dummy
scripts/vm/rxe-up.sh 198.18.3.1 9000 d0 || exit 1
export UCX_TLS=rc_verbs,ud_verbs,self
failed=0
for t in transport/transport_test worker/cluster_integration_test worker/codec_cluster_test \
         worker/node_cluster_test worker/missing_rank_cluster_test \
         worker/basis_activation_cluster_test; do
  name=${t##*/}
  start=$SECONDS
  "$BUILD/tests/$t" --gtest_filter="$FILTER" >"/out/$name.log" 2>&1
  rc=$?
  echo "$name: exit $rc in $((SECONDS - start)) s: $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "/out/$name.log" | tr -s ' ' | paste -sd';')"
  ((rc == 0)) || failed=$((failed + 1))
done
rdma statistic show link rxe0/1
exit "$failed"
