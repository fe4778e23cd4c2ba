#!/usr/bin/env python3
"""check_damage.py STRATA DEMO WORK [ROUNDS]: damaged traces through every
reader command (issue 49).  A real trace (strata-demo, small sub-buffers so
that each stream holds several packets) is copied and damaged the ways disks,
crashes and serial lines damage traces: flipped bits, a truncated stream, a
zeroed run, an overwritten packet header, spliced bytes, a cut metadata file.

Oracles, for each damaged copy and command (view, check, analyze mutex and
monitor, export in both formats):
  - it ends (no hang) within a time proportional to the trace's size, with
    exit 0 or 1, and exit 1 comes with a message;
  - strata view prints every event of every stream the damage did not touch,
    exactly as it printed them from the undamaged trace;
  - strata check names the damage, and its clean copy is read by
    babeltrace2 without error, with exactly the events strata view printed.
"""
import os
import random
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import Checks  # noqa: E402

check = Checks(quiet=True)


def run(cmd, timeout):
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, timeout=timeout, env=dict(os.environ, TZ="UTC"))
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0
    except subprocess.TimeoutExpired:
        return "hang", b"", b"", timeout


def streams_of(trace):
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(trace) for f in fs
                  if f != "metadata" and not f.startswith(".") and not f.endswith(".idx"))


def damage(kind, path, rng):
    b = bytearray(open(path, "rb").read())
    if kind == "flip":
        for _ in range(4):
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        b = b[:rng.randrange(1, len(b))]
    elif kind == "zero":
        i = rng.randrange(len(b))
        n = rng.randrange(1, 6000)
        b[i:i + n] = bytes(len(b[i:i + n]))
    elif kind == "header":
        offs = [i for i in range(0, len(b) - 4) if b[i:i + 4] == b"\xc1\x1f\xfc\xc1"]
        i = rng.choice(offs)
        b[i:i + 88] = bytes(rng.randrange(256) for _ in range(88))
    elif kind == "splice":
        i, j = rng.randrange(len(b)), rng.randrange(len(b))
        b[i:i] = b[j:j + rng.randrange(1, 3000)]
    elif kind == "metadata":
        b = b[:rng.randrange(len(b))]
    open(path, "wb").write(b)


def tid_lines(out):
    by = {}
    for ln in out.splitlines():
        t = ln.split(b" tid=")[1].split(b" ")[0] if b" tid=" in ln else b"?"
        by.setdefault(t, []).append(ln)
    return by


def main():
    strata, demo, work = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 2
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    orig = os.path.join(work, "orig")
    r = subprocess.run([strata, "record", "-o", orig, "--subbuf-size", "16384", "--subbuf-count", "64", "--",
                        demo, "--threads", "4", "--events", "3000"], capture_output=True, timeout=300)
    check(r.returncode == 0, "the trace is recorded (%s)" % r.stderr[-300:])
    rc, want, _, t_clean = run([strata, "view", orig], 120)
    check(rc == 0, "the undamaged trace reads")
    # A bound per run: generous against a noisy machine, far below a hang.
    bound = max(10.0, 50 * t_clean)
    want_by = tid_lines(want)
    rng = random.Random(49)
    runs = 0
    for kind in ("flip", "truncate", "zero", "header", "splice", "metadata"):
        for k in range(rounds):
            d = os.path.join(work, "%s%d" % (kind, k))
            shutil.copytree(orig, d)
            if kind == "metadata":
                victim = [os.path.join(x, "metadata") for x, _, fs in os.walk(d) if "metadata" in fs][0]
            else:
                victim = rng.choice([s for s in streams_of(d) if os.path.getsize(s) > 200])
            damage(kind, victim, rng)
            name = "%s%d (%s)" % (kind, k, os.path.basename(victim))
            for cmd in (["view"], ["check"], ["analyze", "mutex"], ["analyze", "monitor"],
                        ["export", "-o", d + ".perfetto-trace"], ["export", "--format", "json", "-o", d + ".json"]):
                rc, out, err, t = run([strata] + cmd + [d], bound)
                runs += 1
                check(rc in (0, 1), "%s: strata %s ends with 0 or 1 in %.1f s (got %r)" % (name, cmd[0], t, rc))
                check(rc != 1 or err.strip() or out.strip(), "%s: strata %s's exit 1 says why" % (name, cmd[0]))
                if cmd == ["view"]:
                    view_out = out
            if kind == "metadata":
                continue
            # Every untouched stream's events, exactly: the threads whose
            # lines differ all have events in the damaged stream (those that
            # differ with the stream file removed).
            got_by = tid_lines(view_out)
            differ = {t for t, lines in want_by.items() if got_by.get(t) != lines}
            without = d + ".without"
            shutil.copytree(orig, without)
            os.unlink(os.path.join(without, os.path.relpath(victim, d)))
            _, out, _, _ = run([strata, "view", without], bound)
            in_stream = {t for t, lines in tid_lines(out).items() if want_by.get(t) != lines}
            in_stream |= set(want_by) - set(tid_lines(out))
            check(differ <= in_stream, "%s: only the damaged stream's events differ (threads %s, the stream's %s)" %
                  (name, sorted(differ), sorted(in_stream)))
            # The clean copy: babeltrace2 reads it, with the events view printed.
            clean = d + ".clean"
            rc, out, err, _ = run([strata, "check", "--clean-copy", clean, d], bound)
            check(rc in (0, 1) and os.path.isdir(clean), "%s: strata check --clean-copy writes a copy (%r)" %
                  (name, err[-300:]))
            b = subprocess.run(["babeltrace2", clean], capture_output=True, timeout=120)
            errors = [ln for ln in b.stderr.splitlines() if b"discarded" not in ln and ln.strip()]
            check(b.returncode == 0 and not errors, "%s: babeltrace2 reads the clean copy (%r)" %
                  (name, b.stderr[-300:]))
            events = sum(1 for ln in view_out.splitlines() if b"] *** " not in ln)
            check(b.stdout.count(b"\n") == events,
                  "%s: the clean copy holds exactly the events strata view printed (%d vs %d)" %
                  (name, b.stdout.count(b"\n"), events))
            # Where view reported lost packets, so does babeltrace2 on the copy.
            if b"packets discarded" in view_out:
                check(b"discarded" in b.stderr, "%s: babeltrace2 reports the loss in the clean copy" % name)
    print("%d reader runs on %d damaged traces" % (runs, runs // 6))
    check.finish()


if __name__ == "__main__":
    sys.exit(main())
