#!/usr/bin/python3
"""A burst of first events (issue 38): N traced processes (tp-sync) join a
running session, then all make their buffer at once: each gets a line on
stdin at the same moment, and its first event hands its buffer over to the
daemon on a connection of its own.  The daemon's listen backlog overflows
under such a burst; a hand-over must then wait for room (it was sent on an
unconnected socket before: "cannot hand the buffer to the consumer daemon
at the first event: errno 107", the process' events lost and counted
nowhere).

Oracle: every process serves its batch and exits 0, none says it could not
hand its buffer over; per process, the recorded events with distinct
(thread, seq) plus the discarded ones == THREADS x EVENTS, for every one of
the N processes; babeltrace2 reads the trace.  The daemon's thread count at
the burst's peak is printed (docs/benchmarks.md, "Current figures": row 8).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, check_readable, control_setup, end_session, start_daemon, tick_tally  # noqa: E402

THREADS, EVENTS = 1, 50


def threads_of(pid):
    try:
        with open("/proc/%d/status" % pid) as f:
            return int([l for l in f if l.startswith("Threads:")][0].split()[1])
    except (OSError, IndexError):
        return 0


def main():
    a, work, env, strata = control_setup("strata-burst-", "app",
                                         more=lambda ap: ap.add_argument("--procs", type=int, default=300))
    out = os.path.join(work, "trace")

    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    apps = []
    peak = 0
    try:
        strata("create", "s", "-o", out, "--subbuf-size", "64K", "--subbuf-count", "4")
        strata("enable-event", "s", "ctltest:*")
        strata("start", "s")
        for _ in range(a.procs):
            apps.append(subprocess.Popen([a.app, str(THREADS), str(EVENTS), "serve"], env=env,
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True, bufsize=1))
        # The burst: every process' first event within a few ms.
        for p in apps:
            p.stdin.write("go\n")
            p.stdin.flush()
        served = 0
        for p in apps:
            served += p.stdout.readline().strip() == "ok"
            peak = max(peak, threads_of(d.pid))
        peak = max(peak, threads_of(d.pid))
        errs, status = [], []
        for p in apps:
            p.stdin.close()
            status.append(p.wait(timeout=60))
            errs.append(p.stderr.read())
            p.stdout.close()
            p.stderr.close()
    except BaseException:
        for p in apps:
            if p.poll() is None:
                p.kill()
        d.kill()
        raise
    end_session(strata, d)

    check = Checks()
    check(served == a.procs and status.count(0) == a.procs,
          "%d processes served their batch (%d) and exited 0 (%d)" % (a.procs, served, status.count(0)))
    said = [e.strip() for e in errs if "cannot hand" in e or "tracing disabled" in e]
    check(not said, "no process lost its buffer at the first event (%d did: %s)" % (len(said), said[:1]))
    ticks, discarded = tick_tally(out)
    seen = {pid: set(t) for pid, t in ticks.items()}
    pids = {p.pid for p in apps}
    wrong = [(pid, len(seen.get(pid, ())), discarded.get(pid, 0)) for pid in pids
             if len(seen.get(pid, ())) + discarded.get(pid, 0) != THREADS * EVENTS]
    check(not wrong, "every process: recorded + discarded == %d (%d wrong: %s)" % (
        THREADS * EVENTS, len(wrong), wrong[:3]))
    check(set(seen) <= pids, "only the burst's processes recorded")
    print("daemon threads at the burst's peak: %d for %d processes" % (peak, a.procs))
    check_readable(check, out)
    check.finish()


if __name__ == "__main__":
    main()
