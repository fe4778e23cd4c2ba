"""Streaming a session over a byte line (strata record --serial, strata
receive), issue 34, docs/serial.md.

The workload is control_snap_app (numbered snap:tick events on command),
recorded with `strata record --serial`, which starts its own daemon.

Cases and oracles:
  - session (a daemon, strata create/enable-event/start/stop/destroy): a
    FIFO nobody reads, an unsupported speed and --serial with --relay are
    refused; a session on a FIFO at 57600 baud: status shows the line, the
    stop answer says what it carried, the receiver ends when the session is
    destroyed, babeltrace2 reads exactly seq 0..99.
  - pipe: the sender writes into a pipe the receiver reads (`strata receive
    -`); 2000 events within the line's bandwidth: babeltrace2 reads the
    rebuilt trace with nothing on stderr, exactly seq 0..1999 in order; the
    receiver reports no frame lost and every packet the sender offered
    written.
  - late join: a session on a file lasting over one metadata resend period
    (5 s); a receiver given the whole line and one given the line less its
    first 600 bytes (the announcement and the start of the metadata): both
    rebuild exactly seq 0..199, the late one from the resent metadata (its
    report counts the metadata frames it missed).
  - pty: a pseudo-terminal pair made by socat (both ends ttys, set raw at
    115200 by sender and receiver): the same 2000 events, exactly; the
    receiver, which has no end of input on a tty, is stopped by SIGINT once
    it said the sub-trace ended.
  - over capacity: 115200 baud (11520 B/s), 4 KiB sub-buffers and 200000
    events at once, far above what the line carries, then 10 more a second
    later: the sender refuses packets (record's stop message counts them)
    and the traced process is not slowed to the line (it ends well before
    the line could have carried its events); missing == counted: the
    packets the sender offered minus those written (receiver's report)
    equals the refused count; the events that arrived are valid and in
    order, the last one there, and babeltrace2 shows exactly the refused
    packets as discarded packets.
  - corrupter: between sender and receiver, the test's own corrupter flips
    bits, drops runs of bytes and inserts garbage (one damage per about
    20000 bytes, inside a window that spares the first 16 KiB, where the
    metadata goes, and what follows 400 KiB, where the end frame goes): babeltrace2
    reads the trace (exit 0), every event is a valid snap:tick with seq in
    range and in order (no corrupt event), the packets lost (sent minus
    written) equal the frames the receiver counted lost on the data
    streams, and resync is within one frame: frames lost <= 2 x damages
    (a damaged delimiter costs the frame after it too).
"""
import argparse
import math
import os
import random
import re
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, bt_text, start_daemon, strata_cli, trace_messages, wait_for  # noqa: E402

check = Checks()


def ticks(path):
    """(seqs of snap:tick in trace order, discarded packets, discarded events)"""
    seqs, dpk, dev = [], 0, 0
    for m in trace_messages(path):
        if m.kind == "event":
            if m.name == "snap:tick":
                seqs.append(m.fields["seq"])
        elif m.kind == "discarded_packets":
            dpk += m.count
        else:
            dev += m.count
    return seqs, dpk, dev


def bt_stderr(args, path):
    rc, _, _, err = bt_text(path, args.babeltrace2, timeout=60)
    return rc, err


def record(args, env, device, n, extra=(), tail=0, pause=1):
    """`strata record --serial device` of snap_app emitting n events (then,
    with tail, `tail` more `pause` seconds later); returns (exit code,
    record's stderr, seconds the app took for the n)."""
    p = subprocess.Popen([args.strata, "record", "--serial", device] + list(extra) + ["--", args.app],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    t0 = time.monotonic()
    line = p.stdout.readline().strip()
    assert line == "ready", line
    p.stdin.write("%d\n" % n)
    p.stdin.flush()
    last = p.stdout.readline().strip()
    ran = time.monotonic() - t0
    if tail:
        # Not a synchronisation: the line's bucket refills with time, and
        # a second gives it room for the tail's packet, so that the refused
        # packets lie between packets the trace has (gaps babeltrace2 sees).
        time.sleep(pause)
        p.stdin.write("%d\n" % tail)
        p.stdin.flush()
        last = p.stdout.readline().strip()
        n += tail
    p.stdin.close()
    p.stdin = None
    out, err = p.communicate(timeout=60)
    assert last == str(n - 1), last
    return p.returncode, err, ran


def stop_counts(err):
    m = re.search(r"(\d+) packet\(s\) sent .*?, (\d+) refused over capacity", err)
    return (int(m.group(1)), int(m.group(2))) if m else (None, None)


def rx_report(text):
    """The receiver's report: totals and, per data lane, (frames, lost,
    offered, written)."""
    rep = {"lanes": {}}
    m = re.search(r"(\d+) frame\(s\) good, (\d+) with a bad CRC, (\d+) malformed, (\d+) oversized .*?; (\d+) packet\(s\) "
                  r"written; (\d+) frame\(s\) lost", text)
    if m:
        (rep["good"], rep["bad_crc"], rep["malformed"], rep["oversized"], rep["written"],
         rep["lost"]) = map(int, m.groups())
    for m in re.finditer(r"^  \S+/channel0_(\d+): (\d+) frame\(s\)(?:, (\d+) lost)?(?:; (\d+) packet\(s\) offered by the "
                         r"sender, (\d+) written, (\d+) missing)?(?:; (\d+) event\(s\) missing)?", text, re.M):
        rep["lanes"][int(m.group(1))] = tuple(int(g) if g else 0 for g in m.groups()[1:])
    m = re.search(r"(\d+) packet\(s\) and (\d+) event\(s\) missing, each marked in the trace", text)
    if m:
        rep["missing_packets"], rep["missing_events"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"^  \S+/metadata: (\d+) frame\(s\), (\d+) lost", text, re.M)
    rep["meta_lost"] = int(m.group(2)) if m else None
    return rep


def pipe_case(args, env, tmp, name, n, extra=(), corrupter=None, baud="", tail=0):
    """Sender -> pipe [-> corrupter -> pipe] -> strata receive -.  Returns
    (record's stderr, receiver's stderr, out dir, app run time)."""
    out = os.path.join(tmp, name)
    r, w = os.pipe()
    if corrupter:
        r2, w2 = os.pipe()
        rx = subprocess.Popen([args.strata, "receive", "-", "-o", out], stdin=r2, stderr=subprocess.PIPE, text=True)
        os.close(r2)
        th = threading.Thread(target=corrupter, args=(r, w2), daemon=True)
        th.start()
    else:
        rx = subprocess.Popen([args.strata, "receive", "-", "-o", out], stdin=r, stderr=subprocess.PIPE, text=True)
        os.close(r)
    code, err, ran = record(args, env, "/proc/%d/fd/%d%s" % (os.getpid(), w, baud), n, extra, tail)
    check(code == 0, "%s: strata record exits 0 (%d)" % (name, code))
    os.close(w)  # the daemon is gone: the receiver sees end of input
    if corrupter:
        th.join(timeout=60)
    _, rxerr = rx.communicate(timeout=60)
    check(rx.returncode == 0, "%s: strata receive exits 0 (%d)" % (name, rx.returncode))
    return err, rxerr, out, ran


def case_pipe(args, env, tmp):
    err, rxerr, out, _ = pipe_case(args, env, tmp, "pipe", 2000)
    rc, bterr = bt_stderr(args, out)
    check(rc == 0 and bterr == "", "pipe: babeltrace2 reads the trace, nothing on stderr (%d %r)" % (rc, bterr[:300]))
    seqs, dpk, dev = ticks(out)
    check(seqs == list(range(2000)), "pipe: exactly seq 0..1999 in order (%d events)" % len(seqs))
    rep = rx_report(rxerr)
    sent, refused = stop_counts(err)
    check(refused == 0 and rep.get("lost") == 0, "pipe: nothing refused, no frame lost (%s %s)" % (refused, rep.get("lost")))
    lanes = rep["lanes"]
    check(lanes and all(v[2] == v[3] and v[4] == 0 for v in lanes.values()) and rep.get("written") == sent,
          "pipe: every packet offered was written (%s, sent %s)" % (lanes, sent))


def case_stdout(args, env, tmp):
    """`record --serial -`: record's own standard output carries the frames;
    the traced command's output goes to record's standard error, not into
    the stream (where it used to land inside frames and lose them)."""
    out = os.path.join(tmp, "stdout")
    rec = subprocess.Popen([args.strata, "record", "--serial", "-", "--", args.app], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    rx = subprocess.Popen([args.strata, "receive", "-", "-o", out], stdin=rec.stdout, stderr=subprocess.PIPE, text=True)
    rec.stdout.close()
    _, rerr = rec.communicate(input=b"500\n", timeout=60)
    _, rxerr = rx.communicate(timeout=60)
    check(rec.returncode == 0 and rx.returncode == 0,
          "stdout: record and receive exit 0 (%d %d)" % (rec.returncode, rx.returncode))
    seqs, dpk, dev = ticks(out)
    check(seqs == list(range(500)) and dpk == 0 and dev == 0,
          "stdout: exactly seq 0..499, nothing discarded (%d events, %d %d)" % (len(seqs), dpk, dev))
    check(b"ready" in rerr and b"499" in rerr, "stdout: the command's own output is on record's stderr")
    rep = rx_report(rxerr)
    check(rep.get("malformed") == 0 and rep.get("bad_crc") == 0 and rep.get("lost") == 0,
          "stdout: no frame damaged or lost (%s)" % {k: rep.get(k) for k in ("malformed", "bad_crc", "lost")})


def case_pty(args, env, tmp):
    a, b = os.path.join(tmp, "ttyA"), os.path.join(tmp, "ttyB")
    socat = subprocess.Popen([args.socat, "pty,raw,echo=0,link=" + a, "pty,raw,echo=0,link=" + b],
                             stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: os.path.exists(a) and os.path.exists(b), "socat's pty pair", 10)
        out = os.path.join(tmp, "pty")
        rx = subprocess.Popen([args.strata, "receive", b + ",115200", "-o", out], stderr=subprocess.PIPE, text=True)
        # The receiver has set its end raw once it holds it open: wait for
        # that before anything is sent (bytes before it would be cooked).
        wait_for(lambda: any(os.path.realpath("/proc/%d/fd/%s" % (rx.pid, f)) == os.path.realpath(b)
                             for f in os.listdir("/proc/%d/fd" % rx.pid)), "the receiver to open its tty", 10)
        code, err, _ = record(args, env, a + ",115200", 2000)
        check(code == 0, "pty: strata record exits 0 (%d)" % code)
        lines = []

        def ended():
            line = rx.stderr.readline()
            lines.append(line)
            return " ended: " in line or line == ""
        wait_for(ended, "the receiver to see the sub-trace end", 30)
        rx.send_signal(signal.SIGINT)
        rest = rx.communicate(timeout=30)[1]
        rxerr = "".join(lines) + rest
        check(rx.returncode == 0, "pty: strata receive ends on SIGINT with 0 (%d)" % rx.returncode)
        rc, bterr = bt_stderr(args, out)
        check(rc == 0 and bterr == "", "pty: babeltrace2 reads the trace, nothing on stderr (%d %r)" % (rc, bterr[:300]))
        seqs, _, _ = ticks(out)
        check(seqs == list(range(2000)), "pty: exactly seq 0..1999 in order (%d events)" % len(seqs))
        rep = rx_report(rxerr)
        check(rep.get("lost") == 0 and rep.get("bad_crc") == 0, "pty: no frame lost or damaged (%s)" % rxerr.strip()[-300:])
    finally:
        socat.terminate()
        socat.wait(timeout=10)


def case_over_capacity(args, env, tmp):
    n = 200000
    err, rxerr, out, ran = pipe_case(args, env, tmp, "over", n, ["--subbuf-size", "4k"], tail=10)
    sent, refused = stop_counts(err)
    rep = rx_report(rxerr)
    print("over capacity: app ran %.2f s; sent %s refused %s; receiver: %s" % (ran, sent, refused, rxerr.strip()))
    check(refused is not None and refused > 0 and sent > 0, "over: the sender refused packets (%s sent, %s refused)"
          % (sent, refused))
    missing = sum(v[4] for v in rep["lanes"].values())
    offered = sum(v[2] for v in rep["lanes"].values())
    check(offered == sent + refused and missing == refused and rep.get("lost") == 0,
          "over: missing == counted (offered %d = sent %s + refused %s; missing %d; line losses %s)"
          % (offered, sent, refused, missing, rep.get("lost")))
    # 200000 events are ~3 MB: at 11520 B/s the line needs minutes; the
    # process must not have waited for it.
    check(ran < 30, "over: the traced process was not slowed to the line (%.1f s)" % ran)
    rc, bterr = bt_stderr(args, out)
    check(rc == 0, "over: babeltrace2 reads the trace (%d %r)" % (rc, bterr[:300]))
    seqs, dpk, dev = ticks(out)
    check(0 < len(seqs) < n and all(seqs[i] < seqs[i + 1] for i in range(len(seqs) - 1)) and seqs[-1] == n + 9,
          "over: %d valid events, in order, the tail's last there (of %d)" % (len(seqs), n + 10))
    check(dpk == refused, "over: the trace shows each refused packet as discarded (%d discarded, %s refused)"
          % (dpk, refused))
    # Discarded: by the writers (a ring of 4 KiB sub-buffers fills) and the
    # events of the refused packets, which the receiver counts.
    check(len(seqs) + dev == n + 10 and 0 < rep.get("missing_events", 0) <= dev,
          "over: recorded %d + discarded %d == emitted %d; %s of them in the refused packets"
          % (len(seqs), dev, n + 10, rep.get("missing_events")))


def case_session(args, tmp):
    """create/enable/start/stop/destroy on a daemon, into a FIFO."""
    sock = os.path.join(tmp, "d.sock")
    env = dict(os.environ, STRATA_CONSUMERD_SOCKET=sock)
    d = start_daemon(args.consumerd, sock, env)
    try:
        fifo = os.path.join(tmp, "line.fifo")
        os.mkfifo(fifo)

        strata = strata_cli(args.strata, env, ok=False, timeout=60)
        r = strata("create", "S0", "--serial", fifo)
        check(r.returncode == 1 and "no process reads the FIFO" in r.stderr,
              "session: a FIFO nobody reads is refused at create (%d %r)" % (r.returncode, r.stderr.strip()))
        r = strata("create", "S0", "--serial", fifo + ",12345")
        check(r.returncode == 1 and "not a supported speed" in r.stderr,
              "session: an unsupported speed is refused (%d %r)" % (r.returncode, r.stderr.strip()))
        r = strata("create", "S0", "--serial", fifo, "--relay", "localhost")
        check(r.returncode == 2, "session: --serial with --relay is a usage error (%d)" % r.returncode)
        out = os.path.join(tmp, "session")
        rx = subprocess.Popen([args.strata, "receive", fifo, "-o", out], stderr=subprocess.PIPE, text=True)
        # Its open() blocks until a writer comes; the daemon's non-blocking
        # open for writing needs it to be there: retried until it is.
        deadline = time.monotonic() + 30
        while True:
            r = strata("create", "S", "--serial", fifo + ",57600")
            if r.returncode == 0 or "no process reads" not in r.stderr or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        check(r.returncode == 0 and "57600 baud (5760 B/s)" in r.stdout,
              "session: created on the FIFO at 57600 baud (%r %r)" % (r.stdout.strip(), r.stderr.strip()))
        strata("enable-event", "S", "snap:*")
        strata("start", "S")
        st = strata("status", "S").stdout
        check(re.search(r"line: +%s 57600 baud \(5760 B/s\): 0 packet\(s\) sent" % re.escape(fifo), st) is not None,
              "session: status shows the line (%r)" % st.strip()[-200:])
        app = subprocess.run([args.app], input="100\n", stdout=subprocess.PIPE, text=True, env=env, timeout=60)
        check(app.stdout.split() == ["ready", "99"], "session: the app emitted 100 events")
        r = strata("stop", "S")
        check(r.returncode == 0 and re.search(r"1 packet\(s\) sent .* 0 refused over capacity .* of the line's 5760 B/s",
                                              r.stdout) is not None,
              "session: stop says what the line carried (%r)" % r.stdout.strip())
        strata("destroy", "S")
        _, rxerr = rx.communicate(timeout=60)  # the line closed with the session
        check(rx.returncode == 0 and " 0 frame(s) lost" in rxerr, "session: the receiver ended, nothing lost (%r)"
              % rxerr.strip()[-300:])
        rc, bterr = bt_stderr(args, out)
        seqs, _, _ = ticks(out)
        check(rc == 0 and bterr == "" and seqs == list(range(100)),
              "session: babeltrace2 reads exactly seq 0..99 (%d events, %r)" % (len(seqs), bterr[:200]))
    finally:
        d.terminate()
        d.wait(timeout=30)


def case_late_join(args, env, tmp):
    """A receiver that joins late: the line's first bytes (the sub-trace's
    announcement and the start of its metadata) never reach it."""
    line = os.path.join(tmp, "late.line")
    # Not a synchronisation: the sender re-sends the metadata every 5 s at
    # least (docs/serial.md); 6 s between the two batches put a resend
    # between them.
    code, err, _ = record(args, env, line, 100, tail=100, pause=6)
    check(code == 0, "late: strata record exits 0 (%d)" % code)
    data = open(line, "rb").read()
    rep = {}
    for name, cut in (("whole", 0), ("late", 600)):
        src = os.path.join(tmp, "late-%s.bin" % name)
        open(src, "wb").write(data[cut:])
        out = os.path.join(tmp, "late-" + name)
        r = subprocess.run([args.strata, "receive", src, "-o", out], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        rep[name] = rx_report(r.stderr)
        rc, bterr = bt_stderr(args, out)
        seqs, _, _ = ticks(out)
        check(r.returncode == 0 and rc == 0 and bterr == "" and seqs == list(range(200)),
              "late: %s line: babeltrace2 reads exactly seq 0..199 (%d events, %r)" % (name, len(seqs), bterr[:200]))
    check(rep["whole"].get("meta_lost") == 0 and rep["late"].get("meta_lost", 0) > 0,
          "late: the late receiver missed metadata frames (%s) and got the text from the resend"
          % rep["late"].get("meta_lost"))


def pump(rfd, wfd, transform):
    """Copies rfd to wfd until its end, each chunk through transform(chunk, pos)."""
    pos = 0
    with os.fdopen(rfd, "rb", buffering=0) as r, os.fdopen(wfd, "wb", buffering=0) as w:
        while True:
            chunk = r.read(65536)
            if not chunk:
                return
            w.write(transform(chunk, pos))
            pos += len(chunk)


def make_corrupter(seed, start, stop, rate, damages):
    rng = random.Random(seed)

    def transform(chunk, pos):
        outb = bytearray()
        i = 0
        while i < len(chunk):
            b = chunk[i]
            if start <= pos < stop and rng.randrange(rate) == 0:
                kind = rng.randrange(3)
                damages[kind] += 1
                if kind == 0:
                    outb.append(b ^ (1 << rng.randrange(8)))
                elif kind == 1:
                    k = 1 + rng.randrange(64)  # drop k bytes (within this chunk)
                    i += k
                    pos += k
                    continue
                else:
                    outb += bytes(rng.randrange(256) for _ in range(1 + rng.randrange(32)))
                    outb.append(b)
            else:
                outb.append(b)
            i += 1
            pos += 1
        return bytes(outb)
    return lambda rfd, wfd: pump(rfd, wfd, transform)


def case_corrupter(args, env, tmp):
    n = 40000
    damages = [0, 0, 0]
    corrupter = make_corrupter(34, 16 << 10, 400 << 10, 20000, damages)
    # 3 Mbaud: the line has room for all of it (no refusal); a 1 MiB ring
    # of 16 KiB packets: no event discarded by the writers, ~32 frames.
    err, rxerr, out, _ = pipe_case(args, env, tmp, "corrupt", n, ["--subbuf-size", "16k", "--subbuf-count", "64"],
                                   corrupter, baud=",3000000")
    d = sum(damages)
    sent, refused = stop_counts(err)
    rep = rx_report(rxerr)
    print("corrupter: %d flips, %d dropped runs, %d insertions; sent %s refused %s; receiver: %s"
          % (damages[0], damages[1], damages[2], sent, refused, rxerr.strip()))
    check(refused == 0, "corrupt: the line had room for every packet (refused %s)" % refused)
    check(d >= 5, "corrupt: the corrupter damaged the stream (%d times)" % d)
    rc, bterr = bt_stderr(args, out)
    check(rc == 0, "corrupt: babeltrace2 reads the trace (%d %r)" % (rc, bterr[:300]))
    seqs, dpk, dev = ticks(out)
    check(0 < len(seqs) < n and all(seqs[i] < seqs[i + 1] for i in range(len(seqs) - 1)) and seqs[-1] == n - 1,
          "corrupt: %d events, all valid and in order, the last one there" % len(seqs))
    lost_data = sum(v[1] for v in rep["lanes"].values())
    missing = sum(v[4] for v in rep["lanes"].values())
    check(sent is not None and sent - rep.get("written", -1) == lost_data == missing and lost_data > 0,
          "corrupt: every lost packet counted (sent %s - written %s = frames lost on data streams %d = missing %d)"
          % (sent, rep.get("written"), lost_data, missing))
    check(dpk == lost_data and len(seqs) + dev == n and dev == rep.get("missing_events"),
          "corrupt: the trace shows each lost packet as discarded (%d discarded packet(s)) and its events (recorded "
          "%d + discarded %d == emitted %d; the receiver says %s missing)" % (dpk, len(seqs), dev, n,
                                                                                rep.get("missing_events")))
    check(0 < rep.get("lost", 0) <= 2 * d, "corrupt: resync within one frame (%s frames lost for %d damages)"
          % (rep.get("lost"), d))
    check(rep.get("bad_crc", 0) + rep.get("malformed", 0) > 0, "corrupt: damaged frames rejected by CRC or framing")


def damage_positions(rng, per_mib, length, start=0):
    """Offsets in [start, start + length) each damaged with probability
    per_mib / 2^20 (geometric gaps: exact in expectation, cheap)."""
    out = []
    if per_mib <= 0:
        return out
    p = per_mib / float(1 << 20)
    i = start - 1
    while True:
        i += int(math.log(1.0 - rng.random()) / math.log(1.0 - p)) + 1
        if i >= start + length:
            return out
        out.append(i)


def damage(buf, per_mib, rng, start=0):
    """Random byte corruption: each chosen byte replaced by another value."""
    b = bytearray(buf)
    pos = damage_positions(rng, per_mib, len(b), start)
    for i in pos:
        b[i - start] ^= rng.randrange(1, 256)
    return bytes(b), len(pos)


_CRC32C = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def cobs_decode(p):
    out, i = bytearray(), 0
    while i < len(p):
        code = p[i]
        out += p[i + 1:i + code]
        i += code
        if code != 0xFF and i < len(p):
            out.append(0)
    return bytes(out)


def cobs_encode(body):
    out, block = bytearray(), bytearray()
    for b in body:
        if b:
            block.append(b)
        if not b or len(block) == 254:
            out += bytes([len(block) + 1]) + block
            block = bytearray()
    return bytes(out + bytes([len(block) + 1]) + block)


def hostile_sender(line, seed, rounds):
    """The line's frames re-framed with their CRC right after a hostile
    edit: frames repeated, dropped, swapped, bytes of a header or payload
    replaced, a payload cut (its length field and CRC made to agree)."""
    frames = [cobs_decode(f) for f in line.split(b"\0") if f]
    rng = random.Random(seed)
    for _ in range(rounds):
        op, k = rng.randrange(4), rng.randrange(len(frames))
        if op == 0:
            frames.insert(rng.randrange(len(frames)), frames[k])
        elif op == 1 and len(frames) > 1:
            del frames[k]
        elif op == 2:
            frames[k], frames[-1 - k] = frames[-1 - k], frames[k]
        else:
            b = bytearray(frames[k][:-4])
            for _ in range(1 + rng.randrange(8)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            if rng.randrange(3) == 0 and len(b) > 24:
                b = b[:rng.randrange(16, len(b))]
                b[12:16] = (len(b) - 16).to_bytes(4, "little")
            frames[k] = bytes(b) + crc32c(b).to_bytes(4, "little")
    return b"\0" + b"".join(cobs_encode(f) + b"\0" for f in frames)


def frame(kind, trace, stream, seq, payload):
    """One frame of wire format 2 (docs/serial.md), its CRC right."""
    b = bytes([2 << 4 | kind, 0]) + struct.pack("<HHHII", trace, stream, 0, seq, len(payload)) + payload
    return cobs_encode(b + crc32c(b).to_bytes(4, "little")) + b"\0"


def case_clock_frames(args, tmp, small):
    """Frames of the clock rewrite (docs/clocks.md, "Serial followers") that
    no honest sender sends, after a good line: a kind this receiver does not
    know, clocks.json under another name or longer than any text, a rewrite
    chunk off its grid, a whole rewrite that is not CTF, one for a sub-trace
    never announced.  The receiver ends with 0, counts the unknown kind
    apart, and writes none of them: the same metadata as without them, no
    clocks.json, no temporary file; babeltrace2 reads the trace."""
    ctf = b"/* CTF 1.8 */\n"
    bad = [frame(7, 0x7777, 0xFFFF, 0, b"later"),
           frame(6, 0xFFFF, 0xFFFF, 0, struct.pack("<IIIBB", 0, 4, 1, 6, 0) + b"../etc" + b"abcd"),
           frame(6, 0xFFFF, 0xFFFF, 1, struct.pack("<IIIBB", 0, 0x7FFFFFFF, 1, 11, 0) + b"clocks.json" + b"x"),
           frame(5, 0, 0xFFFF, 1000, struct.pack("<IIII", 3, 4000, 10, 1) + b"x" * 1024),
           frame(5, 0, 0xFFFF, 1001, struct.pack("<IIII", 0, 10, 10, 1) + b"not a tsdl"),
           frame(5, 9, 0xFFFF, 0, struct.pack("<IIII", 0, len(ctf), 10, 1) + ctf)]
    outs = {}
    for name, data in (("clean", small), ("clock frames", small + b"".join(bad))):
        src = os.path.join(tmp, "clock-frames.bin")
        open(src, "wb").write(data)
        o = outs[name] = os.path.join(tmp, "clock-frames-" + name.replace(" ", "-"))
        r = subprocess.run([args.strata, "receive", src, "-o", o], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        check(r.returncode == 0, "%s: strata receive exits 0 (%d)" % (name, r.returncode))
    check("1 frame(s) of a kind this receiver does not know skipped" in r.stderr and
          "0 packet frame(s) and 4 other frame(s) with a good CRC but bad contents ignored" in r.stderr,
          "clock frames: the unknown kind skipped and counted, 4 lying frames ignored as bad, the unannounced rewrite unused: " +
          " | ".join(ln.strip() for ln in r.stderr.splitlines() if "frame(s) of" in ln or "bad contents" in ln))
    metas = {}
    for name, o in outs.items():
        metas[name] = {os.path.relpath(os.path.join(dp, f), o): open(os.path.join(dp, f), "rb").read()
                       for dp, _, fs in os.walk(o) for f in fs if f == "metadata"}
    o = outs["clock frames"]
    check(metas["clean"] and metas["clean"] == metas["clock frames"] and
          not os.path.exists(os.path.join(o, "clocks.json")) and
          not os.path.exists(os.path.join(o, ".strata-receive.tmp")),
          "clock frames: the metadata as without them (%d file(s)), no clocks.json, no temporary file" %
          len(metas["clean"]))
    rc, bterr = bt_stderr(args, o)
    check(rc == 0, "clock frames: babeltrace2 reads the trace (%d %r)" % (rc, bterr[:300]))


def noisy_check(args, name, out, rxerr, n, floor):
    """The oracle of a noisy line: babeltrace2 reads the rebuilt trace (exit
    0); every event a valid tick, in order; recorded + the events the trace
    reports as discarded == emitted, the receiver's count of missing events
    and packets == what babeltrace2 reports; recorded >= floor * emitted."""
    rep = rx_report(rxerr)
    # babeltrace2's own command (the Python bindings take 5 times as long
    # on 100,000 events): the events on stdout, the discarded ones in its
    # warnings on stderr.
    r = subprocess.run([args.babeltrace2, out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60)
    check(r.returncode == 0, "%s: babeltrace2 reads the rebuilt trace (%d %r)" % (name, r.returncode, r.stderr[-300:]))
    seqs = [int(v) for v in re.findall(r" snap:tick: \{[^}]*\}, \{ seq = (\d+) \}$", r.stdout, re.M)]
    check(len(seqs) == r.stdout.count("\n"), "%s: every line babeltrace2 prints is a tick (%d of %d)"
          % (name, len(seqs), r.stdout.count("\n")))
    dev = sum(int(v) for v in re.findall(r"Tracer discarded (\d+) events? between", r.stderr))
    dpk = sum(int(v) for v in re.findall(r"Tracer discarded (\d+) packets? between", r.stderr))
    check(all(0 <= seqs[i] < seqs[i + 1] < n for i in range(len(seqs) - 1)),
          "%s: every event a valid tick, in order (%d)" % (name, len(seqs)))
    check(len(seqs) + dev == n, "%s: recorded %d + discarded %d == emitted %d" % (name, len(seqs), dev, n))
    check(dev == rep.get("missing_events") and dpk == rep.get("missing_packets"),
          "%s: the trace marks what the receiver counts missing (%d event(s), %d packet(s); receiver %s, %s)"
          % (name, dev, dpk, rep.get("missing_events"), rep.get("missing_packets")))
    # Strata's own reader (strata view) reports the same, in place.
    v = subprocess.run([args.strata, "view", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60)
    vev = sum(int(x) for x in re.findall(r"^\[[^]]*\] \*\*\* (\d+) events discarded in ", v.stdout, re.M))
    vpk = sum(int(x) for x in re.findall(r"^\[[^]]*\] \*\*\* (\d+) packets discarded in ", v.stdout, re.M))
    check(v.returncode == 0 and v.stdout.count(" snap:tick: ") == len(seqs) and (vev, vpk) == (dev, dpk),
          "%s: strata view shows the same events and losses (%d; %d %d)" % (name, v.returncode, vev, vpk))
    check(len(seqs) >= floor * n, "%s: %d of %d events delivered (%.1f%%, at least %d%%)"
          % (name, len(seqs), n, 100.0 * len(seqs) / n, floor * 100))
    return len(seqs)


def case_noisy(args, env, tmp):
    """Lines with 2 and 20 damaged bytes per MiB (issue 49): the packets on
    the line are at most 4 KiB, so a damaged byte costs at most about 4 KiB
    of events, marked in the trace.  Live through a corrupting relay at
    20/MiB, then the relay's clean copy of the line replayed into `strata
    receive FILE` at 0, 2 and 20 damaged bytes per MiB (two seeds each), and
    at rates and inputs no line has (5000/MiB, random bytes): the receiver
    ends with 0 and whatever it rebuilt reads."""
    n = 100000
    clean = bytearray()
    damaged = [0]
    rng = random.Random(49)

    def transform(chunk, pos):
        clean.extend(chunk)
        out, d = damage(chunk, 20, rng, pos)
        damaged[0] += d
        return out

    def relay(rfd, wfd):
        pump(rfd, wfd, transform)
    # 4 Mbaud (400 KB/s, a 1.6 MB bucket): room for the ~1.3 MB at once;
    # a 2 MiB ring: no event discarded by the writers.
    err, rxerr, out, _ = pipe_case(args, env, tmp, "noisy-live", n, ["--subbuf-size", "256k", "--subbuf-count", "8"],
                                   relay, baud=",4000000")
    sent, refused = stop_counts(err)
    check(refused == 0, "noisy: the line had room for every packet (refused %s)" % refused)
    got = noisy_check(args, "noisy live 20/MiB", out, rxerr, n, 0.80)
    print("noisy: live, 20 damaged bytes/MiB: %d damaged of %d bytes; %d of %d events delivered"
          % (damaged[0], len(clean), got, n))
    line = bytes(clean)
    for per_mib, seeds, floor in ((0, (0,), 1.0), (2, (1, 3), 0.97), (20, (4, 5), 0.80)):
        for seed in seeds:
            data, d = damage(line, per_mib, random.Random(seed))
            name = "noisy %d/MiB seed %d" % (per_mib, seed)
            src = os.path.join(tmp, "noisy-%d-%d.bin" % (per_mib, seed))
            open(src, "wb").write(data)
            o = os.path.join(tmp, "noisy-%d-%d" % (per_mib, seed))
            r = subprocess.run([args.strata, "receive", src, "-o", o], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, timeout=60)
            check(r.returncode == 0, "%s: strata receive exits 0 (%d)" % (name, r.returncode))
            got = noisy_check(args, name, o, r.stderr, n, floor)
            print("noisy: %d damaged bytes/MiB (seed %d): %d damaged of %d bytes; %d of %d events delivered (%.1f%%)"
                  % (per_mib, seed, d, len(data), got, n, 100.0 * got / n))
    hostile = (("5000/MiB", damage(line, 5000, random.Random(5))[0]),
               ("random bytes", random.Random(6).randbytes(1 << 20)),
               ("the line twice, spliced", line[:len(line) // 2] + line + line[len(line) // 3:]))
    small = bytes(clean[:clean.index(b"\0", 200000) + 1])  # the metadata and a few dozen packets
    assert cobs_decode(cobs_encode(b"a\0" + bytes(300))) == b"a\0" + bytes(300)
    check(hostile_sender(small, 0, 0) == small, "hostile sender: the line re-framed unchanged is the line")
    case_clock_frames(args, tmp, small)
    hostile += tuple(("hostile sender %d" % seed, hostile_sender(small, seed, 1 + seed % 7)) for seed in range(30))
    for name, data in hostile:
        src = os.path.join(tmp, "hostile.bin")
        open(src, "wb").write(data)
        o = os.path.join(tmp, "hostile-" + name.replace(" ", "-").replace("/", "-"))
        t0 = time.monotonic()
        r = subprocess.run([args.strata, "receive", src, "-o", o], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=60)
        # A sender may lie (the CRC then checks): metadata that is not
        # CTF is refused with exit 1, said; nothing else fails.
        check((r.returncode == 0 or "the metadata does not start with" in r.stderr) and "frame(s) good" in r.stderr,
              "%s: strata receive ends with 0 and its report (%d, %.1f s)" % (name, r.returncode, time.monotonic() - t0))
        # What a lying sender's frames carry is its own: only the line's
        # damage must leave a trace babeltrace2 reads.
        if not name.startswith("hostile sender") and any(files for _, _, files in os.walk(o)):
            rc, bterr = bt_stderr(args, o)
            check(rc == 0, "%s: babeltrace2 reads what it rebuilt (%d %r)" % (name, rc, bterr[:300]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--app", required=True)
    ap.add_argument("--babeltrace2", required=True)
    ap.add_argument("--socat", default="")
    ap.add_argument("--consumerd", required=True)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="strata-serial-") as tmp:
        env = dict(os.environ, STRATA_CONSUMERD_SOCKET=os.path.join(tmp, "none.sock"))
        case_pipe(args, env, tmp)
        case_stdout(args, env, tmp)
        case_session(args, tmp)
        case_late_join(args, env, tmp)
        if args.socat:
            case_pty(args, env, tmp)
        else:
            print("skip pty: no socat")
        case_over_capacity(args, env, tmp)
        case_corrupter(args, env, tmp)
        case_noisy(args, env, tmp)
    check.finish()


if __name__ == "__main__":
    main()
