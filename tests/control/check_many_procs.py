#!/usr/bin/python3
"""Many live traced processes in one session (issue 38, "Many processes"):
N processes (tp-sync, "serve" mode) start at once, each writes a batch
(its buffer is handed over at its first event), then all stay alive and
idle, then all write a second batch, then all exit.

Oracle: the daemon's threads (/proc/PID/task), sampled while every process
is alive, idle and writing, stay <= --max-threads (default 4 x CPUs, at
least 8) whatever N: its drains are multiplexed on a few workers
(docs/ring-buffer.md, "Many processes"), not one thread per process; every
process serves both batches and exits 0; per process, the recorded events
with distinct (thread, seq) plus the discarded ones == 2 x THREADS x EVENTS;
babeltrace2 reads the trace.  A daemon that says it runs one thread per
process (a kernel with neither io_uring futex waits nor futex_waitv)
skips the thread bound only.  --futex waitv[:N] forces the Linux 6.1 path
(futex_waitv on N waiter threads, STRATA_CONSUMERD_FUTEX) and checks that
the daemon says it took it; with N=1, 127 buffers are waited on and the
others polled, and every event must still be there.  Printed, not checked: the daemon's descriptors, RSS, CPU while the
processes idle, and the time of `strata status` and `strata list` with
every process alive (--json: one line of them, for bench/run.py).
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, check_readable, end_session, start_daemon, strata_cli, tick_tally, work_dir  # noqa: E402

THREADS, EVENTS = 1, 50


def tasks(pid):
    try:
        return len(os.listdir("/proc/%d/task" % pid))
    except OSError:
        return 0


def status_kib(pid, key):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def cpu_ms(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000.0 / os.sysconf("SC_CLK_TCK")


def buffer_kib(pid):
    """Rss of the process's Strata buffer mappings (memfd strata-slot-*)."""
    total, inside = 0, False
    try:
        with open("/proc/%d/smaps" % pid) as f:
            for line in f:
                if "-" in line.split(" ", 1)[0]:
                    inside = "strata-slot" in line
                elif inside and line.startswith("Rss:"):
                    total += int(line.split()[1])
    except OSError:
        pass
    return total


def timed_ms(cmd, env):
    best = None
    for _ in range(3):
        t0 = time.monotonic()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        dt = (time.monotonic() - t0) * 1000.0
        best = dt if best is None else min(best, dt)
    return best


def batch(apps, served):
    """A line to every process at once, then every "ok" back."""
    for p in apps:
        p.stdin.write("go\n")
        p.stdin.flush()
    for p in apps:
        served[p.pid] = served.get(p.pid, 0) + (p.stdout.readline().strip() == "ok")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--consumerd", required=True)
    ap.add_argument("--app", required=True)
    ap.add_argument("--procs", type=int, default=300)
    ap.add_argument("--max-threads", type=int, default=max(8, 4 * (os.cpu_count() or 1)))
    ap.add_argument("--futex", help="STRATA_CONSUMERD_FUTEX for the daemon (waitv, waitv:N, uring)")
    ap.add_argument("--settle", type=float, default=0.0,
                    help="seconds idle before the idle CPU is measured (the safety nets backed off)")
    ap.add_argument("--json", action="store_true", help="print the measurements as one JSON line")
    a = ap.parse_args()
    work = work_dir("strata-many-")
    env = dict(os.environ, STRATA_CONSUMERD_SOCKET=os.path.join(work, "sock"))
    if a.futex:
        env["STRATA_CONSUMERD_FUTEX"] = a.futex
    out = os.path.join(work, "trace")
    log_path = os.path.join(work, "daemon.log")

    strata = strata_cli(a.strata, env)

    with open(log_path, "w") as log:
        d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env, stderr=log)
    apps, served, peak, m = [], {}, 0, {"procs": a.procs}
    try:
        strata("create", "s", "-o", out, "--subbuf-size", "64K", "--subbuf-count", "4")
        strata("enable-event", "s", "ctltest:*")
        strata("start", "s")
        cpu0 = cpu_ms(d.pid)
        for _ in range(a.procs):
            apps.append(subprocess.Popen([a.app, str(THREADS), str(EVENTS), "serve"], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, bufsize=1))
        batch(apps, served)  # every buffer handed over
        m["cpu_start_ms"] = cpu_ms(d.pid) - cpu0
        peak = max(peak, tasks(d.pid))
        # Alive and idle: what the daemon holds per process, and costs.
        m["threads"] = tasks(d.pid)
        m["fds"] = len(os.listdir("/proc/%d/fd" % d.pid))
        m["rss_mib"] = status_kib(d.pid, "VmRSS") / 1024.0
        m["buffer_kib_per_proc"] = sum(buffer_kib(p.pid) for p in apps[:10]) / min(10, len(apps))
        time.sleep(a.settle)  # a measurement's start, not a synchronisation
        c0, t0 = cpu_ms(d.pid), time.monotonic()
        time.sleep(1.0)  # a measurement interval, not a synchronisation
        m["idle_cpu_pct"] = (cpu_ms(d.pid) - c0) / ((time.monotonic() - t0) * 10.0)
        m["status_ms"] = timed_ms([a.strata, "status"], env)
        m["list_ms"] = timed_ms([a.strata, "list"], env)
        peak = max(peak, tasks(d.pid))
        c0 = cpu_ms(d.pid)
        batch(apps, served)  # all write again
        m["cpu_write_ms"] = cpu_ms(d.pid) - c0
        peak = max(peak, tasks(d.pid))
        errs, status = [], []
        for p in apps:
            p.stdin.close()
            status.append(p.wait(timeout=120))
            errs.append(p.stderr.read())
            p.stdout.close()
            p.stderr.close()
    except BaseException:
        for p in apps:
            if p.poll() is None:
                p.kill()
        d.kill()
        raise
    rc = end_session(strata, d, timeout=120)
    m["peak_threads"] = peak
    with open(log_path) as f:
        daemon_log = f.read()
    sys.stderr.write(daemon_log)

    check = Checks()
    n = a.procs
    check(rc == 0, "the daemon exits 0 (%d; a sanitizer's report makes it fail)" % rc)
    check(sum(served.values()) == 2 * n and status.count(0) == n,
          "%d processes served both batches (%d) and exited 0 (%d)" % (n, sum(served.values()), status.count(0)))
    said = [e.strip() for e in errs if "cannot hand" in e or "tracing disabled" in e]
    check(not said, "no process lost its buffer (%d did: %s)" % (len(said), said[:1]))
    threaded = "one thread per live traced process" in daemon_log
    if a.futex and a.futex.startswith("waitv"):
        # -q: the start-up notice is not logged, the first polled buffer is
        # (waitv:1 holds 127 waits).
        polled = "futex waits of this kernel: the others are polled" in daemon_log
        check((polled or n <= 127) and not threaded,
              "the daemon waits with futex_waitv threads and says once that it polls the buffers beyond "
              "them (STRATA_CONSUMERD_FUTEX=%s)" % a.futex)
    if threaded:
        print("SKIP the thread bound: the daemon runs one thread per process here (%d at the peak)" % peak)
    else:
        check(peak <= a.max_threads, "the daemon's threads at their peak: %d <= %d for %d live processes" % (
            peak, a.max_threads, n))
    ticks, discarded = tick_tally(out)
    seen = {pid: set(t) for pid, t in ticks.items()}
    pids = {p.pid for p in apps}
    want = 2 * THREADS * EVENTS
    wrong = [(pid, len(seen.get(pid, ())), discarded.get(pid, 0)) for pid in pids
             if len(seen.get(pid, ())) + discarded.get(pid, 0) != want]
    check(not wrong, "every process: recorded + discarded == %d (%d wrong: %s)" % (want, len(wrong), wrong[:3]))
    m["recorded"] = sum(len(v) for v in seen.values())
    m["discarded"] = sum(discarded.values())
    check_readable(check, out)
    print("%d live processes: daemon threads %d (peak %d), fds %d, RSS %.1f MiB, buffer Rss per process "
          "%.0f KiB, CPU %.0f ms to hand over, %.2f %% idle, %.0f ms for the second batch; "
          "strata status %.1f ms, strata list %.1f ms" % (
              n, m["threads"], peak, m["fds"], m["rss_mib"], m["buffer_kib_per_proc"], m["cpu_start_ms"],
              m["idle_cpu_pct"], m["cpu_write_ms"], m["status_ms"], m["list_ms"]))
    if a.json:
        print(json.dumps(m))
    check.finish()


if __name__ == "__main__":
    main()
