#!/usr/bin/python3
"""A running, unmodified program under LD_PRELOAD=libstrata-pthread.so is
switched on and off through the control plane (tp-async-lib inside the
preload library installs the update handler, since the program did not link
tp-async).

Oracle, from the program's own count of completed lock/unlock pairs in shared
memory: every pair completed between `start --wait` returning and `stop`
being issued is recorded, and no more pairs than were completed between
`start` being issued and `stop --wait` returning (each bound with the one
pair in flight at an ack, IN_FLIGHT); lock and unlock events of
the lock pair up exactly; the lock is named; babeltrace2 is silent.

--count (counting mode, STRATA_PTHREAD_COUNT=1; docs/pthread.md "Counting
mode"): the daemon's stop first tells the process and waits for it, and it
flushes its counts into the still running session (and writes
mutex_counts_done): the same exact oracle, counted pairs included, and the
analysis says nothing is missing.  (check_stop_counts.py: the same with the
variable in the program's environment only.)  --disable-first: the user does that step
(`strata disable-event pthread:mutex_counts --wait`) 200 pairs before the
stop.  --kill: the program is killed (SIGKILL) while it counts, before the
stop: its last counts cannot reach the trace, and the oracle is that the
analysis SAYS so (the process in counts_unfinished, "COUNTS INCOMPLETE" in
the text), with never more acquisitions than were made.  --tight (with
--disable-first): the program locks without pausing, and 16 sessions in turn
record the mutex events only and are disabled (all of them at once), so that the update signal that disables them now and then
lands on the counting thread inside an update of its table: the handler
waits for the update's end (strata_rt_state_ready), and each session's
counts are complete: a mutex_counts_done after the last mutex_counts, and every pair
from start's ack to the disable's issue recorded, at most those from start's
issue to the disable's ack.  --window (with --count): the same rounds, four
of them, with a build of the preload that waits 50 us in each counted unlock
between counting's decision and the count, so that the disable's change
lands there; then the program idles and a quiet session starts and stops:
it holds no pair (a pair the table counted after the disable's flush would
go into it).
"""
import json
import os
import re
import signal
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, control_setup, counter, start_daemon, wait_for  # noqa: E402


def main():
    def flags(ap):
        for flag in ("--count", "--disable-first", "--kill", "--tight", "--window"):
            ap.add_argument(flag, action="store_true")

    a, work, env, strata = control_setup("strata-live-", "preload", "prog", more=flags)
    cnt = os.path.join(work, "counter")

    def pairs():
        return counter(cnt)

    # the program's and the controller's environment: counting (every hold
    # timed) with --count, else every pair a record of its own
    env["STRATA_PTHREAD_COUNT"] = "1" if a.count else "0"
    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    penv = dict(env, LD_PRELOAD=a.preload)
    if a.count:
        penv["STRATA_PTHREAD_COUNT"] = "1"
    prog = subprocess.Popen([a.prog, cnt, "100000000000", "0" if a.tight or a.window else "200"], env=penv)
    out = os.path.join(work, "trace")
    try:
        wait_for(lambda: os.path.exists(cnt) and pairs() >= 200, "the program to run untraced")
        if a.window:
            rounds = window_rounds(strata, work, pairs, cnt)
        elif a.tight:
            rounds = tight_rounds(strata, work, pairs)
        else:
            strata("create", "s", "-o", out)
            strata("enable-event", "s", "pthread:*")
            c0, c1, cd0, cd, c2, c3 = live_round(a, strata, pairs, prog)
    finally:
        with open(cnt, "r+b") as f:  # ask the program to end
            f.seek(8)
            f.write(struct.pack("<Q", 1))
        prog.wait(timeout=30)
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=30)
    check = Checks()
    check(prog.returncode == (-9 if a.kill else 0),
          "the program ran to its end under the preload (status %s)" % prog.returncode)
    if a.window:
        for i, (tout, c0, c1, cd0, cd, qout) in enumerate(rounds):
            check_tight(check, a, i, tout, c0, c1, cd0, cd)
            check_quiet(check, a, i, qout)
        check.finish()
        return
    if a.tight:
        for i, (tout, c0, c1, cd0, cd) in enumerate(rounds):
            check_tight(check, a, i, tout, c0, c1, cd0, cd)
        check.finish()
        return
    check_round(check, a, out, c0, c1, cd0, cd, c2, c3)


def live_round(a, strata, pairs, prog):
    """Session s (created, events enabled) started, then (--disable-first)
    counting disabled, (--kill) the program killed, stopped, destroyed: the
    program's pair counts at each step."""
    cd0 = cd = 0
    c0 = pairs()
    strata("start", "s", "--wait=20")
    c1 = pairs()
    wait_for(lambda: pairs() >= c1 + 500, "500 pairs while traced")
    if a.disable_first:
        cd0 = pairs()
        strata("disable-event", "s", "pthread:mutex_counts", "--wait=20")
        cd = pairs()
        wait_for(lambda: pairs() >= cd + 200, "200 pairs more, not counted")
    c2 = pairs()
    if a.kill:
        prog.kill()
        prog.wait(timeout=30)
    strata("stop", "s", "--wait=20")
    c3 = pairs()
    strata("destroy", "s")
    return c0, c1, cd0, cd, c2, c3


# The program's count rises after each unlock, so at an ack one pair may be
# complete and not yet in the count: the handler that applied the change
# ran between the unlock and the count's increment, and the test read the
# count before the program ran again (two CPUs, four busy processes).  At a
# disable's or stop's ack that pair is in the trace (made before the
# change) and not in the count read: the upper bound allows it.  At start's
# ack it is in the count read later and not in the trace (made before
# tracing began): the lower bound allows it.  The program has one thread:
# at most one such pair.  A pair lost or recorded outside the change would
# be many, not one (the program locks without pausing).
IN_FLIGHT = 1


# --tight: the mutex events (a pair is a mutex_held or counted), the call
# sites and the mappings (the lock's name); the disable takes every mutex
# event in one change.  Each round's signal lands inside an update of the
# table now and then (a few percent of rounds without the wait).
TIGHT = ("pthread:mutex_*", "pthread:site", "pthread:mapping")
TIGHT_ROUNDS = 16


def disabled_round(strata, tout, pairs, made):
    """One session (trace tout) started, its mutex events disabled once
    `made` pairs were made while it traced, then stopped: its pair counts."""
    strata("create", "t", "-o", tout)
    strata("enable-event", "t", *TIGHT)
    c0 = pairs()
    strata("start", "t", "--wait=20")
    c1 = pairs()
    wait_for(lambda: pairs() >= c1 + made, "%d pairs while traced" % made)
    cd0 = pairs()
    strata("disable-event", "t", "pthread:mutex_*", "--wait=20")
    cd = pairs()
    strata("stop", "t", "--wait=20")
    strata("destroy", "t")
    return c0, c1, cd0, cd


def tight_rounds(strata, work, pairs):
    """TIGHT_ROUNDS sessions, each started, its mutex events disabled while
    the program locks without pausing, then stopped: (trace, pair counts)."""
    rounds = []
    for i in range(TIGHT_ROUNDS):
        tout = os.path.join(work, "trace%d" % i)
        rounds.append((tout,) + disabled_round(strata, tout, pairs, 500))
    return rounds


WINDOW_ROUNDS = 4


def set_word(cnt, word, value):
    """pt_live.c's control word `word` (2: the allowance)."""
    with open(cnt, "r+b") as f:
        f.seek(8 * word)
        f.write(struct.pack("<Q", value))


def window_rounds(strata, work, pairs, cnt):
    """WINDOW_ROUNDS sessions as tight_rounds', each followed, the program
    idle, by a quiet session: (trace, pair counts, quiet trace)."""
    rounds = []
    for i in range(WINDOW_ROUNDS):
        tout, qout = os.path.join(work, "trace%d" % i), os.path.join(work, "quiet%d" % i)
        counts = disabled_round(strata, tout, pairs, 200)
        set_word(cnt, 2, 1)  # an allowance used up: the program idles, its last pair counted
        wait_for(lambda: counter(cnt, 3) == 1, "the program to idle")
        strata("create", "q", "-o", qout)
        strata("enable-event", "q", *TIGHT)
        strata("start", "q", "--wait=20")
        strata("stop", "q", "--wait=20")
        strata("destroy", "q")
        set_word(cnt, 2, 0)
        wait_for(lambda: counter(cnt, 3) == 0, "the program to lock again")
        rounds.append((tout,) + counts + (qout,))
    return rounds


def check_quiet(check, a, i, out):
    """Round i's quiet session: the program made no pair while it was armed."""
    res = subprocess.run([a.strata, "analyze", "mutex", out, "--format=json"], capture_output=True, text=True)
    rep = json.loads(res.stdout) if res.returncode == 0 else {}
    n = sum(l.get("acquisitions", 0) for l in rep.get("locks", []))
    check(res.returncode == 0 and n == 0 and rep.get("counted_pairs", 0) == 0,
          "round %d: the quiet session, the program idle throughout, holds no pair (%d acquisitions, %d "
          "counted; %s)" % (i, n, rep.get("counted_pairs", 0), res.stderr.strip()[:200]))


def check_tight(check, a, i, out, c0, c1, cd0, cd):
    """Round i's trace: its counts complete, every pair from start's ack to
    the disable's issue recorded, none made after the disable's ack."""
    res = subprocess.run([a.strata, "analyze", "mutex", out, "--format=json"], capture_output=True, text=True)
    check(res.returncode == 0, "round %d: strata analyze exits 0 (%s)" % (i, res.stderr.strip()[:200]))
    rep = json.loads(res.stdout) if res.returncode == 0 else {}
    # one lock (named in the first session only: the mappings are told once)
    locks = rep.get("locks", [])
    n = locks[0].get("acquisitions", -1) if len(locks) == 1 else -1
    check(rep.get("counted_pairs", 0) > 0 and rep.get("counts_unfinished") == [],
          "round %d: %d pairs counted, complete though the change's signal may interrupt a count (%r)" %
          (i, rep.get("counted_pairs", 0), rep.get("counts_unfinished")))
    check(cd0 - c1 - IN_FLIGHT <= n <= cd - c0 + IN_FLIGHT,
          "round %d: acquisitions %d within [%d pairs from start's ack to the disable, %d from start to "
          "the disable's ack, each with the pair in flight]" % (i, n, cd0 - c1 - IN_FLIGHT, cd - c0 + IN_FLIGHT))
    bt = subprocess.run(["babeltrace2", out], capture_output=True, text=True)
    check(bt.returncode == 0 and bt.stderr == "", "round %d: babeltrace2 reads the trace with nothing on stderr" % i)


def check_round(check, a, out, c0, c1, cd0, cd, c2, c3):
    """The trace of live_round."""
    res = subprocess.run([a.strata, "analyze", "mutex", out, "--format=json"], capture_output=True, text=True)
    check(res.returncode == 0, "strata analyze exits 0 (%s)" % res.stderr.strip()[:200])
    locks = json.loads(res.stdout).get("locks", []) if res.returncode == 0 else []
    live = [l for l in locks if "live_lock" in json.dumps(l)]
    check(len(live) == 1, "the lock is named live_lock")
    n = live[0].get("acquisitions", -1) if live else -1
    if a.kill:
        rep = json.loads(res.stdout)
        text = subprocess.run([a.strata, "analyze", "mutex", out], capture_output=True, text=True).stdout
        check(0 < n <= c3 - c0 + IN_FLIGHT,
              "acquisitions %d at most the %d pairs from start to stop's ack and the pair in flight" %
              (n, c3 - c0 + IN_FLIGHT))
        check(len(rep["counts_unfinished"]) == 1 and "COUNTS INCOMPLETE" in text,
              "the analysis says the stopped process's last counts are missing (%r)" % rep["counts_unfinished"])
        bt = subprocess.run(["babeltrace2", out], capture_output=True, text=True)
        check(bt.returncode == 0 and bt.stderr == "", "babeltrace2 reads the trace with nothing on stderr")
        check.finish()
        return
    if a.count:
        rep = json.loads(res.stdout)
        check(rep["counted_pairs"] > 0 and rep["counts_unfinished"] == [],
              "%d pairs counted, all flushed before the change (%r)" % (rep["counted_pairs"], rep["counts_unfinished"]))
    check(c2 - c1 - IN_FLIGHT <= n <= c3 - c0 + IN_FLIGHT,
          "acquisitions %d within [%d pairs after start's ack, %d pairs from start to stop's ack, each with the "
          "pair in flight]" % (n, c2 - c1 - IN_FLIGHT, c3 - c0 + IN_FLIGHT))
    bt = subprocess.run(["babeltrace2", out], capture_output=True, text=True)
    # a compact pthread:mutex_held is one lock and its unlock (docs/pthread.md)
    held_ev = bt.stdout.count("pthread:mutex_held:")
    if a.count:  # counted pairs: a lock and an unlock each
        held_ev += sum(int(x) for x in re.findall(r"pthread:mutex_counts: .*?, count = (\d+)", bt.stdout))
    locks_ev = bt.stdout.count("pthread:mutex_lock:") + bt.stdout.count("pthread:mutex_acquired:") + held_ev
    unlocks_ev = bt.stdout.count("pthread:mutex_unlock:") + held_ev
    check(bt.returncode == 0 and bt.stderr == "", "babeltrace2 reads the trace with nothing on stderr")
    # A pair locked before the start's change and unlocked after it: its
    # unlock is recorded (a true event) and its lock is not, so the trace
    # may begin with one unmatched unlock, and only there.
    first = re.search(r"pthread:mutex_\w+:", bt.stdout)
    lead = 1 if first and first.group(0) == "pthread:mutex_unlock:" else 0
    check(locks_ev == n and unlocks_ev == locks_ev + lead,
          "lock events %d == acquisitions %d, unlock events %d == lock events + %d unmatched at the start "
          "(%d compact)" % (locks_ev, n, unlocks_ev, lead, held_ev))
    check.finish()


if __name__ == "__main__":
    main()
