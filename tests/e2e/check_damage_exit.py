#!/usr/bin/python3
"""Every reader says in its exit status that it skipped damage, as tar and
gzip do: `strata view`, `analyze mutex`, `analyze monitor`, `export` (both
formats) and `query` write everything readable, then exit 1; a trace of
which not one event can be read says that in words.  On a hand-made trace
(make_fixture_trace.py: five events in three packets), so the readable
events are known exactly:

  whole         every reader exits 0; view prints the 5 events, query counts 5
  garbage       the only stream file is 300000 bytes of noise from byte 0:
                exit 1, no event, "not one event could be read"
  torn          the stream file ends inside its only packet: the same
  one-bad       the second packet's magic zeroed: exit 1, and the 4 events of
                the other packets are still printed, exported and counted

usage: check_damage_exit.py STRATA WORKDIR
"""
import os
import random
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import Checks  # noqa: E402

check = Checks()
NONE_READ = "not one event could be read"


def run(args):
    return subprocess.run(args, capture_output=True, text=True, env=dict(os.environ, TZ="UTC"), timeout=60)


def make(work, name, damage=None):
    trace = os.path.join(work, name)
    sub = os.path.join(trace, "ust", "pid", "fixture-4242")
    subprocess.run([sys.executable, os.path.join(HERE, "make_fixture_trace.py"), sub], check=True)
    stream = os.path.join(sub, "channel0_0")
    if damage:
        damage(stream)
    return trace


def garbage(stream):
    with open(stream, "wb") as f:
        f.write(random.Random(60).randbytes(300000))


def torn(stream):
    with open(stream, "r+b") as f:  # the first packet alone, cut inside
        data = f.read()
        first = int.from_bytes(data[56:64], "little") // 8  # packet_size, bits
        f.truncate(first - 10)


def one_bad(stream):
    with open(stream, "r+b") as f:  # the second packet's magic
        data = f.read()
        second = data.find(b"\xc1\x1f\xfc\xc1", 1)
        f.seek(second)
        f.write(b"\0\0\0\0")


def readers(strata, trace, want_rc, want_events, has_query):
    """Each reader on `trace`: its exit status, and the events it got."""
    name = os.path.basename(trace)
    quiet_none = want_events > 0 or want_rc == 0
    r = run([strata, "view", trace])
    events = [ln for ln in r.stdout.splitlines() if " demo:" in ln]
    check(r.returncode == want_rc and len(events) == want_events,
          "%s: view exits %d (got %d) with %d event line(s) (got %d)" %
          (name, want_rc, r.returncode, want_events, len(events)), r.stderr)
    said = "says \"not one event\" only when none was readable"
    check((NONE_READ in r.stderr) != quiet_none, "%s: view %s" % (name, said), r.stderr)
    for what in ("mutex", "monitor"):
        r = run([strata, "analyze", what, trace])
        check(r.returncode == want_rc, "%s: analyze %s exits %d (got %d)" % (name, what, want_rc, r.returncode),
              r.stderr)
        check((NONE_READ in r.stderr) != quiet_none, "%s: analyze %s %s" % (name, what, said), r.stderr)
    for fmt in ("perfetto", "json"):
        out = trace + "." + fmt
        r = run([strata, "export", "--format", fmt, "-o", out, trace])
        m = re.search(r"strata export: (\d+) events", r.stderr)
        got = int(m.group(1)) if m else -1
        check(r.returncode == want_rc and got == want_events,
              "%s: export --format %s exits %d (got %d), %d event(s) written (got %d)" %
              (name, fmt, want_rc, r.returncode, want_events, got), r.stderr)
        check((NONE_READ in r.stderr) != quiet_none, "%s: export %s" % (name, said), r.stderr)
    if has_query:
        r = run([strata, "query", "--csv", trace, "SELECT count(*) FROM events"])
        check(r.returncode == want_rc and r.stdout.splitlines()[1:] == [str(want_events)],
              "%s: query exits %d (got %d), counts %d event(s) (got %r)" %
              (name, want_rc, r.returncode, want_events, r.stdout.splitlines()[1:]), r.stderr)


def main():
    strata, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    has_query = run([strata, "query", "--help"]).returncode == 0
    readers(strata, make(work, "whole"), 0, 5, has_query)
    readers(strata, make(work, "garbage", garbage), 1, 0, has_query)
    readers(strata, make(work, "torn", torn), 1, 0, has_query)
    readers(strata, make(work, "one-bad", one_bad), 1, 4, has_query)
    check.finish()


if __name__ == "__main__":
    main()
