#!/bin/bash
# Runs inside the guest of tests/v2guest/stage.sh, which copies it into the 9p share:
#   in_guest.sh SHARE                   (the guest's boot hook) mounts the project's disk at the
#                                       checkout's path, writes SHARE/guest-info, then runs each
#                                       placement of SHARE/plan in turn into SHARE/<placement>.log
#   in_guest.sh job SHARE PLACEMENT     what runs in a placement: ctest, then the leftovers check
#                                       into SHARE/<placement>.leftovers
# The placements are described in stage.sh.
set -uo pipefail

# Every unit and integration test runs in every placement but one: the thousand sessions run only
# in the delegated one, the shipped layout. What the placement changes for them is only their
# cgroups' parent, which the other tests of the service and plain placements cover, and a run
# takes 130 to 160 s under emulation, a share of CI's 90 minutes the stage cannot spare.
delegated_only='ThousandSessions'

# Tests run with the same environment in every placement.
job() {
  local share=$1 placement=$2 build regex skip= before reasons
  build=$(cat "$share/build")
  regex=$(cat "$share/tests-regex")
  [ "$placement" = delegated ] || skip=$delegated_only
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
  local build=$1 dir uid
  {
    getent passwd | cut -d: -f1 | grep '^pandotest-' | sed 's/^/user /'
    find /sys/fs/cgroup -mindepth 1 -type d \( -name 'pandotest-*' -o -path '*/sessions/*' \) \
      -prune -printf 'cgroup %p\n'
    for dir in /proc/[0-9]*; do
      uid=$(awk '/^Uid:/ { print $2 }' "$dir/status" 2>/dev/null)
      [ -n "$uid" ] || continue
      if ! getent passwd "$uid" >/dev/null || [[ "$(readlink "$dir/exe")" == "$build"/* ]]; then
        echo "process ${dir#/proc/} uid $uid: $(tr '\0' ' ' <"$dir/cmdline" 2>/dev/null)"
      fi
    done
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
  mapfile -t placements <"$share/plan"
  for placement in "${placements[@]}"; do
    started=$(date +%s)
    echo "== v2 guest, $placement"
    "run_in_$placement" "$share" </dev/null 2>&1 | tee "$share/$placement.log"
    echo "== v2 guest, $placement: $(($(date +%s) - started)) s"
  done
}

if [ "${1:-}" = job ]; then
  job "$2" "$3"
else
  main "$1"
fi
