#!/usr/bin/env bash
# Builds the disk of the pure cgroup v2 guest that tests/v2guest/stage.sh boots:
#   build_image.sh DIR PACKAGE...
# DIR (new or empty) gets disk.img (ext4, sparse), vmlinuz and initrd.img: Debian 12 bookworm
# from the mirror (debootstrap, then apt) with systemd as PID 1, Debian's 6.12 kernel
# (linux-image-6.12-amd64, from bookworm-security: Landlock ABI 6, fchmodat2, cgroup.kill) and
# PACKAGE... (what the tests run: the libraries the build links, ctest, useradd, git, python3).
# Once booted, the guest mounts the host's 9p share "pando" and runs in_guest.sh from it, then
# powers off whatever happened; a guest without the share powers off at once.
# stage.sh names DIR after a hash of this file and PACKAGE..., so a change to either builds a
# new disk. PANDO_DEBIAN_MIRROR and PANDO_DEBIAN_SECURITY_MIRROR replace the mirrors.
set -euo pipefail

dir=${1:?usage: build_image.sh DIR PACKAGE...}
shift
mirror=${PANDO_DEBIAN_MIRROR:-http://deb.debian.org/debian}
security_mirror=${PANDO_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}
root=$dir/root
log=$dir/build.log

fail() {
  echo "build_image.sh: $*" >&2
  [ -f "$log" ] && tail -n 30 "$log" >&2
  exit 1
}

# In a mount namespace of its own: whatever debootstrap or a package script mounts in the root
# goes with the namespace, even when it is killed half way.
private() { unshare --mount --propagation private "$@"; }
in_root() {
  private sh -c 'mount -t proc proc "$1/proc" && mount --rbind /dev "$1/dev" && exec chroot "$@"' \
    sh "$root" "$@"
}

mkdir -p "$dir"
echo "v2 guest: debootstrap bookworm from $mirror (log: $log)"
# dbus: systemd-run talks to PID 1 through it.
private debootstrap --variant=minbase --include=systemd-sysv,dbus,udev,kmod,e2fsprogs \
  bookworm "$root" "$mirror" >"$log" 2>&1 || fail "debootstrap failed"

cat >"$root/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb $security_mirror bookworm-security main
EOF
# No package's service starts inside the chroot.
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
# An initramfs with only what finds the root disk: made in seconds, not minutes, and twice
# (the kernel's postinst, then initramfs-tools' trigger).
mkdir -p "$root/etc/initramfs-tools/conf.d" "$root/usr/share/initramfs-tools/modules.d"
echo MODULES=list >"$root/etc/initramfs-tools/conf.d/pando-v2guest"
printf '%s\n' virtio_pci virtio_blk ext4 >"$root/usr/share/initramfs-tools/modules.d/pando-v2guest"
echo "v2 guest: apt-get install linux-image-6.12-amd64 $*"
in_root env DEBIAN_FRONTEND=noninteractive sh -c \
  'apt-get update -qq && apt-get install -y -qq --no-install-recommends "$@" && apt-get clean' \
  sh linux-image-6.12-amd64 initramfs-tools "$@" >>"$log" 2>&1 || fail "apt-get install failed"
rm "$root/usr/sbin/policy-rc.d"

echo pando-v2guest >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 pando-v2guest\n' >"$root/etc/hosts"
echo '/dev/vda / ext4 rw,errors=remount-ro 0 1' >"$root/etc/fstab"
# Empty: systemd makes a new one at every boot.
: >"$root/etc/machine-id"
# Under emulation every unit costs seconds: no logins, no timers, no clock sync.
for unit in getty@tty1.service serial-getty@ttyS0.service serial-getty@ttyS1.service \
  apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
  e2scrub_reap.service fstrim.timer logrotate.timer man-db.timer systemd-timesyncd.service; do
  ln -sfn /dev/null "$root/etc/systemd/system/$unit"
done

cat >"$root/usr/local/sbin/pando-v2guest-boot" <<'EOF'
#!/bin/sh
# Runs the host's in_guest.sh from the 9p share, then powers off whatever happened: the host
# reads the results from the share once QEMU has exited.
share=/run/pando-v2guest
mkdir -p "$share"
if modprobe 9pnet_virtio && modprobe 9p &&
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 pando "$share"; then
  bash "$share/in_guest.sh" "$share" >/dev/ttyS1 2>&1
else
  echo "pando-v2guest: no 9p share from the host" >/dev/ttyS0
fi
sync
systemctl --force --force poweroff
EOF
chmod 0755 "$root/usr/local/sbin/pando-v2guest-boot"
cat >"$root/etc/systemd/system/pando-v2guest.service" <<'EOF'
[Unit]
Description=pando-helper tests from the host, then power off
After=multi-user.target

[Service]
Type=exec
ExecStart=/usr/local/sbin/pando-v2guest-boot

[Install]
WantedBy=multi-user.target
EOF
ln -sfn /etc/systemd/system/pando-v2guest.service \
  "$root/etc/systemd/system/multi-user.target.wants/pando-v2guest.service"

kernel=$(find "$root/boot" -name 'vmlinuz-6.12.*' | sort -V | tail -n 1)
[ -n "$kernel" ] || fail "no 6.12 kernel in $root/boot"
version=${kernel##*/vmlinuz-}
[ -f "$root/boot/initrd.img-$version" ] || in_root update-initramfs -c -k "$version" >>"$log" 2>&1 ||
  fail "update-initramfs failed"
cp "$kernel" "$dir/vmlinuz"
cp "$root/boot/initrd.img-$version" "$dir/initrd.img"
# 6 GiB, sparse: room for what the tests write in the guest's /tmp.
mkfs.ext4 -q -F -L pando-v2guest -d "$root" "$dir/disk.img" 6G >>"$log" 2>&1 ||
  fail "mkfs.ext4 -d failed"
printf 'Debian 12 bookworm, kernel %s, from %s on %s\npackages: %s\n' "$version" "$mirror" \
  "$(date -u +%FT%TZ)" "$*" >"$dir/README"
rm -rf "$root"
echo "v2 guest: disk ready in $dir (kernel $version)"
