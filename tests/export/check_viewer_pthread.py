#!/usr/bin/python3
"""Real programs from Debian under the pthread preload, exported to Chrome
JSON and opened in speedscope (headless Chromium, speedscope_harness.py):

- python3 running pt_pylock.py (tests/pthread): ROUNDS threads each block
  once on one threading.Lock (a sem_t), and CPython's GIL (a mutex and a
  condition variable) makes the threads wait for each other;
- sqlite3 with `PRAGMA threads=2` building an index (its sorter threads).

Oracles, from speedscope's own parsed profiles (Profile.forEachCall, what
its flame chart draws):
- its profiles are the program's threads that have slices, named by the
  program's name and pid;
- for every lock `strata analyze mutex --format=json` reports, the calls
  named `wait KIND 0xADDR` over all threads equal its contended
  acquisitions, and there is no wait slice of a lock the analysis does not
  report;
- condition variables: a `cond wait 0xCOND` call is one cond_wait or
  cond_timedwait call (the export draws each call), counted in the trace by
  babeltrace2; the analysis reports a plain condition variable's waits as
  those calls, and a mutex+cond lock's (the GIL's) contended waits as runs
  of them: a thread's calls with no unlock of its own between are one wait
  (a timed wait retried, or a wake-up that lost the lock to another thread
  and waits again), so under load the calls can outnumber the waits;
- pt_pylock's lock: exactly ROUNDS waits, one on each of ROUNDS threads
  (from the program's own account, not ours);
- the JSON passes the trace-event schema, its flows pair exactly;
- a screenshot of python3's timeline is a picture.

usage: check_viewer_pthread.py STRATA NPM_CACHE WORKDIR PT_PYLOCK
exit 77 (skip) without npm, chromium, sqlite3, or when the tracer lost events."""
import json
import os
import re
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import speedscope_harness as ss  # noqa: E402
from timeline_check import check_json, fail, record, run  # noqa: E402

ROUNDS = 20
# Small pages and cache make the index's sort spill into several runs, which
# the sorter threads merge, on 10,000 rows (a 20 MB JSON: speedscope in
# headless Chromium needs minutes for 100 MB).
SQL = ("PRAGMA page_size=512; PRAGMA threads=2; PRAGMA cache_size=-64; CREATE TABLE t(a INTEGER, b TEXT); "
       "BEGIN; WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<10000) "
       "INSERT INTO t SELECT (x*7919)%10000, hex(randomblob(8)) FROM c; COMMIT; "
       "CREATE INDEX ti ON t(b); SELECT count(*) FROM t;")


class NotExact(Exception):
    pass


# The records after which a thread has unlocked once more (the analysis'
# per-thread unlock count; a compact hold record is a lock and its unlock).
UNLOCKS = ("pthread:mutex_unlock", "pthread:rwlock_unlock", "pthread:sem_post", "pthread:mutex_held",
           "pthread:mutex_tryheld")


def cond_wait_calls(trace):
    """{`cond wait 0xCOND`: [calls, runs]} of the trace, read by babeltrace2
    (the reference reader).  A run: a thread's waits on the cond with no
    unlock of that thread between (a timed wait retried, or a wake-up that
    found the predicate false again: the mutex stays held)."""
    import bt2
    calls, unlocks, last = {}, {}, {}
    for msg in bt2.TraceCollectionMessageIterator(trace):
        if type(msg) is not bt2._EventMessageConst:
            continue
        ev = msg.event
        tid = int(ev["vtid"])
        if ev.name in UNLOCKS:
            unlocks[tid] = unlocks.get(tid, 0) + 1
        elif ev.name in ("pthread:cond_wait", "pthread:cond_timedwait"):
            name = "cond wait 0x%x" % int(ev.payload_field["cond"])
            c = calls.setdefault(name, [0, 0])
            c[0] += 1
            n = unlocks.get(tid, 0)
            if last.get((name, tid)) != n:
                c[1] += 1
                last[(name, tid)] = n
    return calls


def expected_waits(label, rep, conds):
    """{slice name: calls} the export must give for the analysis REP and
    the trace's cond wait calls CONDS (cond_wait_calls); fails where the
    analysis does not account for those calls."""
    want = {}
    for lk in rep["locks"]:
        addr = "0x%x" % int(lk["address"], 16)
        if lk["kind"] == "mutex+cond":
            name = "cond wait " + addr
            calls, runs = conds.get(name, [0, 0])
            if lk["contended"] != runs:
                fail("%s: %s: %d contended waits, the trace's %d calls make %d runs" %
                     (label, name, lk["contended"], calls, runs))
        elif lk["contended"]:
            name = "wait %s %s" % (lk["kind"], addr)
            want[name] = want.get(name, 0) + lk["contended"]
    for cv in rep.get("conds", []):
        name = "cond wait 0x%x" % int(cv["address"], 16)
        if cv["waits"] != conds.get(name, [0, 0])[0]:
            fail("%s: %s: %d waits, the trace holds %d calls" % (label, name, cv["waits"], conds.get(name, [0])[0]))
    reported = {"cond wait 0x%x" % int(x["address"], 16) for x in rep["locks"] + rep.get("conds", [])
                if x in rep.get("conds", []) or x["kind"] == "mutex+cond"}
    for name, (calls, _) in conds.items():
        if name not in reported:
            fail("%s: %s: %d calls in the trace, not in the analysis" % (label, name, calls))
        want[name] = calls
    return want


def check_program(strata, site, work, label, prog, min_threads, screenshot):
    """Records PROG, exports it, opens it in speedscope; returns (the
    parsed profiles by name, the program's pid, the screenshot's path), or
    None when the program waited for no lock (nothing for speedscope to
    draw)."""
    trace = record(strata, work, prog)
    rep = json.loads(run([strata, "analyze", "mutex", trace, "--format=json"]).stdout)
    if rep["discarded"]:
        raise NotExact("%s: the tracer lost events; counts would not be exact" % label)
    if len(rep["processes"]) != 1:
        fail("%s: processes %r" % (label, rep["processes"]))
    pid, procname = rep["processes"][0]["pid"], rep["processes"][0]["name"]
    js = os.path.join(work, label + ".json")
    run([strata, "export", "--format=json", trace, "-o", js])
    evs = check_json(js)
    starts = sorted(e["id"] for e in evs if e["ph"] == "s")
    if starts != sorted(e["id"] for e in evs if e["ph"] == "f"):
        fail("%s: flows do not pair: %d starts, %d ends" % (label, len(starts), sum(e["ph"] == "f" for e in evs)))
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in evs if e["ph"] == "M"}
    with_slices = {ss.thread_profile_name(names.get((e["pid"], None)), e["pid"], names.get((e["pid"], e["tid"])),
                                          e["tid"]) for e in evs if e["ph"] in "BX"}
    want = expected_waits(label, rep, cond_wait_calls(trace))
    if not want:
        print("info: %s (pid %d) waited for no lock this time: nothing for speedscope to draw" % (label, pid))
        return None
    png = os.path.join(work, label + ".png") if screenshot else None
    dom, parsed = ss.load(site, js, work, screenshot=png)
    if parsed is None:
        fail("%s: speedscope's parsed profiles were not found in the page" % label)
    profiles = {p["name"]: ss.calls_by_name(p) for p in parsed["profiles"]}
    if set(profiles) != with_slices:
        fail("%s: speedscope's profiles %r, want the threads with slices %r" %
             (label, sorted(profiles), sorted(with_slices)))
    mine = [n for n in profiles if n.startswith("%s (pid %d" % (procname, pid))]
    if len(mine) != len(profiles) or len(mine) < min_threads:
        fail("%s: profiles %r, want at least %d, all of %s (pid %d)" %
             (label, sorted(profiles), min_threads, procname, pid))
    got = {}
    for calls in profiles.values():
        for name, n in calls.items():
            if re.match(r"(wait (mutex|rwlock|semaphore)|cond wait) 0x", name):
                got[name] = got.get(name, 0) + n
    if got != want:
        diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
        fail("%s: speedscope's wait calls differ from analyze mutex's (name: (speedscope, analyze)): %r" %
             (label, diff))
    print("ok: %s (pid %d): speedscope shows %d threads; %d waits on %d locks and conds as analyze mutex" %
          (label, pid, len(profiles), sum(got.values()), len(got)))
    return profiles, pid, png


def main():
    strata, cache, work, pylock = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    sqlite3 = shutil.which("sqlite3")
    if not sqlite3:
        print("SKIP: needs sqlite3 (scripts/deps.sh installs it)")
        return 77
    try:
        site = ss.site(cache, work)
    except ss.Skip as e:
        print("SKIP: %s" % e)
        return 77
    try:
        py_json = os.path.join(work, "pylock.json")
        profiles, pid, png = check_program(strata, site, os.path.join(work, "python3"), "python3",
                                           ["/usr/bin/python3", pylock, py_json, str(ROUNDS), "100"], ROUNDS,
                                           True)
        with open(py_json) as f:
            prog = json.load(f)
        # The program's own account: its lock blocked each of ROUNDS
        # threads once.
        name = "wait semaphore 0x%x" % int(prog["lock"], 16)
        per_thread = sorted(calls.get(name, 0) for calls in profiles.values() if calls.get(name))
        if prog["pid"] != pid or prog["contended"] != ROUNDS or per_thread != [1] * ROUNDS:
            fail("python3: %s per thread %r, want 1 on each of %d threads" % (name, per_thread, ROUNDS))
        w, h, colours = ss.check_picture(png)
        print("ok: python3's lock %s waited once on each of %d threads; screenshot %dx%d, %d colours" %
              (name, ROUNDS, w, h, colours))
        db = os.path.join(work, "sqlite3.db")
        check_program(strata, site, os.path.join(work, "sqlite3"), "sqlite3", [sqlite3, db, SQL], 1, False)
    except NotExact as e:
        print("SKIP: %s" % e)
        return 77
    return 0


if __name__ == "__main__":
    sys.exit(main())
