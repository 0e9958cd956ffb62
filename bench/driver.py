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
import json
import os
import re
import signal
import statistics
import sys
import time

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


def stats_ns(samples):
    s = sorted(samples)
    return {
        "n": len(s),
        "median_ns": statistics.median(s),
        "p10_ns": s[len(s) // 10],
        "p90_ns": s[(len(s) * 9) // 10],
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


def bench_throughput(args, cmds, errfd):
    size = args.mib * MIB
    producer = ["/bin/dd", "if=/dev/zero", "bs=1M", f"count={args.mib}", "status=none"]
    timeout = 20 + args.mib / 20
    out = {}
    errors = []
    for name in ("direct", "helper"):
        rates = []
        for i in range(args.throughput_runs):
            try:
                seconds, got = pipeline(producer, cmds[name]("cat"), errfd, timeout)
            except BenchError as e:
                errors.append(f"{name} run {i + 1}: {e}")
                print(f"  throughput {name:7s} run {i + 1} FAILED: {e}", flush=True)
                continue
            if got != size:
                raise BenchError(f"throughput {name}: consumer read {got} bytes, expected {size}")
            rates.append(args.mib / seconds)
        if not rates:
            raise BenchError("; ".join(errors))
        out[name] = {"mib_per_s": statistics.median(rates), "runs": rates}
        print(f"  throughput {name:7s} {args.mib} MiB: median {out[name]['mib_per_s']:.0f} MiB/s "
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


def bench_pingpong(args, cmds, errfd):
    out = {}
    message = bytes(range(64))
    for name in ("direct", "helper"):
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        pid = spawn(cmds[name]("cat"), stdin=to_r, stdout=from_w, stderr=errfd)
        os.close(to_r)
        os.close(from_w)
        samples = []
        try:
            with deadline(60 + args.pings / 1000, f"pingpong {name}"):
                # The first exchange waits for the session to start; it is not timed.
                os.write(to_w, message)
                if read_exact(from_r, 64) != message:
                    raise BenchError(f"pingpong {name}: echo returned other bytes")
                for _ in range(args.pings):
                    start = now()
                    os.write(to_w, message)
                    back = read_exact(from_r, 64)
                    samples.append(now() - start)
                    if back != message:
                        raise BenchError(f"pingpong {name}: echo returned other bytes")
                os.close(to_w)
                rest = os.read(from_r, 4096)
                os.close(from_r)
                code = wait_status(pid)
        except BenchError as e:
            kill_and_reap([pid])
            for fd in (to_w, from_r):
                try:
                    os.close(fd)
                except OSError:
                    pass
            raise type(e)(f"{e} (after {len(samples)} timed round trips)") from None
        if code != 0 or rest:
            raise BenchError(f"pingpong {name}: exit {code}, {len(rest)} extra bytes")
        out[name] = stats_ns(samples)
        print(f"  round trip {name:7s} median {out[name]['median_ns'] / 1e3:.1f} us "
              f"(p90 {out[name]['p90_ns'] / 1e3:.1f} us)", flush=True)
    return out


def bench_concurrent(args, cmds, errfd):
    out = {}
    for name in ("direct", "helper"):
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


def mode_caller(args):
    errfd = os.open(args.stderr_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    cmds = commands(args)
    results = {}
    sections = [
        ("launch", "launch latency (/bin/true)", bench_launch),
        ("throughput", "throughput (cat)", bench_throughput),
        ("pingpong", "round trip (64 B through cat)", bench_pingpong),
        ("concurrent", "concurrent sessions (/bin/true)", bench_concurrent),
    ]
    # One failing section does not hide the numbers of the others.
    failed = False
    for key, title, fn in sections:
        print(title + ":", flush=True)
        try:
            results[key] = fn(args, cmds, errfd)
        except BenchError as e:
            print(f"  FAILED: {e}", flush=True)
            results[key] = {"error": str(e)}
        if "error" in results[key] or "errors" in results[key]:
            failed = True
    results["params"] = {"launches": args.launches, "mib": args.mib, "pings": args.pings,
                         "concurrent": args.concurrent}
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
    with open(args.netns) as f:
        n = json.load(f)
    p = r["params"]
    rows = []
    misses = []
    failures = []

    def row(metric, direct="-", helper="-", ratio="-", target="-"):
        rows.append((metric, direct, helper, ratio, target))

    def failed(key, metric):
        section = r.get(key, {"error": "not measured"})
        for e in section.get("errors", []):
            failures.append(f"{key}: {e}")
        if "error" in section:
            failures.append(f"{key}: {section['error']}")
            row(metric, "FAILED", "FAILED")
            return True
        return False

    if not failed("launch", "launch /bin/true (median)"):
        L = r["launch"]
        ld, lh, lb = L["direct"]["median_ns"], L["helper"]["median_ns"], L["bwrap"]["median_ns"]
        row("launch /bin/true (median)", ms(ld), ms(lh), f"{lh / ld:.1f}x")
        row("  helper p10 / p90", "-", f"{ms(L['helper']['p10_ns'])} / {ms(L['helper']['p90_ns'])}")
        row("  bwrap (median)", "-", ms(lb), f"{lh / lb:.2f}x of bwrap", "helper <= bwrap")
        bd, bh, bb = (L[k]["block_ns"] / 1e9 for k in ("direct", "helper", "bwrap"))
        row(f"  {p['launches']} back to back (wall)", f"{bd:.2f} s", f"{bh:.2f} s", f"{bh / bd:.1f}x")
        row(f"  bwrap {p['launches']} back to back", "-", f"{bb:.2f} s", f"{bh / bb:.2f}x of bwrap",
            "helper <= bwrap")
        if lh > lb:
            misses.append(f"launch: helper median {ms(lh)} > bwrap {ms(lb)}")
    metric = f"throughput cat {p['mib']} MiB"
    if not failed("throughput", metric):
        T = r["throughput"]
        td, th = T["direct"]["mib_per_s"], T["helper"]["mib_per_s"]
        note = f" ({len(T['errors'])} runs FAILED)" if T.get("errors") else ""
        row(metric + note, f"{td:.0f} MiB/s", f"{th:.0f} MiB/s", f"{th / td:.2f}x", ">= 0.7x")
        if th / td < 0.7:
            misses.append(f"throughput: {th:.0f} / {td:.0f} MiB/s = {th / td:.2f}x < 0.7x")
    if not failed("pingpong", "round trip 64 B (median)"):
        P = r["pingpong"]
        pd, ph = P["direct"]["median_ns"], P["helper"]["median_ns"]
        row("round trip 64 B (median)", f"{pd / 1e3:.1f} us", f"{ph / 1e3:.1f} us", f"{ph / pd:.1f}x",
            "<= 3x")
        row("  p90", f"{P['direct']['p90_ns'] / 1e3:.1f} us", f"{P['helper']['p90_ns'] / 1e3:.1f} us")
        if ph / pd > 3:
            misses.append(f"round trip: {ph / 1e3:.1f} / {pd / 1e3:.1f} us = {ph / pd:.1f}x > 3x")
    metric = f"{p['concurrent']} concurrent sessions"
    if not failed("concurrent", metric):
        C = r["concurrent"]
        cd, ch = C["direct"]["wall_s"], C["helper"]["wall_s"]
        row(metric + " (all exit 0)", f"{cd:.3f} s", f"{ch:.3f} s", f"{ch / cd:.1f}x")
    base = n["unshare true"]["median_ns"]
    net = n["unshare --net true"]["median_ns"]
    row("netns: unshare [--net] true", ms(base), ms(net), f"+{(net - base) / 1e6:.2f} ms netns")
    allns = n["unshare --mount --pid --ipc --uts --fork true"]["median_ns"]
    allnet = n["unshare --net --mount --pid --ipc --uts --fork true"]["median_ns"]
    row("  with mnt/pid/ipc/uts too", ms(allns), ms(allnet), f"+{(allnet - allns) / 1e6:.2f} ms netns")

    header = ("metric", "direct", "helper", "ratio", "target")
    widths = [max(len(str(x[i])) for x in rows + [header]) for i in range(5)]
    print()
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip())
    for r_ in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r_, widths)).rstrip())
    print()
    print("ratio = helper / direct (throughput: helper MiB/s / direct MiB/s); bwrap rows: helper / "
          "bwrap; netns rows: direct = without, helper column = with a new network namespace.")
    print("targets missed: " + ("; ".join(misses) if misses else "none"))
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
    r.add_argument("--netns", required=True)
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
