#!/usr/bin/python3
"""End-to-end check of the pthread preload library and `strata analyze mutex`.

Records an unmodified program with `strata record --preload pthread`, analyses
the trace, and compares with what the program reports it did (pt_workload /
pt_cxx write JSON: lock addresses, exact acquisition counts, own wait measure).

usage: check_pthread.py SCENARIO --strata S --workload W --cxx C --dllib L --work DIR
SCENARIO: contend basic fork fork_agg dlopen signal sigstorm blocker ctor cxx stack pylock nest nest_monotonic
          count count16 count_default count_spill count_trade count_trade_mixed count_trade_nested, or any of them + "_count" (in counting mode,
          STRATA_PTHREAD_COUNT=16); the others with STRATA_PTHREAD_COUNT=0 (every pair a record); the spill and
          trade ones + "_every" with STRATA_PTHREAD_COUNT=1 (every hold timed)
"""
import argparse
import json
import re
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, trace_messages  # noqa: E402

check = Checks()


def waits_and_holds(trace, lock, pid):
    """The contended waits of `lock` in process `pid` ([ts - wait_ns, ts])
    and the holds of it (compact records, docs/pthread.md: a mutex_held
    whole, or begun by a mutex_acquired or a mutex_lock and ended by the
    unlock), each as (tid, begin, end) in ns, read with babeltrace2."""
    acq, holds, open_ = [], [], {}
    for m in trace_messages(trace):
        if m.kind != "event" or m.name not in (
                "pthread:mutex_lock", "pthread:mutex_unlock", "pthread:mutex_held", "pthread:mutex_acquired") \
                or m.env_int("vpid") != pid:
            continue
        p = m.fields
        if p["lock"] != lock:
            continue
        ts, tid = m.ts, m.tid
        if m.name == "pthread:mutex_held":
            holds.append((tid, ts - p["hold_ns"], ts))
        elif m.name == "pthread:mutex_acquired":
            open_[tid] = ts - p["age_ns"]
        elif m.name == "pthread:mutex_lock":
            open_[tid] = ts
            if p["contended"]:
                acq.append((tid, ts - p["wait_ns"], ts))
        elif tid in open_:
            holds.append((tid, open_.pop(tid), ts))
    return acq, holds


def hold_overlap_ns(trace, lock, pid):
    """Sum over the contended waits of `lock` in `pid` of their overlap with
    other threads' holds."""
    acq, holds = waits_and_holds(trace, lock, pid)
    return sum(max(0, min(e, he) - max(b, hb)) for t, b, e in acq for ht, hb, he in holds if ht != t)


def overlapped_waits(trace, lock, pid):
    """How many contended waits of `lock` in `pid` overlap another thread's
    recorded hold."""
    acq, holds = waits_and_holds(trace, lock, pid)
    return sum(1 for t, b, e in acq if any(ht != t and min(e, he) > max(b, hb) for ht, hb, he in holds))


def compact_counts(trace, pid):
    """Per lock address: (mutex_held records, full mutex_lock events); and
    the clocks that stamped the process's streams (trace env `clock`)."""
    n, clocks = {}, set()
    for m in trace_messages(trace):
        if m.kind == "event" and m.name in ("pthread:mutex_held", "pthread:mutex_lock") and \
                m.env_int("vpid") == pid:
            c = n.setdefault(m.fields["lock"], [0, 0])
            c[0 if m.name == "pthread:mutex_held" else 1] += 1
            clocks.add(m.env_get("clock"))
    return n, clocks


def check_nest(rep, prog_out, pid, trace, lost, monotonic):
    """Nested, out-of-order, recursive and overflowing holds (pt_workload
    nest): exact pairs, the compact form wherever the stash had room, and
    the timed holds' hold_ns against the program's own measure."""
    check(lost == 0, "nothing lost")
    check(rep["unmatched_unlocks"] == 0, "no unmatched unlock (%d)" % rep["unmatched_unlocks"])
    locks = prog_out["locks"] + [{"lock": prog_out["rec"], "acq": prog_out["rec_acq"]}]
    rows = [lock_of(rep, pid, int(lk["lock"], 16)) for lk in locks]
    got = [(r or {}).get("acquisitions") for r in rows]
    check(got == [lk["acq"] for lk in locks], "acquisitions per lock %r" % got)
    check(all(r and r["holds"] == r["acquisitions"] for r in rows), "every acquisition paired with its unlock")
    # Ten held at once: the stash keeps the first 8, locks 8 and 9 go in
    # full every time; everything else is a mutex_held.
    n, clocks = compact_counts(trace, pid)
    # The hold's two ends: TSC ticks with a clock page, else CLOCK_MONOTONIC.
    check(clocks == {"monotonic"} if monotonic else clocks and "monotonic" not in clocks,
          "stamped by %r" % sorted(clocks))
    forms = [tuple(n.get(int(lk["lock"], 16), [0, 0])) for lk in locks]
    want = [(lk["acq"], 0) if i not in (8, 9) else (0, lk["acq"]) for i, lk in enumerate(locks)]
    check(forms == want, "(mutex_held, mutex_lock) per lock %r == %r" % (forms, want))
    # hold_ns runs from after the trylock to after the real unlock (the
    # 200 us hold: to its record's own clock read; the 20 ms one, over the
    # 2^20 ticks the record's read times: to an rdtsc of its own): at least
    # the program's measure (less a clock calibration's ppm), and for the
    # 20 ms hold at most 10 ms more (a preemption inside the wrappers).
    outer, inner = rows[4], rows[5]
    o, i = prog_out["outer_ns"], prog_out["inner_ns"]
    if outer and inner:
        check(o * 0.999 - 10000 <= outer["hold_max_ns"] <= o + 10000000,
              "outer hold %d ns against the program's %d ns" % (outer["hold_max_ns"], o))
        check(inner["hold_max_ns"] >= i * 0.999 - 10000,
              "inner hold %d ns >= the program's %d ns" % (inner["hold_max_ns"], i))


def check_count(rep, prog_out, pid, trace, lost, sampled):
    """Counting mode (docs/pthread.md): the uncontended pairs of five locks,
    made by main (locks and tries; one lock at 8 sites), by a thread that
    then idles until the process exits, by a thread that exits, by a fork
    child that leaves by _exit (half of its pairs by a thread of its own,
    on the table the idler holds in the parent: none of the idler's counts
    may reach the child's records), each exactly accounted for: the first pair
    of each (thread, lock, site, lock-or-try) is a mutex_held
    (mutex_tryheld) and every later one counted in mutex_counts records.  The blocker rounds' waits and blockers
    as without counting; `sampled` (one hold in 16 timed): the hold of a
    lock's first wait may be untimed, and is then said so."""
    if not check(lost == 0, "nothing lost (the oracles below are exact)"):
        return
    bt = subprocess.run(["babeltrace2", trace], capture_output=True, text=True)
    check(bt.returncode == 0 and bt.stderr == "", "babeltrace2 reads the trace silently (%r)" % bt.stderr[:200])
    held, total = {}, {}
    for x in re.findall(r"pthread:mutex_(?:try)?held: .*?lock = (0x[0-9A-Fa-f]+)", bt.stdout):
        held[int(x, 16)] = held.get(int(x, 16), 0) + 1
    for m in re.finditer(r"pthread:mutex_counts: .*?lock = (0x[0-9A-Fa-f]+), .*?count = (\d+)", bt.stdout):
        total[int(m.group(1), 16)] = total.get(int(m.group(1), 16), 0) + int(m.group(2))
    counted = 0
    # first pairs: main's lock and trylock sites, one site for the others,
    # 8 for main's lock taken at 8 sites in turn (each its own entry)
    for name, who, first in (("main", pid, 2), ("idle", pid, 1), ("exit", pid, 1),
                             ("child_lock", prog_out["child"], 2), ("sites", pid, 8)):
        addr = int(prog_out[name], 16)
        lk = lock_of(rep, who, addr)
        want = prog_out[name.split("_")[0] + "_acq"]
        got = lk and {k: lk[k] for k in ("acquisitions", "holds", "contended")}
        # (sampled: a try site's first pair may go untimed, the lock having
        # an entry from its other site, and then be counted)
        h = held.get(addr, 0)
        check(got == {"acquisitions": want, "holds": want, "contended": 0} and 1 <= h <= first and
              lk["counted"] == want - h and total.get(addr) == want - h,
              "%s: %d pairs, the first (%d, at most %d) per-pair records, the rest counted: %r, counted %r, "
              "in records %r" % (name, want, h, first, got, lk and lk["counted"], total.get(addr)))
        check(lk is not None and 0 < lk["hold_max_ns"] and lk["hold_total_ns"] >= lk["hold_max_ns"],
              "%s: hold total and max (%r)" % (name, lk and (lk["hold_total_ns"], lk["hold_max_ns"])))
        counted += want - h
    check(rep["counts_unfinished"] == [], "every process's final flush is in the trace (%r)" %
          rep["counts_unfinished"])
    hot = lock_of(rep, pid, int(prog_out["hot"], 16))
    if check(hot is not None, "hot lock analysed"):
        check(hot["acquisitions"] == prog_out["hot_acq"] and hot["holds"] == hot["acquisitions"] and
              hot["contended"] > 0 and hot["wait_total_ns"] > 0,
              "hot lock: %d acquisitions, held as many times, waits timed (%r)" %
              (prog_out["hot_acq"], {k: hot[k] for k in ("acquisitions", "holds", "contended", "wait_total_ns")}))
        # A hold that had a waiter keeps its record (its interval), and the
        # blocker of the waits is main's hold_long(): the waits credited are
        # those that overlap a recorded hold (not one whose waiter was
        # preempted between its try and its clock read, nor one whose holder
        # saw no sleeping waiter yet: docs/pthread.md).  Exactly those: how
        # many there are depends on the scheduling (a TSan run of count16
        # had 1 contended wait of 20 rounds, whose waiter had not slept
        # yet), so the oracle is the trace's own overlaps, not a share.
        blind = rep["untimed_waited"] if sampled else 0
        credited = hot["blockers"][0]["waits"] if hot["blockers"] else 0
        over = overlapped_waits(trace, int(prog_out["hot"], 16), pid)
        check(blind <= 1 and credited == over and credited <= hot["contended"] and
              all(b["function"].startswith("hold_long") for b in hot["blockers"]),
              "%d of %d waits blamed on hold_long(), those overlapping a recorded hold (%d; %d untimed: %r)" %
              (credited, hot["contended"], over, blind, hot["blockers"][:1]))
        # Main's last n pairs of the hot lock (prog_out's count n: the exit
        # thread's), nobody waiting: one in 16 timed when sampled (a hot
        # lock's pair keeps its interval only if its unlock finds waiters),
        # every one with STRATA_PTHREAD_COUNT=1.
        n = prog_out["exit_acq"]
        check((hot["untimed"] >= n - (n + 15) // 16 - 2) if sampled else hot["untimed"] == 0,
              "hot lock: %d untimed holds, its %d pairs without waiters %s" %
              (hot["untimed"], n, "sampled one in 16" if sampled else "all timed"))
        if sampled:
            check(rep["untimed_holds"] > 0 and all(
                  lock_of(rep, w, int(prog_out[k], 16))["untimed"] > 0
                  for k, w in (("main", pid), ("child_lock", prog_out["child"]))),
                  "sampled: untimed holds counted as such (%d)" % rep["untimed_holds"])
        counted += hot["counted"]
    check(rep["counted_pairs"] >= counted, "counted_pairs %d covers the locks' %d" % (rep["counted_pairs"], counted))


# preload/pthread_count.h: a small table's window, a big table's (and its
# entries), and how many windows' pairs a spill writes as records
CWINDOW, CWINDOW_BIG, BIG_ENTRIES, CSPILL_WINDOWS = 4096, 32768, 8192, 16


def check_spill(rep, prog_out, pid, trace, lost, traded, every):
    """Spilling (docs/pthread.md): a thread's pairs over many locks miss
    its table of 256, which it trades for a big one (8,192 entries), also
    when only one pair in 5 is on them (count_trade_mixed: over 1 in 8
    missed), and when each is inside a hold of the one lock
    (count_trade_nested: the trade comes while it is held).  traded (2,048
    locks): they fit there, and are counted but for
    each lock's first pairs.  Else (32,768 locks) the big table churns too: the
    thread writes its pairs as records for CSPILL_WINDOWS big windows; the
    one lock it then takes has its first pairs recorded while the spill
    lasts, the rest counted.  Every pair of every lock accounted for.
    every: counting every hold timed (STRATA_PTHREAD_COUNT=1)."""
    if not check(lost == 0, "nothing lost (the oracles below are exact)"):
        return
    bt = subprocess.run(["babeltrace2", trace], capture_output=True, text=True)
    check(bt.returncode == 0 and bt.stderr == "", "babeltrace2 reads the trace silently (%r)" % bt.stderr[:200])
    records = {}
    for m in re.finditer(r"pthread:mutex_held: .*?lock = 0x([0-9A-F]+),", bt.stdout, re.I):
        records[int(m.group(1), 16)] = records.get(int(m.group(1), 16), 0) + 1
    one = int(prog_out["one"], 16)
    held = records.get(one, 0)
    counted = sum(int(m.group(1)) for m in re.finditer(
        r"pthread:mutex_counts: .*?lock = 0x0*%X, .*?count = (\d+)" % one, bt.stdout, re.I))
    n = prog_out["one_acq"]
    check(held + counted == n, "one lock: %d records + %d counted == %d pairs" % (held, counted, n))
    churn = sum(acq for _, acq in prog_out["churn"])
    if traded:
        # The big table holds every lock: each one's first pair is a record
        # (timed, it makes the entry), a few more where a window of 4 was
        # full; nothing like a spill's CSPILL_WINDOWS * CWINDOW records.
        locks = len(prog_out["churn"])
        churn_records = sum(records.get(int(addr, 16), 0) for addr, _ in prog_out["churn"])
        check(locks * 2 < BIG_ENTRIES and churn_records < CWINDOW + 2 * locks,
              "traded: %d of the churn's %d pairs over %d locks are records (< %d)" %
              (churn_records, churn, locks, CWINDOW + 2 * locks))
        # Its first pair at each of its two sites a record; counting every
        # hold timed, also its first in the big table (its entry stayed in
        # the small one: a timed pair's first makes it, and stays a record),
        # where sampling counts it untimed into an entry made then.
        most = 3 if every else 2
        check(held <= most, "traded: the one lock's first pairs records, the rest counted (%d records, <= %d)" %
              (held, most))
    else:
        # The first window missed the small table, the next (a big table's)
        # the big one (32,768 locks, 8,192 entries): its thread spilled for
        # CSPILL_WINDOWS big windows, the churn's other pairs and the one
        # lock's first ones, whose first pair after the spill is a record
        # too (it has no entry), the rest counted.  Give or take the pairs
        # the program's start made before main (the first window's).
        want = CSPILL_WINDOWS * CWINDOW_BIG - (churn - CWINDOW - CWINDOW_BIG) + 1
        check(abs(held - want) <= CWINDOW // 8 and counted == n - held,
              "one lock: %d of its first pairs records (the spill's rest: %d expected), %d counted after" %
              (held, want, counted))
    procs = [p["index"] for p in rep["processes"] if p["pid"] == pid]
    by_addr = {int(lk["address"], 16): lk for lk in rep["locks"] if lk["process"] in procs}
    lk = by_addr.get(one)
    check(lk is not None and lk["acquisitions"] == n and lk["holds"] == n and lk["counted"] == counted,
          "analyze: the one lock's %d pairs, %d counted (%r)" %
          (n, counted, lk and {k: lk[k] for k in ("acquisitions", "holds", "counted")}))
    bad = []
    for addr, acq in prog_out["churn"]:
        lk = by_addr.get(int(addr, 16))
        if lk is None or lk["acquisitions"] != acq or lk["holds"] != acq:
            bad.append((addr, acq, lk and (lk["acquisitions"], lk["holds"])))
    check(not bad, "the %d churned locks: every pair accounted for (%d wrong: %r)" %
          (len(prog_out["churn"]), len(bad), bad[:3]))
    check(rep["counts_unfinished"] == [], "the final flush is in the trace (%r)" % rep["counts_unfinished"])


def run(cmd, env=None, timeout=90):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def lock_of(report, pid, addr):
    """The row of lock `addr` (int) in process `pid`."""
    procs = [p["index"] for p in report["processes"] if p["pid"] == pid]
    for lk in report["locks"]:
        if lk["process"] in procs and int(lk["address"], 16) == addr:
            return lk
    return None


def window_checks(a, env, prog):
    """`strata view --since` over a trace that records pthread:mapping: the
    reader's window applies (4 KiB packets, so that the packets holding the
    mappings lie before it and are not read by the window's pass), and the
    lines are exactly the whole view's from that time on, their addresses
    named by the mappings recorded before it."""
    trace = os.path.join(a.work, "trace-4k")
    rc, _, se = run([a.strata, "record", "-o", trace, "--preload", "pthread", "--subbuf-size", "4k",
                     "--subbuf-count", "64", "--"] + prog[:2] + [prog[2] + ".4k"] + prog[3:], env=env)
    if not check(rc == 0, "window: strata record with 4 KiB sub-buffers exits 0", se[-300:]):
        return
    env_utc = dict(os.environ, TZ="UTC")
    whole = subprocess.run([a.strata, "view", trace], capture_output=True, text=True, env=env_utc,
                           timeout=120).stdout.splitlines()

    def tod(line):
        h, m, sec = line[1:19].split(":")
        return (int(h) * 3600 + int(m) * 60) * 10**9 + int(sec.replace(".", ""))

    for frac in (0.5, 0.95):
        at = whole[int(len(whole) * frac)][1:19] if whole else "00:00:00.000000000"
        tail = [ln for ln in whole if tod(ln) >= tod("[" + at)]
        r = subprocess.run([a.strata, "view", "--since", at, trace], capture_output=True, text=True,
                           env=env_utc, timeout=120)
        named = sum(1 for ln in tail if re.search(r" [A-Za-z_][\w.]*\+0x[0-9a-f]+", ln))
        check(r.returncode == 0 and named and r.stdout.splitlines() == tail,
              "window: view --since %s prints the whole view's %d lines from there, %d naming symbols" %
              (at, len(tail), named), r.stderr[-300:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("scenario")
    ap.add_argument("--strata", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--cxx", required=True)
    ap.add_argument("--dllib", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()

    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    trace = os.path.join(a.work, "trace")
    out = os.path.join(a.work, "program.json")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    # A private consumerd: never a system-wide one a developer runs.
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(a.work, "no-daemon.sock")
    # Every pair a record of its own (counting is the preload's default):
    # the per-pair oracles below; the count scenarios count.
    env["STRATA_PTHREAD_COUNT"] = "0"
    sc = a.scenario
    if sc.endswith("_count"):  # the same scenario in counting mode, one hold in 16 timed
        env["STRATA_PTHREAD_COUNT"] = "16"
        sc = sc[:-len("_count")]
    # The spill and trade scenarios run with the default (no variable), or
    # with "_every" counting every hold timed (STRATA_PTHREAD_COUNT=1: each
    # lock's entry looked up at its lock, and carried to its unlock).
    spill_count = None
    if sc.endswith("_every"):
        spill_count = "1"
        sc = sc[:-len("_every")]

    def spill_env():
        if spill_count:
            env["STRATA_PTHREAD_COUNT"] = spill_count
        else:
            env.pop("STRATA_PTHREAD_COUNT")
    if sc == "cxx":
        prog = [a.cxx, out]
    elif sc == "dlopen":
        prog = [a.workload, "dlopen", out, a.dllib]
    elif sc in ("contend", "stack"):
        prog = [a.workload, "contend", out, "4", "100" if sc == "contend" else "20", "200"]
    elif sc == "sigstorm":
        prog = [a.workload, "sigstorm", out, "4", "4000"]
    elif sc == "blocker":
        prog = [a.workload, "blocker", out, "10"]
    elif sc.startswith("nest"):
        prog = [a.workload, "nest", out, "100"]
    elif sc == "count_spill":  # the default: one hold in 16 timed; beyond a big table
        prog = [a.workload, "spill", out, "40960", "600000", "32768"]
        spill_env()
    elif sc == "count_trade":  # the same over 2,048 locks: a big table holds them
        prog = [a.workload, "spill", out, "200000", "200000", "2048"]
        spill_env()
    elif sc == "count_trade_mixed":  # one pair in 5 on them: a fifth missed, traded too
        prog = [a.workload, "spill", out, "200000", "1000", "2048", "5"]
        spill_env()
    elif sc == "count_trade_nested":  # each inside a hold of the one lock: traded while it is held
        prog = [a.workload, "spill", out, "200000", "1000", "2048", "-1"]
        spill_env()
    elif sc.startswith("count"):
        prog = [a.workload, "count", out, "5000", "10"]
        if sc == "count_default":  # no variable: the default, one hold in 16 timed
            env.pop("STRATA_PTHREAD_COUNT")
        else:
            env["STRATA_PTHREAD_COUNT"] = "16" if sc == "count16" else "1"
    elif sc == "pylock":
        prog = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "pt_pylock.py"), out,
                "20", "500"]
    elif sc == "fork_agg":
        prog = [a.workload, "fork", out]
    else:
        prog = [a.workload, sc, out]
    if sc == "stack":
        env["STRATA_PTHREAD_STACK_DEPTH"] = "6"
    if sc == "fork_agg":
        # An aggregation is a probe: libstrata's fork handlers (the probe
        # report's lock, liburcu's) run at the fork, under the preload.
        env["STRATA_AGGREGATE"] = "pthread:mutex_lock:wait_ns by lock"
    if sc == "nest_monotonic":
        # No clock page: hold_ns from CLOCK_MONOTONIC at both ends instead
        # of TSC ticks converted with the page's scale.
        env["STRATA_CLOCK"] = "monotonic"

    # Buffers large enough that a slow (sanitizer-built) consumer loses nothing.
    rc, so, se = run([a.strata, "record", "-o", trace, "--preload", "pthread", "--subbuf-size", "1M",
                      "--"] + prog, env=env)
    if not check(rc == 0, "strata record exits 0 (got %d)" % rc):
        print(so, se, file=sys.stderr)
        return 1
    with open(out) as f:
        prog_out = json.load(f)
    pid = prog_out["pid"]

    html = os.path.join(a.work, "report.html")
    rc, so, se = run([a.strata, "analyze", "mutex", trace, "--format=json", "--report=" + html])
    if not check(rc == 0, "strata analyze exits 0 (got %d)" % rc):
        print(so, se, file=sys.stderr)
        return 1
    rep = json.loads(so)
    # Counts are exact when nothing is lost; otherwise each lock's count lies
    # within the number of events the tracer reported lost (recorded +
    # discarded == emitted).
    lost = rep["discarded"]
    print("info events lost: %d" % lost)
    check(any(p["pid"] == pid for p in rep["processes"]), "the program's process %d is in the trace" % pid)
    with open(html) as f:
        page = f.read()
    check("<svg" in page and "</html>" in page and "http://" not in page.replace(
        "http://www.w3.org/2000/svg", ""), "HTML report is self-contained with inline SVG")

    chromium = shutil.which("chromium")
    if sc == "contend" and chromium:
        # The page must render in a real browser (headless Chromium, no
        # network): a blank or failed render leaves no or a tiny PNG.
        png = os.path.join(a.work, "report.png")
        try:
            subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                            "--user-data-dir=" + os.path.join(a.work, "chromium"),
                            "--window-size=1300,1200", "--screenshot=" + png, "file://" + html],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60)
        except subprocess.TimeoutExpired:
            pass
        size = os.path.getsize(png) if os.path.exists(png) else 0
        check(size > 20000, "headless Chromium renders the HTML report (%d bytes of PNG)" % size)

    def expect(name, key_addr, count, p=pid):
        lk = lock_of(rep, p, int(prog_out[key_addr], 16))
        if check(lk is not None, "%s: lock %s of pid %d analysed" % (name, prog_out[key_addr], p)):
            check(count - lost <= lk["acquisitions"] <= count,
                  "%s: acquisitions %d == %d (%d events lost)" % (name, lk["acquisitions"], count, lost))
        return lk

    if sc in ("contend", "stack"):
        hot = expect("hot", "hot", prog_out["hot_acq"])
        cold = expect("cold", "cold", prog_out["cold_acq"])
        rw = expect("rw", "rw", prog_out["rw_acq"])
        if hot and cold:
            mine = [lk for lk in rep["locks"] if lk["process"] == hot["process"]]
            check(mine[0] is hot, "hot lock ranks first by total wait")
            check(hot["symbol"] == "strata_hot_lock", "hot lock named by its symbol (%r)" % hot["symbol"])
            check(hot["contended"] > 0, "hot lock contended %d times" % hot["contended"])
            check(hot["hold_max_ns"] >= prog_out["hold_ns"],
                  "hold max %d >= the program's hold %d" % (hot["hold_max_ns"], prog_out["hold_ns"]))
            if lost == 0:
                check(hot["holds"] == hot["acquisitions"], "every hot acquisition paired with its unlock")
            # Stated tolerance: the analysis's total wait (time blocked inside
            # the lock call) is at most the program's own measure around the
            # call (+1 ms) and at least 70% of it minus 5 ms (preemption
            # between the program's clock reads and the call is not a wait).
            sw, aw = prog_out["self_wait_hot_ns"], hot["wait_total_ns"]
            check(aw <= sw + 1000000 and aw >= 0.7 * sw - 5000000,
                  "hot wait total %d ns within tolerance of the program's %d ns" % (aw, sw))
            site = hot["sites"][0] if hot["sites"] else {}
            check(site.get("function", "").startswith("take_hot+"),
                  "top waiting site is take_hot() (%r)" % site.get("function"))
            check("pt_workload.c" in site.get("location", ""), "top site has file:line (%r)" % site.get("location"))
            if sc == "stack":
                st = site.get("stack", [])
                check(len(st) >= 2 and int(st[0]["address"], 16) == int(site["caller"], 16),
                      "stack recorded from the caller (%d frames)" % len(st))
                check(any("start_thread" in f.get("function", "") for f in st),
                      "stack reaches start_thread")
                # `strata view` names the stack's addresses as it names the
                # caller, through either reader, identically.
                views = []
                for reader in ("strata", "babeltrace2"):
                    env_r = dict(os.environ, STRATA_READER=reader)
                    r = subprocess.run([a.strata, "view", "-e", "pthread:mutex_lock", "--limit", "200", trace],
                                       capture_output=True, text=True, env=env_r, timeout=120)
                    views.append(r.stdout)
                    named = [ln for ln in r.stdout.splitlines()
                             if re.search(r"stack = \[ 0x[0-9a-f]+ take_hot\+0x[0-9a-f]+, ", ln)]
                    check(r.returncode == 0 and named and all(" start_thread+" in ln for ln in named),
                          "view (%s reader) names the stack's frames: take_hot+... first, start_thread+... "
                          "(%d lines)" % (reader, len(named)))
                check(views[0] == views[1], "both readers print the same lines")
                window_checks(a, env, prog)
        check(rw is None or rw["kind"] == "rwlock", "rwlock kind")
    elif sc == "basic":
        expect("errorcheck", "ec", prog_out["ec_acq"])
        expect("recursive", "rec", prog_out["rec_acq"])
        sem = expect("semaphore", "sem", prog_out["sem_acq"])
        check(sem is not None and sem["kind"] == "semaphore" and sem["failed"] == prog_out["sem_failed"] and
              sem["holds"] == prog_out["sem_acq"],
              "semaphore: kind, %d failed calls (EAGAIN, ETIMEDOUT twice), holds (%r)" %
              (prog_out["sem_failed"], sem and {k: sem[k] for k in ("kind", "failed", "holds")}))
        # A successful trylock and its unlock fold into one compact record
        # (docs/pthread.md): ec's, and rec's innermost (unlocked first).
        bt = subprocess.run(["babeltrace2", trace], capture_output=True, text=True)
        tried = {int(x, 16) for x in re.findall(r"pthread:mutex_tryheld: .*?lock = (0x[0-9A-Fa-f]+)", bt.stdout)}
        check(tried == {int(prog_out["ec"], 16), int(prog_out["rec"], 16)},
              "mutex_tryheld records for ec and rec (%s)" % sorted(hex(x) for x in tried))
        lk = expect("one-letter global", "m", 1)
        check(lk is not None and lk["symbol"] == "m", "lock named m (not demangled as a type): %r"
              % (lk and lk["symbol"]))
        # The 20 ms timedlock that timed out is a failed wait, not an acquisition.
        held = [lk for lk in rep["locks"] if lk["symbol"] == "held_by_other"]
        if check(len(held) == 1, "held_by_other analysed"):
            check(held[0]["failed"] == 2 and held[0]["failed_wait_ns"] >= 1000000,
                  "timed-out wait counted as failed (%d calls, %d ns)" % (held[0]["failed"],
                                                                         held[0]["failed_wait_ns"]))
    elif sc in ("fork", "fork_agg"):
        expect("parent", "lock", prog_out["parent_acq"])
        expect("child", "lock", prog_out["child_acq"], p=prog_out["child"])
        # Libstrata's own locks (its fork handlers') are not the program's:
        # none in either process, and no unlock without its lock.
        check(rep["unmatched_unlocks"] == 0, "no unmatched unlock (%d)" % rep["unmatched_unlocks"])
        names = sorted(set(lk["symbol"] for lk in rep["locks"]))
        check(names == ["strata_ctor_lock", "strata_fork_lock"], "only the program's locks in the trace: %r" % names)
    elif sc == "dlopen":
        lk = expect("dlopen'd library", "lock", prog_out["acq"])
        if lk and lk["sites"]:
            check("strata_test_dl_work" in lk["sites"][0]["function"],
                  "site in the dlopen'd library symbolized (%r)" % lk["sites"][0]["function"])
    elif sc in ("signal", "ctor"):
        expect(sc, "lock", prog_out["acq"])
    elif sc == "blocker":
        # Every wait is the worker's in ask_briefly(), behind main's hold
        # taken in hold_long(): the blockers must say exactly that.
        hot = expect("handed-over lock", "hot", prog_out["hot_acq"])
        if hot and check(hot["contended"] > 0, "the worker waited (%d times)" % hot["contended"]):
            check(len(hot["blockers"]) == 1 and hot["blockers"][0]["function"].startswith("hold_long"),
                  "only hold_long() holds made others wait (%r)" % [b["function"] for b in hot["blockers"]])
            check(hot["sites"][0]["function"].startswith("ask_briefly"), "the waiting site is ask_briefly()")
            bt = hot["blockers"][0]["wait_total_ns"] if hot["blockers"] else 0
            # The oracle, computed here from the events themselves: the
            # overlap of each wait of the worker with main's holds.  (Not a
            # share of the waits: on a loaded machine the worker's wake-up
            # after main's unlock is part of its wait but nobody's hold.)
            ov = hold_overlap_ns(trace, int(prog_out["hot"], 16), pid)
            check(ov > 0 and abs(bt - ov) <= 0.01 * ov + 100000,
                  "blocked time %d ns is the overlap of the waits with the holds, %d ns (waits %d ns)" %
                  (bt, ov, hot["wait_total_ns"]))
    elif sc == "sigstorm":
        # Handlers interrupt lock calls, the tracer's emission and blocking
        # waits: every handler's acquisition and every worker's is recorded.
        check(prog_out["acq"] > 0, "handlers ran (%d of %d signals)" % (prog_out["acq"], prog_out["sent"]))
        expect("handlers' lock", "lock", prog_out["acq"])
        expect("workers' lock", "hot", prog_out["hot_acq"])
    elif sc == "cxx":
        lk = expect("std::mutex", "mutex", prog_out["mutex_acq"])
        if lk and lk["sites"]:
            # std::mutex::lock is inlined from libstdc++ headers: the site must
            # still name the user's line, not gthr-default.h.
            check(lk["sites"][0]["location"].startswith(os.path.join(os.path.dirname(
                os.path.abspath(__file__)), "pt_cxx.cpp:")),
                "std::mutex site at the user's line (%r)" % lk["sites"][0]["location"])
        expect("std::shared_mutex", "shared", prog_out["shared_acq"])
        if "timed" in prog_out:  # absent in a TSan build
            expect("std::timed_mutex (clocklock)", "timed", prog_out["timed_acq"])
            expect("std::shared_timed_mutex (rwlock clock*lock)", "stm", prog_out["stm_acq"])
            cv = [c for c in rep["conds"] if int(c["address"], 16) == int(prog_out["cv"], 16)]
            if check(len(cv) == 1, "condition_variable::wait_for (clockwait) analysed"):
                check(cv[0]["waits"] == prog_out["cv_timeouts"] and cv[0]["timeouts"] == prog_out["cv_timeouts"],
                      "wait_for: %d waits, %d timeouts == %d" % (cv[0]["waits"], cv[0]["timeouts"],
                                                                prog_out["cv_timeouts"]))
    elif sc == "pylock":
        # CPython's threading.Lock, a semaphore (pt_pylock.py): exact counts.
        lk = expect("threading.Lock", "lock", prog_out["acq"])
        if lk and lost == 0:
            got = {k: lk[k] for k in ("kind", "acquisitions", "contended", "failed", "holds")}
            want = {"kind": "semaphore", "acquisitions": prog_out["acq"], "contended": prog_out["contended"],
                    "failed": prog_out["failed"], "holds": prog_out["holds"]}
            check(got == want, "threading.Lock as a lock: %r == %r" % (got, want))
            check(lk["wait_total_ns"] > 0 and lk["wait_p99_ns"] > 0, "its waits are timed (%d ns, p99 %d ns)" %
                  (lk["wait_total_ns"], lk["wait_p99_ns"]))
    elif sc.startswith("nest"):
        check_nest(rep, prog_out, pid, trace, lost, sc == "nest_monotonic")
    elif sc in ("count_spill", "count_trade", "count_trade_mixed", "count_trade_nested"):
        check_spill(rep, prog_out, pid, trace, lost, sc != "count_spill", spill_count == "1")
    elif sc.startswith("count"):
        check_count(rep, prog_out, pid, trace, lost, sc in ("count16", "count_default"))
    else:
        check(False, "unknown scenario " + sc)

    rc, so, se = run([a.strata, "analyze", "mutex", trace, "--top", "3"])
    check(rc == 0 and "Lock contention" in so, "text report")
    print("%d failure(s)" % check.failures)
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
