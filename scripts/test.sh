#!/usr/bin/env bash
# The whole test suite, from a fresh clone, as root (tests create users,
# namespaces and cgroups for real and remove them again):
#   1. dependencies (Debian 12 packages)
#   2. a RelWithDebInfo build and every test: unit, integration, packaging; then its unit and
#      integration tests again in a pure cgroup v2 guest under QEMU (tests/v2guest/stage.sh:
#      Debian 12, systemd, kernel 6.12), in a plain service, a delegated unit like the
#      shipped one and a plain cgroup
#   3. an ASan+UBSan build running the unit and integration tests
#   4. a gcov build (PANDO_COVERAGE) running the unit and integration tests, and
#      gcovr's line coverage of daemon/ (daemon and launcher)
#   5. the libFuzzer target on the protocol core (both directions) and request validator (60 s)
# Ends with the line "times: <stage> N s, ..., whole run N s", the line
# "coverage: daemon/ P% of lines (N of M)" and the line
# "tests: N passed, N failed, N skipped" (skipped: a kernel feature or cgroup
# layout this host or the guest lacks, or node 20+ or the npm registry for the MCP
# example when its install is not cached, as in the guest; each prints its reason,
# the guest's in a list after each of its runs).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

if [ "$(id -u)" -ne 0 ]; then
  echo "scripts/test.sh: run as root (the tests create users, namespaces and cgroups)" >&2
  exit 2
fi
./scripts/install-deps.sh || exit 1

# What a failure on another machine needs to be read: where the tests ran.
echo "== host: kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/ { print int($2 / 1048576) }' /proc/meminfo) GiB," \
  "/sys/fs/cgroup $(stat -fc %T /sys/fs/cgroup), /tmp $(stat -fc %T /tmp), own cgroup $(tr '\n' ' ' </proc/self/cgroup | cut -c1-200)"

fuzz_seconds=${PANDO_FUZZ_SECONDS:-60}
passed=0
failed=0
skipped=0
status=0

# Each stage's time goes into the "times:" line at the end, where a run that nears CI's limit
# shows which stage grew.
times=
stage_name=
stage_started=$SECONDS
stage() {  # <short name> <title>: ends the stage before, starts this one (none: ends the last)
  [ -z "$stage_name" ] || times+="$stage_name $((SECONDS - stage_started)) s, "
  stage_name=${1:-}
  stage_started=$SECONDS
  [ -z "${2:-}" ] || echo "== $2"
}

count_ctest_log() {  # <log of one ctest run> <where it ran>
  local log=$1 line
  line=$(grep -E "tests passed, [0-9]+ tests? failed out of [0-9]+" "$log" 2>/dev/null | tail -n 1)
  if [ -z "$line" ]; then
    echo "scripts/test.sh: ctest in $2 reported no result" >&2
    status=1
    return 1
  fi
  local failed_here total skipped_here
  failed_here=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\1/' <<<"$line")
  total=$(sed -E 's/.* ([0-9]+) tests? failed out of ([0-9]+).*/\2/' <<<"$line")
  # ctest counts a skipped test among those that "passed"; this count does not.
  skipped_here=$(grep -cE '^[[:space:]]+[0-9]+ - .*\(Skipped\)$' "$log")
  passed=$((passed + total - failed_here - skipped_here))
  failed=$((failed + failed_here))
  skipped=$((skipped + skipped_here))
  [ "$failed_here" -eq 0 ] || status=1
}

run_ctest() {  # <build dir> <ctest args...>
  local dir=$1
  shift
  local log
  log=$(mktemp)
  (cd "$dir" && ctest --output-on-failure "$@") 2>&1 | tee "$log"
  count_ctest_log "$log" "$dir"
  rm -f "$log"
}

# The pure cgroup v2 guest (tests/v2guest/stage.sh): each placement's ctest run counts like the
# others, and its leftovers check as one test. A placement the guest did not finish (it did not
# boot, hung or crashed) counts as one failed test.
v2_stage() {  # <build dir>
  local out placement
  out=$(mktemp -d)
  tests/v2guest/stage.sh "$1" "$out"
  if [ ! -s "$out/plan" ]; then
    echo "scripts/test.sh: the v2 guest stage did not start" >&2
    failed=$((failed + 1))
    status=1
    rm -rf "$out"
    return
  fi
  while read -r placement; do
    if ! count_ctest_log "$out/$placement.log" "the v2 guest ($placement)" ||
      [ ! -f "$out/$placement.leftovers" ]; then
      echo "scripts/test.sh: the v2 guest did not finish its $placement run" >&2
      failed=$((failed + 1))
      status=1
    elif [ -s "$out/$placement.leftovers" ]; then
      echo "scripts/test.sh: the tests left behind in the v2 guest ($placement):" >&2
      cat "$out/$placement.leftovers" >&2
      failed=$((failed + 1))
      status=1
    else
      passed=$((passed + 1))
    fi
  done <"$out/plan"
  rm -rf "$out"
}

build() {  # <dir> <cmake args...>
  local dir=$1
  shift
  # -Werror here (PANDO_WERROR is off for packagers): CI fails on a warning.
  cmake -S "$root" -B "$dir" -G Ninja -DPANDO_WERROR=ON "$@" >/dev/null && cmake --build "$dir" || {
    echo "scripts/test.sh: build in $dir failed" >&2
    failed=$((failed + 1))
    status=1
    return 1
  }
}

stage release "build and test (RelWithDebInfo): unit, integration, packaging"
if build build/test -DCMAKE_BUILD_TYPE=RelWithDebInfo; then
  run_ctest build/test
  stage v2-guest "pure cgroup v2 guest (QEMU): unit and integration tests in three placements"
  v2_stage build/test
fi

stage asan "ASan+UBSan: unit and integration tests"
if build build/asan -DCMAKE_BUILD_TYPE=Debug -DPANDO_SANITIZE=ON; then
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:quarantine_size_mb=16 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    run_ctest build/asan -LE packaging
fi

# gcovr's own count of daemon/'s lines, nothing adjusted; what it cannot see is
# in the README ("Tests").
coverage_line() {  # <build dir>: sets $coverage
  local summary report
  # A file of its own for the report: gcovr must never be pointed at /dev/null.
  report=$(mktemp)
  summary=$(gcovr --root "$root" --object-directory "$1" --filter "$root/daemon/" \
    --print-summary -o "$report" | grep -E '^lines: ')
  rm -f "$report"
  if [ -z "$summary" ]; then
    coverage="coverage: gcovr reported nothing for daemon/"
    status=1
    return
  fi
  coverage=$(sed -E \
    's/^lines: ([0-9.]+%) \(([0-9]+) out of ([0-9]+)\)$/coverage: daemon\/ \1 of lines (\2 of \3)/' \
    <<<"$summary")
}

stage coverage "coverage (gcov): unit and integration tests, line coverage of daemon/"
coverage="coverage: not measured (the coverage build failed)"
# A launcher attaches its new root on /tmp of its mount namespace, which hides
# a build tree under the host's /tmp from the counters it writes before
# pivot_root (daemon/coverage/flush_counters.cc): a checkout there gets its
# coverage build in /var/tmp, removed afterwards.
coverage_dir=build/coverage
case "$root/" in
  /tmp/*)
    coverage_dir=$(mktemp -d /var/tmp/pando-helper-coverage.XXXXXX)
    # Like a checkout: the roles and the tests' users run its binaries.
    chmod 0755 "$coverage_dir"
    ;;
esac
if build "$coverage_dir" -DCMAKE_BUILD_TYPE=Debug -DPANDO_COVERAGE=ON; then
  # This run's counts only (the build's test discovery runs the test binaries too).
  find "$coverage_dir" -name '*.gcda' -delete
  run_ctest "$coverage_dir" -LE packaging
  coverage_line "$coverage_dir"
  echo "$coverage"
fi
[ "$coverage_dir" = build/coverage ] || rm -rf "$coverage_dir"

stage fuzz "libFuzzer: protocol core and request validator, ${fuzz_seconds} s"
if build build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DCMAKE_CXX_COMPILER=clang++ -DPANDO_FUZZ=ON -DPANDO_TESTS=OFF; then
  corpus=$(mktemp -d)
  cp tests/fuzz/corpus/* "$corpus/"
  if ./build/fuzz/tests/fuzz/fuzz_frames -max_total_time="$fuzz_seconds" -max_len=20000 \
    -artifact_prefix="$corpus/" "$corpus" 2>&1 | tail -n 3; then
    passed=$((passed + 1))
  else
    echo "scripts/test.sh: the fuzzer found a crash (artifacts in $corpus)" >&2
    failed=$((failed + 1))
    status=1
  fi
  [ "$status" -ne 0 ] || rm -rf "$corpus"
fi

if [ "$status" -ne 0 ]; then
  # A daemon or launcher that crashed or was OOM-killed says so only here.
  echo "== the kernel's last words on crashes and OOM kills (dmesg):"
  dmesg 2>/dev/null | grep -E 'segfault|traps:|general protection|Out of memory|Killed process|invoked oom-killer' |
    tail -n 20
fi
stage
echo "times: ${times}whole run ${SECONDS} s"
echo "$coverage"
echo "tests: ${passed} passed, ${failed} failed, ${skipped} skipped"
exit "$status"
