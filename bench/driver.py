#!/usr/bin/python3
"""Timing loops for bench/run.sh (standard library only).

run.sh starts this file once as the caller user (so no su/runuser cost is timed)
for the caller-side measurements, once as root for the network namespace
measurement, and once more to print the summary. Each measuring mode writes a
JSON file; `report` reads them all. Every child is started with
os.posix_spawn (vfork+exec in glibc), the cheapest way Python has, and the
same way for direct, bwrap and helper runs, so the spawn cost cancels out in
the comparison.
"""

import argparse
import glob
import json
import os
import re
import resource
import signal
import socket
import statistics
import sys
import threading
import time
import tty

MIB = 1024 * 1024


class BenchError(Exception):
    """Something did not work (not: a number was bad)."""


class Stalled(BenchError):
    """A step did not finish within its deadline."""


def now():
    return time.perf_counter_ns()


class deadline:
    """Raises Stalled inside the `with` block after `seconds` (SIGALRM interrupts
    waitpid/read, and Python raises from the handler). No cost while timing."""

    def __init__(self, seconds, what):
        self.seconds, self.what = seconds, what

    def _fire(self, signum, frame):
        raise Stalled(f"{self.what}: no progress after {self.seconds:.0f} s")

    def __enter__(self):
        self.old = signal.signal(signal.SIGALRM, self._fire)
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def __exit__(self, *exc):
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self.old)
        return False


def kill_and_reap(pids, sig=signal.SIGKILL):
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    for pid in pids:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def spawn(argv, stdin=None, stdout=None, stderr=None):
    """Starts argv with the given fds as 0/1/2 (None: /dev/null, stderr: inherited)."""
    actions = []
    null = os.open(os.devnull, os.O_RDWR)
    try:
        actions.append((os.POSIX_SPAWN_DUP2, null if stdin is None else stdin, 0))
        actions.append((os.POSIX_SPAWN_DUP2, null if stdout is None else stdout, 1))
        if stderr is not None:
            actions.append((os.POSIX_SPAWN_DUP2, stderr, 2))
        return os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
    finally:
        os.close(null)


def wait_status(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def percentile(sorted_samples, q):
    """Nearest-rank percentile: the smallest sample with at least q% at or below it."""
    rank = max(1, -(-len(sorted_samples) * q // 100))
    return sorted_samples[int(rank) - 1]


def stats_ns(samples):
    s = sorted(samples)
    return {
        "n": len(s),
        "median_ns": statistics.median(s),
        "p10_ns": percentile(s, 10),
        "p90_ns": percentile(s, 90),
        "p95_ns": percentile(s, 95),
        "p99_ns": percentile(s, 99),
        "min_ns": s[0],
        "max_ns": s[-1],
    }


def commands(args):
    """The argv of each way to run a command; `what` is 'true' or 'cat'."""
    role = {"true": "workspace", "cat": "core"}

    def direct(what):
        return ["/bin/" + what]

    def helper(what):
        return [args.client, "security", "launch", "--role", role[what], "--project-root",
                args.project, "--stdio", "--socket", args.socket]

    def bwrap(what):
        return [args.bwrap, "--unshare-all", "--die-with-parent", "--new-session",
                "--ro-bind", "/usr", "/usr", "--symlink", "usr/bin", "/bin",
                "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
                "--symlink", "usr/sbin", "/sbin", "--proc", "/proc", "--dev", "/dev",
                "--bind", args.project, args.project, "/bin/" + what]

    return {"direct": direct, "helper": helper, "bwrap": bwrap}


def run_one(argv, errfd, timeout=30):
    start = now()
    pid = spawn(argv, stderr=errfd)
    try:
        with deadline(timeout, f"{argv[0]} launch"):
            code = wait_status(pid)
    except Stalled:
        kill_and_reap([pid])
        raise
    elapsed = now() - start
    if code != 0:
        raise BenchError(f"{argv[0]} exited {code} (see the stderr log)")
    return elapsed


LAUNCH_BLOCK = 20


def bench_launch(args, cmds, errfd):
    """N back-to-back launches of /bin/true per method: per-launch times and block wall time.

    The methods take turns in blocks of LAUNCH_BLOCK back-to-back launches, so
    a machine that gets faster or slower during the run (other load, CPU
    frequency) shifts every method alike instead of favouring the one that
    ran last. The back-to-back wall time of a method is the sum of its
    blocks."""
    names = ("direct", "bwrap", "helper")
    argvs = {name: cmds[name]("true") for name in names}
    for name in names:
        for _ in range(args.warmup):
            run_one(argvs[name], errfd)
    samples = {name: [] for name in names}
    block_ns = {name: 0 for name in names}
    done = 0
    while done < args.launches:
        count = min(LAUNCH_BLOCK, args.launches - done)
        for name in names:
            start = now()
            for _ in range(count):
                samples[name].append(run_one(argvs[name], errfd))
            block_ns[name] += now() - start
        done += count
    out = {}
    for name in names:
        out[name] = stats_ns(samples[name])
        out[name]["block_ns"] = block_ns[name]
        print(f"  launch {name:7s} median {out[name]['median_ns'] / 1e6:.2f} ms, "
              f"{args.launches} back to back in {block_ns[name] / 1e9:.2f} s", flush=True)
    return out


def pipeline(producer, middle, errfd, timeout):
    """producer | middle | dd of=/dev/null; returns (seconds, bytes the consumer saw)."""
    a_r, a_w = os.pipe()
    b_r, b_w = os.pipe()
    c_r, c_w = os.pipe()  # the consumer's stderr, where dd reports its byte count
    start = now()
    p1 = spawn(producer, stdout=a_w, stderr=errfd)
    p2 = spawn(middle, stdin=a_r, stdout=b_w, stderr=errfd)
    p3 = spawn(["/bin/dd", "of=/dev/null", "bs=1M"], stdin=b_r, stderr=c_w)
    for fd in (a_r, a_w, b_r, b_w, c_w):
        os.close(fd)
    try:
        with deadline(timeout, f"pipeline through {os.path.basename(middle[0])}"):
            codes = [wait_status(p) for p in (p1, p2, p3)]
    except Stalled as e:
        # dd prints how much it read when interrupted: say where the data stopped.
        kill_and_reap([p1, p2])
        kill_and_reap([p3], signal.SIGINT)
        report = os.read(c_r, 4096)
        os.close(c_r)
        m = re.search(rb"^(\d+) bytes", report, re.MULTILINE)
        raise Stalled(f"{e}; the consumer had read {int(m.group(1)) if m else '?'} bytes") from None
    elapsed = now() - start
    report = b""
    while chunk := os.read(c_r, 4096):
        report += chunk
    os.close(c_r)
    if codes != [0, 0, 0]:
        raise BenchError(f"pipeline {middle[0]} exit codes {codes}")
    m = re.search(rb"^(\d+) bytes", report, re.MULTILINE)
    if not m:
        raise BenchError(f"dd did not report a byte count: {report!r}")
    return elapsed / 1e9, int(m.group(1))


STDIO_MODES = ("pipes", "framed", "pty")


def open_pty():
    """A new pty in raw mode (no echo, no line editing, no output translation): returns
    (master, slave). The measured command gets the slave as stdin and stdout, as an
    interactive terminal would give it."""
    master, slave = os.openpty()
    tty.setraw(slave)
    return master, slave


def close_quietly(*fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def end_session(pid, timeout=10):
    """Waits for a command whose terminal was closed; SIGTERM, then SIGKILL if it lingers.
    Returns its exit code, or None when it had to be killed."""
    deadline_at = time.monotonic() + timeout
    while time.monotonic() < deadline_at:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    kill_and_reap([pid], signal.SIGTERM)
    return None


def pty_stream(argv, size, errfd, timeout):
    """size bytes written to the pty master by a thread while this thread reads the echo
    back; returns (seconds until the last byte came back, bytes seen)."""
    master, slave = open_pty()
    pid = spawn(argv, stdin=slave, stdout=slave, stderr=errfd)
    os.close(slave)
    chunk = bytes(64 * 1024)
    failure = []

    def writer():
        left = size
        try:
            while left > 0:
                left -= os.write(master, chunk[:min(len(chunk), left)])
        except OSError as e:
            failure.append(e)

    got = 0
    start = now()
    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        with deadline(timeout, f"pty stream through {os.path.basename(argv[0])}"):
            while got < size:
                data = os.read(master, 1 << 20)
                if not data:
                    break
                got += len(data)
    except (Stalled, OSError) as e:
        close_quietly(master)
        kill_and_reap([pid])
        raise BenchError(f"pty stream: {e}; {got} of {size} bytes came back") from None
    elapsed = now() - start
    thread.join(timeout=5)
    close_quietly(master)
    end_session(pid)
    if failure:
        raise BenchError(f"pty stream: writing failed: {failure[0]}")
    return elapsed / 1e9, got


def devnull_pipeline(producer, middle, errfd, timeout):
    """producer | middle > /dev/null (framed stdio); returns (seconds, None)."""
    a_r, a_w = os.pipe()
    null = os.open(os.devnull, os.O_WRONLY)
    start = now()
    p1 = spawn(producer, stdout=a_w, stderr=errfd)
    p2 = spawn(middle, stdin=a_r, stdout=null, stderr=errfd)
    close_quietly(a_r, a_w, null)
    try:
        with deadline(timeout, f"pipeline through {os.path.basename(middle[0])} to /dev/null"):
            codes = [wait_status(p) for p in (p1, p2)]
    except Stalled:
        kill_and_reap([p1, p2])
        raise
    elapsed = now() - start
    if codes != [0, 0]:
        raise BenchError(f"pipeline {middle[0]} > /dev/null: exit codes {codes}")
    return elapsed / 1e9, None


def bench_throughput(args, cmds, errfd):
    """args.mib MiB through cat, per stdio mode: pipes (dd | cat | dd, the consumer's byte
    count checked), framed (dd | cat > /dev/null: the helper relays stdout through the
    daemon; both exit codes checked) and pty (the driver writes into a raw pty and reads
    the echo back; the byte count checked)."""
    size = args.mib * MIB
    producer = ["/bin/dd", "if=/dev/zero", "bs=1M", f"count={args.mib}", "status=none"]
    timeout = 20 + args.mib / 10
    out = {}
    errors = []
    for mode in args.stdio_modes:
        out[mode] = {}
        for name in ("direct", "helper"):
            rates = []
            for i in range(args.throughput_runs):
                try:
                    if mode == "pipes":
                        seconds, got = pipeline(producer, cmds[name]("cat"), errfd, timeout)
                    elif mode == "framed":
                        seconds, got = devnull_pipeline(producer, cmds[name]("cat"), errfd, timeout)
                    else:
                        seconds, got = pty_stream(cmds[name]("cat"), size, errfd, timeout)
                except BenchError as e:
                    errors.append(f"{mode} {name} run {i + 1}: {e}")
                    print(f"  throughput {mode:6s} {name:7s} run {i + 1} FAILED: {e}", flush=True)
                    continue
                if got is not None and got != size:
                    raise BenchError(f"throughput {mode} {name}: {got} bytes came through, "
                                     f"expected {size}")
                rates.append(args.mib / seconds)
            if not rates:
                raise BenchError("; ".join(errors))
            out[mode][name] = {"mib_per_s": statistics.median(rates), "runs": rates}
            print(f"  throughput {mode:6s} {name:7s} {args.mib} MiB: median "
                  f"{out[mode][name]['mib_per_s']:.0f} MiB/s "
                  f"(runs: {', '.join(f'{r:.0f}' for r in rates)})", flush=True)
    if errors:
        out["errors"] = errors
    return out


def read_exact(fd, n):
    data = b""
    while len(data) < n:
        chunk = os.read(fd, n - len(data))
        if not chunk:
            raise BenchError(f"echo closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def echo_endpoints(mode, argv, errfd):
    """Starts argv (an echo) with the stdio of `mode`; returns (pid, write fd, read fd)."""
    if mode == "pty":
        master, slave = open_pty()
        pid = spawn(argv, stdin=slave, stdout=slave, stderr=errfd)
        os.close(slave)
        return pid, master, master
    to_r, to_w = os.pipe()
    if mode == "pipes":
        from_r, from_w = os.pipe()
    else:
        # A socket is neither a pipe nor a terminal: the helper frames stdout through the
        # daemon exactly as for a file or /dev/null, and the driver can still read it.
        from_r, from_w = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        from_r, from_w = from_r.detach(), from_w.detach()
    pid = spawn(argv, stdin=to_r, stdout=from_w, stderr=errfd)
    close_quietly(to_r, from_w)
    return pid, to_w, from_r


def pingpong_one(mode, name, argv, pings, errfd):
    message = bytes(range(64))
    pid, to_w, from_r = echo_endpoints(mode, argv, errfd)
    samples = []
    try:
        with deadline(60 + pings / 1000, f"pingpong {mode} {name}"):
            # The first exchange waits for the session to start; it is not timed.
            os.write(to_w, message)
            if read_exact(from_r, 64) != message:
                raise BenchError(f"pingpong {mode} {name}: echo returned other bytes")
            for _ in range(pings):
                start = now()
                os.write(to_w, message)
                back = read_exact(from_r, 64)
                samples.append(now() - start)
                if back != message:
                    raise BenchError(f"pingpong {mode} {name}: echo returned other bytes")
            if mode == "pty":
                close_quietly(to_w)
                end_session(pid)
                return stats_ns(samples)
            os.close(to_w)
            rest = os.read(from_r, 4096)
            os.close(from_r)
            code = wait_status(pid)
    except (BenchError, OSError) as e:
        kill_and_reap([pid])
        close_quietly(to_w, from_r)
        raise BenchError(f"{e} (after {len(samples)} timed round trips)") from None
    if code != 0 or rest:
        raise BenchError(f"pingpong {mode} {name}: exit {code}, {len(rest)} extra bytes")
    return stats_ns(samples)


def bench_pingpong(args, cmds, errfd):
    """64-byte round trips through cat per stdio mode (see echo_endpoints)."""
    out = {}
    for mode in args.stdio_modes:
        out[mode] = {}
        for name in ("direct", "helper"):
            out[mode][name] = pingpong_one(mode, name, cmds[name]("cat"), args.pings, errfd)
            print(f"  round trip {mode:6s} {name:7s} median "
                  f"{out[mode][name]['median_ns'] / 1e3:.1f} us "
                  f"(p90 {out[mode][name]['p90_ns'] / 1e3:.1f} us)", flush=True)
    return out


def bench_concurrent(args, cmds, errfd):
    out = {}
    for name in ("direct", "bwrap", "helper"):
        argv = cmds[name]("true")
        walls = []
        for _ in range(args.concurrent_runs):
            start = now()
            pids = [spawn(argv, stderr=errfd) for _ in range(args.concurrent)]
            try:
                with deadline(120, f"concurrent {name}"):
                    codes = [wait_status(p) for p in pids]
            except Stalled:
                kill_and_reap(pids)
                raise
            walls.append((now() - start) / 1e9)
            failed = sum(1 for c in codes if c != 0)
            if failed:
                raise BenchError(f"concurrent {name}: {failed} of {len(codes)} exited non-zero "
                                 f"(codes {sorted(set(codes))})")
        out[name] = {"wall_s": statistics.median(walls), "runs": walls, "n": args.concurrent}
        print(f"  concurrent {name:7s} {args.concurrent} at once: median {out[name]['wall_s']:.3f} s, "
              f"all exited 0 (runs: {', '.join(f'{w:.3f}' for w in walls)})", flush=True)
    return out


def proc_status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise BenchError(f"/proc/{pid}/status has no {field}")


def session_memory_bytes(parent):
    """Memory charged to each live session's cgroup (cgroup v2 memory.current, else v1
    memory.usage_in_bytes), read from the world-readable cgroup files."""
    for pattern in (f"/sys/fs/cgroup/{parent}/**/session-*/memory.current",
                    f"/sys/fs/cgroup/memory/{parent}/**/session-*/memory.usage_in_bytes"):
        paths = glob.glob(pattern, recursive=True)
        if paths:
            values = []
            for path in paths:
                with open(path) as f:
                    values.append(int(f.read()))
            return os.path.basename(pattern), values
    return None, []


def bench_live(args, cmds, errfd):
    """args.live sessions of `cat` alive at once (each proven alive by an echoed byte),
    then the daemon's RSS (now and its peak since it started) and each session cgroup's
    memory; then every stdin closed and every session must exit 0."""
    n = args.live
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * n + 64
    if hard != resource.RLIM_INFINITY and hard < need:
        raise BenchError(f"live sessions: RLIMIT_NOFILE hard limit {hard} < {need}")
    if soft != resource.RLIM_INFINITY and soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    argv = cmds["helper"]("cat")
    sessions = []
    start = now()
    try:
        with deadline(60 + n * 0.5, f"{n} live sessions"):
            # Each is proven alive before the next starts: the row is about n sessions
            # alive together, not n requests at once (the concurrent row is), which the
            # daemon's per-user pending limit (64 at most) would refuse in part.
            for _ in range(n):
                sessions.append(echo_endpoints("pipes", argv, errfd))
                _, to_w, from_r = sessions[-1]
                os.write(to_w, b"x")
                if read_exact(from_r, 1) != b"x":
                    raise BenchError("live sessions: echo returned another byte")
        up_s = (now() - start) / 1e9
        rss_kib = proc_status_kib(args.daemon_pid, "VmRSS")
        hwm_kib = proc_status_kib(args.daemon_pid, "VmHWM")
        memory_file, memory = session_memory_bytes(args.cgroup_parent)
    except (BenchError, OSError) as e:
        kill_and_reap([pid for pid, _, _ in sessions])
        for _, to_w, from_r in sessions:
            close_quietly(to_w, from_r)
        raise BenchError(f"{e} ({len(sessions)} sessions started)") from None
    codes = []
    with deadline(120 + n * 0.2, f"ending {n} live sessions"):
        for _, to_w, _ in sessions:
            os.close(to_w)
        for pid, _, from_r in sessions:
            os.read(from_r, 16)
            os.close(from_r)
            codes.append(wait_status(pid))
    failed = sum(1 for c in codes if c != 0)
    out = {"n": n, "up_s": up_s, "daemon_rss_kib": rss_kib, "daemon_hwm_kib": hwm_kib,
           "failed": failed, "memory_file": memory_file,
           "session_memory_median": statistics.median(memory) if memory else None,
           "session_cgroups": len(memory)}
    per = f"{out['session_memory_median'] / MIB:.2f} MiB" if memory else "not readable"
    print(f"  {n} live sessions up in {up_s:.2f} s; daemon RSS {rss_kib / 1024:.1f} MiB "
          f"(peak since start {hwm_kib / 1024:.1f} MiB); per session {per} "
          f"({memory_file}, median of {len(memory)} cgroups); {n - failed} of {n} exited 0",
          flush=True)
    if failed:
        raise BenchError(f"live sessions: {failed} of {n} exited non-zero "
                         f"(codes {sorted(set(codes))})")
    return out


def bench_projectsize(args, cmds, errfd):
    """Launches of /bin/true (workspace) in projects of each size, helper and bwrap taking
    turns launch by launch: the first helper launch of a project (the daemon reads it whole)
    apart, then the median of the rest (the daemon reads what changed: nothing here)."""
    out = {}
    for size, project in zip(args.project_sizes, args.size_projects):
        helper = cmds["helper"]("true")
        helper[helper.index("--project-root") + 1] = project
        bwrap = cmds["bwrap"]("true")
        at = bwrap.index(args.project)
        bwrap[at:at + 2] = [project, project]
        first = run_one(helper, errfd, timeout=600)
        samples = {"helper": [], "bwrap": []}
        for _ in range(args.size_launches):
            samples["helper"].append(run_one(helper, errfd))
            samples["bwrap"].append(run_one(bwrap, errfd))
        out[str(size)] = {"first_ns": first,
                          "helper": stats_ns(samples["helper"]),
                          "bwrap": stats_ns(samples["bwrap"])}
        print(f"  {size:>9} entries: first {first / 1e6:.1f} ms, then helper median "
              f"{out[str(size)]['helper']['median_ns'] / 1e6:.2f} ms, bwrap "
              f"{out[str(size)]['bwrap']['median_ns'] / 1e6:.2f} ms", flush=True)
    out["daemon_rss_kib"] = proc_status_kib(args.daemon_pid, "VmRSS") if args.daemon_pid else 0
    return out


SECTIONS = {
    "launch": ("launch latency (/bin/true)", bench_launch),
    "throughput": ("throughput (cat)", bench_throughput),
    "pingpong": ("round trip (64 B through cat)", bench_pingpong),
    "concurrent": ("concurrent sessions (/bin/true)", bench_concurrent),
    "live": ("live sessions (cat, all at once)", bench_live),
    "projectsize": ("launch by project size (/bin/true, workspace)", bench_projectsize),
}


def mode_caller(args):
    errfd = os.open(args.stderr_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    cmds = commands(args)
    results = {}
    # One failing section does not hide the numbers of the others.
    failed = False
    for key in args.sections:
        title, fn = SECTIONS[key]
        print(title + ":", flush=True)
        try:
            results[key] = fn(args, cmds, errfd)
        except BenchError as e:
            print(f"  FAILED: {e}", flush=True)
            results[key] = {"error": str(e)}
        if "error" in results[key] or "errors" in results[key]:
            failed = True
    results["params"] = {"launches": args.launches, "mib": args.mib, "pings": args.pings,
                         "concurrent": args.concurrent, "live": args.live,
                         "cpus": sorted(os.sched_getaffinity(0))}
    with open(args.out, "w") as f:
        json.dump(results, f)
    if failed:
        raise BenchError("some measurements did not work (see above)")


def mode_netns(args):
    """Back-to-back process starts with and without a new network namespace (as root)."""
    variants = [
        ("true", ["/bin/true"]),
        ("unshare true", [args.unshare, "/bin/true"]),
        ("unshare --net true", [args.unshare, "--net", "/bin/true"]),
        ("unshare --mount --pid --ipc --uts --fork true",
         [args.unshare, "--mount", "--pid", "--ipc", "--uts", "--fork", "/bin/true"]),
        ("unshare --net --mount --pid --ipc --uts --fork true",
         [args.unshare, "--net", "--mount", "--pid", "--ipc", "--uts", "--fork", "/bin/true"]),
    ]
    out = {}
    print("network namespace creation (root):", flush=True)
    for name, argv in variants:
        for _ in range(5):
            run_one(argv, 2)
        samples = []
        start = now()
        for _ in range(args.launches):
            samples.append(run_one(argv, 2))
        out[name] = stats_ns(samples)
        out[name]["block_ns"] = now() - start
        print(f"  {name:52s} median {out[name]['median_ns'] / 1e6:.2f} ms, "
              f"{args.launches} back to back in {out[name]['block_ns'] / 1e9:.2f} s", flush=True)
    with open(args.out, "w") as f:
        json.dump(out, f)


def mode_daemonlog(args):
    """The daemon's own view of each session, from its JSON-lines log: where launch time goes.

    Sessions are taken in request order: the first --sequential workspace
    sessions are the back-to-back launch loop, later ones the concurrent bursts."""
    from datetime import datetime

    def ts(value):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()

    order, requested, setup, duration, cpu, reasons = [], {}, {}, {}, {}, {}
    with open(args.log) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            event, session = e.get("event", ""), e.get("session")
            if event.endswith("_launch_requested"):
                requested[session] = (e.get("role"), ts(e["ts"]))
                order.append(session)
            elif event.endswith("_session_started") and session in requested:
                setup[session] = (ts(e["ts"]) - requested[session][1]) * 1e3
            elif event.endswith("_session_ended") and session in requested:
                duration[session] = e.get("duration_ms", 0)
                cpu[session] = e.get("cpu_usage_usec", 0) / 1e3
                reason = e.get("reason", "?")
                reasons[reason] = reasons.get(reason, 0) + 1
    workspace = [s for s in order if requested[s][0] == "workspace"]
    groups = [
        ("launch loop (workspace, /bin/true)", workspace[:args.sequential]),
        ("concurrent bursts (workspace)", workspace[args.sequential:]),
        ("cat sessions (core)", [s for s in order if requested[s][0] == "core"]),
    ]
    print("daemon's view (its log): setup = request received -> role started; session = whole "
          "session; cpu = the session cgroup's CPU time")

    def med(table, sessions):
        values = [table[s] for s in sessions if s in table]
        return statistics.median(values) if values else float("nan")

    for title, sessions in groups:
        if not sessions:
            continue
        print(f"  {title}: {len(sessions)} sessions, setup median {med(setup, sessions):.1f} ms, "
              f"session median {med(duration, sessions):.0f} ms, cpu median {med(cpu, sessions):.1f} ms")
    print("  end reasons: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())))


def ms(ns):
    return f"{ns / 1e6:.2f} ms"


def mode_report(args):
    with open(args.caller) as f:
        r = json.load(f)
    pinned = None
    if args.pinned:
        with open(args.pinned) as f:
            pinned = json.load(f)
    with open(args.netns) as f:
        n = json.load(f)
    p = r["params"]
    rows = []
    misses = []
    failures = []
    heading = [""]

    def row(metric, base="-", helper="-", ratio="-", target="-", met=None):
        verdict = "-" if met is None else ("met" if met else "MISSED")
        rows.append((metric, base, helper, ratio, target, verdict))
        if not metric.startswith(" "):
            heading[0] = metric.split(":")[0]
        if met is False:
            name = metric if not metric.startswith(" ") else f"{heading[0]}: {metric.strip()}"
            misses.append(f"{name}: {helper} vs {base} = {ratio}, target {target}")

    def failed(results, key, metric):
        section = results.get(key, {"error": "not measured"})
        for e in section.get("errors", []):
            failures.append(f"{key}: {e}")
        if "error" in section:
            failures.append(f"{key}: {section['error']}")
            row(metric, "FAILED", "FAILED")
            return True
        return False

    def launch_rows(results, where):
        if failed(results, "launch", f"launch /bin/true, {where}"):
            return
        L = results["launch"]
        h, b, d = L["helper"], L["bwrap"], L["direct"]
        row(f"launch /bin/true, {where}: p50", f"bwrap {ms(b['median_ns'])}", ms(h["median_ns"]),
            f"{h['median_ns'] / b['median_ns']:.2f}x", "<= 0.8x",
            h["median_ns"] <= 0.8 * b["median_ns"])
        row("  p95", f"bwrap {ms(b['p95_ns'])}", ms(h["p95_ns"]),
            f"{h['p95_ns'] / b['p95_ns']:.2f}x", "<= 1.0x", h["p95_ns"] <= b["p95_ns"])
        row("  p99", f"bwrap {ms(b['p99_ns'])}", ms(h["p99_ns"]), f"{h['p99_ns'] / b['p99_ns']:.2f}x")
        row("  max", f"bwrap {ms(b['max_ns'])}", ms(h["max_ns"]), f"{h['max_ns'] / b['max_ns']:.2f}x")
        row("  p50 vs direct", f"direct {ms(d['median_ns'])}", ms(h["median_ns"]),
            f"{h['median_ns'] / d['median_ns']:.1f}x")
        row(f"  {results['params']['launches']} back to back (wall)",
            f"bwrap {b['block_ns'] / 1e9:.2f} s", f"{h['block_ns'] / 1e9:.2f} s",
            f"{h['block_ns'] / b['block_ns']:.2f}x")

    def pingpong_rows(results, where, judged):
        """judged: the row counts for the target (all CPUs); pinned rows are for reading."""
        if failed(results, "pingpong", f"round trip 64 B, {where}"):
            return
        P = results["pingpong"]
        for mode in STDIO_MODES:
            if mode not in P:
                continue
            pd, ph = P[mode]["direct"], P[mode]["helper"]
            row(f"round trip 64 B, {mode}, {where}: p50", f"direct {pd['median_ns'] / 1e3:.1f} us",
                f"{ph['median_ns'] / 1e3:.1f} us", f"{ph['median_ns'] / pd['median_ns']:.2f}x",
                "<= 1.2x", ph["median_ns"] <= 1.2 * pd["median_ns"] if judged else None)
            row("  p90", f"direct {pd['p90_ns'] / 1e3:.1f} us", f"{ph['p90_ns'] / 1e3:.1f} us",
                f"{ph['p90_ns'] / pd['p90_ns']:.2f}x")

    every_cpu = f"CPUs {','.join(map(str, p['cpus']))}"
    if "launch" in args.sections:
        launch_rows(r, every_cpu)
    if pinned is not None and "launch" in pinned:
        launch_rows(pinned, f"all on CPU {','.join(map(str, pinned['params']['cpus']))}")
    metric = f"{p['concurrent']} launches at once (wall)"
    if "concurrent" in r and not failed(r, "concurrent", metric):
        C = r["concurrent"]
        cb, ch = C["bwrap"]["wall_s"], C["helper"]["wall_s"]
        row(metric, f"bwrap {cb:.3f} s", f"{ch:.3f} s", f"{ch / cb:.2f}x", "<= 1.0x", ch <= cb)
        row("  direct", f"{C['direct']['wall_s']:.3f} s")
    if "throughput" in r and not failed(r, "throughput", f"throughput cat {p['mib']} MiB"):
        T = r["throughput"]
        for mode in STDIO_MODES:
            if mode not in T:
                continue
            td, th = T[mode]["direct"]["mib_per_s"], T[mode]["helper"]["mib_per_s"]
            row(f"throughput cat {p['mib']} MiB, {mode}", f"direct {td:.0f} MiB/s",
                f"{th:.0f} MiB/s", f"{th / td:.2f}x", ">= 0.95x", th >= 0.95 * td)
    if "pingpong" in args.sections:
        pingpong_rows(r, every_cpu, judged=True)
    if pinned is not None and "pingpong" in pinned:
        pingpong_rows(pinned, f"CPU {','.join(map(str, pinned['params']['cpus']))}", judged=False)
    if "projectsize" in r and not failed(r, "projectsize", "launch by project size"):
        S = r["projectsize"]
        sizes = [k for k in S if k.isdigit()]
        empty = S[sizes[0]]["helper"]["median_ns"]
        for size in sizes:
            h, b = S[size]["helper"], S[size]["bwrap"]
            row(f"launch /bin/true, project of {int(size):,} entries: p50",
                f"empty {ms(empty)}", ms(h["median_ns"]), f"{h['median_ns'] / empty:.2f}x",
                "<= 3x" if int(size) else "-",
                h["median_ns"] <= 3 * empty if int(size) else None)
            row("  vs bwrap", f"bwrap {ms(b['median_ns'])}", ms(h["median_ns"]),
                f"{h['median_ns'] / b['median_ns']:.2f}x")
            row("  first launch (the whole project read)", "-", ms(S[size]["first_ns"]))
        row("  daemon RSS after", "-", f"{S['daemon_rss_kib'] / 1024:.1f} MiB")
    metric = f"{p['live']} live sessions"
    if "live" in r and not failed(r, "live", metric):
        V = r["live"]
        row(f"{metric}: all exited 0", "-", f"{V['n'] - V['failed']} of {V['n']}", "-",
            "all", V["failed"] == 0)
        row("  daemon peak RSS (VmHWM)", "-", f"{V['daemon_hwm_kib'] / 1024:.1f} MiB", "-",
            "<= 32 MiB", V["daemon_hwm_kib"] <= 32 * 1024)
        row("  daemon RSS, all up", "-", f"{V['daemon_rss_kib'] / 1024:.1f} MiB")
        per = ("not readable" if V["session_memory_median"] is None
               else f"{V['session_memory_median'] / MIB:.2f} MiB")
        row(f"  per session ({V['memory_file']})", "-", per)
        row("  all up after", "-", f"{V['up_s']:.2f} s")
    base = n["unshare true"]["median_ns"]
    net = n["unshare --net true"]["median_ns"]
    row("netns: unshare [--net] true", ms(base), ms(net), f"+{(net - base) / 1e6:.2f} ms netns")
    allns = n["unshare --mount --pid --ipc --uts --fork true"]["median_ns"]
    allnet = n["unshare --net --mount --pid --ipc --uts --fork true"]["median_ns"]
    row("  with mnt/pid/ipc/uts too", ms(allns), ms(allnet), f"+{(allnet - allns) / 1e6:.2f} ms netns")

    header = ("metric", "baseline", "helper", "ratio", "target", "")
    widths = [max(len(str(x[i])) for x in rows + [header]) for i in range(len(header))]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for r_ in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r_, widths)).rstrip())
    print()
    print("ratio = helper / baseline (throughput: helper MiB/s / baseline MiB/s); netns rows: "
          "baseline = without, helper column = with a new network namespace.")
    print("targets missed: " + ("none" if not misses else f"{len(misses)}"))
    for m in misses:
        print("  " + m)
    if failures:
        print("FAILURES:")
        for f_ in failures:
            print("  " + f_)
        return 1
    return 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    c = sub.add_parser("caller")
    c.add_argument("--client", required=True)
    c.add_argument("--socket", required=True)
    c.add_argument("--project", required=True)
    c.add_argument("--bwrap", default="/usr/bin/bwrap")
    c.add_argument("--launches", type=int, default=200)
    c.add_argument("--warmup", type=int, default=5)
    c.add_argument("--mib", type=int, default=1024)
    c.add_argument("--throughput-runs", type=int, default=5)
    c.add_argument("--pings", type=int, default=10000)
    c.add_argument("--concurrent", type=int, default=100)
    c.add_argument("--concurrent-runs", type=int, default=3)
    c.add_argument("--live", type=int, default=1000)
    c.add_argument("--daemon-pid", type=int, default=0)
    c.add_argument("--cgroup-parent", default="pandobench")
    c.add_argument("--sections", type=lambda v: v.split(","), default=list(SECTIONS))
    c.add_argument("--stdio-modes", type=lambda v: v.split(","), default=list(STDIO_MODES))
    c.add_argument("--project-sizes", type=lambda v: [int(x) for x in v.split(",")], default=[])
    c.add_argument("--size-projects", type=lambda v: v.split(","), default=[])
    c.add_argument("--size-launches", type=int, default=21)
    c.add_argument("--stderr-log", required=True)
    c.add_argument("--out", required=True)
    n = sub.add_parser("netns")
    n.add_argument("--unshare", default="/usr/bin/unshare")
    n.add_argument("--launches", type=int, default=200)
    n.add_argument("--out", required=True)
    d = sub.add_parser("daemonlog")
    d.add_argument("--log", required=True)
    d.add_argument("--sequential", type=int, default=0)
    r = sub.add_parser("report")
    r.add_argument("--caller", required=True)
    r.add_argument("--pinned")
    r.add_argument("--netns", required=True)
    r.add_argument("--sections", type=lambda v: v.split(","), default=list(SECTIONS))
    args = ap.parse_args()
    try:
        rc = {"caller": mode_caller, "netns": mode_netns, "daemonlog": mode_daemonlog,
              "report": mode_report}[args.mode](args)
    except BenchError as e:
        print(f"bench: FAILED: {e}", file=sys.stderr)
        return 1
    return rc or 0


if __name__ == "__main__":
    sys.exit(main())
