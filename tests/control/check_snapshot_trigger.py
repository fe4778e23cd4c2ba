"""Snapshots on an event (`strata snapshot --on`).

An overwrite-mode session with small buffers; a process emits numbered
events (snap:tick seq 0, 1, ...) in batches on command, and snap:fatal
(after = the last tick's seq) on command, and stays alive between them.

  1. Trigger set before start, hold-off 10 min: 3000 ticks, fatal -> exactly
     one snapshot appears by itself; it holds a contiguous newest tail of
     ticks ending at 2999, then fatal(after=2999) exactly once, as its last
     event; what the ring overwrote is counted (first packet's sequence
     number > 0, and its events as discarded: recorded + discarded ==
     emitted); babeltrace2 silent but for that count.  2000 ticks, fatal again: within the
     hold-off, no snapshot.
  2. Trigger replaced while the session runs, hold-off 0 (the process
     follows through tp-async): 3000 ticks (more than the 4 x 4 KiB ring
     holds), fatal -> one new snapshot ending with ticks ..7999 and
     fatal(after=7999), without the held fatal(4999).
  3. `strata stop` reports "1 taken"; the companions' traces
     (<out>-triggers) hold the three fatals; exactly two snapshot directories
     exist; bad uses are refused (discard-mode session: exit 1; a pattern
     without ':' or --on with --off: exit 2); --off answers.
"""
import glob
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, control_setup, payload_ints, start_daemon, wait_for  # noqa: E402
from check_snapshot import first_packet_seq  # noqa: E402


def read_trace(path):
    """[(name, value)] in time order: ("tick", seq) and ("fatal", after)."""
    recs = payload_ints(path, "seq", "after", names={"snap:tick", "snap:fatal"})[0]
    return [("tick", f["seq"]) if name == "snap:tick" else ("fatal", f["after"]) for name, f in recs]


def main():
    a, work, env, strata = control_setup("strata-snaptrig-", "app", "babeltrace2")
    check = Checks()
    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)

    out = os.path.join(work, "trace")

    def snapshots():
        return sorted(glob.glob(out + "-snapshot-*"))

    strata("create", "disc", "-o", os.path.join(work, "disc"))
    check(strata("snapshot", "--on", "snap:fatal", "disc", ok=False).returncode == 1,
          "a discard-mode session is refused: exit 1")
    check(strata("snapshot", "--on", "fatal", "disc", ok=False).returncode == 2, "a pattern without ':': exit 2")
    check(strata("snapshot", "--on", "a:b", "--off", "disc", ok=False).returncode == 2, "--on with --off: exit 2")
    strata("destroy", "disc")

    strata("create", "s", "-o", out, "--mode", "overwrite", "--subbuf-size", "4096", "--subbuf-count", "4",
           "--lanes", "1")
    strata("enable-event", "s", "snap:*")
    r = strata("snapshot", "--on", "snap:fatal", "--holdoff", "600000", "s")
    check("once started" in r.stdout, "a trigger set before start says so (%r)" % r.stdout.strip())
    strata("start", "s")
    app = subprocess.Popen([a.app], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def cmd(line):
        app.stdin.write(line + "\n")
        app.stdin.flush()
        return app.stdout.readline().strip()

    def await_snapshot(n):
        wait_for(lambda: len(snapshots()) >= n, "snapshot %d" % n)
        # The daemon answers a control command only after the snapshot it
        # is taking (same thread): once status answers, it is complete.
        strata("status", "s")
        return snapshots()

    try:
        check(app.stdout.readline().strip() == "ready", "the process started")
        check(cmd("3000") == "2999", "3000 ticks")
        check(cmd("fatal") == "fatal", "fatal")
        snaps = await_snapshot(1)
        check(len(snaps) == 1, "one snapshot after the first fatal (%d)" % len(snaps))
        check(cmd("2000") == "4999", "2000 more ticks")
        check(cmd("fatal") == "fatal", "a second fatal within the hold-off")
        r = strata("snapshot", "--on", "snap:fatal", "--holdoff", "0", "s")
        check(r.returncode == 0 and "at most one per 0 ms" in r.stdout, "trigger replaced while running (%r)" %
              r.stdout.strip())
        check(len(snapshots()) == 1, "no snapshot for the fatal within the hold-off (%d)" % len(snapshots()))
        check(cmd("3000") == "7999", "3000 more ticks")
        check(cmd("fatal") == "fatal", "a third fatal")
        snaps = await_snapshot(2)
        check(len(snaps) == 2, "a second snapshot after the third fatal (%d)" % len(snaps))
        check(app.poll() is None, "the process kept running")
        app.stdin.close()
        check(app.wait(timeout=30) == 0, "the process exited normally")
        r = strata("stop", "s")
        check("snapshots on snap:fatal: 1 taken" in r.stdout, "stop reports the trigger's snapshots (%r)" %
              r.stdout.strip())
        check(len(snapshots()) == 2, "exactly two snapshots in all (%d)" % len(snapshots()))
        r = strata("snapshot", "--off", "s")
        check("no more snapshots" in r.stdout, "--off (%r)" % r.stdout.strip())
        # emitted by each snapshot: the ticks 0..last and the fatals so far
        for snap, last, emitted in zip(snaps, (2999, 7999), (3001, 8003)):
            name = os.path.basename(snap)
            bt = subprocess.run([a.babeltrace2, snap], capture_output=True, text=True, timeout=60)
            other = [ln for ln in bt.stderr.splitlines() if ln.strip() and not ln.startswith("WARNING: Tracer discarded")]
            check(bt.returncode == 0 and not other,
                  "babeltrace2 reads %s with nothing on stderr but its discarded-events count (%r)" %
                  (name, bt.stderr[:300]))
            _, _, discarded = payload_ints(snap)
            check(len(read_trace(snap)) + discarded == emitted, "%s: recorded %d + discarded %d == emitted %d" %
                  (name, len(read_trace(snap)), discarded, emitted))
            evs = read_trace(snap)
            ticks = [v for k, v in evs if k == "tick"]
            fatals = [v for k, v in evs if k == "fatal"]
            check(bool(ticks) and ticks == list(range(ticks[0], last + 1)),
                  "%s: a contiguous newest tail of ticks %s..%s ending at %d" %
                  (name, ticks[0] if ticks else None, ticks[-1] if ticks else None, last))
            check(fatals == [last] and evs[-1] == ("fatal", last),
                  "%s: the trigger fatal(after=%d) exactly once, last (%s)" % (name, last, fatals))
            p0 = first_packet_seq(snap)
            check(p0 is not None and p0 > 0 and ticks and ticks[0] > 0,
                  "%s: what the ring overwrote is counted (first packet seq %s)" % (name, p0))
        trig = read_trace(out + "-triggers")
        check(trig == [("fatal", 2999), ("fatal", 4999), ("fatal", 7999)],
              "the companions' own traces hold every trigger event, the held one too (%s)" % trig)
        strata("destroy", "s")
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=30)
    check.finish()


if __name__ == "__main__":
    main()
