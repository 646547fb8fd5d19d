#!/usr/bin/env bash
# The README's first command, timed on a fresh Debian 12 (as root): a debootstrap minbase
# chroot (no compiler, no Python: less than a cloud image has), a fresh clone of this
# repository's HEAD in it, then `bash scripts/setup.sh && build/tide` with ccache off. Prints
# one JSON line: the whole command's wall time, setup.sh's two stages (apt-get; configure and
# build), the training line, and the load average before and after (other work on the machine
# slows every stage; the training most).
#
#   bench/first_command.sh [CHROOT_DIR]     (default /tmp/tide-first-command; made fresh, removed
#                                            unless TIDE_KEEP_CHROOT=1, to look inside after)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(realpath -m "${1:-/tmp/tide-first-command}")
[ "$(id -u)" = 0 ] || { echo "first_command.sh: run as root (debootstrap, chroot)" >&2; exit 2; }
bash scripts/install_missing.sh debootstrap git
umount_all() { for m in dev sys proc; do umount -R "$root/$m" 2>/dev/null || true; done; }
trap umount_all EXIT
umount_all
rm -rf "$root"
debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null
printf 'deb http://deb.debian.org/debian %s main\n' bookworm bookworm-updates >"$root/etc/apt/sources.list"
echo 'deb http://deb.debian.org/debian-security bookworm-security main' >>"$root/etc/apt/sources.list"
cp /etc/resolv.conf "$root/etc/resolv.conf"
mount -t proc proc "$root/proc" && mount --rbind /sys "$root/sys" && mount --rbind /dev "$root/dev"
git clone -q "$PWD" "$root/root/tide"
load0=$(cut -d' ' -f1 /proc/loadavg)
start=$(date +%s.%N)
chroot "$root" env CCACHE_DISABLE=1 bash -c 'cd /root/tide && bash scripts/setup.sh && build/tide' \
  >"$root/root/first_command.log" 2>&1
end=$(date +%s.%N)
log="$root/root/first_command.log"
stages=$(grep -o 'packages [0-9]* s, configure and build [0-9]* s' "$log")
trained=$(grep -o 'trained [0-9]* steps in [0-9ms]*' "$log" | tail -1)
val=$(grep -o 'val loss [0-9.]*' "$log" | tail -1 | cut -d' ' -f3)
printf '{"bench":"first_command","wall_s":%.1f,"packages_s":%s,"build_s":%s,"trained":"%s","final_val_loss":%s,"loadavg_start":%s,"loadavg_end":%s,"nproc":%s}\n' \
  "$(awk "BEGIN{print $end - $start}")" "$(echo "$stages" | awk '{print $2}')" \
  "$(echo "$stages" | awk '{print $7}')" "$trained" "${val:-null}" "$load0" \
  "$(cut -d' ' -f1 /proc/loadavg)" "$(nproc)"
[ "${TIDE_KEEP_CHROOT:-0}" = 1 ] && { echo "chroot kept: $root" >&2; exit 0; }
umount_all
rm -rf "$root"
