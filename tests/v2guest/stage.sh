#!/usr/bin/env bash
# The pure cgroup v2 stage of scripts/test.sh. Most users run the daemon on a pure cgroup v2
# host with systemd; CI's machine is cgroup v1 hybrid without systemd. So this boots a
# throwaway Debian 12 guest under QEMU (systemd 252 as PID 1, cgroup v2 only, Debian's 6.12
# kernel: every layer the product uses, so no test skips for an old kernel) and runs a build's
# unit and integration tests there (ctest -LE 'packaging|lint'), in each placement users give
# the daemon, one after the other in one boot:
#   service    a systemd service without delegation (the daemon's sessions go to
#              /sys/fs/cgroup/<parent>, as for a daemon started from a CI runner's shell)
#   delegated  a service with the cgroup settings of systemd/pando-helperd.service (its
#              Delegate=, Environment=, OOMPolicy=, TasksMax= and LimitNOFILE= lines): the daemon
#              moves into <unit>/daemon and puts sessions in <unit>/sessions
#   plain      a cgroup below the root that is no unit (a container, a bare root shell)
# The whole suite (unit and integration) runs in the delegated placement, the shipped one; the
# service and plain placements run the tests whose outcome depends on the placement (cgroup
# detection and setup, limits, what a session's cgroup does when it ends or is killed, leftovers
# of killed daemons, the selftest's cgroup checks: placement_tests in in_guest.sh). The whole
# suite takes about 800 s a placement under emulation on CI's 2-vCPU VM, and three would not
# fit in CI's 90 minutes (README, "Tests"). One guest with two CPUs, the placements one after the
# other: three guests at once, one CPU each, ran each test 2.3 times slower, missed the tests'
# 2 s answer deadline when fifty sessions started at once, and took longer for the same tests.
# Not the shipped unit's hardening (system call filter, capability bounding set): the tests
# create users and FUSE mounts that it denies; the packaging tests (tests/packaging/
# nspawn_test.sh) run the daemon under the whole unit.
#
#   tests/v2guest/stage.sh BUILD_DIR OUT_DIR
# BUILD_DIR: a build of this checkout, below it (scripts/test.sh: build/test). OUT_DIR gets
# `plan` first (the placements, one a line), then for each placement <placement>.log (ctest's
# output there) and <placement>.leftovers (what the tests left behind in the guest: users,
# cgroups, processes, mounts, temporary files; empty when nothing). scripts/test.sh counts each
# log like its own ctest runs and each leftovers file as one check; a placement whose files are
# missing or whose log has no ctest summary counts as failed (the guest did not boot, hung, or
# crashed). Exit status: 0 when every placement passed and left nothing, 1 otherwise.
#
# The guest's disk is built on first use (tests/v2guest/build_image.sh: debootstrap and apt from
# the Debian mirror, a few minutes) and cached in /var/cache/pando-helper-tests/v2guest/<key>
# (PANDO_V2GUEST_CACHE: another parent), <key> a hash of build_image.sh and the packages the
# build needs there (the owners of the shared libraries it links). Each run boots a
# copy-on-write view of that disk plus a second disk holding this checkout and BUILD_DIR (no
# objects, no .git) at the same paths as here, as ctest and the tests expect; results come back
# through a 9p share. Nothing of a run stays on this host but OUT_DIR.
# PANDO_V2GUEST_ACCEL: tcg (default; CI's VM has kvm-pvm, which runs no ordinary KVM guest) or
# kvm. A guest that hangs is killed once it has printed nothing for PANDO_V2GUEST_SILENCE
# seconds (default 900), and any after PANDO_V2GUEST_TIMEOUT seconds (default 7200): a slow
# host (another build beside it) stretches the run without failing it.
# PANDO_V2GUEST_MEM: guest memory (default 4G). PANDO_V2GUEST_TESTS: a ctest -R regex, to run
# only some tests (by hand; scripts/test.sh runs all). Needs root, qemu-system-x86, debootstrap and
# e2fsprogs (scripts/install-deps.sh).
set -euo pipefail

build=${1:?usage: stage.sh BUILD_DIR OUT_DIR}
out=${2:?usage: stage.sh BUILD_DIR OUT_DIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd -P)
build=$(cd "$build" && pwd -P)
cache=${PANDO_V2GUEST_CACHE:-/var/cache/pando-helper-tests/v2guest}
placements=(service delegated plain)

fail() {
  echo "v2 guest: $*" >&2
  exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root"
case "$build/" in
  "$src"/*) ;;
  *) fail "$build is not below the checkout $src: the guest sees only the checkout" ;;
esac
for tool in qemu-system-x86_64 debootstrap mkfs.ext4; do
  command -v "$tool" >/dev/null || fail "$tool is missing (scripts/install-deps.sh installs it)"
done
mkdir -p "$out"
printf '%s\n' "${placements[@]}" >"$out/plan"

run=$(mktemp -d /var/tmp/pando-v2guest.XXXXXX)
qemu_pid=
cleanup() {
  [ -z "$qemu_pid" ] || kill "$qemu_pid" 2>/dev/null || true
  rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The Debian packages that own the shared libraries the build's executables link. By their
# last two path components: /usr merged or not, and not the 32-bit library of the same name.
library_packages() {
  find "$build" -type f -perm -u+x ! -path '*/CMakeFiles/*' -exec ldd {} + 2>/dev/null |
    awk '$2 == "=>" && $3 ~ /^\// { n = split($3, p, "/"); print p[n - 1] "/" p[n] }' | sort -u |
    while read -r library; do dpkg -S "*/$library" 2>/dev/null; done | cut -d: -f1 | sort -u
}

# The cached disk for these packages, built when missing. Built beside the cache and renamed
# into place when complete, so that an interrupted or concurrent run never leaves half a disk.
image_dir() {
  local packages key dir building
  # What the tests run beside the build: ctest, useradd, ps, ip, git, python3, and cc (a role
  # compiles a program in ConfinementTest).
  packages="cmake passwd util-linux procps iproute2 git python3 gcc libc6-dev"
  packages+=" $(library_packages | tr '\n' ' ')"
  key=$( (cat "$here/build_image.sh" && echo "$packages") | sha256sum | cut -c1-16)
  dir=$cache/$key
  if [ ! -f "$dir/disk.img" ]; then
    mkdir -p "$cache"
    building=$(mktemp -d "$cache/.build-XXXXXX")
    # shellcheck disable=SC2086 # one word per package
    "$here/build_image.sh" "$building" $packages >&2 || {
      rm -rf "$building"
      return 1
    }
    mv -T "$building" "$dir" 2>/dev/null || rm -rf "$building"
    # Disks of other keys (an older build_image.sh, other packages) and builds that were cut
    # short, once a day old: another checkout on this host may still boot a recent one.
    find "$cache" -mindepth 1 -maxdepth 1 -type d ! -name "$key" -mtime +1 -exec rm -rf {} +
  fi
  touch "$dir"  # in use: younger than a day
  echo "$dir"
}

# This checkout (no build trees, no git metadata) and BUILD_DIR (no objects, no packages, no
# ctest history) in an ext4 image, mounted in the guest at the same path.
project_disk() {
  local tree=$run/tree size_mb
  mkdir -p "$tree"
  tar -C "$src" --exclude=./build --exclude=./.git -cf - . | tar -C "$tree" -xf -
  tar -C "$src" --exclude='*.o' --exclude='*.a' --exclude='packaging-out*' --exclude='Testing' \
    -cf - "${build#"$src"/}" | tar -C "$tree" -xf -
  size_mb=$(($(du -sm "$tree" | cut -f1) * 3 / 2 + 512))
  mkfs.ext4 -q -F -L pando-project -E root_owner=0:0 -d "$tree" "$run/project.img" "${size_mb}M" \
    >/dev/null
  rm -rf "$tree"
}

started=$(date +%s)
image=$(image_dir) || fail "could not build the guest's disk"
echo "v2 guest: disk $image ($(head -n 1 "$image/README"))"
project_disk || fail "could not make the project's disk"
mkdir "$run/share"
cp "$here/in_guest.sh" "$run/share/"
cp "$out/plan" "$run/share/plan"
echo "$src" >"$run/share/src"
echo "$build" >"$run/share/build"
echo "${PANDO_V2GUEST_TESTS:-}" >"$run/share/tests-regex"
: >"$run/live.log"

accel=${PANDO_V2GUEST_ACCEL:-tcg}
cpu=max
[ "$accel" = kvm ] && cpu=host
cpus=$(nproc)
[ "$cpus" -le 4 ] || cpus=4
echo "v2 guest: booting ($accel, $cpus CPUs, ${PANDO_V2GUEST_MEM:-4G}); prepared in $(($(date +%s) - started)) s"
booted=$(date +%s)
# mitigations=off: no layer under test depends on the CPU's speculation mitigations, and without
# them the guest's system calls are cheaper under emulation (7% off the Confinement tests' time
# in three one-CPU guests).
timeout --kill-after=10 "${PANDO_V2GUEST_TIMEOUT:-7200}" qemu-system-x86_64 \
  -accel "$accel" -cpu "$cpu" -smp "$cpus" -m "${PANDO_V2GUEST_MEM:-4G}" \
  -display none -monitor none -no-reboot -nic none \
  -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
  -append "root=/dev/vda rw console=ttyS0,115200 systemd.unified_cgroup_hierarchy=1 panic=-1 loglevel=4 mitigations=off" \
  -drive "file=$image/disk.img,if=virtio,format=raw,snapshot=on,cache=unsafe" \
  -drive "file=$run/project.img,if=virtio,format=raw,cache=unsafe" \
  -virtfs "local,path=$run/share,mount_tag=pando,security_model=none,id=pando" \
  -serial "file:$run/console.log" -chardev "file,id=live,path=$run/live.log" -serial chardev:live \
  >"$run/qemu.log" 2>&1 &
qemu_pid=$!
tail -n +1 -f --pid="$qemu_pid" "$run/live.log" &
tail_pid=$!
# A guest silent for PANDO_V2GUEST_SILENCE seconds hangs: ctest prints as each test ends, and
# each test has a 600 s TIMEOUT; booting takes a minute or two.
silence=${PANDO_V2GUEST_SILENCE:-900}
running() { # a zombie is not
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ]
}
while running "$qemu_pid"; do
  sleep 5
  if [ $(($(date +%s) - $(stat -c %Y "$run/live.log"))) -ge "$silence" ]; then
    echo "v2 guest: silent for $silence s (PANDO_V2GUEST_SILENCE): killing it" >&2
    kill "$qemu_pid"
    break
  fi
done
qemu_status=0
wait "$qemu_pid" || qemu_status=$?
qemu_pid=
wait "$tail_pid" || true
echo "v2 guest: ran $(($(date +%s) - booted)) s (QEMU exit status $qemu_status); stage $(($(date +%s) - started)) s"
[ "$qemu_status" != 124 ] ||
  echo "v2 guest: killed after PANDO_V2GUEST_TIMEOUT=${PANDO_V2GUEST_TIMEOUT:-7200} s" >&2

status=0
for placement in "${placements[@]}"; do
  for file in "$placement.log" "$placement.leftovers"; do
    if [ -f "$run/share/$file" ]; then
      cp "$run/share/$file" "$out/$file"
    else
      echo "v2 guest: $placement: no $file" >&2
      status=1
    fi
  done
  grep -qE '^100% tests passed' "$out/$placement.log" 2>/dev/null || status=1
  [ ! -s "$out/$placement.leftovers" ] || status=1
done
if [ "$status" -ne 0 ] && [ ! -f "$run/share/guest-info" ]; then
  echo "v2 guest: the guest never ran in_guest.sh; the end of its console:" >&2
  tail -n 40 "$run/console.log" "$run/qemu.log" >&2 || true
fi
exit "$status"
