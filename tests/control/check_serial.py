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
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

import bt2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, bt_text, start_daemon, strata_cli, wait_for  # noqa: E402

check = Checks()


def ticks(path):
    """(seqs of snap:tick in trace order, discarded packets, discarded events)"""
    seqs, dpk, dev = [], 0, 0
    for m in bt2.TraceCollectionMessageIterator(path):
        if type(m) is bt2._EventMessageConst and m.event.name == "snap:tick":
            seqs.append(int(m.event.payload_field["seq"]))
        elif type(m) is bt2._DiscardedPacketsMessageConst:
            dpk += m.count or 0
        elif type(m) is bt2._DiscardedEventsMessageConst:
            dev += m.count or 0
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
                         r"sender, (\d+) written, (\d+) missing)?", text, re.M):
        rep["lanes"][int(m.group(1))] = tuple(int(g) if g else 0 for g in m.groups()[1:])
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


def make_corrupter(seed, start, stop, rate, damages):
    rng = random.Random(seed)

    def run(rfd, wfd):
        pos = 0
        with os.fdopen(rfd, "rb", buffering=0) as r, os.fdopen(wfd, "wb", buffering=0) as w:
            while True:
                chunk = r.read(65536)
                if not chunk:
                    break
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
                w.write(bytes(outb))
    return run


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
    check(dev == 0 and dpk == lost_data, "corrupt: the trace shows each lost packet as discarded (%d discarded "
          "packet(s), %d discarded event(s) by the writers)" % (dpk, dev))
    check(0 < rep.get("lost", 0) <= 2 * d, "corrupt: resync within one frame (%s frames lost for %d damages)"
          % (rep.get("lost"), d))
    check(rep.get("bad_crc", 0) + rep.get("malformed", 0) > 0, "corrupt: damaged frames rejected by CRC or framing")


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
    check.finish()


if __name__ == "__main__":
    main()
