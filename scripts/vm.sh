#!/usr/bin/env bash
# vm.sh: runs a command in a virtual machine with Debian's own kernel, for
# what this machine's kernel lacks (netem, soft-RoCE, systemd as PID 1).
#
#   scripts/vm.sh prepare                      # packages, kernel, initramfs
#   scripts/vm.sh run [options] -- CMD [ARG...] # boot, run CMD, power off
#
# The guest: Debian 12's kernel (linux-image-amd64) and its modules, and as
# its root this machine's own root file system, shared read-only over 9p
# under a tmpfs overlay (writes stay in the guest's memory and vanish at
# power-off). So the guest runs the very binaries and libraries built here,
# at the same paths, with no image to build. qemu runs under software
# emulation (-accel tcg, -cpu max: AVX2 included) unless /dev/kvm exists.
# CMD runs as root in the repository folder, under bash; its output comes
# back on this terminal and in OUT/output.log, its exit status as vm.sh's.
# OUT (--out, default build/vm/out) is the guest's /out, writable: results
# go there. Nothing leaves the guest: it has no network device unless
# --link is given, and that one joins only other guests over loopback.
#
# Cached in GIFT_VM_CACHE (default ~/.cache/gift-vm), keyed by the kernel
# package's version: `prepare` downloads two packages (apt-get download
# linux-image-6.1.0-N-amd64, busybox-static; about 72 MB), extracts them and
# builds the initramfs (about 10 s once, nothing when cached). The packages
# qemu needs on this machine (qemu-system-x86, kmod, rdma-core, ...) come
# from scripts/install-deps.sh --vm. Exit codes: CMD's; 64 usage; 69 the
# guest did not report (it crashed, or --timeout passed: see
# OUT/console.log); 77 cannot run here.
set -euo pipefail

SELF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$SELF_DIR/.." && pwd)
CACHE=${GIFT_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gift-vm}

usage() {
  cat <<EOF
usage: $0 prepare
       $0 run [options] -- CMD [ARG...]

run:
  --init MODE        shell (default): CMD runs as soon as the root is
                     mounted (about 3 s of boot under emulation);
                     systemd: systemd boots as PID 1 and runs CMD from a unit
                     once basic.target is reached
  --cpus N           virtual CPUs (default: this machine's, at most 4)
  --mem MIB          guest memory (default 4096)
  --timeout S        power the guest off after S seconds (default 1800)
  --out DIR          the guest's /out (default $REPO/build/vm/out; emptied
                     first)
  --link listen:PORT | connect:PORT
                     one virtio NIC (eth0) joined to another guest's through
                     qemu's socket netdev on 127.0.0.1:PORT; the listening
                     guest starts first
  --mac MAC          that NIC's address (default 52:54:00:12:34:56)
  --append ARGS      more kernel parameters
EOF
}
usage_error() { echo "vm.sh: $*" >&2; usage >&2; exit 64; }
cannot_run() { echo "vm.sh: cannot run here: $*" >&2; exit 77; }

# The kernel modules the first stage loads, in order (their dependencies first).
INITRD_MODULES=(virtio_pci virtio_net 9pnet_virtio 9p overlay)

prepare() {
  command -v qemu-system-x86_64 >/dev/null && command -v modprobe >/dev/null \
    || "$REPO/scripts/install-deps.sh" --vm \
    || cannot_run "qemu-system-x86 and kmod are missing (scripts/install-deps.sh --vm)"
  local meta version
  meta=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/{print $2; exit}')
  [[ -n $meta ]] || cannot_run "apt knows no linux-image-amd64 (apt-get update?)"
  version=${meta#linux-image-}
  KDIR=$CACHE/$version
  if [[ -f $KDIR/ready ]]; then return; fi
  echo "vm.sh: preparing the guest's kernel $version in $KDIR" >&2
  rm -rf "$KDIR"
  mkdir -p "$KDIR/deb"
  (cd "$KDIR/deb" && apt-get download "$meta" busybox-static >/dev/null 2>&1) \
    || cannot_run "apt-get download $meta busybox-static failed"
  dpkg-deb -x "$KDIR"/deb/linux-image-*.deb "$KDIR/root"
  dpkg-deb -x "$KDIR"/deb/busybox-static_*.deb "$KDIR/busybox"
  depmod -b "$KDIR/root" "$version"
  local initrd=$KDIR/initrd-tree ko
  mkdir -p "$initrd"/{bin,modules,proc,sys,dev}
  cp "$KDIR/busybox/bin/busybox" "$initrd/bin/"
  cp "$SELF_DIR/vm/init" "$initrd/init"
  : >"$initrd/modules.order"
  for ko in $(for m in "${INITRD_MODULES[@]}"; do
                modprobe -d "$KDIR/root" -S "$version" --show-depends "$m"
              done | awk '$1 == "insmod" && !seen[$2]++ {print $2}'); do
    cp "$ko" "$initrd/modules/"
    basename "$ko" >>"$initrd/modules.order"
  done
  (cd "$initrd" && find . | "$KDIR/busybox/bin/busybox" cpio -o -H newc 2>/dev/null | gzip -1) \
    >"$KDIR/initrd.img"
  cp "$KDIR/root/boot/vmlinuz-$version" "$KDIR/vmlinuz"
  rm -rf "$KDIR/deb" "$initrd"
  touch "$KDIR/ready"
}

run() {
  local init=shell cpus mem=4096 timeout=1800 out=$REPO/build/vm/out link="" mac=52:54:00:12:34:56
  local append=""
  cpus=$(nproc); ((cpus <= 4)) || cpus=4
  while (($#)); do
    case $1 in
      --init) init=${2:?}; shift 2 ;;
      --cpus) cpus=${2:?}; shift 2 ;;
      --mem) mem=${2:?}; shift 2 ;;
      --timeout) timeout=${2:?}; shift 2 ;;
      --out) out=${2:?}; shift 2 ;;
      --link) link=${2:?}; shift 2 ;;
      --mac) mac=${2:?}; shift 2 ;;
      --append) append=${2:?}; shift 2 ;;
      --) shift; break ;;
      -h|--help) usage; exit 0 ;;
      *) usage_error "unknown option $1" ;;
    esac
  done
  (($#)) || usage_error "run: no command (after --)"
  [[ $init == shell || $init == systemd ]] || usage_error "--init: shell or systemd"
  [[ $cpus =~ ^[0-9]+$ && $mem =~ ^[0-9]+$ && $timeout =~ ^[0-9]+$ ]] \
    || usage_error "--cpus, --mem and --timeout take numbers"
  [[ -z $link || $link =~ ^(listen|connect):[0-9]+$ ]] || usage_error "--link: listen:PORT or connect:PORT"
  prepare

  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  case $out/ in "$REPO"/build/*|/tmp/*) ;; *) [[ -z $(ls -A "$out") ]] \
    || usage_error "--out $out is not empty and not under build/ or /tmp: refusing to empty it" ;;
  esac
  find "$out" -mindepth 1 -delete
  mkdir -p "$out/.gift-vm"
  printf '%q ' "$@" >"$out/.gift-vm/cmd"
  echo >>"$out/.gift-vm/cmd"
  sed "s|@REPO@|$REPO|" "$SELF_DIR/vm/gift-vm-run.service" >"$out/.gift-vm/gift-vm-run.service"
  cp "$SELF_DIR/vm/gift-vm.target" "$out/.gift-vm/"

  # systemd as PID 1 of a machine (not a container) reads its unit from the
  # kernel's command line.
  [[ $init == systemd ]] && append="systemd.unit=gift-vm.target $append"
  local accel=tcg cpu=max
  if [[ -w /dev/kvm ]]; then accel=kvm; cpu=host; fi
  local net=()
  if [[ -n $link ]]; then
    net=(-netdev "socket,id=n0,${link%%:*}=127.0.0.1:${link#*:}"
         -device "virtio-net-pci,netdev=n0,mac=$mac")
  fi
  local rc=0
  # The guest's console is this terminal's stdout, and a copy in console.log.
  timeout --foreground -k 10 "$timeout" qemu-system-x86_64 \
    -accel "$accel" -cpu "$cpu" -smp "$cpus" -m "$mem" \
    -kernel "$KDIR/vmlinuz" -initrd "$KDIR/initrd.img" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 gift.init=$init gift.repo=$REPO $append" \
    -nographic -no-reboot -serial mon:stdio -nodefaults \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
    -virtfs "local,path=$KDIR/root/lib/modules,mount_tag=modules,security_model=none,readonly=on" \
    -virtfs "local,path=$out,mount_tag=out,security_model=none" \
    "${net[@]}" </dev/null > >(tee "$out/console.log") 2>&1 || rc=$?
  wait 2>/dev/null || true # tee's last lines
  if [[ ! -f $out/rc ]]; then
    echo "vm.sh: the guest did not report an exit status (qemu: $rc; timeout $timeout s; see $out/console.log)" >&2
    exit 69
  fi
  exit "$(cat "$out/rc")"
}

case ${1:-} in
  prepare) prepare; echo "$KDIR" ;;
  run) shift; run "$@" ;;
  -h|--help|"") usage; [[ -n ${1:-} ]] ;;
  *) usage_error "unknown command $1" ;;
esac
