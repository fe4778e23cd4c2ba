#!/usr/bin/python3
"""Every stop of a session completes the counting mode's counts
(docs/pthread.md, "Counting mode"; docs/consumerd.md, "Stopping a session").

A running, unmodified program (pt_live) counts under the pthread preload
with STRATA_PTHREAD_COUNT=1 in ITS environment only: the controller's
(`strata`) has no such variable, so no command of the CLI flushes anything
for it.  The program makes exactly N pairs while the session records, then
idles holding them in its per-thread table (an idle thread flushes nothing
on its own), and the session ends by:

  stop     `strata stop`
  destroy  `strata destroy` of the active session
  sigterm  SIGTERM to the (standalone) daemon

Oracle: `strata analyze mutex` on the trace reports the lock with exactly N
acquisitions, no process in counts_unfinished and no "COUNTS INCOMPLETE";
babeltrace2 is silent.

  bounded  the daemon's wait is bounded and only where someone is told: a
           session with no running process stops at once (its answer says
           0 processes signalled, in well under the 2 s bound); a counting
           program that cannot answer (SIGSTOP) holds the stop for the bound
           (2 s), the answer names it, and the analysis then truthfully
           says COUNTS INCOMPLETE.
"""
import argparse
import json
import os
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, bt_clean, counter, start_daemon, strata_cli, wait_for, work_dir  # noqa: E402

N = 3000  # pairs made while the session records


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("how", choices=["stop", "destroy", "sigterm", "bounded"])
    for opt in ("--strata", "--consumerd", "--preload", "--prog"):  # the binaries under test
        ap.add_argument(opt, required=True)
    a = ap.parse_args()
    work = work_dir("strata-stopcounts-")
    env = {k: v for k, v in os.environ.items() if k != "STRATA_PTHREAD_COUNT"}
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "sock")
    cnt = os.path.join(work, "counter")
    check = Checks()

    run = strata_cli(a.strata, env)

    def strata(*args):  # its stdout
        return run(*args).stdout

    def allow(n):  # the program's allowance word (pt_live.c)
        with open(cnt, "r+b") as f:
            f.seek(16)
            f.write(struct.pack("<Q", n))

    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    if a.how == "bounded":  # no process at all: nobody to wait for
        strata("create", "empty", "-o", os.path.join(work, "empty"))
        strata("enable-event", "empty", "pthread:*")
        strata("start", "empty")
        t0 = time.monotonic()
        text = strata("stop", "empty")
        dt = time.monotonic() - t0
        check("0 running process(es) signalled" in text and "not acknowledged" not in text,
              "a session without processes: its stop tells nobody (%r)" % text.strip()[-120:])
        # Under the bound, not a guess at the machine's speed: a stop that
        # waited would take all of it; one that did not takes a CLI's start
        # and a round trip, which a sanitizer build on a loaded 2-CPU
        # machine can stretch past a second.
        check(dt < 2.0, "... and does not wait (%.3f s, the bound is 2 s)" % dt)
    with open(cnt, "wb") as f:  # made before the program maps it: the allowance is set
        f.write(b"\0" * 4096)
    allow(200)
    penv = dict(env, LD_PRELOAD=a.preload, STRATA_PTHREAD_COUNT="1")
    prog = subprocess.Popen([a.prog, cnt, "100000000", "20"], env=penv)
    out = os.path.join(work, "trace")
    stop_text, stop_dt = "", 0.0
    try:
        wait_for(lambda: counter(cnt) == 200, "200 pairs untraced, then idle")
        strata("create", "s", "-o", out)
        strata("enable-event", "s", "pthread:*")
        strata("start", "s", "--wait=20")  # the program joined: its next pair is recorded
        allow(200 + N)
        wait_for(lambda: counter(cnt) == 200 + N, "%d pairs traced, then idle" % N)
        if a.how == "bounded":
            prog.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        if a.how in ("stop", "bounded"):
            stop_text = strata("stop", "s")
        elif a.how == "destroy":
            stop_text = strata("destroy", "s")
        else:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=30)
        stop_dt = time.monotonic() - t0
        if a.how == "bounded":
            prog.send_signal(signal.SIGCONT)
    finally:
        with open(cnt, "r+b") as f:  # ask the program to end
            f.seek(8)
            f.write(struct.pack("<Q", 1))
        prog.send_signal(signal.SIGCONT)
        prog.wait(timeout=30)
        if d.poll() is None:
            d.send_signal(signal.SIGTERM)
            d.wait(timeout=30)
    check(prog.returncode == 0, "the program ran to its end under the preload (status %s)" % prog.returncode)
    if a.how == "sigterm":
        check(d.returncode == 0, "the daemon exited cleanly on SIGTERM (status %s)" % d.returncode)
    res = subprocess.run([a.strata, "analyze", "mutex", out, "--format=json"], capture_output=True, text=True)
    check(res.returncode == 0, "strata analyze exits 0 (%s)" % res.stderr.strip()[:200])
    rep = json.loads(res.stdout) if res.returncode == 0 else {}
    live = [lk for lk in rep.get("locks", []) if "live_lock" in json.dumps(lk)]
    n = live[0].get("acquisitions", -1) if len(live) == 1 else -1
    text = subprocess.run([a.strata, "analyze", "mutex", out], capture_output=True, text=True).stdout
    if a.how == "bounded":
        pid = str(prog.pid)
        check("not acknowledged in time by 1 of 1 process(es): %s (" % pid in stop_text,
              "the stop's answer names the process that did not answer (%r)" % stop_text.strip()[-160:])
        check(2.0 <= stop_dt < 10.0, "the stop waited for it the bound, 2 s (%.3f s)" % stop_dt)
        check(len(rep.get("counts_unfinished", [])) == 1 and "COUNTS INCOMPLETE" in text,
              "the analysis says its last counts are missing (%r)" % rep.get("counts_unfinished"))
        check(0 < n <= N, "acquisitions %d, at most the %d pairs made" % (n, N))
    else:
        check(rep.get("counted_pairs", 0) > 0, "%d pairs counted (counting mode on)" % rep.get("counted_pairs", 0))
        check(rep.get("counts_unfinished") == [] and "COUNTS INCOMPLETE" not in text,
              "no counts missing after %s (%r)" % (a.how, rep.get("counts_unfinished")))
        check(n == N, "live_lock: %d acquisitions, exactly the %d pairs the program made" % (n, N))
    ok, status, other = bt_clean(out)
    check(ok, "babeltrace2 reads the trace (status %s) %s" % (status, other))
    check.finish()


if __name__ == "__main__":
    main()
