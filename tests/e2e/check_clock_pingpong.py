#!/usr/bin/python3
"""Causality across processes on the consumer's clock page (docs/design.md,
"The consumer's clock page").

usage: check_clock_pingpong.py STRATA PINGPONG WORKDIR [ROUNDS]

`strata record` (a private daemon refreshing its page every 5 ms, so that
the run crosses many refreshes) of strata-test-clock-pingpong: a parent and its
child take turns through pipes, each emitting event k before handing over
to the other, who emits k+1.  babeltrace2's time-merged order must be
exactly k = 0, 1, 2, ..., 2*ROUNDS-1 with strictly increasing timestamps
(and so non-decreasing per stream), and both sub-traces must say
env.clock = "consumer-page".  Exit 77 (skipped) where the TSC cannot back
a page (the daemon publishes none there).
"""
import os
import shutil
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, trace_messages, need_tsc_page  # noqa: E402

REFRESH_MS = 5


def main():
    strata, prog, work = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 10000
    need_tsc_page()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env.pop("STRATA_CLOCK", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "consumerd.sock")
    env["STRATA_CLOCK_REFRESH_MS"] = str(REFRESH_MS)
    check = Checks()
    r = subprocess.run([strata, "record", "-o", out, "--", prog, str(rounds)], env=env,
                       capture_output=True, text=True, timeout=300)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, "strata record exits 0 (got %d)" % r.returncode)
    kv = dict(w.split("=", 1) for w in r.stdout.split() if "=" in w)
    check(kv.get("clock_id") == "2", "the program stamped with the consumer page (clock_id=%s)" %
          kv.get("clock_id"))
    duration = int(kv.get("duration_ns", "0"))
    check(duration >= 4 * REFRESH_MS * 1000000,
          "the run (%d us) spans at least 4 refresh periods of %d ms" % (duration // 1000, REFRESH_MS))

    ks, ts, clocks, per_stream = [], [], set(), {}
    bad_stream = 0
    for msg in trace_messages(out):
        if msg.kind != "event":
            continue
        t = msg.ts
        ks.append(msg.fields["k"])
        ts.append(t)
        clocks.add(msg.env_get("clock"))
        key = msg.stream
        if per_stream.get(key, t) > t:
            bad_stream += 1
        per_stream[key] = t
    check(len(ks) == 2 * rounds, "%d events read back (expected %d)" % (len(ks), 2 * rounds))
    order = next((i for i, k in enumerate(ks) if k != i), None)
    check(order is None, "events in causal order 0..%d%s" % (
        2 * rounds - 1, "" if order is None else " (first break at position %d: k=%d)" % (order, ks[order])))
    ties = sum(1 for a, b in zip(ts, ts[1:]) if b <= a)
    check(ties == 0, "timestamps strictly increasing along the causal chain (%d not)" % ties)
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    if gaps:
        print("smallest hand-over gap: %d ns" % min(gaps))
    check(bad_stream == 0, "timestamps non-decreasing within every stream (%d back)" % bad_stream)
    check(clocks == {"consumer-page"}, "env.clock of every sub-trace is consumer-page (%r)" % clocks)
    check(len(per_stream) >= 2, "both processes have streams (%d)" % len(per_stream))
    check.finish()


main()
