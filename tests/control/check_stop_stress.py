#!/usr/bin/python3
"""Stops during heavy tracing lose nothing they do not count.

usage: check_stop_stress.py --strata S --consumerd D --app stop_stress_app
       [--cycles N] [--threads T] [--shorts K] [--rest-us U] [--progress]

One long-lived process (stop_stress_app long: T writing threads, and
short-lived threads started one after the other) runs through N sessions,
each created, started (`--wait`: the process applied it), recorded while
the threads write as fast as they can, with K short-lived processes
(stop_stress_app short) started and finished meanwhile, then stopped and
destroyed.  Small buffers (4 KiB x 4) so that events are discarded too.

Odd cycles pause the writers before the stop; even ones stop while they
write (the stop lands wherever the writers are: inside a reservation, in
the update handler that applies it, between two events), and pause them
after the stop's acknowledgement.  Every third cycle is a flight recorder
(overwrite mode), and a snapshot of it is taken while the writers write:
it keeps the newest events and counts what it overwrote as discarded
(babeltrace2 reports them before its first packet), so the same counts
hold, and each thread's newest event at the snapshot, or at a stop after
a pause, is kept.

Oracle, per cycle and per process, on babeltrace2's reading of the trace
(recorded events and the discarded counts it reports):
  - each short-lived process: recorded + discarded == its N events;
  - the long-lived one: recorded + discarded == what its threads emitted
    from the start's acknowledgement on, exactly when paused before the
    stop; when stopped while writing, at least what they had emitted when
    the stop was issued (what a stop finds recorded reaches the trace or
    is counted) and at most what they emitted until they paused;
  - each writing thread's recorded seqs increase and lie in its window.

CI runs 6 cycles (each combination of paused or racing stop and discard or
overwrite mode once) with the writers resting U = 500 us between bursts of
64 events, so that babeltrace2 reads each cycle's trace in well under a
second; by hand, STRATA_STOP_STRESS_CYCLES (or --cycles) for more and
--rest-us 0 for writers flat out (then a cycle records millions of events,
tens of seconds each to read).  Each check says its figures on failure.
"""
import argparse
import os
import re
import shutil
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, start_daemon, strata_cli, wait_for, work_dir  # noqa: E402

SHORT_EVENTS = 300
SHORT_THREAD_EVENTS = 50  # stop_stress_app.c: SHORT
STOP_SECONDS = []  # each cycle's `strata stop`, for the summary line
TICK = re.compile(r"^\S+ \S+ \((\d+)\) stress:tick: .*\{ thread = (\d+), seq = (\d+) \}$")
LOSS = re.compile(r"Tracer discarded (\d+) (event|packet)s? .* in trace \"[^\"]*-(\d+)-\d{8}-\d{6}\"")


def tally(path):
    """babeltrace2's reading of the trace at path, by process (the vpid of
    its sub-trace): ({pid: [(thread, seq), ...] in trace order}, {pid:
    discarded events}, {pid: discarded packets}, stderr lines that are
    neither).  The command-line reader: the Python bindings read about 20
    times slower."""
    bt = subprocess.run(["babeltrace2", "-f", "trace:vpid", path], capture_output=True, text=True, timeout=300)
    ticks, discarded, packets, other = {}, {}, {}, []
    for line in bt.stdout.splitlines():
        m = TICK.match(line)
        if m:
            ticks.setdefault(int(m.group(1)), []).append((int(m.group(2)), int(m.group(3))))
        else:
            other.append(line)
    for line in bt.stderr.splitlines():
        m = LOSS.search(line)
        if m:
            into = discarded if m.group(2) == "event" else packets
            into[int(m.group(3))] = into.get(int(m.group(3)), 0) + int(m.group(1))
        elif line.strip():
            other.append(line)
    if bt.returncode:
        other.append("babeltrace2 exit %d" % bt.returncode)
    return ticks, discarded, packets, other


class Control:
    """The long-lived process's shared words (stop_stress_app.c)."""

    def __init__(self, path, threads):
        self.fd = os.open(path, os.O_RDWR)  # unbuffered: every read is the file's word now
        self.threads = threads

    def word(self, i):
        return struct.unpack("<Q", os.pread(self.fd, 8, 8 * i))[0]

    def set(self, i, v):
        os.pwrite(self.fd, struct.pack("<Q", v), 8 * i)

    def emitted(self):
        """Per writing thread (and the spawner last): events so far."""
        return [self.word(8 + 2 * t) for t in range(self.threads + 1)]

    def pause(self, gen):
        """go 0, and wait until every thread acknowledged (emits no more)."""
        self.set(0, 0)
        self.set(2, gen)
        wait_for(lambda: all(self.word(9 + 2 * t) == gen for t in range(self.threads + 1)),
                 "the writers to pause", 60)


def check_trace(check, out, what, pid, e0, low, high, shorts, threads, flight=False):
    """The trace at `out` against what was emitted: each short-lived
    process in `shorts` all its events; the long-lived one (pid) at least
    `low` and at most `high` (the sums from e0), each writing thread's seqs
    increasing within [e0, its high).  A flight recorder's (overwrite mode)
    counts what the ring overwrote as discarded, and keeps the newest: each
    thread's newest event emitted by `low` (each short-lived process's
    last) is in it; packets overwritten while a snapshot copied them are
    lost packets (their events counted too)."""
    ticks, discarded, packets, other = tally(out)
    # A flight recorder's packets overwritten while a snapshot copied them
    # are lost packets there (its sequence numbers say so), by design.
    check((flight or not packets) and not other, "%s: babeltrace2 reads the trace, no packet lost (%r, %r)" %
          (what, packets, other[:3]))
    for p in shorts:
        seqs = [s for _, s in ticks.get(p, [])]
        n, lost = len(seqs), discarded.get(p, 0)
        if flight:
            check(SHORT_EVENTS - 1 in seqs, "%s: short-lived process %d: its last event kept" % (what, p))
        check(n + lost == SHORT_EVENTS, "%s: short-lived process %d: %d recorded + %d discarded == %d" %
              (what, p, n, lost, SHORT_EVENTS))
    recs = ticks.get(pid, [])
    got = len(recs) + discarded.get(pid, 0)
    check(sum(low) - sum(e0) <= got <= sum(high) - sum(e0),
          "%s: long-lived process: %d recorded + %d discarded = %d, emitted at least %d, at most %d" %
          (what, len(recs), discarded.get(pid, 0), got, sum(low) - sum(e0), sum(high) - sum(e0)))
    newest = {}
    for thread, seq in recs:
        newest[thread] = max(seq, newest.get(thread, -1))
    for t in range(threads):
        if flight and low[t] > e0[t]:
            check(newest.get(t, -1) >= low[t] - 1, "%s: thread %d's newest event by then (%d) kept (newest %d)" %
                  (what, t, low[t] - 1, newest.get(t, -1)))
    last = {}
    for thread, seq in recs:
        if thread < threads:
            ok = e0[thread] <= seq < high[thread] and seq > last.get(thread, -1)
            if not check(ok, "%s: thread %d's seq %d in [%d, %d), after %d" %
                         (what, thread, seq, e0[thread], high[thread], last.get(thread, -1))):
                break
            last[thread] = seq


def one_cycle(a, strata, ctl, check, cycle, out, gen, pid, env):
    """Cycle `cycle`: odd ones pause the writers before the stop, even ones
    stop while they write; every third is a flight recorder (overwrite
    mode) of which a snapshot is taken while they write.  The next pause
    generation."""
    racing, flight = cycle % 2 == 0, cycle % 3 == 2
    mode = ["--mode", "overwrite"] if flight else []
    strata("create", "s", "-o", out, "--subbuf-size", "4K", "--subbuf-count", "4", *mode)
    strata("enable-event", "s", "stress:*")
    strata("start", "s", "--wait=20")
    e0 = ctl.emitted()  # paused: exact
    ctl.set(0, 1)
    shorts = [subprocess.Popen([a.app, "short", str(SHORT_EVENTS)], env=env) for _ in range(a.shorts)]
    for p in shorts:
        check(p.wait(timeout=60) == 0, "cycle %d: a short-lived process exits 0" % cycle)
    wait_for(lambda: sum(ctl.emitted()) > sum(e0) + 2000, "the long-lived writers to write", 60)
    if flight:
        snap = out + "-snapshot"
        before = ctl.emitted()
        strata("snapshot", "s", "-o", snap)
        # A short-lived thread's events count when the spawner joins it:
        # one may be running, all its events in the snapshot.
        high = ctl.emitted()
        high[-1] += SHORT_THREAD_EVENTS
        check_trace(check, snap, "cycle %d: snapshot while writing" % cycle, pid, e0, before, high,
                    set(), a.threads, flight)  # the short-lived processes exited: their buffers went
        shutil.rmtree(snap, ignore_errors=True)
    if not racing:
        gen += 1
        ctl.pause(gen)
    before = ctl.emitted()
    t = time.monotonic()
    strata("stop", "s", "--wait=20")
    STOP_SECONDS.append(time.monotonic() - t)
    if racing:
        gen += 1
        ctl.pause(gen)
    after = ctl.emitted()
    strata("destroy", "s")
    what = "cycle %d (%s%s)" % (cycle, "flight recorder, " if flight else "",
                                 "stopped while writing" if racing else "paused, then stopped")
    check_trace(check, out, what, pid, e0, before, after, {p.pid for p in shorts}, a.threads, flight)
    shutil.rmtree(out, ignore_errors=True)
    return gen


def main():
    ap = argparse.ArgumentParser()
    for name in ("strata", "consumerd", "app"):
        ap.add_argument("--" + name, required=True)
    ap.add_argument("--cycles", type=int, default=int(os.environ.get("STRATA_STOP_STRESS_CYCLES", "6")))
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--shorts", type=int, default=2)
    ap.add_argument("--rest-us", type=int, default=500)
    ap.add_argument("--progress", action="store_true", help="a line per cycle (long runs by hand)")
    a = ap.parse_args()
    work = work_dir("strata-stop-stress-")
    env = dict(os.environ, STRATA_CONSUMERD_SOCKET=os.path.join(work, "sock"))
    env.pop("STRATA_EARLY", None)
    strata = strata_cli(a.strata, env)
    check = Checks(quiet=True)
    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    ctl_path = os.path.join(work, "control")
    long_proc = subprocess.Popen([a.app, "long", ctl_path, str(a.threads), str(a.rest_us)], env=env)
    wait_for(lambda: os.path.exists(ctl_path) and os.path.getsize(ctl_path) == 32768, "the long-lived process")
    ctl = Control(ctl_path, a.threads)
    gen, t0 = 0, time.monotonic()
    try:
        for cycle in range(a.cycles):
            gen = one_cycle(a, strata, ctl, check, cycle, os.path.join(work, "trace%d" % cycle), gen,
                            long_proc.pid, env)
            if a.progress:
                print("cycle %d done at %.0f s (load %.1f)" % (cycle, time.monotonic() - t0, os.getloadavg()[0]),
                      flush=True)
            if check.failures:
                break
    finally:
        ctl.set(1, 1)
        long_proc.wait(timeout=60)
        d.terminate()
        d.wait(timeout=60)
    check(long_proc.returncode == 0, "the long-lived process exits 0")
    print("%d cycle(s) of %d writing threads, spawned threads and %d short-lived processes in %.1f s" %
          (a.cycles, a.threads, a.shorts, time.monotonic() - t0))
    if STOP_SECONDS:
        st = sorted(STOP_SECONDS)
        print("strata stop: median %.3f s, max %.3f s over %d stops" % (st[len(st) // 2], st[-1], len(st)))
    check.finish()


if __name__ == "__main__":
    main()
