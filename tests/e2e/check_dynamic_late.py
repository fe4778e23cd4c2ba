#!/usr/bin/python3
"""Events declared at run time under `strata record` (include/strata/dynamic.h).

usage: check_dynamic_late.py STRATA PROG WORKDIR

strata-test-dynamic-late declares dyn:first as main starts and dyn:late
after dyn:first filled several packets.  babeltrace2 must read the trace
with nothing on stderr (the metadata describes the late event too), with
every event of each once, in order, with its exact field values (the
rings, 4 MiB, hold the whole run: nothing may be discarded).
"""
import os
import shutil
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, bt_text, trace_messages  # noqa: E402


def main():
    strata, prog, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "consumerd.sock")
    check = Checks()
    r = subprocess.run([strata, "record", "--subbuf-size", "256K", "--subbuf-count", "16", "-e", "dyn:*", "-o", out, "--",
                        prog], env=env, capture_output=True, text=True, timeout=300)
    sys.stderr.write(r.stderr)
    check(r.returncode == 0, "strata record exits 0 (got %d)" % r.returncode)
    kv = dict(w.split("=", 1) for w in r.stdout.split() if "=" in w)
    n1, n2 = int(kv.get("first", -1)), int(kv.get("late", -1))
    rc, _, _, stderr = bt_text(out, timeout=300)
    check(rc == 0 and stderr.strip() == "", "babeltrace2 reads the trace silently (rc %d, stderr %r)" % (rc, stderr[:300]))
    first, late, bad = [], [], 0
    for msg in trace_messages(out):
        if msg.kind != "event":
            continue
        p = msg.fields
        if msg.name == "dyn:first":
            first.append(p["seq"])
            if p["half"] != p["seq"] / 2.0:
                bad += 1
        elif msg.name == "dyn:late":
            i = p["seq"]
            late.append(i)
            if p["tag"] != ("three" if i % 3 else "zero") or p["neg"] != -(i % 1000):
                bad += 1
    check(first == list(range(n1)), "dyn:first: %d events in order (read %d)" % (n1, len(first)))
    check(late == list(range(n2)), "dyn:late, declared mid-run: %d events in order (read %d)" %
          (n2, len(late)))
    check(bad == 0, "every field value as emitted (%d wrong)" % bad)
    check.finish()


main()
