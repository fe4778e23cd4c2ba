#!/usr/bin/env python3
"""check_reader_agreement.py STRATA DEMO WORKLOAD WORK: Strata's own trace
reader and babeltrace2 agree (issue 49) on traces of every layout Strata
writes: owned lanes, shared lanes (more threads than owned lanes), lost
events (tiny sub-buffers), the pthread preload's records and its counting
mode, and an overwrite-mode (flight recorder) trace.  `strata view` through
each reader, line by line (strata_testlib.readers_agree); and strata check
finds no damage in any of them."""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import Checks, readers_agree  # noqa: E402

check = Checks(quiet=True)


def record(strata, out, opts, cmd, env=None):
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([strata, "record", "-o", out] + opts + ["--"] + cmd, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, **(env or {})))
    check(r.returncode == 0, "strata record %s exits 0 (%s)" % (" ".join(opts + cmd), r.stderr[-400:]))
    return r


def main():
    strata, demo, workload, work = sys.argv[1:5]
    os.makedirs(work, exist_ok=True)
    cases = [
        ("owned", [], [demo, "--threads", "4", "--events", "2000"], None),
        ("shared", ["--lanes", "2"], [demo, "--threads", "12", "--events", "500"], None),
        ("lossy", ["--subbuf-size", "4096", "--subbuf-count", "2"], [demo, "--threads", "2", "--events", "4000"],
         None),
        ("preload", ["--preload", "pthread"], [workload, "contend", os.path.join(work, "p.json"), "4", "300", "20"],
         {"STRATA_PTHREAD_COUNT": "0"}),
        ("counting", ["--preload", "pthread"], [workload, "contend", os.path.join(work, "c.json"), "4", "300", "20"],
         None),
    ]
    for name, opts, cmd, env in cases:
        out = os.path.join(work, name)
        record(strata, out, opts, cmd, env)
        readers_agree(check, strata, out, name)
        r = subprocess.run([strata, "check", out], capture_output=True, text=True, timeout=300)
        check(r.returncode == 0 and "no damage" in r.stdout,
              "%s: strata check finds no damage (%d: %s)" % (name, r.returncode, (r.stdout + r.stderr)[-300:]))
    check.finish()


if __name__ == "__main__":
    sys.exit(main())
