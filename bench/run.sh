#!/bin/bash
# Benchmark: direct execution vs. execution through pando-helperd (and bwrap).
# Usage (as root): bench/run.sh [--quick] [--sections LIST]
# See bench/README.md for what each number means. Exits non-zero only when
# something did not work (build, daemon start, a session failed, wrong byte
# count); slow numbers never fail it.
set -euo pipefail

quick=0
all_sections=launch,throughput,pingpong,concurrent,live,projectsize
sections=$all_sections
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --sections)
      sections=${2:-}
      shift
      for s in ${sections//,/ }; do
        [[ ",$all_sections," == *",$s,"* ]] || { echo "bench: unknown section $s (of $all_sections)" >&2; exit 64; }
      done ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) echo "bench: unknown argument $1" >&2; exit 64 ;;
  esac
  shift
done
has_section() { [[ ",$sections," == *",$1,"* ]]; }
if [[ $(id -u) -ne 0 ]]; then
  echo "bench: must run as root (it creates users and starts the daemon)" >&2
  exit 77
fi

bench_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src_dir=$(dirname "$bench_dir")
build_dir=${PANDO_BENCH_BUILD_DIR:-$src_dir/build-bench}
prefix=pandobench
core_user=$prefix-core
ws_user=$prefix-ws
caller=$prefix-caller
cgroup_parent=$prefix

# Entries of the projects the projectsize section launches in (bench/make_project.py).
project_sizes=0,100000,1000000
if [[ $quick -eq 1 ]]; then
  project_sizes=0,10000,100000
  sequential=$((20 + 5))
  counts=(--launches 20 --mib 128 --throughput-runs 3 --pings 1000 --concurrent 20 --concurrent-runs 1 --live 100)
  netns_launches=20
else
  sequential=$((200 + 5))
  counts=(--launches 200 --mib 1024 --throughput-runs 5 --pings 10000 --concurrent 100 --concurrent-runs 3 --live 1000)
  netns_launches=200
fi

tmp=""
daemon_pid=""
created_users=()
stop_daemon() {
  if [[ -n "$daemon_pid" ]] && kill -0 "$daemon_pid" 2>/dev/null; then
    kill -TERM "$daemon_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$daemon_pid" 2>/dev/null || true
    wait "$daemon_pid" 2>/dev/null || true
  fi
  daemon_pid=""
}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  # Cleanup must finish even when whoever read our output is gone.
  trap '' PIPE
  stop_daemon
  for user in "${created_users[@]}"; do
    if [[ $user == "$caller" ]]; then
      userdel --remove "$user" 2>/dev/null
    else
      userdel "$user" 2>/dev/null
    fi || echo "bench: could not delete user $user" >&2
  done
  for hierarchy in /sys/fs/cgroup/*/; do
    [[ -d "$hierarchy$cgroup_parent" ]] || continue
    # Session cgroups are removed by the daemon; only empty leftovers go here.
    find "$hierarchy$cgroup_parent" -depth -type d -exec rmdir {} + 2>/dev/null || true
    [[ -d "$hierarchy$cgroup_parent" ]] && echo "bench: could not remove $hierarchy$cgroup_parent" >&2
  done
  [[ -n "$tmp" ]] && rm -rf "$tmp"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "== build ($build_dir)"
if [[ ! -f "$build_dir/build.ninja" ]]; then
  cmake -S "$src_dir" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPANDO_TESTS=OFF >/dev/null
fi
ninja -C "$build_dir" -j2 pando-helperd pando-helper pando-helper-sandbox pando-helper-git-query >/dev/null
grep -q 'CMAKE_BUILD_TYPE:STRING=Release' "$build_dir/CMakeCache.txt" ||
  echo "bench: warning: $build_dir is not a Release build" >&2

echo "== users"
for user in "$core_user" "$ws_user" "$caller"; do
  if id "$user" >/dev/null 2>&1; then
    echo "bench: user $user left over from an earlier run; deleting it" >&2
    userdel --remove "$user" 2>/dev/null || ! id "$user" >/dev/null 2>&1 || userdel "$user"
  fi
done
for user in "$core_user" "$ws_user"; do
  useradd --system --user-group --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin "$user"
  created_users+=("$user")
done
useradd --user-group --create-home --shell /bin/sh "$caller"
created_users+=("$caller")
caller_home=$(getent passwd "$caller" | cut -d: -f6)

tmp=$(mktemp -d /tmp/pandobench.XXXXXX)
chmod 755 "$tmp"
project=$tmp/proj
mkdir "$project"
chown "$caller:$caller" "$project"
install -m 0644 "$bench_dir/driver.py" "$bench_dir/make_project.py" "$tmp/"
stderr_log=$tmp/stderr.log
touch "$stderr_log"
chown "$caller" "$stderr_log"
caller_json=$tmp/caller.json
: >"$caller_json"
chown "$caller" "$caller_json"

# The core role echoes (cat) and the workspace role exits at once (true): one
# daemon serves every measurement.
conf=$tmp/pandobench.conf
cat >"$conf" <<EOF
sandbox_helper_path: "$build_dir/pando-helper-sandbox"
max_sessions: 1100
max_sessions_per_uid: 1100
max_pending_per_uid: 64
caller_limits {
  memory_max_bytes: 34359738368
  pids_max: 16384
}
log_file: "$tmp/daemon.log"
log_level: "info"
core {
  user: "$core_user"
  argv: "/bin/cat"
}
workspace {
  user: "$ws_user"
  argv: "/bin/true"
}
cgroups { parent: "$cgroup_parent" }
EOF
chmod 0644 "$conf"

# start_daemon LOG [taskset -c CPU]: the daemon, on every CPU or on the ones given.
start_daemon() {
  local log=$1
  shift
  sed "s|^log_file: .*|log_file: \"$log\"|" "$conf" >"$conf.run"
  rm -f "$socket"
  "$@" "$build_dir/pando-helperd" --config "$conf.run" --socket "$socket" 2>>"$tmp/daemon.stderr" &
  daemon_pid=$!
  for _ in $(seq 100); do
    [[ -S "$socket" ]] && break
    kill -0 "$daemon_pid" 2>/dev/null || break
    sleep 0.05
  done
  if [[ ! -S "$socket" ]]; then
    echo "bench: the daemon did not come up:" >&2
    cat "$tmp/daemon.stderr" "$log" >&2 2>/dev/null || true
    exit 1
  fi
}

# as_caller CMD...: runs CMD as the caller with a clean environment.
as_caller() {
  setpriv --reuid="$caller" --regid="$caller" --init-groups --inh-caps=-all \
    env -i HOME="$caller_home" USER="$caller" LOGNAME="$caller" PATH=/usr/bin:/bin LANG=C.UTF-8 "$@"
}

size_projects=""
if has_section projectsize; then
  echo "== projects of $project_sizes entries (bench/make_project.py)"
  for size in ${project_sizes//,/ }; do
    dir=$tmp/size-$size
    mkdir "$dir"
    chown "$caller:$caller" "$dir"
    as_caller python3 "$tmp/make_project.py" "$dir" "$size"
    size_projects=${size_projects:+$size_projects,}$dir
  done
fi

echo "== daemon"
socket=$tmp/run/helper.sock
start_daemon "$tmp/daemon.log"

# A run right after another one starts while the kernel still tears down the last one's
# namespaces and cgroups (kworkers): wait (at most 180 s) for the 1-minute load average to
# fall below the CPU count, so that runs back to back measure alike.
for _ in $(seq 180); do
  awk -v cpus="$(nproc)" '{ exit !($1 < cpus) }' /proc/loadavg && break
  sleep 1
done
echo "== host: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r)"
echo "== caller-side measurements (as $caller)"
caller_ok=1
as_caller python3 "$tmp/driver.py" caller --client "$build_dir/pando-helper" --socket "$socket" \
  --project "$project" --stderr-log "$stderr_log" --out "$caller_json" --daemon-pid "$daemon_pid" \
  --cgroup-parent "$cgroup_parent" --sections "$sections" "${counts[@]}" \
  --project-sizes "$project_sizes" --size-projects "$size_projects" ||
  caller_ok=0
if [[ -s "$stderr_log" ]]; then
  echo "-- stderr of the measured commands (first 20 lines):"
  head -n 20 "$stderr_log"
fi
if [[ $caller_ok -eq 0 ]]; then
  echo "-- daemon log, warnings and errors (last 20):"
  grep -v '"level":"info"' "$tmp/daemon.log" | tail -n 20 || true
  cat "$tmp/daemon.stderr"
fi
[[ -s "$caller_json" ]] || exit 1
python3 "$tmp/driver.py" daemonlog --log "$tmp/daemon.log" --sequential "$sequential" || true

# The launch loop again with the daemon (and so its launchers), the driver, every
# client and every bwrap on CPU 0: preparation ahead of requests competes with the
# launch itself there. The round trips too: on CPU 0 every wakeup stays on one CPU
# for direct and helper alike, where on all CPUs a wakeup of an idle vCPU (tens of
# microseconds here) decides more than the path does.
pinned_json=""
pinned_sections=""
has_section launch && pinned_sections=launch
has_section pingpong && pinned_sections=${pinned_sections:+$pinned_sections,}pingpong
if [[ -n $pinned_sections ]]; then
  echo "== ${pinned_sections/,/ and }, everything on CPU 0"
  stop_daemon
  start_daemon "$tmp/daemon-pinned.log" taskset -c 0
  pinned_json=$tmp/caller-pinned.json
  : >"$pinned_json"
  chown "$caller" "$pinned_json"
  as_caller taskset -c 0 python3 "$tmp/driver.py" caller --client "$build_dir/pando-helper" \
    --socket "$socket" --project "$project" --stderr-log "$stderr_log" --out "$pinned_json" \
    --daemon-pid "$daemon_pid" --sections "$pinned_sections" "${counts[@]}" || caller_ok=0
  [[ -s "$pinned_json" ]] || exit 1
fi
stop_daemon

echo "== network namespace cost (as root)"
python3 "$tmp/driver.py" netns --launches "$netns_launches" --out "$tmp/netns.json"

report_ok=1
echo "== load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$tmp/driver.py" report --caller "$caller_json" ${pinned_json:+--pinned "$pinned_json"} \
  --netns "$tmp/netns.json" --sections "$sections" || report_ok=0
[[ $caller_ok -eq 1 && $report_ok -eq 1 ]]
