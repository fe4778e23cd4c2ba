#!/usr/bin/python3
"""`strata query` and libstrata-sqlite.so (docs/query.md) against babeltrace2.

usage: check_query.py STRATA DEMO WORKLOAD SQLITE_EXT WORKDIR

On traces made here (strata-demo recorded by `strata record`, a pthread
program recorded with `--preload pthread`, a hand-made trace with losses, a
u64 past INT64_MAX and a string with quotes, control characters and
invalid UTF-8), the answers to a set of questions equal what the bt2 Python
bindings compute from the same trace: counts per event and thread, min, max
and sum of fields, every field of every event (typed tables and the JSON
column), a time window (and that it reads fewer bytes), pid and tid
filters, begin/end pairs (slices), the SQL of docs/query.md that gives
`strata analyze mutex`'s figures (equal to its JSON), the lost table, bad
SQL (its position), a damaged trace (answers, says what it skipped, and
its `lost` rows name the machine, process, thread and stream), exact u64
aggregates and REALs that read back exactly from CSV and JSON,
and the extension loaded by Python's sqlite3; and 30 mutated copies of the
demo trace (every query exits 0 or 1, in bounded time).
"""
import csv
import io
import json
import math
import os
import re
import shutil
import sqlite3
import struct
import subprocess
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from strata_testlib import Checks, trace_messages  # noqa: E402

check = Checks()


def run(args, env=None, timeout=120):
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=timeout)


def q(strata, trace, sql, *opts, damaged=False):
    """Rows of `strata query --csv` (a list of lists of str, header first) and stderr.
    damaged: the trace is, so the answer comes with exit 1 and the damage said."""
    r = run([strata, "query", "--csv"] + list(opts) + [trace, sql])
    if r.returncode != (1 if damaged else 0) or (damaged and "skipped: damaged" not in r.stderr):
        print("query failed:", sql, r.stderr)
        return None, r.stderr
    return list(csv.reader(io.StringIO(r.stdout))), r.stderr


def bt_events(trace):
    """Every event of the trace: (ts_ns, name, tid, vpid, payload dict)."""
    out = []
    for m in trace_messages(trace):
        if m.kind == "event":
            out.append((m.ts, m.name, m.tid, m.env_int("vpid", None), bt_payload(m.fields)))
    return out


def bt_payload(p):
    """The payload as the query tables give it: an enumeration also as its
    label (`NAME_label`), a sequence's CTF length field left out."""
    d = {}
    for k in p:
        if k.startswith("_"):
            continue  # a sequence's length field (CTF's), not one of Strata's fields
        d[k] = p[k]
        labels = p.labels(k)
        if labels is not None:
            d[k + "_label"] = labels[0] if labels else None
    return d


def as_int(s):
    return None if s == "" else int(s)


def record(strata, out, args, env=None):
    shutil.rmtree(out, ignore_errors=True)
    r = run([strata, "record", "-o", out] + args, env=env)
    check(r.returncode == 0, "strata record %s exits 0 (%s)" % (" ".join(args[-3:]), r.stderr[-300:]))
    return r.returncode == 0


def demo_checks(strata, trace):
    evs = bt_events(trace)
    check(len(evs) > 1000, "bt2 reads the demo trace (%d events)" % len(evs))
    # Counts per event and thread.
    exp = {}
    for ts, name, tid, pid, p in evs:
        exp[(name, tid)] = exp.get((name, tid), 0) + 1
    rows, _ = q(strata, trace, "SELECT name, tid, count(*) FROM events GROUP BY name, tid")
    got = {(r[0], int(r[1])): int(r[2]) for r in rows[1:]} if rows else {}
    check(got == exp, "count per event and thread equals bt2's (%d groups)" % len(exp))
    # min/max/sum of fields, among them a u64 past INT64_MAX (as exact text).
    ints = [p for ts, n, tid, pid, p in evs if n == "demo:ints"]
    rows, _ = q(strata, trace, 'SELECT min(s64), max(s64), sum(u32), min(s8), max(u16), count(*), '
                'sum(CAST(x64 AS TEXT) = \'%d\') FROM "demo:ints"' % max(p["x64"] for p in ints))
    r = rows[1] if rows else []
    check(r == [str(min(p["s64"] for p in ints)), str(max(p["s64"] for p in ints)),
                str(sum(p["u32"] for p in ints)), str(min(p["s8"] for p in ints)),
                str(max(p["u16"] for p in ints)), str(len(ints)), "1"],
          "min/max/sum of demo:ints fields and the largest x64 equal bt2's (%r)" % r)
    rows, _ = q(strata, trace, 'SELECT x64, typeof(x64) FROM "demo:ints"')
    got = sorted(int(r[0]) for r in rows[1:]) if rows else []
    check(got == sorted(p["x64"] for p in ints) and all(r[1] == "text" for r in rows[1:]),
          "every x64 (u64 past INT64_MAX) comes out exact, as text")
    # Every field of every demo:mix event, typed columns.
    mix = [(ts, tid, p) for ts, n, tid, pid, p in evs if n == "demo:mix"]
    rows, _ = q(strata, trace, 'SELECT ts, tid, f_thread, seq, f32, f64, state, state_label, msg, arr, vals, '
                'blob, typeof(f32), typeof(state) FROM "demo:mix"')
    got = []
    for r in rows[1:] if rows else []:
        got.append((int(r[0]), int(r[1]), {"thread": int(r[2]), "seq": int(r[3]), "f32": float(r[4]),
                                          "f64": float(r[5]), "state": int(r[6]),
                                          "state_label": r[7] or None, "msg": r[8],
                                          "arr": json.loads(r[9]), "vals": json.loads(r[10]),
                                          "blob": json.loads(r[11])}))
    check(sorted(got, key=lambda x: (x[0], x[1], x[2]["seq"])) ==
          sorted(mix, key=lambda x: (x[0], x[1], x[2]["seq"])),
          "every demo:mix row (floats, enum value and label, string, array, sequences) equals bt2's")
    check(all(r[12] == "real" and r[13] == "integer" for r in rows[1:]), "floats are REAL, enums INTEGER")
    # The fields as JSON, every event.
    rows, _ = q(strata, trace, "SELECT ts, tid, name, fields FROM events")
    got = sorted((int(r[0]), int(r[1]), r[2], json.dumps(json.loads(r[3]), sort_keys=True))
                 for r in rows[1:]) if rows else []
    exp = sorted((ts, tid, n, json.dumps(p, sort_keys=True)) for ts, n, tid, pid, p in evs)
    check(got == exp, "events.fields (JSON) of every event equals bt2's payload")
    # A time window: the middle third; fewer packet bytes read than the whole.
    tss = sorted(e[0] for e in evs)
    t1, t2 = tss[len(tss) // 3], tss[2 * len(tss) // 3]
    rows, err_w = q(strata, trace, "SELECT count(*), min(ts), max(ts) FROM events WHERE ts BETWEEN %d AND %d"
                    % (t1, t2), "--stats")
    n = sum(1 for t in tss if t1 <= t <= t2)
    check(rows and rows[1] == [str(n), str(t1), str(t2)], "a ts window's rows equal bt2's (%d)" % n)
    _, err_all = q(strata, trace, "SELECT count(*) FROM events", "--stats")
    bw = re.search(r"(\d+) packet bytes read", err_w)
    ba = re.search(r"(\d+) packet bytes read", err_all)
    check(bw and ba and int(bw.group(1)) < int(ba.group(1)),
          "the window reads fewer packet bytes than the whole (%s vs %s)" %
          (bw and bw.group(1), ba and ba.group(1)))
    # tid and pid equality (pushed down to the streams).
    tid = sorted({e[2] for e in evs if e[1] == "demo:ints"})[1]
    pid = evs[0][3]
    rows, err_t = q(strata, trace, "SELECT count(*) FROM events WHERE tid = %d" % tid, "--stats")
    check(rows and int(rows[1][0]) == sum(1 for e in evs if e[2] == tid), "tid = %d counts as bt2" % tid)
    bt = re.search(r"(\d+) packet bytes read", err_t)
    check(bt and ba and int(bt.group(1)) < int(ba.group(1)), "tid = X reads fewer bytes than the whole")
    rows, _ = q(strata, trace, "SELECT count(*) FROM events WHERE pid = %d" % pid)
    check(rows and int(rows[1][0]) == len(evs), "pid = X counts every event of that process")
    rows, _ = q(strata, trace, "SELECT count(*) FROM events WHERE pid = %d" % (pid + 1))
    check(rows and int(rows[1][0]) == 0, "another pid has no event")
    # ORDER BY ts comes in the reader's order: equal to bt2's timestamps.
    rows, _ = q(strata, trace, "SELECT ts FROM events ORDER BY ts")
    check(rows and [int(r[0]) for r in rows[1:]] == tss, "ORDER BY ts gives bt2's timestamps in order")
    # processes and threads.
    rows, _ = q(strata, trace, "SELECT pid, process, domain FROM processes")
    check(rows and rows[1:] == [[str(pid), "strata-demo", "ust"]], "processes names the demo (%r)" % rows)
    rows, _ = q(strata, trace, "SELECT tid FROM threads ORDER BY tid")
    check(rows and sorted(int(r[0]) for r in rows[1:]) == sorted({e[2] for e in evs}),
          "threads lists every thread bt2 saw")
    return evs


def pthread_checks(strata, trace):
    evs = bt_events(trace)
    check(any(e[1] == "pthread:mutex_lock" for e in evs), "the pthread trace holds mutex_lock events")
    # Waits: each contended acquisition's [ts - wait_ns, ts].
    exp = sorted((ts - p["wait_ns"], ts, tid, p["lock"]) for ts, n, tid, pid, p in evs
                 if n == "pthread:mutex_lock" and p["wait_ns"] > 0)
    rows, _ = q(strata, trace, "SELECT ts, ts_end, tid, object FROM slices WHERE kind = 'lock_wait'")
    got = sorted(tuple(int(x) for x in r) for r in rows[1:]) if rows else None
    check(got == exp and exp, "lock waits (begin/end) equal bt2's (%d)" % len(exp))
    # kind, tid and a ts_end window pushed down (the question of issue 50).
    # The window: the middle half of that thread's own waits (by their
    # ends), so that it holds some whatever the scheduling made of the run.
    tid = max(set(e[2] for e in exp), key=lambda t: sum(1 for e in exp if e[2] == t))
    mine = sorted(e[1] for e in exp if e[2] == tid)
    t1, t2 = mine[len(mine) // 4], mine[3 * len(mine) // 4]
    rows, err = q(strata, trace, "SELECT ts, ts_end, tid, object FROM slices WHERE kind = 'lock_wait' AND tid = %d "
                  "AND ts_end BETWEEN %d AND %d" % (tid, t1, t2), "--stats")
    got = sorted(tuple(int(x) for x in r) for r in rows[1:]) if rows else None
    want = [e for e in exp if e[2] == tid and t1 <= e[1] <= t2]
    check(got == want and want, "lock waits of thread %d ending in a window equal bt2's (%d)" % (tid, len(want)))
    # Holds of full records: each acquisition and its thread's next unlock of
    # the lock, ended early by the first acquisition of the lock read after it
    # (analyze's rule: records in order, a compact record's acquisition at its
    # record) if that comes before the unlock: at that acquisition's time, or
    # at the hold's own start if that was later.
    seq = {}
    acqs = []  # (read at, acquired at, lock, exclusive) of every thread
    for ts, n, tid, pid, p in evs:
        if n in ("pthread:mutex_lock", "pthread:rwlock_rdlock", "pthread:rwlock_wrlock") and p["ret"] == 0:
            seq.setdefault((tid, p["lock"]), []).append((ts, "a", n))
            acqs.append((ts, ts, p["lock"], n != "pthread:rwlock_rdlock"))
        elif n == "pthread:mutex_held":
            acqs.append((ts, ts - p["hold_ns"], p["lock"], True))
        elif n in ("pthread:mutex_unlock", "pthread:rwlock_unlock"):
            seq.setdefault((tid, p["lock"]), []).append((ts, "u", n))
    acqs.sort(key=lambda x: x[0])
    exp = []
    for (tid, lock), s_ in seq.items():
        s_.sort()
        for a, b in zip(s_, s_[1:]):
            if a[1] == "a" and b[1] == "u":
                excl = a[2] != "pthread:rwlock_rdlock"
                later = [x for x in acqs if x[2] == lock and x[0] > a[0]]
                end = b[0]
                if later and later[0][0] < b[0] and (excl or later[0][3]):
                    end = max(later[0][1], a[0])
                exp.append((a[0], end, tid, lock))
    rows, _ = q(strata, trace, "SELECT ts, ts_end, tid, object FROM slices WHERE kind = 'lock_hold' "
                "AND name NOT LIKE 'mutex_held'")
    got = sorted(tuple(int(x) for x in r) for r in rows[1:]) if rows else None
    check(got == sorted(exp) and exp, "lock holds of full records (begin/end join) equal bt2's (%d)" % len(exp))
    exp.sort()
    t1, t2 = exp[len(exp) // 3][0], exp[2 * len(exp) // 3][1]
    rows, _ = q(strata, trace, "SELECT ts, ts_end, tid, object FROM slices WHERE kind = 'lock_hold' AND name NOT LIKE "
                "'mutex_held' AND ts >= %d AND ts_end <= %d" % (t1, t2))
    got = sorted(tuple(int(x) for x in r) for r in rows[1:]) if rows else None
    want = [e for e in exp if e[0] >= t1 and e[1] <= t2]
    check(got == want and want, "lock holds of full records in a window equal bt2's (%d)" % len(want))
    analyze_sql_checks(strata, trace, "every pair a record")


def counting_checks(strata, trace):
    """Counting mode (docs/pthread.md): hold_counts' rows from bt2's
    mutex_counts, and the docs' SQL for analyze mutex again."""
    evs = bt_events(trace)
    exp = []
    for ts, n, tid, pid, p in evs:
        if n != "pthread:mutex_counts":
            continue
        timed = min(p["timed"], p["count"])
        total = p["hold_sum_ns"] + (int(float(p["hold_sum_ns"]) / timed * (p["count"] - timed)) if timed else 0)
        exp.append((ts, tid, p["lock"], p["site"], p["try_"], p["count"], p["timed"], p["hold_sum_ns"],
                    p["hold_max_ns"], total))
    check(any(e[5] > e[6] > 0 for e in exp), "the counting trace has rows with untimed pairs among timed ones "
          "(%d rows)" % len(exp))
    rows, _ = q(strata, trace, "SELECT ts, tid, object, site, tried, pairs, timed, hold_sum_ns, hold_max_ns, "
                "hold_total_ns FROM hold_counts")
    got = sorted(tuple(int(x) for x in r) for r in rows[1:]) if rows else None
    check(got == sorted(exp) and exp, "hold_counts equals bt2's mutex_counts, untimed holds at the timed "
          "ones' mean (%d rows)" % len(exp))
    analyze_sql_checks(strata, trace, "counting mode")


def symbol_checks(strata, trace):
    """strata query's table and strata view name an address as `analyze mutex` does: each
    lock's address with its data symbol, each call site's with its function
    (analyze's JSON: address and symbol, caller and function); the
    workload's own names among them (strata_hot_lock, take_hot+0x...)."""
    r = run([strata, "analyze", "mutex", trace, "--format=json"])
    check(r.returncode == 0, "analyze mutex --format=json exits 0")
    if r.returncode != 0:
        return
    want = {}
    for lk in json.loads(r.stdout)["locks"]:
        if lk.get("symbol"):
            want[lk["address"]] = lk["symbol"]
        for site in lk.get("sites", []):
            if site.get("function"):
                want[site["caller"]] = site["function"]
    shown = {}
    for col, table in (("lock", '"pthread:mutex_lock"'), ("caller", '"pthread:mutex_lock"'), ("caller", "slices")):
        r = run([strata, "query", trace, "SELECT DISTINCT %s FROM %s WHERE %s IS NOT NULL" % (col, table, col)])
        check(r.returncode == 0, "query of distinct %ss exits 0 (%s)" % (col, r.stderr[-200:]))
        for line in r.stdout.splitlines()[2:]:  # below the header and its rule
            addr, _, name = line.strip().partition(" ")
            shown[addr] = name
    both = [a for a in want if a in shown]  # analyze's locks and sites of other classes are not asked here
    differ = {a: (want[a], shown[a]) for a in both if shown[a] != want[a]}
    check(len(both) >= 2 and not differ, "the table shows %d addresses with analyze's symbols beside (differ: %r)"
          % (len(both), differ))
    names = set(shown.values())
    check("strata_hot_lock" in names and any(n.startswith("take_hot+0x") for n in names),
          "the workload's lock and function by name (%r)" % sorted(names)[:8])
    # strata view names them the same way, through either reader.
    for reader in ("strata", "babeltrace2"):
        r = run([strata, "view", trace], env=dict(os.environ, STRATA_READER=reader))
        seen = {}
        for addr, name in re.findall(r"(?:lock|caller) = (0x[0-9a-f]+)(?: ([^,} ]+))?", r.stdout):
            seen[addr] = name
        both = [a for a in want if a in seen]
        differ = {a: (want[a], seen[a]) for a in both if seen[a] != want[a]}
        check(r.returncode == 0 and len(both) >= 2 and not differ,
              "view (%s's reader) shows %d addresses with analyze's symbols beside (differ: %r)"
              % (reader, len(both), differ))
    r = run([strata, "query", "--csv", trace, 'SELECT DISTINCT lock FROM "pthread:mutex_lock"'])
    check(r.returncode == 0 and all(x.isdigit() for x in r.stdout.split()[1:]),
          "--csv keeps the numbers (%r)" % r.stdout[:80])


def analyze_sql_checks(strata, trace, what):
    # docs/query.md's SQL for analyze mutex's figures, against its JSON.
    with open(os.path.join(HERE, "..", "..", "docs", "query.md")) as f:
        doc = f.read()
    m = re.search(r"<!-- query-test: analyze-mutex -->\s*```sql\n(.*?)```", doc, re.S)
    check(m is not None, "docs/query.md holds the analyze-mutex SQL")
    if not m:
        return
    rows, _ = q(strata, trace, m.group(1))
    r = run([strata, "analyze", "mutex", trace, "--format=json"])
    check(r.returncode == 0, "analyze mutex --format=json exits 0")
    keys = ["acquisitions", "contended", "wait_total_ns", "wait_max_ns", "holds", "hold_total_ns",
            "hold_max_ns"]
    exp = {}
    for lk in json.loads(r.stdout)["locks"]:
        exp[int(lk["address"], 16)] = [lk[k] for k in keys]
    got = {}
    hdr = rows[0] if rows else []
    for row in rows[1:] if rows else []:
        d = dict(zip(hdr, row))
        got[int(d["address"], 16)] = [as_int(d[k]) or 0 for k in keys]
    diff = {a: (got.get(a), exp.get(a)) for a in set(got) | set(exp) if got.get(a) != exp.get(a)}
    check(not diff and exp, "%s: the docs' SQL gives analyze mutex's figures per lock (%d locks; differing: "
          "address: (SQL, analyze) %r)" % (what, len(exp), diff))


# A hand-made trace: every kind of field, losses, awkward text.
RAW_MSG = b'say "hi"\\ \x01\x1f\n\t\xff\xfe\xe2\x82 ok \xc3\xa9'


class RawStr(str):
    def encode(self, *a, **k):
        return RAW_MSG


def u64_checks(strata, trace):
    """u64_sum, u64_min, u64_max exact past INT64_MAX; CSV and JSON REALs read
    back as the same doubles."""
    rows, _ = q(strata, trace, 'SELECT x64 FROM "demo:ints"')
    xs = [int(r[0]) for r in rows[1:]] if rows else []
    got, _ = q(strata, trace, 'SELECT u64_sum(x64), u64_min(x64), u64_max(x64), typeof(u64_sum(x64)) '
               'FROM "demo:ints"')
    check(xs and max(xs) > 2 ** 63 and got and got[1] == [str(sum(xs)), str(min(xs)), str(max(xs)), "text"],
          "u64_sum, u64_min and u64_max of a u64 column past INT64_MAX are exact (%r, of %r)" % (got, xs))
    got, _ = q(strata, trace, "SELECT u64_sum(v), u64_max(v), typeof(u64_min(v)) FROM (SELECT "
               "'18446744073709551615' AS v UNION ALL SELECT '18446744073709551615' UNION ALL SELECT 7)")
    check(got and got[1] == ["36893488147419103237", "18446744073709551615", "integer"],
          "u64_sum past 2^64 exact; a result that fits INT64 is an INTEGER (%r)" % got)
    r = run([strata, "query", trace, "SELECT u64_sum(v) FROM (SELECT 5 AS v UNION ALL SELECT -1)"])
    check(r.returncode == 1 and "u64_sum: -1 is not an unsigned 64-bit integer" in r.stderr,
          "u64_sum of a negative value is an error naming it (%r)" % r.stderr)
    reals = [1.7976931348623157e308, -0.0, 0.1 + 0.2, float("inf"), float("-inf"), 5e-324, 1.0, 1e20]
    sql = "SELECT 1.7976931348623157e308, -0.0, 0.1 + 0.2, 1e999, -1e999, 5e-324, 1.0, 1e20"
    rows, _ = q(strata, trace, sql)
    csv_back = [float(v) for v in rows[1]] if rows else []
    r = run([strata, "query", "--json", trace, sql])
    json_back = list(json.loads(r.stdout)[0].values()) if r.returncode == 0 else []
    for what, back in (("CSV", csv_back), ("JSON", json_back)):
        check(len(back) == len(reals) and all(x == y and math.copysign(1, x) == math.copysign(1, y)
                                               and type(y) is float for x, y in zip(reals, back)),
              "%s REALs read back as the same doubles, -0.0 and the infinities too (%r)" % (what, back))
    check(rows and rows[1][3:5] == ["Inf", "-Inf"] and rows[1][6] == "1.0" and '"a":' not in r.stdout
          and "1e999" in r.stdout, "infinities are Inf in CSV, 1e999 in JSON; 1.0 keeps its point (%r)"
          % (rows and rows[1]))


def fixture_checks(strata, work):
    import demo_oracle
    import make_fixture_trace
    orig = demo_oracle.mix

    def mix(t, i):
        v = orig(t, i)
        v["msg"] = RawStr("raw")
        return v
    demo_oracle.mix = mix
    trace = os.path.join(work, "fixture")
    sub = os.path.join(trace, "ust", "pid", "fixture-4242")
    sys.argv = ["make_fixture_trace.py", sub]
    make_fixture_trace.main()
    demo_oracle.mix = orig
    text = RAW_MSG.decode("utf-8", "replace")
    rows, _ = q(strata, trace, 'SELECT msg, x64 FROM "demo:mix", "demo:ints" LIMIT 1')
    check(rows and rows[1][0] == text, "a string with quotes, control bytes and invalid UTF-8 comes out as "
          "valid UTF-8, each ill-formed subsequence U+FFFD (%r)" % (rows and rows[1][0]))
    r = run([strata, "query", "--json", trace, 'SELECT name, fields FROM events WHERE name = \'demo:mix\''])
    try:
        js = json.loads(r.stdout)
        fields = json.loads(js[0]["fields"])
        check(fields["msg"] == text and fields["state_label"] == "busy", "--json and events.fields are "
              "valid JSON holding that string and the enum's label")
    except (ValueError, IndexError, KeyError) as e:
        check(False, "--json output parses (%s: %r)" % (e, r.stdout[:300]))
    rows, _ = q(strata, trace, 'SELECT x64 FROM "demo:ints" ORDER BY ts LIMIT 1')
    check(rows and rows[1][0] == str(0xdead000000000000), "u64 0xdead000000000000 exact (%r)" % rows)
    u64_checks(strata, trace)
    rows, _ = q(strata, trace, "SELECT kind, count FROM lost ORDER BY ts")
    check(rows and rows[1:] == [["events", "5"], ["packets", "2"]], "lost: 5 events, then 2 packets (%r)" % rows)
    # A damaged copy: answers from the rest, says what it skipped.
    bad = os.path.join(work, "fixture-damaged")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(trace, bad)
    stream = os.path.join(bad, "ust", "pid", "fixture-4242", "channel0_0")
    size = os.path.getsize(stream)
    with open(stream, "r+b") as f:  # the second packet's magic
        data = f.read()
        second = data.find(b"\xc1\x1f\xfc\xc1", 1)
        f.seek(second)
        f.write(b"\0\0\0\0")
    check(0 < second < size, "the fixture has a second packet to damage")
    r = run([strata, "query", "--csv", bad, "SELECT count(*) FROM events"])
    check(r.returncode == 1 and r.stdout.splitlines()[1:] == ["4"] and "skipped: damaged" in r.stderr
          and "channel0_0" in r.stderr, "a damaged trace answers from the rest, says what it skipped, exits 1 "
          "(%r, %r)" % (r.stdout, r.stderr))
    rows, _ = q(strata, bad, "SELECT pid, process, stream, ts, ts_end, bytes FROM lost WHERE kind = 'damage'",
                damaged=True)
    third = data.find(b"\xc1\x1f\xfc\xc1", second + 1)
    check(rows and rows[1:] == [["4242", "fixture", stream, "1000000200", "3000000000", str(third - second)]],
          "the damaged span's lost row names its process and stream, between the packets around it (%r)" % rows)
    # Bad SQL: SQLite's message and where.
    r = run([strata, "query", trace, "SELECT count(*) FROM events\nWHERE ts >> AND 1"])
    check(r.returncode == 1 and "syntax error" in r.stderr and "line 2, column" in r.stderr,
          "bad SQL exits 1 with SQLite's message and its line and column (%r)" % r.stderr)
    r = run([strata, "query", trace, "SELECT nosuch FROM events"])
    check(r.returncode == 1 and "no such column: nosuch" in r.stderr, "an unknown column is named")
    r = run([strata, "query", os.path.join(work, "no-such-trace"), "SELECT 1"])
    check(r.returncode == 1 and "no-such-trace" in r.stderr, "a missing trace exits 1 and names it")
    # Addresses (strata_hex) in the table as 0x..., CSV keeps the number
    # (above); an empty answer is told; .schema takes a quoted name.
    r = run([strata, "query", trace, 'SELECT x64 FROM "demo:ints" ORDER BY ts LIMIT 1'])
    check(r.returncode == 0 and r.stdout.split() == ["x64", "-" * 18, "0xdead000000000000"],
          "a strata_hex u64 shows as 0x... in the table (%r)" % r.stdout)
    r = run([strata, "query", trace, "SELECT name FROM events WHERE 0"])
    check(r.returncode == 0 and r.stderr == "strata query: no row\n", "an empty answer says so, exit 0 (%r)" % r.stderr)
    r = run([strata, "query", trace, '.schema "demo:ints"'])
    check(r.returncode == 0 and "x64 HEX BLOB" in r.stdout, ".schema of a quoted name (%r)" % r.stdout)
    r = run([strata, "query", trace, ".schema nosuch"])
    check(r.returncode == 1 and "no table or view named nosuch" in r.stderr, ".schema of an unknown table says so")
    # The shell: statements over several lines, dot commands.
    r = subprocess.run([strata, "query", trace], input=".tables\nSELECT count(*)\n  FROM events;\n.quit\n",
                       capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and "demo:mix" in r.stdout and re.search(r"\n *5\n", r.stdout),
          "the shell reads statements ending in ';' and .tables (%r)" % r.stdout)


def float_spelling_checks(strata, work):
    """Floats in the `fields` column, read back through `strata query --json`
    as text (docs/query.md, "Types"): written as `--json` writes a REAL, the
    shortest text that reads back as the same double, with a `.` or an
    exponent; NaN null, an infinity 1e999 or -1e999.  One fixture trace per
    pair of values (its one demo:mix event's f32 and f64)."""
    import demo_oracle
    import make_fixture_trace

    def f32(x):
        return struct.unpack("<f", struct.pack("<f", x))[0]
    nan, inf = float("nan"), float("inf")
    cases = [((nan, 0.1 + 0.2), ("null", "0.30000000000000004")),
             ((inf, -inf), ("1e999", "-1e999")),
             ((f32(0.1), 1.0), ("0.10000000149011612", "1.0")),
             ((-0.0, 1.7976931348623157e308), ("-0.0", "1.7976931348623157e+308")),
             ((16777216.0, 5e-324), ("16777216.0", "5e-324")),
             ((-inf, 1e20), ("-1e999", "1e+20"))]
    orig = demo_oracle.mix
    for k, ((a, b), (sa, sb)) in enumerate(cases):
        def mix(t, i, a=a, b=b):
            v = orig(t, i)
            v["f32"], v["f64"] = a, b
            return v
        demo_oracle.mix = mix
        trace = os.path.join(work, "floats-%d" % k)
        sys.argv = ["make_fixture_trace.py", os.path.join(trace, "ust", "pid", "floats-4242")]
        make_fixture_trace.main()
        demo_oracle.mix = orig
        r = run([strata, "query", "--json", trace, "SELECT fields, f32, f64 FROM events JOIN \"demo:mix\" "
                 "USING (ts)"])
        m = re.search(r'\\"f32\\":([^,]*),\\"f64\\":([^,]*),', r.stdout)
        check(r.returncode == 0 and m and m.groups() == (sa, sb),
              "fields spells f32 %r and f64 %r as %s and %s (%r)" % (a, b, sa, sb, r.stdout))
        # The typed columns are REALs (NaN NULL), through the same writer.
        check(r.returncode == 0 and '"f32":%s,"f64":%s}' % (sa, sb) in r.stdout,
              "the typed columns f32 and f64 of %r and %r are %s and %s in --json (%r)" % (a, b, sa, sb, r.stdout))


def lost_owner_checks(strata, trace, work):
    """A packet damaged in the middle of one thread's stream: its `lost` row
    names the machine, process, thread and stream it belongs to, and the
    good packets around it bound its time.  The thread's oracle: the one
    whose events the damage took away."""
    bad = os.path.join(work, "demo-damaged")
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(trace, bad)
    streams = sorted(os.path.join(r, f) for r, _, fs in os.walk(bad) for f in fs
               if f.startswith("channel") and not f.endswith(".idx"))
    stream = max(streams, key=os.path.getsize)
    with open(stream, "r+b") as f:
        data = f.read()
        at = [i for i in range(len(data) - 3) if data[i:i + 4] == b"\xc1\x1f\xfc\xc1"]
        check(len(at) >= 3, "the demo's largest stream has 3 packets or more (%d)" % len(at))
        if len(at) < 3:
            return
        f.seek(at[len(at) // 2])
        f.write(b"\0\0\0\0")
    count = "SELECT tid, count(*) FROM events GROUP BY tid"
    before, _ = q(strata, trace, count)
    after, _ = q(strata, bad, count, damaged=True)
    lessened = sorted(set(map(tuple, before[1:])) - set(map(tuple, after[1:]))) if before and after else []
    rows, _ = q(strata, bad, "SELECT machine, pid, process, tid, stream, ts < ts_end FROM lost WHERE kind = 'damage'",
                damaged=True)
    procs, _ = q(strata, trace, "SELECT machine, pid, process FROM processes")
    check(len(lessened) == 1 and rows and len(rows) == 2 and procs
          and rows[1] == procs[1] + [lessened[0][0], stream, "1"],
          "a damaged packet's lost row names its machine, pid, process, thread and stream, its time "
          "bounded by the packets around it (%r, lessened %r)" % (rows, lessened))


def discard_owner_checks(strata, demo, work, env):
    """Discards on threads' own lanes (small sub-buffers, not blocking): each
    `lost` row of them names its thread, and each worker's events plus its
    lost ones are the --events it emitted."""
    trace = os.path.join(work, "discards")
    if not record(strata, trace, ["--subbuf-size", "4k", "--", demo, "--threads", "3", "--events", "50000"], env):
        return
    rows, _ = q(strata, trace, "SELECT tid, count(*) + coalesce((SELECT sum(count) FROM lost AS l "
                "WHERE l.tid = e.tid), 0) FROM events AS e WHERE tid != pid GROUP BY tid")
    lost, _ = q(strata, trace, "SELECT count(*), sum(tid IS NULL), coalesce(sum(count), 0) FROM lost")
    check(rows and len(rows) == 4 and all(r[1] == "50000" for r in rows[1:]) and lost and lost[1][1] in ("0", ""),
          "discards on threads' own lanes: each lost row names its thread, whose events plus its losses are "
          "the 50000 it emitted (%r; lost rows, untold threads, events: %r)" % (rows, lost and lost[1]))


def opt_int(s):
    return None if s == "" else int(s)


def sched_checks(strata, work, ext):
    """A synthetic kernel trace (make_sched_fixture.py): the sched view and
    the kernel threads' names over time, each from bt2's reading of it."""
    import make_sched_fixture
    trace = os.path.join(work, "sched")
    shutil.rmtree(trace, ignore_errors=True)
    make_sched_fixture.make(trace)
    evs = []  # the kernel's: (ts, name, tid, cpu, payload)
    user_pid = {}  # tid -> pid: the threads of the user sub-traces (of machine "box")
    for m in trace_messages(trace):
        if m.kind == "event":
            if m.env_get("domain") != "kernel":
                check(m.env_get("hostname") == "box", "the user sub-trace is of the kernel's machine")
                user_pid[m.tid] = m.env_int("vpid")
                continue
            evs.append((m.ts, m.name, m.tid, m.context("cpu_id"), bt_payload(m.fields)))
    # sched: each switch starts next_tid's slice on its CPU, the CPU's next
    # switch ends it (with its prev_state when it switched that thread out).
    # Its pid: the last fork naming the thread, else its user sub-trace's,
    # 0 for the idle task.  Its wake-up: the first sched_waking of the
    # thread since it was last the thread of an event or switched out.
    per_cpu = {}
    forked, woken = {}, {}
    for ts, n, tid, cpu, p in evs:
        if tid >= 0:
            woken.pop(tid, None)
        if n == "sched_process_fork":
            forked[p["parent_tid"]] = p["parent_pid"]
            forked[p["child_tid"]] = p["child_pid"]
        elif n == "sched_waking":
            woken.setdefault(p["tid"], ts)
        elif n == "sched_switch":
            woken.pop(p["prev_tid"], None)
            nt = p["next_tid"]
            pid = 0 if nt == 0 else forked.get(nt, user_pid.get(nt))
            per_cpu.setdefault(cpu, []).append((ts, p, pid, woken.pop(nt, None)))
    cols = ["ts", "ts_end", "dur", "machine", "cpu", "pid", "tid", "comm", "prio", "end_state", "next_tid",
            "next_comm", "wake_ts", "wake_latency"]
    exp = []
    for cpu, sw in per_cpu.items():
        for (ts, p, pid, wake), nx in zip(sw, sw[1:] + [None]):
            exp.append({"ts": ts, "ts_end": nx and nx[0], "dur": nx and nx[0] - ts, "machine": "box", "cpu": cpu,
                        "pid": pid, "tid": p["next_tid"], "comm": p["next_comm"], "prio": p["next_prio"],
                        "end_state": nx[1]["prev_state"] if nx and nx[1]["prev_tid"] == p["next_tid"] else None,
                        "next_tid": nx and nx[1]["next_tid"], "next_comm": nx and nx[1]["next_comm"],
                        "wake_ts": wake, "wake_latency": None if wake is None else ts - wake})
    exp.sort(key=lambda d: (d["ts"], d["cpu"]))
    ints = {"ts", "ts_end", "dur", "cpu", "pid", "tid", "prio", "end_state", "next_tid", "wake_ts", "wake_latency"}

    def typed(hdr, r):
        return {k: (opt_int(v) if k in ints else v or None) for k, v in zip(hdr, r)}
    rows, _ = q(strata, trace, "SELECT * FROM sched ORDER BY ts, cpu")
    got = [typed(rows[0], r) for r in rows[1:]] if rows else None
    lost = sum(1 for d in exp if d["ts_end"] is not None and d["end_state"] is None)
    check(rows and rows[0] == cols, "sched's columns (%r)" % (rows and rows[0]))
    pids = {d["tid"]: d["pid"] for d in exp}
    check(got == exp and len(per_cpu) == 3 and lost > 0,
          "sched: every CPU slice equals bt2's switches paired per CPU (%d slices, %d after a lost switch)"
          % (len(exp), lost))
    woke = [d["wake_latency"] for d in exp if d["wake_latency"] is not None]
    check(len(woke) > len(exp) // 2 and pids.get(102) == 101 and pids.get(107) == 106 and pids.get(108) == 108
          and pids.get(109, 0) is None and pids.get(110) == 110,
          "sched: pid from the forks and the user sub-trace, wake_latency of %d slices (min %d, max %d ns) as bt2's"
          % (len(woke), min(woke or [0]), max(woke or [0])))
    # ts bounds pushed down: the slices that begin in a window, fewer bytes read
    # (pid and the wake columns need what came before: read from the start).
    tss = sorted(d["ts"] for d in exp)
    t1, t2 = tss[len(tss) // 3], tss[len(tss) // 2]
    win = [d for d in exp if t1 <= d["ts"] <= t2]
    few = [c for c in cols if c not in ("pid", "wake_ts", "wake_latency")]
    rows, err_w = q(strata, trace, "SELECT %s FROM sched WHERE ts >= %d AND ts <= %d ORDER BY ts, cpu"
                    % (", ".join(few), t1, t2), "--stats")
    _, err_all = q(strata, trace, "SELECT count(*) FROM sched", "--stats")
    bw = re.search(r"(\d+) packet bytes read", err_w)
    ba = re.search(r"(\d+) packet bytes read", err_all)
    got = [typed(rows[0], r) for r in rows[1:]] if rows else None
    check(got == [{k: d[k] for k in few} for d in win] and bw and ba and int(bw.group(1)) < int(ba.group(1)) / 2,
          "sched in a ts window: bt2's slices that begin in it, %s of %s packet bytes read" %
          (bw and bw.group(1), ba and ba.group(1)))
    rows, _ = q(strata, trace, "SELECT * FROM sched WHERE ts >= %d AND ts <= %d ORDER BY ts, cpu" % (t1, t2))
    got = [typed(rows[0], r) for r in rows[1:]] if rows else None
    check(got == win and any(d["wake_latency"] is not None for d in win),
          "sched in a ts window with pid and wake_latency: bt2's (%d slices)" % len(win))
    # The worked question of docs/query.md, at a time T of the trace.
    with open(os.path.join(HERE, "..", "..", "docs", "query.md")) as f:
        doc = f.read()
    m = re.search(r"<!-- query-test: cpu-before-spike -->\s*```sql\n(.*?)```", doc, re.S)
    check(m is not None, "docs/query.md holds the cpu-before-spike SQL")
    if m:
        on1 = [d["ts"] for d in exp if d["cpu"] == 1]
        t = on1[len(on1) // 2] + 1
        sql = m.group(1).replace("1795680261540000000", str(t))
        rows, _ = q(strata, trace, sql)
        want = [d for d in exp if d["cpu"] == 1 and d["ts"] <= t and (d["ts_end"] is None or
                                                                     d["ts_end"] >= t - 10000000)]
        got = [typed(rows[0], r) for r in rows[1:]] if rows else None
        check(rows and got == [{k: d[k] for k in rows[0]} for d in want] and len(want) > 3,
              "the docs' question (what ran on CPU 1 in the 10 ms before T) gives bt2's %d slices" % len(want))
        m = re.search(r"<!-- query-test: cpu-share -->\s*```sql\n(.*?)```", doc, re.S)
        check(m is not None, "docs/query.md holds the cpu-share SQL")
        share = {}
        for d in want:
            n, ran = share.get(d["tid"], (0, 0))
            end = t if d["ts_end"] is None else min(d["ts_end"], t)
            share[d["tid"]] = (n + 1, ran + end - max(d["ts"], t - 10000000))
        rows, _ = q(strata, trace, m.group(1).replace("1795680261540000000", str(t))) if m else (None, "")
        got = [tuple(int(x) for x in r) for r in rows[1:]] if rows else None
        check(got == sorted(((k,) + v for k, v in share.items()), key=lambda x: (-x[2], x[0])),
              "the docs' CPU share in that window gives bt2's (%r)" % got)
        m = re.search(r"<!-- query-test: wake-latency -->\s*```sql\n(.*?)```", doc, re.S)
        check(m is not None, "docs/query.md holds the wake-latency SQL")
        worst = {}
        for d in exp:
            if d["wake_latency"] is not None:
                n, mx, sm = worst.get(d["tid"], (0, 0, 0))
                worst[d["tid"]] = (n + 1, max(mx, d["wake_latency"]), sm + d["wake_latency"])
        want = sorted(((pids[t], t) + v for t, v in worst.items()), key=lambda x: (-x[3], x[1]))[:10]
        rows, _ = q(strata, trace, m.group(1)) if m else (None, "")
        got = [tuple(opt_int(x) for x in r) for r in rows[1:]] if rows else None
        check(got == want and len(want) == 10, "the docs' longest wake-up latencies give bt2's (%r)" % (got,))
    # threads: a kernel thread's row per name, in time order.
    runs = {}

    def seen(tid, ts, name=None):
        r = runs.setdefault(tid, [])
        naming = bool(name) and tid != 0
        if not r or (naming and r[-1][0] is not None and r[-1][0] != name):
            r.append([None, ts, ts])
        if naming and r[-1][0] is None:
            r[-1][0] = name
        r[-1][1] = min(r[-1][1], ts)
        r[-1][2] = max(r[-1][2], ts)
    for ts, n, tid, cpu, p in evs:
        if tid >= 0:
            seen(tid, ts)
        for k in p:
            if k.endswith("comm") and k[:-4] + "tid" in p and p[k[:-4] + "tid"] >= 0:
                seen(p[k[:-4] + "tid"], ts, p[k])
    exp_t = sorted((tid, name, b, e) for tid, r in runs.items() for name, b, e in r)
    rows, _ = q(strata, trace, "SELECT tid, thread, ts, ts_end FROM threads WHERE pid IS NULL")
    got = sorted((int(r[0]), r[1] or None, int(r[2]), int(r[3])) for r in rows[1:]) if rows else None
    renamed = len(exp_t) - len(runs)
    check(got == exp_t and renamed > 0 and 110 in runs,
          "threads: each kernel thread's names over time equal bt2's (%d rows, %d renames)" % (len(exp_t), renamed))
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    db.load_extension(ext)
    db.execute("SELECT strata_open(?)", (trace,))
    n = db.execute("SELECT count(*), sum(dur) FROM sched").fetchone()
    check(n == (len(exp), sum(d["dur"] or 0 for d in exp)), "the extension: sched's count and sum(dur) (%r)" % (n,))
    db.close()
    mutation_checks(strata, trace, work, n=10, seed=51, what="the sched trace",
                    sql="SELECT count(*), sum(dur), max(comm) FROM sched; SELECT * FROM threads; "
                    "SELECT * FROM sched WHERE ts > 1100000000 AND ts < 1200000000")


def shared_lane_checks(strata, trace):
    """Threads that wrote only to a shared lane (strata-demo's workers under
    `--lanes 1`: its main thread holds the one owned lane) have their
    process's pid in events, threads and sched (a kernel sub-trace beside
    the user one switches to each of them, with no fork to say whose they
    are), as bt2 reads the user records."""
    import make_sched_fixture
    pid, host, shared_only, owned = {}, None, set(), set()
    for m in trace_messages(trace):
        if m.kind == "event":
            pid[m.tid] = m.env_int("vpid")
            host = m.env_get("hostname")
            (shared_only if m.context("vtid") is not None else owned).add(m.tid)
    shared_only -= owned
    check(len(shared_only) == 3 and len(set(pid.values())) == 1,
          "bt2: 3 threads wrote only to the shared lane (%r) of one process" % sorted(shared_only))
    rows, _ = q(strata, trace, "SELECT tid, pid FROM events GROUP BY tid, pid")
    check(rows and {int(r[0]): as_int(r[1]) for r in rows[1:]} == pid, "events: every thread's pid is bt2's")
    rows, _ = q(strata, trace, "SELECT tid, pid FROM threads")
    check(rows and {int(r[0]): as_int(r[1]) for r in rows[1:]} == pid, "threads: every thread's pid is bt2's")
    make_sched_fixture.make_switches(trace, host, sorted(shared_only))
    rows, _ = q(strata, trace, "SELECT tid, pid FROM sched WHERE tid != 0")
    got = {int(r[0]): as_int(r[1]) for r in rows[1:]} if rows else None
    check(got == {t: pid[t] for t in shared_only},
          "sched: a shared-lane-only thread's pid is its process's, as bt2 reads it (%r)" % got)


def extension_checks(ext, trace, evs):
    db = sqlite3.connect(":memory:")
    db.enable_load_extension(True)
    db.load_extension(ext)
    db.enable_load_extension(False)
    db.execute("SELECT strata_open(?)", (trace,))
    got = {(n, t): c for n, t, c in db.execute("SELECT name, tid, count(*) FROM events GROUP BY 1, 2")}
    exp = {}
    for ts, name, tid, pid, p in evs:
        exp[(name, tid)] = exp.get((name, tid), 0) + 1
    check(got == exp, "the extension from Python's sqlite3: counts per event and thread equal bt2's")
    x = [r[0] for r in db.execute('SELECT x64 FROM "demo:ints"')]
    check(sorted(int(v) for v in x) == sorted(p["x64"] for ts, n, tid, pid, p in evs if n == "demo:ints"),
          "the extension: x64 exact from Python")
    db2 = sqlite3.connect(":memory:")
    db2.enable_load_extension(True)
    db2.load_extension(ext)
    db2.execute("CREATE VIRTUAL TABLE temp.ev USING strata(?, 'events')".replace("?", "'%s'" % trace))
    n = db2.execute("SELECT count(*) FROM ev").fetchone()[0]
    check(n == len(evs), "CREATE VIRTUAL TABLE ... USING strata(PATH, 'events') counts every event")
    try:
        db2.execute("SELECT strata_open('/no/such/trace')")
        check(False, "strata_open of a missing trace fails")
    except sqlite3.OperationalError as e:
        check("no/such/trace" in str(e), "strata_open of a missing trace fails naming it (%s)" % e)
    db.close()
    db2.close()


DEMO_MUTATION_SQL = ("SELECT count(*), max(fields) FROM events; SELECT * FROM lost; SELECT * FROM threads; "
                     "SELECT count(*) FROM slices; SELECT * FROM \"demo:mix\" WHERE ts > 0 AND tid = 5")


def mutation_checks(strata, trace, work, n=30, seed=50, sql=DEMO_MUTATION_SQL, what="the demo trace"):
    """Hostile bytes (flipped, cut, inserted, in the stream files and the
    metadata): every query exits 0 or 1, in bounded time, never by a signal."""
    import random
    rng = random.Random(seed)
    bad = []
    for k in range(n):
        d = os.path.join(work, "mutated")
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(trace, d)
        files = [os.path.join(r, f) for r, _, fs in os.walk(d) for f in fs]
        for _ in range(rng.randint(1, 20)):
            f = rng.choice(files)
            with open(f, "rb") as fh:
                b = bytearray(fh.read())
            if not b:
                continue
            i, op = rng.randrange(len(b)), rng.random()
            if op < 0.6:
                b[i] = rng.randrange(256)
            elif op < 0.8:
                del b[i:i + rng.randint(1, 64)]
            else:
                b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
            with open(f, "wb") as fh:
                fh.write(b)
        try:
            r = subprocess.run([strata, "query", d, sql], capture_output=True, timeout=30)
            if r.returncode not in (0, 1):
                bad.append((k, r.returncode, r.stderr[-200:]))
        except subprocess.TimeoutExpired:
            bad.append((k, "timeout"))
    check(not bad, "%d mutated copies of %s: every query exits 0 or 1 in bounded time (%r)" %
          (n, what, bad[:3]))


def main():
    strata, demo, workload, ext, work = sys.argv[1:6]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = dict(os.environ, STRATA_CONSUMERD_SOCKET=os.path.join(work, "no-daemon.sock"))
    for v in ("STRATA_EARLY", "LD_PRELOAD", "STRATA_AGGREGATE"):
        env.pop(v, None)
    demo_trace = os.path.join(work, "demo")
    if record(strata, demo_trace, ["--subbuf-size", "4k", "--blocking", "--", demo, "--threads", "3", "--events", "3000"],
              env):
        evs = demo_checks(strata, demo_trace)
        extension_checks(ext, demo_trace, evs)
        mutation_checks(strata, demo_trace, work)
        lost_owner_checks(strata, demo_trace, work)
        discard_owner_checks(strata, demo, work, env)
    shared_trace = os.path.join(work, "shared")
    if record(strata, shared_trace, ["--blocking", "--lanes", "1", "--", demo, "--threads", "3", "--events", "200"],
              env):
        shared_lane_checks(strata, shared_trace)
    pt_trace = os.path.join(work, "pthread")
    env_pt = dict(env, STRATA_PTHREAD_COUNT="0")
    if record(strata, pt_trace, ["--preload", "pthread", "--", workload, "contend", "-", "4", "100", "50"],
              env_pt):
        pthread_checks(strata, pt_trace)
        symbol_checks(strata, pt_trace)
    cnt_trace = os.path.join(work, "pthread-counting")
    env_cnt = dict(env)
    env_cnt.pop("STRATA_PTHREAD_COUNT", None)  # the default: one pair in 16 timed
    if record(strata, cnt_trace, ["--preload", "pthread", "--", workload, "contend", "-", "4", "100", "50"],
              env_cnt):
        counting_checks(strata, cnt_trace)
    sched_checks(strata, work, ext)
    fixture_checks(strata, work)
    float_spelling_checks(strata, work)
    check.finish()


if __name__ == "__main__":
    main()
