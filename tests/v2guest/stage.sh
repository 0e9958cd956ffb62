#!/usr/bin/env bash
# The pure cgroup v2 stage of scripts/test.sh. Most users run the daemon on a pure cgroup v2
# host with systemd; CI's machine is cgroup v1 hybrid without systemd. So this boots throwaway
# Debian 12 guests under QEMU (systemd 252 as PID 1, cgroup v2 only, Debian's 6.12 kernel:
# every layer the product uses, so no test skips for an old kernel) and runs a build's whole
# unit and integration suite there (ctest -LE 'packaging|lint') in each placement users give the
# daemon, one guest per placement, the three at once:
#   service    a systemd service without delegation (the daemon's sessions go to
#              /sys/fs/cgroup/<parent>, as for a daemon started from a CI runner's shell)
#   delegated  a service with the cgroup settings of systemd/pando-helperd.service (its
#              Delegate=, Environment=, OOMPolicy=, TasksMax= and LimitNOFILE= lines): the daemon
#              moves into <unit>/daemon and puts sessions in <unit>/sessions
#   plain      a cgroup below the root that is no unit (a container, a bare root shell)
# A guest of its own per placement keeps each placement's users, sessions and leftovers apart
# from the others', and uses both of CI's CPUs: one guest running ctest's tests one after the
# other keeps about one host CPU busy under emulation, and one CPU per guest beats two
# (PANDO_V2GUEST_CPUS; measured in the README). Not the shipped unit's hardening (system call
# filter, capability bounding set): the tests create users and FUSE mounts that it denies; the
# packaging tests (tests/packaging/nspawn_test.sh) run the daemon under the whole unit.
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
# build needs there (the owners of the shared libraries it links). Each guest boots a
# copy-on-write view of that disk and of a second one holding this checkout and BUILD_DIR (no
# objects, no .git) at the same paths as here, as ctest and the tests expect. Its results come
# back through a 9p share of its own, its lines to stdout prefixed with its placement. Nothing of
# a run stays on this host but OUT_DIR.
# PANDO_V2GUEST_ACCEL: tcg (default; CI's VM has kvm-pvm, which runs no ordinary KVM guest) or
# kvm. A guest that hangs is killed once it has printed nothing for PANDO_V2GUEST_SILENCE
# seconds (default 900), and any after PANDO_V2GUEST_TIMEOUT seconds (default 7200): a slow
# host (another build beside it) stretches the run without failing it.
# PANDO_V2GUEST_MEM: each guest's memory (default 3G); PANDO_V2GUEST_CPUS: its CPUs (default
# 1). PANDO_V2GUEST_TESTS: a ctest -R regex, to run only some tests (by hand; scripts/test.sh
# runs all). Needs root, qemu-system-x86, debootstrap and e2fsprogs (scripts/install-deps.sh).
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
guest_pids=()
cleanup() {
  local pid_file
  for pid_file in "$run"/*/qemu.pid; do
    [ ! -f "$pid_file" ] || kill "$(cat "$pid_file")" 2>/dev/null || true
  done
  # The guests' subshells end once their QEMU has, and only then may their files go.
  [ "${#guest_pids[@]}" -eq 0 ] || wait "${guest_pids[@]}" 2>/dev/null || true
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

accel=${PANDO_V2GUEST_ACCEL:-tcg}
cpu=max
[ "$accel" = kvm ] && cpu=host
cpus=${PANDO_V2GUEST_CPUS:-1}
memory=${PANDO_V2GUEST_MEM:-3G}
silence=${PANDO_V2GUEST_SILENCE:-900}

running() { # a zombie is not
  local state
  state=$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)
  [ -n "$state" ] && [ "$state" != Z ]
}

# One guest per placement, all at once: a guest is a kernel of its own, so no placement's tests
# see another's users, sessions or leftovers, and under emulation one guest running ctest's tests
# one after the other keeps about one host CPU busy. Its lines go to stdout prefixed with the
# placement; its results to $run/<placement>/share.
guest() {  # <placement>
  local placement=$1 dir=$run/$1 qemu_pid tail_pid qemu_status=0 booted
  mkdir -p "$dir/share"
  cp "$here/in_guest.sh" "$dir/share/"
  echo "$placement" >"$dir/share/plan"
  echo "$src" >"$dir/share/src"
  echo "$build" >"$dir/share/build"
  echo "${PANDO_V2GUEST_TESTS:-}" >"$dir/share/tests-regex"
  : >"$dir/live.log"
  booted=$(date +%s)
  timeout --kill-after=10 "${PANDO_V2GUEST_TIMEOUT:-7200}" qemu-system-x86_64 \
    -accel "$accel" -cpu "$cpu" -smp "$cpus" -m "$memory" \
    -display none -monitor none -no-reboot -nic none \
    -kernel "$image/vmlinuz" -initrd "$image/initrd.img" \
    -append "root=/dev/vda rw console=ttyS0,115200 systemd.unified_cgroup_hierarchy=1 panic=-1 loglevel=4" \
    -drive "file=$image/disk.img,if=virtio,format=raw,snapshot=on,cache=unsafe" \
    -drive "file=$run/project.img,if=virtio,format=raw,snapshot=on,cache=unsafe" \
    -virtfs "local,path=$dir/share,mount_tag=pando,security_model=none,id=pando" \
    -serial "file:$dir/console.log" -chardev "file,id=live,path=$dir/live.log" -serial chardev:live \
    >"$dir/qemu.log" 2>&1 &
  qemu_pid=$!
  echo "$qemu_pid" >"$dir/qemu.pid"
  tail -n +1 -f --pid="$qemu_pid" "$dir/live.log" | sed -u "s/^/[$placement] /" &
  tail_pid=$!
  # A guest silent for PANDO_V2GUEST_SILENCE seconds hangs: ctest prints as each test ends, and
  # each test has a 600 s TIMEOUT; booting takes a minute or two.
  while running "$qemu_pid"; do
    sleep 5
    if [ $(($(date +%s) - $(stat -c %Y "$dir/live.log"))) -ge "$silence" ]; then
      echo "v2 guest, $placement: silent for $silence s (PANDO_V2GUEST_SILENCE): killing it" >&2
      kill "$qemu_pid"
      break
    fi
  done
  wait "$qemu_pid" || qemu_status=$?
  rm -f "$dir/qemu.pid"
  wait "$tail_pid" || true
  echo "v2 guest, $placement: ran $(($(date +%s) - booted)) s (QEMU exit status $qemu_status)"
  [ "$qemu_status" != 124 ] ||
    echo "v2 guest, $placement: killed after PANDO_V2GUEST_TIMEOUT=${PANDO_V2GUEST_TIMEOUT:-7200} s" >&2
}

echo "v2 guest: booting one guest per placement (${placements[*]}; $accel, $cpus CPU and" \
  "$memory each); prepared in $(($(date +%s) - started)) s"
for placement in "${placements[@]}"; do
  guest "$placement" &
  guest_pids+=("$!")
done
wait "${guest_pids[@]}" || true
guest_pids=()
echo "v2 guest: stage $(($(date +%s) - started)) s"

status=0
for placement in "${placements[@]}"; do
  share=$run/$placement/share
  for file in "$placement.log" "$placement.leftovers"; do
    if [ -f "$share/$file" ]; then
      cp "$share/$file" "$out/$file"
    else
      echo "v2 guest: $placement: no $file" >&2
      status=1
    fi
  done
  grep -qE '^100% tests passed' "$out/$placement.log" 2>/dev/null || status=1
  [ ! -s "$out/$placement.leftovers" ] || status=1
  if [ ! -f "$share/guest-info" ]; then
    echo "v2 guest: the $placement guest never ran in_guest.sh; the end of its console:" >&2
    tail -n 40 "$run/$placement/console.log" "$run/$placement/qemu.log" >&2 || true
  fi
done
exit "$status"
