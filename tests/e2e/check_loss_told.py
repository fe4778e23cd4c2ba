#!/usr/bin/python3
"""Loss is told where the user looks (issue 31): `strata record`, `strata
stop` and `strata status` say how many events and packets were discarded,
whichever daemon recorded them, with babeltrace2 as the exact oracle.

usage: check_loss_told.py STRATA DEMO WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

  - status/stop: a session whose directory holds a hand-made sub-trace
    (make_fixture_trace.py: 5 discarded events, packets 2 and 3 lost) and a
    second one with no loss: `strata status` and `strata stop` print
    "5 event(s) and 2 packet(s) discarded", name the fixture's sub-trace as
    the worst, and babeltrace2 reports exactly 5 and 2 for that directory;
  - record: tiny buffers (discard mode, 2 x 4 KiB) and a burst of 4 x 50,000
    events, on a daemon already running and on record's private one: the
    last two lines are "trace written to DIR" and the summary, whose counts
    equal babeltrace2's (and are not 0), naming strata-demo's sub-trace;
  - no loss: a large buffer for a small run says "nothing discarded".
  - damage: a copy of the fixture whose second packet header is zeroed:
    a session created on it cuts nothing (whole packets follow), `strata
    status` says one stream file is damaged, naming it and the offset
    `strata check` names, and the third packet still reads.
"""
import os
import re
import shutil
import struct
import subprocess
import sys


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import e2e_setup, start_daemon, trace_messages  # noqa: E402

SUMMARY = re.compile(r"(\d+) event\(s\) and (\d+) packet\(s\) discarded \(the ring buffers were full: "
                     r"larger --subbuf-size or --subbuf-count\); most by ([^ ]+) \((\d+) event\(s\), "
                     r"(\d+) packet\(s\)\)")


def bt2_loss(path):
    if not os.path.isdir(path):
        return None
    ev = pk = 0
    for m in trace_messages(path):
        if m.kind == "discarded_events":
            ev += m.count
        elif m.kind == "discarded_packets":
            pk += m.count
    return ev, pk


def run(cmd, env):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    print("+", " ".join(cmd), "->", r.returncode)
    sys.stdout.write(r.stdout + r.stderr)
    return r


def main():
    strata, demo, work, consumerd, check = e2e_setup()
    base = dict(os.environ, STRATA_CONSUMERD=consumerd)
    base.pop("STRATA_EARLY", None)
    sock = os.path.join(work, "d.sock")
    env = dict(base, STRATA_CONSUMERD_SOCKET=sock)
    daemon = start_daemon(consumerd, sock, env)

    # status and stop, on a known trace.
    fix = os.path.join(work, "fixture")
    sub = os.path.join(fix, "ust", "pid", "fixture-4242-20260101-000000")
    for d, extra in ((sub, []), (os.path.join(fix, "ust", "pid", "other-4343-20260101-000000"), ["--other"])):
        subprocess.run([sys.executable, os.path.join(HERE, "make_fixture_trace.py"), d] + extra, check=True)
    check(bt2_loss(fix) == (5, 2), "babeltrace2 reports 5 events and 2 packets discarded in the fixture (%s)" %
          (bt2_loss(fix),))
    run([strata, "create", "s", "-o", fix], env)
    run([strata, "start", "s"], env)
    st = run([strata, "status", "s"], env)
    check("  loss:     5 event(s) and 2 packet(s) discarded" in st.stdout and
          "most by fixture-4242-20260101-000000 (5 event(s), 2 packet(s))" in st.stdout,
          "strata status tells 5 events, 2 packets, most by the fixture")
    sp = run([strata, "stop", "s"], env)
    check(sp.returncode == 0 and SUMMARY.search(sp.stdout) is not None and
          SUMMARY.search(sp.stdout).groups()[:3] == ("5", "2", "fixture-4242-20260101-000000"),
          "strata stop tells 5 events, 2 packets, most by the fixture")
    run([strata, "destroy", "s"], env)

    # damage inside a file: the fixture's second packet header zeroed.  A
    # session created on the directory leaves the file as it is (whole
    # packets follow: cutting would lose them); status counts up to the
    # damage and says where it is; the third packet still reads.
    dam = os.path.join(work, "damaged")
    dsub = os.path.join(dam, "ust", "pid", "fixture-4242-20260101-000000")
    shutil.copytree(sub, dsub)
    stream = os.path.join(dsub, "channel0_0")
    with open(stream, "r+b") as f:
        data = f.read()
        off = struct.unpack_from("<Q", data, 56)[0] // 8
        f.seek(off)
        f.write(bytes(88))
    size = os.path.getsize(stream)
    ck = subprocess.run([strata, "check", dam], capture_output=True, text=True, timeout=60)
    check("channel0_0" in ck.stdout + ck.stderr and str(off) in ck.stdout + ck.stderr,
          "strata check names the zeroed header (channel0_0 at %d)" % off)
    run([strata, "create", "d", "-o", dam], env)
    run([strata, "start", "d"], env)
    check(os.path.getsize(stream) == size, "a session created on the directory cuts nothing from the damaged file "
          "(%d of %d bytes)" % (os.path.getsize(stream), size))
    st = run([strata, "status", "d"], env)
    want = ("  loss:     nothing discarded; 1 stream file(s) damaged, counted up to the damage only (first: "
            "ust/pid/fixture-4242-20260101-000000/channel0_0 at offset %d; `strata check` names it)" % off)
    check(want in st.stdout, "strata status says the damage and where it is: %s" %
          [ln for ln in st.stdout.splitlines() if "loss:" in ln])
    run([strata, "destroy", "d"], env)
    v = subprocess.run([strata, "view", dam], capture_output=True, text=True, timeout=60, env=dict(env, TZ="UTC"))
    check("00:00:03.000000000" in v.stdout, "the packet after the damage still reads (strata view: %s)" %
          v.stdout.strip().splitlines()[-1:])

    # record, on the running daemon and on its own.
    private_env = dict(base, STRATA_CONSUMERD_SOCKET=os.path.join(work, "nobody.sock"))
    for name, e in (("running", env), ("private", private_env)):
        out = os.path.join(work, "rec-" + name)
        r = run([strata, "record", "-o", out, "--mode", "discard", "--subbuf-size", "4096", "--subbuf-count", "2",
                 "--", demo, "--threads", "4", "--events", "50000"], e)
        last = r.stderr.splitlines()[-2:]
        ev, pk = bt2_loss(out) or (-1, -1)
        m = SUMMARY.fullmatch(last[1][len("strata record: "):]) if len(last) == 2 else None
        check(r.returncode == 0 and len(last) == 2 and last[0] == "strata record: trace written to " + out,
              "%s daemon: record's next-to-last line gives the trace" % name)
        check(m is not None and int(m.group(1)) == ev and int(m.group(2)) == pk and ev > 0,
              "%s daemon: record's last line tells what babeltrace2 reports (%d events, %d packets)" %
              (name, ev, pk))
        check(m is not None and m.group(3).startswith("strata-demo-") and int(m.group(4)) == ev,
              "%s daemon: the worst process is strata-demo, with every loss" % name)

    out = os.path.join(work, "small")
    r = run([strata, "record", "-o", out, "--", demo, "--threads", "1", "--events", "10"], env)
    check(r.stderr.splitlines()[-1:] == ["strata record: nothing discarded"] and bt2_loss(out) == (0, 0),
          "a run with no loss says \"nothing discarded\"")

    daemon.terminate()
    check(daemon.wait(timeout=60) == 0, "the daemon exits cleanly")
    if not check.failures:
        shutil.rmtree(work, ignore_errors=True)
    check.finish()


if __name__ == "__main__":
    main()
