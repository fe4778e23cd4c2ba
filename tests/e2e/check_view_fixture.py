#!/usr/bin/python3
"""`strata view` on a hand-made trace (make_fixture_trace.py): exact lines,
the --limit option, and the exit codes for usage errors (2) and unreadable
traces (1).

usage: check_view_fixture.py STRATA WORKDIR
"""
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import Checks  # noqa: E402

EXPECTED = [
    "[00:00:01.000000000] fixture[4242] tid=100 cpu=0 demo:start",
    "[00:00:01.000000100] fixture[4242] tid=101 cpu=1 demo:ints: { thread = 0, seq = 0, s8 = 0, "
    "u8 = 0, s16 = 0, u16 = 0, s32 = 0, u32 = 0, s64 = 0, x64 = 0xdead000000000000 }",
    "[00:00:01.000000200] fixture[4242] tid=102 cpu=0 demo:mix: { thread = 1, seq = 1, f32 = 0.5, "
    "f64 = 1.25, state = busy (1), msg = \"t1-1\", arr = [ 1, 1, 7, 65535 ], vals = [ 1 ], "
    "blob = [ 0x1 ] }",
    "[00:00:01.000000200] *** 5 events discarded in fixture[4242] stream 0 between "
    "[00:00:01.000000200] and [00:00:02.000000000]",
    "[00:00:02.000000000] fixture[4242] tid=103 cpu=1 demo:ints: { thread = 2, seq = 4, s8 = -4, "
    "u8 = 6, s16 = -4, u16 = 12, s32 = -6, u32 = 30, s64 = -4000014, x64 = 0xdead000200000004 }",
    "[00:00:02.000000000] *** 2 packets discarded in fixture[4242] stream 0 between "
    "[00:00:02.000000000] and [00:00:03.000000000]",
    "[00:00:03.000000000] fixture[4242] tid=100 cpu=0 demo:start",
]

check = Checks(quiet=True)


def run(args, env=None):
    env = dict(env or os.environ, TZ="UTC")
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)


def main():
    strata, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    trace = os.path.join(work, "session")
    sub = os.path.join(trace, "ust", "pid", "fixture-4242")
    subprocess.run([sys.executable, os.path.join(HERE, "make_fixture_trace.py"), sub], check=True)

    r = run([strata, "view", trace])
    check(r.returncode == 0, "view exits 0 (got %d, stderr %r)" % (r.returncode, r.stderr))
    got = r.stdout.splitlines()
    check(got == EXPECTED, "view output is exactly the expected lines:\n%s" % "\n".join(got))
    check(r.stderr == "", "view prints nothing on stderr (got %r)" % r.stderr)

    # A second process's sub-trace beside the first: both read, merged by time.
    both = os.path.join(work, "two-processes")
    shutil.copytree(trace, both)
    subprocess.run([sys.executable, os.path.join(HERE, "make_fixture_trace.py"),
                    os.path.join(both, "ust", "pid", "other-4343"), "--other"], check=True)
    r = run([strata, "view", both])
    merged = EXPECTED[:4] + ["[00:00:01.500000000] other[4343] tid=200 cpu=1 demo:start"] + EXPECTED[4:]
    check(r.returncode == 0 and r.stdout.splitlines() == merged,
          "two sub-traces are merged by time:\n%s%s" % (r.stdout, r.stderr))

    r = run([strata, "view", "-n", "2", trace])
    check(r.returncode == 0 and r.stdout.splitlines() == EXPECTED[:2],
          "view -n 2 prints the first two events (got %r)" % r.stdout)
    r = run([strata, "view", "--limit=3", trace])
    check(r.returncode == 0 and r.stdout.splitlines() == EXPECTED[:3],
          "view --limit=3 prints three events (got %r)" % r.stdout)

    for args in (["-n"], ["-n", "x"], ["--bogus"]):
        r = run([strata, "view"] + args)
        check(r.returncode == 2 and "usage" in r.stderr, "usage error %r exits 2 (got %d)" % (args, r.returncode))
    # Several DIRs are read as one trace; one named twice is read once.
    once, twice = run([strata, "view", trace]), run([strata, "view", trace, trace + "/"])
    check(twice.returncode == 0 and twice.stdout == once.stdout and once.stdout,
          "a trace named twice is read once (%d lines, exit %d)" % (len(twice.stdout.splitlines()), twice.returncode))
    r = run([strata, "view", trace, os.path.join(work, "no-such-trace")])
    check(r.returncode == 1 and "no such trace" in r.stderr and not r.stdout,
          "a missing second DIR: exit 1, nothing printed (%d: %s)" % (r.returncode, r.stderr.strip()))
    r = run([strata, "view", "--help"])
    check(r.returncode == 0 and "--limit" in r.stdout, "view --help exits 0 and documents --limit")

    r = run([strata, "view", os.path.join(work, "does-not-exist")])
    check(r.returncode == 1 and r.stderr.startswith("strata view: no such trace") and "No such file" in r.stderr
          and "repair" not in r.stderr and r.stderr.count("\n") == 1,
          "missing dir exits 1 with one plain 'no such trace' line, no repair message (%r)" % r.stderr)
    empty = os.path.join(work, "empty")
    os.makedirs(empty)
    r = run([strata, "view", empty])
    check(r.returncode == 1 and "metadata" in r.stderr, "dir without trace exits 1 and says why (%r)" % r.stderr)
    # A stream file cut inside its only packet: nothing to show, the file
    # named; babeltrace2 refuses the trace.
    bad = os.path.join(work, "bad")
    shutil.copytree(trace, bad)
    stream = os.path.join(bad, "ust", "pid", "fixture-4242", "channel0_0")
    os.truncate(stream, 100)
    r = run([strata, "view", bad])
    check(r.returncode == 1 and r.stdout == "" and "channel0_0" in r.stderr and "damaged" in r.stderr and
          "not one event could be read" in r.stderr,
          "torn stream: no event (said), the file named as damaged, exit 1 (%r)" % r.stderr)
    r = run([strata, "view", bad], env=dict(os.environ, STRATA_READER="babeltrace2"))
    check(r.returncode == 1 and "channel0_0" in r.stderr,
          "torn stream through babeltrace2 exits 1 and names the file (%r)" % r.stderr)

    check.finish()


if __name__ == "__main__":
    sys.exit(main())
