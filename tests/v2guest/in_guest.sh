#!/bin/bash
# Runs inside the guest of tests/v2guest/stage.sh, which copies it into the 9p share:
#   in_guest.sh SHARE                   (the guest's boot hook) mounts the project's disk at the
#                                       checkout's path, writes SHARE/guest-info, then runs each
#                                       placement of SHARE/plan in turn into SHARE/<placement>.log
#   in_guest.sh job SHARE PLACEMENT     what runs in a placement: ctest, then the leftovers check
#                                       into SHARE/<placement>.leftovers
# The placements are described in stage.sh.
set -uo pipefail

# The whole suite runs in the placement the shipped unit gives the daemon (delegated); the other
# two run the tests whose outcome depends on where the daemon's cgroup is: cgroup detection and
# setup, limits, what a session's cgroup does when it ends or is killed (Foundation), the
# leftovers of killed daemons, the selftest's cgroup checks. The whole suite takes about 800 s a
# placement under emulation (README, "Tests"), and three would not fit in CI's 90 minutes.
placement_tests='Cgroup|Lifecycle|CallerLimits|Selftest|DaemonStartup|LeaveNothing|Foundation'
# Of those, the thousand sessions run only in the delegated placement: what the placement changes
# for them is only their cgroups' parent, and a run takes 130 to 160 s under emulation.
placement_skip='ThousandSessions'

# Tests run with the same environment in every placement.
job() {
  local share=$1 placement=$2 build regex skip= before reasons
  build=$(cat "$share/build")
  regex=$(cat "$share/tests-regex")
  if [ -z "$regex" ] && [ "$placement" != delegated ]; then
    regex=$placement_tests
    skip=$placement_skip
  fi
  export HOME=/root LANG=C.UTF-8
  echo "v2 guest, $placement: cgroup $(grep '^0::' /proc/self/cgroup)"
  before=$(state "$build")
  (cd "$build" && ctest --output-on-failure --no-tests=error -LE 'packaging|lint' ${regex:+-R "$regex"} ${skip:+-E "$skip"})
  # ctest shows no output of a skipped test; whether a skip is true on this host is in its reason.
  reasons=$(awk '/: Skipped$/ { where = $0; getline; print "  " where " " $0 }' \
    "$build/Testing/Temporary/LastTest.log")
  echo "v2 guest, $placement: the reasons of the skipped tests:"
  echo "${reasons:-  none}"
  comm -13 <(echo "$before") <(state "$build") >"$share/$placement.leftovers"
  if [ -s "$share/$placement.leftovers" ]; then
    echo "v2 guest, $placement: the tests left behind:"
    cat "$share/$placement.leftovers"
  else
    echo "v2 guest, $placement: the tests left nothing behind"
  fi
}

# What tests could leave behind, one sorted line each: the test users, the cgroups of the test
# daemons (their parents, and anything below a delegated unit's sessions/), processes of users
# that are gone or running from the build tree, mounts, and entries in the temporary
# directories (not systemd-private-*, the guest's own services' PrivateTmp=).
state() {
  local build=$1
  {
    getent passwd | cut -d: -f1 | grep '^pandotest-' | sed 's/^/user /'
    find /sys/fs/cgroup -mindepth 1 -type d \( -name 'pandotest-*' -o -path '*/sessions/*' \) \
      -prune -printf 'cgroup %p\n'
    # One process for all of them: a few programs started per process took 45 s under emulation.
    python3 - "$build" <<'PYTHON'
import os, pwd, sys
build = sys.argv[1] + "/"
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        with open(f"/proc/{pid}/status") as status:
            uid = int(next(l for l in status if l.startswith("Uid:")).split()[1])
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        try:
            exe = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            exe = ""
    except (OSError, StopIteration):
        continue  # gone meanwhile
    try:
        pwd.getpwuid(uid)
        known = True
    except KeyError:
        known = False
    if not known or exe.startswith(build):
        print(f"process {pid} uid {uid}: {command}")
PYTHON
    awk '{ print "mount " $5 }' /proc/self/mountinfo
    find /tmp /var/tmp /dev/shm -mindepth 1 -maxdepth 1 ! -name 'systemd-private-*' -printf 'file %p\n'
  } | sort
}

run_in_service() {
  systemd-run --quiet --wait --pipe --collect --unit=pando-tests-service \
    bash "$0" job "$1" service
}

# The shipped unit's lines that shape the daemon's cgroup and limits, as they are.
run_in_delegated() {
  local src properties=() line
  src=$(cat "$1/src")
  while read -r line; do properties+=(-p "$line"); done < <(
    grep -E '^(Delegate|Environment|OOMPolicy|TasksMax|LimitNOFILE)=' "$src/systemd/pando-helperd.service"
  )
  if [[ " ${properties[*]} " != *" Delegate="* ]]; then
    echo "v2 guest: no Delegate= in $src/systemd/pando-helperd.service"
    return 1
  fi
  echo "v2 guest, delegated: ${properties[*]}"
  systemd-run --quiet --wait --pipe --collect --unit=pando-tests-delegated "${properties[@]}" \
    bash "$0" job "$1" delegated
}

run_in_plain() {
  local cgroup=/sys/fs/cgroup/pando-tests-plain status
  mkdir "$cgroup" || return 1
  bash -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' sh "$cgroup" bash "$0" job "$1" plain
  status=$?
  rmdir "$cgroup"
  return "$status"
}

guest_info() {
  local landlock
  landlock=$(python3 -c 'import ctypes; print(ctypes.CDLL(None).syscall(444, None, 0, 1))')
  echo "kernel $(uname -r), $(systemctl --version | head -n 1), cgroup2 only: root controllers" \
    "'$(cat /sys/fs/cgroup/cgroup.controllers)', Landlock ABI $landlock"
}

main() {
  local share=$1 src placement placements started
  src=$(cat "$share/src")
  if ! mkdir -p "$src" || ! mount /dev/vdb "$src"; then
    echo "v2 guest: cannot mount the project's disk at $src"
    return 1
  fi
  if [ "$(stat -fc %T /sys/fs/cgroup)" != cgroup2fs ]; then
    echo "v2 guest: /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup), not cgroup v2 alone"
    return 1
  fi
  guest_info | tee "$share/guest-info"
  echo "v2 guest: booted in $(cut -d' ' -f1 /proc/uptime) s; $(systemd-analyze time 2>/dev/null | head -n 1)"
  mapfile -t placements <"$share/plan"
  for placement in "${placements[@]}"; do
    started=$(date +%s)
    echo "== v2 guest, $placement"
    "run_in_$placement" "$share" </dev/null 2>&1 | tee "$share/$placement.log"
    echo "== v2 guest, $placement: $(($(date +%s) - started)) s (booted $(cut -d' ' -f1 /proc/uptime) s ago)"
  done
}

if [ "${1:-}" = job ]; then
  job "$2" "$3"
else
  main "$1"
fi
