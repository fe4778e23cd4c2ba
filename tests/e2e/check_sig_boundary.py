#!/usr/bin/python3
"""Signal handlers tracing across sub-buffer boundaries (issue 16).

usage: check_sig_boundary.py STRATA PROG WORKDIR [RUNS]

Each run: `strata record --subbuf-size 1M --subbuf-count 16` of
strata-test-sig-boundary (300,000 loop events while a 200 us SIGALRM
handler emits its own, plus a forked child's 100,000, both ending with
_exit).  The rings hold the whole run, so the oracle is exact: every loop
event of each process (i = 0..N-1, no gap, no duplicate), every handler
event of each process (numbers 0..N-1 as the program counted them, each
once; the child has none outside ThreadSanitizer), and no discarded event
reported by babeltrace2.
"""
import os
import shutil
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, trace_messages  # noqa: E402


def one_run(strata, prog, work, check, k):
    out = os.path.join(work, "trace%d" % k)
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "consumerd%d.sock" % k)
    r = subprocess.run([strata, "record", "--subbuf-size", "1M", "--subbuf-count", "16",
                        "-o", out, "--", prog], env=env, capture_output=True, text=True,
                       timeout=600)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, "run %d: strata record exits 0 (got %d)" % (k, r.returncode))
    kv = dict(w.split("=", 1) for w in r.stdout.split() if "=" in w)
    want = {0: int(kv.get("parent", -1)), 1: int(kv.get("child", -1))}
    alarms = {0: int(kv.get("alarms", -1)), 1: int(kv.get("child_alarms", -1))}
    loops = {0: [], 1: []}
    handled = {0: [], 1: []}
    discarded = 0
    for msg in trace_messages(out):
        if msg.kind == "discarded_events":
            discarded += msg.count
        elif msg.kind == "event" and msg.name == "sigb:loop":
            loops[msg.fields["who"]].append(msg.fields["i"])
        elif msg.kind == "event" and msg.name == "sigb:alarm":
            handled[msg.fields["who"]].append(msg.fields["n"])
    for who, name in ((0, "parent"), (1, "child")):
        got = loops[who]
        check(got == list(range(want[who])),
              "run %d: the %s's %d loop events, each once, in order (read %d)" %
              (k, name, want[who], len(got)))
    check(alarms[0] > 0, "run %d: the timer interrupted the loop (%d handler events)" %
          (k, alarms[0]))
    for who, name in ((0, "parent"), (1, "child")):
        # Sorted: a handler nested in another (ThreadSanitizer) records after it.
        got = sorted(handled[who])
        check(got == list(range(alarms[who])),
              "run %d: every handler event of the %s, each once (%d of %d)" %
              (k, name, len(got), alarms[who]))
    check(discarded == 0, "run %d: nothing discarded (%d)" % (k, discarded))
    shutil.rmtree(out, ignore_errors=True)


def main():
    strata, prog, work = sys.argv[1:4]
    runs = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check = Checks()
    for k in range(runs):
        one_run(strata, prog, work, check, k)
    check.finish()


main()
