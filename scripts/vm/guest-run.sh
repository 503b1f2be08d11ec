#!/bin/bash
# The guest's second stage (scripts/vm/init hands over to it in the real
# root): runs the command scripts/vm.sh put in /out/.gift-vm/cmd in the
# repository folder, its output both on the console and in /out/output.log,
# writes its exit status to /out/rc and powers the guest off.
#
#   gift.init=shell:    this script is PID 1; it mounts the API file systems
#                       itself and powers off with the kernel's sysrq.
#   gift.init=systemd:  gift-vm-run.service runs it (--under-systemd) once
#                       systemd reached basic.target; the unit's
#                       SuccessAction/FailureAction power the guest off.
set -u
# The repository this script lives in (both ways of starting it run it from
# there: the first stage and the unit name its path).
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
guest_mount() { # TYPE OPTIONS DIR, quietly (util-linux hints at the fstab)
  mkdir -p "$3"
  mount -t "$1" -o "$2" "$1" "$3" 2>/dev/null || echo "gift-vm: cannot mount $1 on $3" >&2
}
if [[ ${1:-} != --under-systemd ]]; then
  guest_mount proc defaults /proc
  guest_mount sysfs defaults /sys
  guest_mount devpts defaults /dev/pts
  guest_mount tmpfs mode=1777 /dev/shm
  guest_mount tmpfs mode=1777 /tmp
  guest_mount tmpfs mode=0755 /run
  guest_mount cgroup2 defaults /sys/fs/cgroup
  ln -sf /proc/self/fd /dev/fd
  mkdir -p /run/netns /run/lock
  hostname gift-vm
  ip link set lo up
  export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  export HOME=/root
fi
cd "$REPO" || echo "gift-vm: no repository at '$REPO'" >&2
# The command's stdout and stderr go to the console (the host's view of the
# run) and to the exchange folder (the record).
bash /out/.gift-vm/cmd > >(tee /out/output.log) 2>&1
rc=$?
wait # tee's last lines
echo "$rc" >/out/rc
sync
if [[ ${1:-} == --under-systemd ]]; then
  exit "$rc"
fi
echo o >/proc/sysrq-trigger
sleep 60
