#!/usr/bin/python3
"""`strata analyze` and `strata export` through Strata's own trace reader and
through babeltrace2 (STRATA_READER=babeltrace2) give the same output (issue
49's agreement): one logic path above both readers (processor/events/read_event.h).

usage: check_readers_agree.py STRATA DEMO PT_WORKLOAD WORK [DYNAMIC_PROG]

Traces: strata-demo with owned lanes, with shared lanes (more threads than
lanes), with lost events (tiny sub-buffers); pt_workload under the pthread
preload, every pair a record and in counting mode; events declared at run
time (strata-test-dynamic-late, when given); and the hand-made kernel +
pthread + JVM fixture of make_timeline_fixture.py.  For each: `analyze
mutex` and `analyze monitor` (text and JSON) byte for byte, `export` in both
formats byte for byte, or, where two streams have events at the same
nanosecond, as the same events in the same order of time with each
timestamp's events compared as a set (the two readers may merge such ties
in either order).  And a damaged copy: Strata's reader names the damage on
stderr, reads the rest, and exits 0.
"""
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import make_timeline_fixture  # noqa: E402
from timeline_check import packets, protoc_decode  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import Checks  # noqa: E402

check = Checks()


def run(cmd, reader=None, timeout=300):
    env = dict(os.environ, TZ="UTC")
    env.pop("STRATA_READER", None)
    if reader:
        env["STRATA_READER"] = reader
    return subprocess.run(cmd, capture_output=True, env=env, timeout=timeout)


def record(strata, out, opts, cmd, env=None):
    shutil.rmtree(out, ignore_errors=True)
    e = dict(os.environ, **(env or {}))
    e.pop("LD_PRELOAD", None)
    r = subprocess.run([strata, "record", "-o", out] + opts + ["--"] + cmd, capture_output=True, text=True,
                       timeout=300, env=e)
    check(r.returncode == 0, "strata record %s exits 0 (%s)" % (" ".join(opts + cmd), r.stderr[-400:]))


def json_groups(path):
    """Chrome JSON's events grouped by time, each group as a sorted list."""
    with open(path) as f:
        evs = json.load(f)["traceEvents"]
    groups, last = [], object()
    for e in evs:
        ts = e.get("ts")
        if ts != last or not groups:
            groups.append([])
            last = ts
        groups[-1].append(json.dumps(e, sort_keys=True))
    return [sorted(g) for g in groups]


def perfetto_groups(path):
    """The Perfetto trace's packets (as protoc decodes them) grouped by
    timestamp, each group sorted."""
    groups, last = [], object()
    for p in packets(protoc_decode(path)):
        ts = p.get("timestamp", [None])[0]
        if ts != last or not groups:
            groups.append([])
            last = ts
        groups[-1].append(json.dumps(p, sort_keys=True))
    return [sorted(g) for g in groups]


def compare(strata, trace, name, work):
    for what in (["analyze", "mutex"], ["analyze", "monitor"]):
        for fmt in ("text", "json"):
            a = run([strata] + what + [trace, "--format=" + fmt])
            b = run([strata] + what + [trace, "--format=" + fmt], "babeltrace2")
            check(a.returncode == b.returncode == 0 and a.stdout == b.stdout and a.stderr == b.stderr,
                  "%s: strata %s --format=%s agrees (exits %d/%d, %d/%d bytes; %r)" %
                  (name, " ".join(what), fmt, a.returncode, b.returncode, len(a.stdout), len(b.stdout),
                   (a.stderr + b.stderr)[-300:]))
    for fmt in ("perfetto", "json"):
        outs = []
        for reader in (None, "babeltrace2"):
            out = os.path.join(work, "%s.%s.%s" % (name, reader or "strata", fmt))
            r = run([strata, "export", trace, "--format", fmt, "-o", out], reader)
            check(r.returncode == 0, "%s: export --format %s exits 0 (%s)" % (name, fmt, r.stderr[-300:]))
            outs.append((out, r.stderr.replace(out.encode(), b"OUT")))
        (a, ea), (b, eb) = outs
        check(ea == eb, "%s: export --format %s says the same (%r / %r)" % (name, fmt, ea[-200:], eb[-200:]))
        if open(a, "rb").read() == open(b, "rb").read():
            continue
        # Not byte for byte: the same events, ties at one time in any order.
        ga, gb = (json_groups(a), json_groups(b)) if fmt == "json" else (perfetto_groups(a), perfetto_groups(b))
        same = ga == gb
        if not same:
            for i, (x, y) in enumerate(zip(ga, gb)):
                if x != y:
                    print("first difference at time group %d:\n  strata:      %s\n  babeltrace2: %s" %
                          (i, x[:2], y[:2]))
                    break
        check(same, "%s: export --format %s agrees (%d vs %d time groups)" % (name, fmt, len(ga), len(gb)))
        print("%s: export --format %s: equal up to the order of events at one time" % (name, fmt))


def damaged_copy(strata, orig, work):
    """A copy with one stream cut inside a packet and a run of bytes
    zeroed in another: Strata's reader names the damage and reads on."""
    d = os.path.join(work, "damaged")
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(orig, d)
    streams = sorted(os.path.join(x, f) for x, _, fs in os.walk(d) for f in fs
                     if f != "metadata" and not f.startswith(".") and not f.endswith(".idx") and os.path.getsize(os.path.join(x, f)) > 4096)
    check(len(streams) >= 2, "the trace has two streams to damage")
    if len(streams) < 2:
        return
    with open(streams[0], "r+b") as f:
        f.truncate(os.path.getsize(streams[0]) - 100)
    with open(streams[1], "r+b") as f:
        f.seek(200)
        f.write(bytes(300))
    for cmd in (["analyze", "mutex"], ["analyze", "monitor"], ["export", "-o", os.path.join(work, "d.pf")],
                ["export", "--format", "json", "-o", os.path.join(work, "d.json")]):
        r = run([strata] + cmd + [d], timeout=120)
        err = r.stderr.decode(errors="replace")
        check(r.returncode == 1 and "damaged: " in err and "damaged span(s) skipped" in err,
              "damaged copy: strata %s names the damage, reads the rest, exits 1 (exit %d, %r)" %
              (cmd[0] + " " + cmd[1], r.returncode, err[-300:]))
    empty = os.path.join(work, "unreadable")
    shutil.rmtree(empty, ignore_errors=True)
    os.makedirs(os.path.join(empty, "t"))
    open(os.path.join(empty, "t", "metadata"), "w").write("/* CTF 1.8 */\ntrace {")
    for cmd in (["analyze", "mutex"], ["export", "-o", os.path.join(work, "u.pf")]):
        r = run([strata] + cmd + [empty], timeout=120)
        check(r.returncode == 1 and b"can be read" in r.stderr,
              "a tree nothing of which can be read: strata %s exits 1 saying so (exit %d, %r)" %
              (cmd[0], r.returncode, r.stderr[-300:]))


def main():
    strata, demo, workload, work = sys.argv[1:5]
    dynamic = sys.argv[5] if len(sys.argv) > 5 else None
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    sock = {"STRATA_CONSUMERD_SOCKET": os.path.join(work, "no-daemon.sock")}
    cases = [
        ("owned", [], [demo, "--threads", "4", "--events", "2000"], {}),
        ("shared", ["--lanes", "2"], [demo, "--threads", "12", "--events", "500"], {}),
        ("lossy", ["--subbuf-size", "4096", "--subbuf-count", "2"], [demo, "--threads", "2", "--events", "4000"],
         {}),
        ("preload", ["--preload", "pthread"], [workload, "contend", os.path.join(work, "p.json"), "4", "300", "20"],
         {"STRATA_PTHREAD_COUNT": "0"}),
        ("counting", ["--preload", "pthread"], [workload, "contend", os.path.join(work, "c.json"), "4", "300", "20"],
         {}),
    ]
    if dynamic:
        cases.append(("dynamic", ["--subbuf-size", "256K", "-e", "dyn:*"], [dynamic], {}))
    for name, opts, cmd, env in cases:
        out = os.path.join(work, name)
        record(strata, out, opts, cmd, dict(sock, **env))
        compare(strata, out, name, work)
    fixture = os.path.join(work, "fixture")
    make_timeline_fixture.make(fixture)
    compare(strata, fixture, "fixture", work)
    damaged_copy(strata, os.path.join(work, "owned"), work)
    check.finish()


if __name__ == "__main__":
    main()
