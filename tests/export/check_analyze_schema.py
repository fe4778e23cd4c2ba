#!/usr/bin/python3
"""`strata analyze mutex` and `strata analyze monitor` write one JSON schema
(docs/pthread.md, "JSON output"), checked on the known pthread + JVM trace
of make_timeline_fixture.py: the same top level, the same keys and types
for what both measure, exact figures (wait statistics over the waits), the
array monitor named as Java writes it (int[], not [I).

usage: check_analyze_schema.py STRATA WORKDIR"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_timeline_fixture  # noqa: E402
from timeline_check import fail  # noqa: E402

TOP = {"analysis": str, "events": int, "discarded": int, "processes": list, "locks": list}
LOCK = {"process": int, "kind": str, "name": str, "address": str, "contended": int, "wait_total_ns": int,
        "wait_mean_ns": int, "wait_p99_ns": int, "wait_max_ns": int, "sites": list}
SITE = {"function": str, "location": str, "contended": int, "wait_total_ns": int, "wait_max_ns": int,
        "stack": list}


def typed(obj, keys, what):
    for k, t in keys.items():
        if not isinstance(obj.get(k), t):
            fail("%s: %s is %r, want a %s" % (what, k, obj.get(k), t.__name__))


def analyze(strata, what, trace, fmt="json"):
    r = subprocess.run([strata, "analyze", what, trace, "--format=" + fmt], capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        fail("analyze %s: %d %s" % (what, r.returncode, r.stderr))
    return json.loads(r.stdout) if fmt == "json" else r.stdout


def main():
    strata, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    trace = os.path.join(work, "trace")
    make_timeline_fixture.make(trace)
    got = {}
    for what in ("mutex", "monitor"):
        rep = analyze(strata, what, trace)
        typed(rep, TOP, what)
        if rep["analysis"] != what or len(rep["locks"]) != 1:
            fail("%s: %r" % (what, rep))
        for p in rep["processes"]:
            typed(p, {"index": int, "name": str, "pid": int}, what + " process")
        lk = rep["locks"][0]
        typed(lk, LOCK, what + " lock")
        for s in lk["sites"]:
            typed(s, SITE, what + " site")
        proc = rep["processes"][lk["process"]]
        got[what] = (proc["name"], proc["pid"], lk["kind"], lk["name"], lk["contended"], lk["wait_total_ns"],
                     lk["wait_mean_ns"], lk["wait_p99_ns"], lk["wait_max_ns"],
                     [(s["function"], s["contended"], s["wait_total_ns"]) for s in lk["sites"] if s["contended"]])
        if what == "monitor":
            extra = (lk["class"], lk["hash"], lk["waiters"], lk["holders"], lk["sites"][0]["stack"])
            if extra != ("int[]", 0x7645a180, {"Worker-1": 1}, {"main": 1}, [{"function": "Main.run:10"}]):
                fail("monitor's own facts %r" % (extra,))
    want = {"mutex": ("app", 500, "mutex", "0xa000", 1, 400, 400, 400, 400, [("", 1, 400)]),
            "monitor": ("java", 700, "monitor", "int[]@7645a180", 1, 500, 500, 500, 500, [("Main.run:10", 1, 500)])}
    if got != want:
        fail("figures\n got %r\nwant %r" % (got, want))
    text = analyze(strata, "monitor", trace, "text")
    if "int[]@7645a180" not in text or "[I" in text:
        fail("monitor text names the array monitor %r" % text)
    print("ok: one schema, exact figures for both analyses")


if __name__ == "__main__":
    main()
