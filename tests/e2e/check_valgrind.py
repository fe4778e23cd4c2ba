#!/usr/bin/python3
"""A traced program run under valgrind is recorded, not killed.

usage: check_valgrind.py STRATA LOOP WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

valgrind shows the program a canned Intel CPUID that claims RDTSCP, and its
decoder refuses RDTSCP where the host CPU lacks it (an AMD EPYC guest under
PVM): a writer that trusted its own CPUID died of SIGILL at its first event.
The clock page now says whether its writer's CPU has RDTSCP
(STRATA_KCLOCK_NO_RDTSCP).  `strata record -- valgrind --tool=none LOOP 5`:
record exits 0 and babeltrace2 reads the loop's 5 bursts of 10 events, in
order.  Exit 77 (skipped) without valgrind.
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import e2e_setup  # noqa: E402


def main():
    strata, loop, work, consumerd, check = e2e_setup()
    valgrind = shutil.which("valgrind")
    if not valgrind:
        print("skip: no valgrind")
        return 77
    env = dict(os.environ, STRATA_CONSUMERD=consumerd,
               STRATA_CONSUMERD_SOCKET=os.path.join(work, "nobody.sock"))  # record's own daemon
    env.pop("STRATA_EARLY", None)
    out = os.path.join(work, "trace")
    r = subprocess.run([strata, "record", "-o", out, "--", valgrind, "-q", "--tool=none", loop, "5"], env=env,
                       capture_output=True, text=True, timeout=300)
    sys.stdout.write(r.stderr[-2000:])
    check(r.returncode == 0 and "SIGILL" not in r.stderr and "unhandled instruction" not in r.stderr,
          "record -- valgrind LOOP 5 exits 0, the program not killed (rc %d)" % r.returncode)
    b = subprocess.run(["babeltrace2", out], capture_output=True, text=True, timeout=120)
    ticks = [l for l in b.stdout.splitlines() if "rloop:tick" in l]
    values = [int(l.rsplit("i = ", 1)[1].split()[0].rstrip("}").rstrip(",")) for l in ticks]
    check(b.returncode == 0 and len(ticks) == 50,
          "babeltrace2 reads the 50 events (%d, rc %d)" % (len(ticks), b.returncode), b.stderr)
    check(values == sorted(values) and len(set(values)) == len(values),
          "their values in order, none twice (%s...)" % values[:5])
    return check.finish()


if __name__ == "__main__":
    sys.exit(main())
