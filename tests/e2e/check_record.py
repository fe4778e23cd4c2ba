#!/usr/bin/python3
"""End-to-end checks of `strata record` with the bundled strata-demo, using
babeltrace2 (the bt2 Python bindings and the babeltrace2 command) as the
oracle.

usage: check_record.py SCENARIO STRATA DEMO WORKDIR

Scenarios:
  full       4 threads x 125,000 events, buffers that hold them all: every event present
             exactly once, every field value as demo_oracle.py defines it,
             timestamps non-decreasing per stream, `babeltrace2 DIR` exits 0
             with an empty stderr.
  blocking   the discard scenario's tiny buffers with --blocking: the full
             scenario's oracle (every event exactly once, 0 discarded); the
             daemon copies out of its mapping (STRATA_READ_BY_FILE=0).
  blocking_file  the same, the daemon reading the rings by their files
             (STRATA_READ_BY_FILE=1) for their first 32 laps, then its
             mapping: both ways and the switch within one run.
  discard    tiny buffers in discard mode: recorded + discarded == emitted
             exactly (discarded = sum of bt2 discarded-events counts).
  overwrite  tiny buffers in overwrite mode: the last event of each thread is
             present and what is kept of each thread is a contiguous newest
             tail (its sequence numbers are N-k .. N-1).
  sigkill    the traced process SIGKILLs itself mid-run: the trace opens and
             the events of each thread are contiguous within each packet run
             (a break only where the stream reports discarded events or
             packets), thread 0 stops exactly at its kill point.
  view       `strata view` of a small run: one line per event, known lines.
  torn       a stream file cut inside a packet (what a consumer killed while
             writing leaves): `strata view` prints exactly the lines of the
             same trace cut cleanly at that packet boundary, naming the torn
             file and the repair (through babeltrace2 it fails so); `strata
             view --repair` cuts the file and prints the same lines.
"""
import os
import re
import shutil
import subprocess
import sys

import bt2

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import demo_oracle  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import Checks, readers_agree  # noqa: E402

check = Checks(quiet=True)


# The daemon's environment beyond the test's own (a scenario's choice).
DAEMON_ENV = {}


def record(strata, demo, out, record_opts, demo_opts, expect_ok=True):
    """Run `strata record`; return its CompletedProcess."""
    shutil.rmtree(out, ignore_errors=True)
    cmd = [strata, "record", "-o", out] + record_opts + ["--", demo] + demo_opts
    print("+", " ".join(cmd), flush=True)
    # No daemon of the machine's (an installed one running): record starts
    # its own, whose reports on stderr the scenarios read (hermetic).
    env = dict(os.environ, STRATA_CONSUMERD_SOCKET=os.path.join(os.path.dirname(out), "no-daemon.sock"),
               **DAEMON_ENV)
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    sys.stdout.write(r.stdout)
    sys.stderr.write(r.stderr)
    if expect_ok:
        check(r.returncode == 0, "strata record exits 0 (got %d)" % r.returncode)
    check(os.path.isdir(out), "the trace directory %s exists" % out)
    return r


def babeltrace2_clean(out):
    """`babeltrace2 DIR` exits 0 and its stderr holds nothing but the loss
    reports (WARNING: Tracer discarded N events/packets ...)."""
    r = subprocess.run(["babeltrace2", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    check(r.returncode == 0, "babeltrace2 exits 0 (got %d)" % r.returncode)
    other = [ln for ln in r.stderr.splitlines() if not ln.startswith("WARNING: Tracer discarded ")]
    check(not other, "babeltrace2 stderr has only loss reports (%d other lines: %r)" %
          (len(other), "\n".join(other[:5])))
    return r


class Trace:
    """Everything read back from a trace, in one pass of bt2's muxer."""

    def __init__(self, path, check_values=True):
        self.by_thread = {}         # thread -> list of seq, in time order
        self.streams = {}           # stream key -> list of ("e", thread, seq) / ("d", count)
        self.discarded_events = 0
        self.discarded_packets = 0
        self.starts = 0
        self.events = 0
        self.bad_values = 0
        self.ts_backwards = 0
        self.other = 0
        last_ts = {}
        it = bt2.TraceCollectionMessageIterator(path)
        EventMsg = bt2._EventMessageConst
        DiscEv = bt2._DiscardedEventsMessageConst
        DiscPk = bt2._DiscardedPacketsMessageConst
        for msg in it:
            t = type(msg)
            if t is EventMsg:
                ev = msg.event
                stream = ev.stream
                key = (stream.trace.uuid, stream.cls.id, stream.id)
                ts = msg.default_clock_snapshot.value
                if ts < last_ts.get(key, 0):
                    self.ts_backwards += 1
                last_ts[key] = ts
                self.events += 1
                name = ev.name
                if name == "demo:start":
                    self.starts += 1
                    continue
                if name not in ("demo:ints", "demo:mix"):
                    self.other += 1
                    continue
                p = ev.payload_field
                thread = int(p["thread"])
                seq = int(p["seq"])
                self.by_thread.setdefault(thread, []).append(seq)
                self.streams.setdefault(key, []).append(("e", thread, seq))
                if check_values and not self.values_ok(name, p, thread, seq):
                    self.bad_values += 1
                    if self.bad_values <= 5:
                        print("bad values: thread %d seq %d %s %s" % (thread, seq, name, p))
            elif t is DiscEv:
                n = msg.count or 0
                self.discarded_events += n
                s = msg.stream
                self.streams.setdefault((s.trace.uuid, s.cls.id, s.id), []).append(("d", n))
            elif t is DiscPk:
                n = msg.count or 0
                self.discarded_packets += n
                s = msg.stream
                self.streams.setdefault((s.trace.uuid, s.cls.id, s.id), []).append(("d", n))

    @staticmethod
    def values_ok(name, p, thread, seq):
        exp_name, exp = demo_oracle.expected(thread, seq)
        if name != exp_name:
            return False
        if name == "demo:ints":
            for k in ("s8", "u8", "s16", "u16", "s32", "u32", "s64", "x64"):
                if int(p[k]) != exp[k]:
                    return False
            return True
        if float(p["f32"]) != exp["f32"] or float(p["f64"]) != exp["f64"]:
            return False
        st = p["state"]
        if int(st) != exp["state"] or list(st.labels) != [demo_oracle.state_label(exp["state"])]:
            return False
        if str(p["msg"]) != exp["msg"]:
            return False
        if [int(x) for x in p["arr"]] != exp["arr"]:
            return False
        if [int(x) for x in p["vals"]] != exp["vals"]:
            return False
        return [int(x) for x in p["blob"]] == exp["blob"]


def check_readback(tr):
    """Checks every scenario makes of what it read back."""
    check(tr.bad_values == 0, "every recorded field value as defined (%d bad events)" % tr.bad_values)
    check(tr.ts_backwards == 0, "timestamps non-decreasing per stream (%d steps back)" % tr.ts_backwards)
    check(tr.other == 0, "no unexpected event names (%d)" % tr.other)


def scenario_full(strata, demo, work, n=int(os.environ.get("STRATA_RECORD_EVENTS", "125000")),
                  # 32 MiB per lane and a lane per thread: everything fits even if the
                  # consumer never got to drain, so the counts are exact on any machine.
                  opts=("--lanes", "8", "--subbuf-size", "1048576", "--subbuf-count", "32")):
    threads = 4
    out = os.path.join(work, "trace")
    r = record(strata, demo, out, list(opts), ["--threads", str(threads), "--events", str(n)])
    check("emitted %d events" % (threads * n) in r.stdout, "strata-demo reports what it emitted")
    tr = Trace(out)
    check(tr.discarded_events == 0 and tr.discarded_packets == 0,
          "no loss (discarded %d events, %d packets)" %
          (tr.discarded_events, tr.discarded_packets))
    check(tr.starts == 1, "demo:start recorded once (got %d)" % tr.starts)
    check(sorted(tr.by_thread) == list(range(threads)), "events of threads 0..%d (got %s)" %
          (threads - 1, sorted(tr.by_thread)))
    for t in range(threads):
        seqs = tr.by_thread.get(t, [])
        check(len(seqs) == n, "thread %d: exactly %d events (got %d)" % (t, n, len(seqs)))
        check(seqs == list(range(n)), "thread %d: sequence numbers 0..%d in time order" % (t, n - 1))
    check_readback(tr)
    readers_agree(check, strata, out)
    check(tr.events == threads * n + 1, "recorded == emitted: %d == %d" % (tr.events, threads * n + 1))
    b = babeltrace2_clean(out)
    check(b.stderr == "", "babeltrace2 prints nothing on stderr (got %r)" % b.stderr[:2000])


def scenario_blocking(strata, demo, work, by_file="0"):
    # The `discard` scenario's tiny buffers (it loses events there), blocking:
    # the writers wait for the consumer, so the `full` oracle holds exactly.
    # 50,000 events a thread are hundreds of laps of a lane's 8 KiB.
    DAEMON_ENV["STRATA_READ_BY_FILE"] = by_file
    scenario_full(strata, demo, work, n=50000,
                  opts=("--blocking=10000", "--subbuf-size", "4096", "--subbuf-count", "2"))


def scenario_blocking_file(strata, demo, work):
    scenario_blocking(strata, demo, work, by_file="1")


def scenario_discard(strata, demo, work):
    threads, n = 4, 50000
    out = os.path.join(work, "trace")
    r = record(strata, demo, out, ["--mode", "discard", "--subbuf-size", "4096", "--subbuf-count", "2"],
               ["--threads", str(threads), "--events", str(n)])
    tr = Trace(out)
    emitted = threads * n + 1
    # The daemon tells the user of the loss, with what its writes cost.
    said = [int(m) for m in re.findall(r"the writers discarded (\d+) event\(s\), their ring full; "
                                       r"this drain wrote [0-9.]+ MiB in [0-9.]+ ms", r.stderr)]
    check(len(said) == 1 and said[0] == tr.discarded_events,
          "strata-consumerd reports the loss once, with the trace's count (%s vs %d)" % (said, tr.discarded_events))
    print("recorded %d, discarded %d events, %d packets" %
          (tr.events, tr.discarded_events, tr.discarded_packets))
    check(tr.discarded_packets == 0, "discard mode loses events, never packets (%d)" % tr.discarded_packets)
    check(tr.events + tr.discarded_events == emitted, "recorded + discarded == emitted: %d + %d == %d" %
          (tr.events, tr.discarded_events, emitted))
    check(tr.discarded_events > 0, "tiny buffers do discard (else this test proves nothing)")
    for t, seqs in sorted(tr.by_thread.items()):
        check(all(a < b for a, b in zip(seqs, seqs[1:])), "thread %d: sequence numbers increasing" % t)
    check_readback(tr)
    readers_agree(check, strata, out)
    babeltrace2_clean(out)


def scenario_overwrite(strata, demo, work):
    threads, n = 4, 50000
    out = os.path.join(work, "trace")
    # --lanes 8: every thread (and main, which emits demo:start) gets a lane
    # of its own.  With shared lanes a thread that finishes first has its
    # tail overwritten by its lane-mate, which a flight recorder must do, but
    # then "each thread's last event is kept" would not hold.
    record(strata, demo, out, ["--mode", "overwrite", "--subbuf-size", "4096", "--subbuf-count", "4",
                               "--lanes", "8"],
           ["--threads", str(threads), "--events", str(n)])
    tr = Trace(out)
    print("kept %d events; discarded packets reported: %d" % (tr.events, tr.discarded_packets))
    check(tr.events < threads * n, "tiny buffers in overwrite mode keep fewer than all events")
    for t in range(threads):
        seqs = tr.by_thread.get(t, [])
        check(bool(seqs) and seqs[-1] == n - 1, "thread %d: its last event (seq %d) is kept" % (t, n - 1))
        if seqs:
            check(seqs == list(range(seqs[0], n)),
                  "thread %d: kept events are a contiguous newest tail (%d..%d, %d events)" %
                  (t, seqs[0], seqs[-1], len(seqs)))
    check_readback(tr)
    readers_agree(check, strata, out)
    babeltrace2_clean(out)


def scenario_sigkill(strata, demo, work):
    threads, kill_at = 4, int(os.environ.get("STRATA_SIGKILL_AT", "100000"))
    out = os.path.join(work, "trace")
    # --lanes 8: every thread gets a lane of its own, so a lane's loss count
    # is its thread's.
    r = record(strata, demo, out, ["--lanes", "8", "--subbuf-size", "65536", "--subbuf-count", "4"],
               ["--threads", str(threads), "--events", "100000000", "--sigkill-at", str(kill_at)],
               expect_ok=False)
    check(r.returncode != 0, "strata record reports the killed command's failure (got %d)" % r.returncode)
    babeltrace2_clean(out)
    tr = Trace(out)
    print("recorded %d events, discarded %d events, %d packets" %
          (tr.events, tr.discarded_events, tr.discarded_packets))
    check_readback(tr)
    readers_agree(check, strata, out)
    # Within a stream, a thread's next event is seq + 1 unless the stream
    # reported a loss in between.
    breaks = 0
    for key, items in tr.streams.items():
        last = {}   # thread -> (seq, loss epoch of the stream when it was seen)
        epoch = 0
        for it in items:
            if it[0] == "d":
                epoch += 1
                continue
            _, t, s = it
            if t in last and s != last[t][0] + 1 and last[t][1] == epoch:
                breaks += 1
                if breaks <= 5:
                    print("gap without reported loss: stream %s thread %d: %d -> %d" % (key, t, last[t][0], s))
            last[t] = (s, epoch)
    check(breaks == 0, "per-thread sequences contiguous within each packet run (%d gaps)" % breaks)
    # A lane starts empty, so a thread's first event always fits.  (Another
    # thread may not have been scheduled at all before the kill on a busy
    # machine: only thread 0 must have events.)
    for t in range(threads):
        seqs = tr.by_thread.get(t, [])
        check(seqs[:1] == [0] or (t != 0 and not seqs), "thread %d: its first event is kept" % t)
    s0 = tr.by_thread.get(0, [])
    check(bool(s0) and s0[-1] <= kill_at, "thread 0 emitted nothing after its kill point")
    # Thread 0 emitted exactly kill_at + 1 events before the SIGKILL, each
    # committed: its lane must hold each of them or count it as discarded
    # (the consumer closes the packet the dead process left open).
    lanes0 = [k for k, items in tr.streams.items() if any(it[0] == "e" and it[1] == 0 for it in items)]
    if check(len(lanes0) == 1, "thread 0's events are in one stream (%d)" % len(lanes0)):
        items = tr.streams[lanes0[0]]
        others = sum(1 for it in items if it[0] == "e" and it[1] != 0)
        lost = sum(it[1] for it in items if it[0] == "d")
        if check(others == 0, "thread 0 has its lane to itself (%d events of others)" % others):
            check(len(s0) + lost == kill_at + 1,
                  "thread 0: recorded + discarded == emitted before the kill: %d + %d == %d" %
                  (len(s0), lost, kill_at + 1))


def scenario_view(strata, demo, work):
    threads, n = 2, 500
    out = os.path.join(work, "trace")
    record(strata, demo, out, [], ["--threads", str(threads), "--events", str(n)])
    r = subprocess.run([strata, "view", out], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, TZ="UTC"))
    check(r.returncode == 0, "strata view exits 0 (got %d: %s)" % (r.returncode, r.stderr))
    check(r.stderr == "", "strata view prints nothing on stderr (%r)" % r.stderr[:500])
    lines = r.stdout.splitlines()
    check(len(lines) == threads * n + 1, "one line per event: %d lines for %d events" %
          (len(lines), threads * n + 1))
    check(sum(" demo:start" in ln and "strata-demo[" in ln for ln in lines) == 1,
          "the demo:start line, with the process name")
    for t in range(threads):
        want = [
            "demo:ints: { thread = %d, seq = 0, s8 = 0, u8 = %d, s16 = 0, u16 = 0, s32 = %d, u32 = %d, "
            "s64 = %d, x64 = 0xdead%04x00000000 }" % (t, t, -t, t, -t, t),
            "demo:mix: { thread = %d, seq = 1, f32 = 0.5, f64 = %s, state = busy (1), msg = \"t%d-1\", "
            "arr = [ 1, %d, 7, 65535 ], vals = [ 1 ], blob = [ 0x1 ] }" % (t, repr(0.25 + t), t, t),
            "demo:mix: { thread = %d, seq = 5, f32 = 2.5, f64 = %s, state = custom (11), msg = \"t%d-5\", "
            "arr = [ 5, %d, 7, 65535 ], vals = [ ], blob = [ 0x5 ] }" % (t, repr(1.25 + t), t, t),
        ]
        for w in want:
            check(any(ln.endswith(w) for ln in lines), "a line contains %r" % w)
    # User events carry no cpu (lanes are per thread); kernel events do.
    pat = re.compile(r"^\[\d\d:\d\d:\d\d\.\d{9}\] strata-demo\[\d+\] tid=\d+ demo:(ints|mix|start)")
    bad = [ln for ln in lines if not pat.match(ln)]
    check(not bad, "every line has time, process[pid], tid, event (%d do not: %r)" % (len(bad), bad[:3]))
    r = subprocess.run([strata, "view", "-n", "10", out], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and len(r.stdout.splitlines()) == 10, "view -n 10 prints 10 lines")


def packet_offsets(path):
    """Start offsets of the packets of a stream file (packet_size at 56)."""
    offs, off, size = [], 0, os.path.getsize(path)
    with open(path, "rb") as f:
        while off < size:
            f.seek(off + 56)
            bits = int.from_bytes(f.read(8), "little")
            if bits == 0 or bits % 8:
                break
            offs.append(off)
            off += bits // 8
    return offs


def scenario_torn(strata, demo, work):
    threads, n = 2, 3000
    whole = os.path.join(work, "whole")
    # Small sub-buffers: every stream file holds several packets.
    record(strata, demo, whole, ["--subbuf-size", "8192", "--subbuf-count", "8"],
           ["--threads", str(threads), "--events", str(n)])
    streams = sorted(os.path.join(d, f) for d, _, fs in os.walk(whole) for f in fs
                     if f.startswith("channel0_") and not f.endswith(".idx"))
    files = [(len(packet_offsets(p)), p) for p in streams]
    check(files and max(files)[0] >= 3, "a stream file with 3 packets or more (%r)" % files[:4])
    if not files or max(files)[0] < 3:
        return
    k, victim = max(files)
    rel = os.path.relpath(victim, whole)
    # Cut 100 bytes into the last packet longer than 200 bytes (a trailing
    # header-only packet is shorter): everything after it is gone, as when
    # the consumer died writing it.
    offs = packet_offsets(victim) + [os.path.getsize(victim)]
    cut = [offs[i] for i in range(k) if offs[i + 1] - offs[i] > 200][-1]
    clean, torn = os.path.join(work, "clean"), os.path.join(work, "torn")
    for d in (clean, torn):
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(whole, d)
    os.truncate(os.path.join(clean, rel), cut)        # ends on a packet boundary
    # The reference reads as a trace written without its last packets: its
    # packet index (which would name them as missing) goes too.
    shutil.rmtree(os.path.join(os.path.dirname(os.path.join(clean, rel)), "index"))
    os.truncate(os.path.join(torn, rel), cut + 100)   # ends 100 bytes into a packet
    env = dict(os.environ, TZ="UTC")
    want = subprocess.run([strata, "view", clean], capture_output=True, text=True, timeout=120, env=env)
    check(want.returncode == 0 and want.stdout.count("\n") > 0, "the cleanly cut trace reads")
    # Strata's reader reads past the torn packet: every whole packet, the
    # torn file named, the repair suggested for other readers, and exit 1
    # (damage skipped).
    r = subprocess.run([strata, "view", torn], capture_output=True, text=True, timeout=120, env=env)
    check(r.returncode == 1 and r.stdout == want.stdout,
          "strata view of a torn trace prints exactly the cleanly cut trace's lines, exits 1 (exit %d, %d vs %d "
          "lines)" %
          (r.returncode, r.stdout.count("\n"), want.stdout.count("\n")))
    check(os.path.basename(victim) in r.stderr and "strata view --repair" in r.stderr,
          "the warning names the torn file and the repair (%r)" % r.stderr[-600:])
    # babeltrace2 refuses it: through it, view fails naming the file.
    r = subprocess.run([strata, "view", torn], capture_output=True, text=True, timeout=120,
                       env=dict(env, STRATA_READER="babeltrace2"))
    check(r.returncode == 1, "strata view through babeltrace2 of a torn trace exits 1 (got %d)" % r.returncode)
    check(os.path.basename(victim) in r.stderr and "strata view --repair" in r.stderr,
          "the error names the torn file and the repair (%r)" % r.stderr[-600:])
    check(os.path.getsize(os.path.join(torn, rel)) == cut + 100, "strata view alone changes nothing")
    r = subprocess.run([strata, "view", "--repair", torn], capture_output=True, text=True, timeout=120,
                       env=env)
    check(r.returncode == 0, "strata view --repair exits 0 (got %d: %s)" % (r.returncode, r.stderr[-400:]))
    got = [ln for ln in r.stdout.splitlines() if ln.startswith("[")]
    check(got == want.stdout.splitlines(),
          "after --repair: exactly the lines of the cleanly cut trace (%d vs %d lines)" %
          (len(got), want.stdout.count("\n")))
    check(os.path.getsize(os.path.join(torn, rel)) == cut, "the torn file was cut to %d bytes" % cut)


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    scenario, strata, demo, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    fn = globals().get("scenario_" + scenario)
    if not fn:
        print("unknown scenario", scenario)
        return 2
    fn(strata, demo, work)
    print(scenario + ":", end=" ")
    check.finish()


if __name__ == "__main__":
    sys.exit(main())
