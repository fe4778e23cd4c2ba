"""Flight-recorder snapshots (`strata snapshot`) of a running overwrite-mode
session.

A process emits numbered events (snap:tick seq 0, 1, ...) in batches on
command and stays alive between them; after each batch a snapshot is taken
while the session and the process keep running.

Oracle, for each snapshot: babeltrace2 reads it with nothing on stderr but
its discarded-events warnings (what the ring overwrote); its
events are exactly a contiguous newest tail seq = a .. last (last: the
process's last emitted seq, printed by it before the snapshot); when a > 0
the overwritten packets are reported as discarded (packet sequence gap) and
the events they held as discarded events: recorded + discarded == last + 1,
exactly (the process emits nothing between a batch and its snapshot);
a second snapshot after more events ends at the new last, and a named
output directory that exists is refused (exit 1).  After the snapshots,
`strata stop` still writes the session's trace ending at the last event.
"""
import os
import signal
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, control_setup, payload_ints, start_daemon  # noqa: E402


def read_trace(path):
    """The snap:tick seqs in time order, the packets and the events said lost."""
    recs, lost_packets, discarded = payload_ints(path, "seq", names={"snap:tick"})
    return [f["seq"] for _, f in recs], lost_packets, discarded


def first_packet_seq(path):
    """packet_seq_num of the first packet with records of the snapshot's
    lane-0 stream file (strata_abi.h: u64 at byte 64, packet_size in bits at
    56; a header-only packet before it carries only a discarded count).
    babeltrace2 reports a sequence gap only between two packets, not before a
    stream's first one: the packets a snapshot could not hold any more are
    counted by this number."""
    import glob
    files = glob.glob(os.path.join(path, "ust", "pid", "*", "channel0_0"))
    if len(files) != 1:
        return None
    with open(files[0], "rb") as f:
        data = f.read()
    off = 0
    while len(data) - off >= 72:
        size, seq = struct.unpack_from("<QQ", data, off + 56)
        if size != 88 * 8 or size % 8:
            return seq
        off += size // 8
    return None


def main():
    a, work, env, strata = control_setup("strata-snap-", "app", "babeltrace2")
    check = Checks()
    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)

    out = os.path.join(work, "trace")
    strata("create", "s", "-o", out, "--mode", "overwrite", "--subbuf-size", "4096", "--subbuf-count", "4",
           "--lanes", "1")
    # A session with no enabled event: `start` says so and names the
    # command that adds one; a snapshot of a session that recorded nothing
    # says so and leaves no directory (issue 52).
    strata("create", "e", "-o", os.path.join(work, "empty"), "--mode", "overwrite")
    r = strata("start", "e")
    check("session 'e' has no enabled event" in r.stderr and "strata enable-event e 'PROVIDER:EVENT'" in r.stderr,
          "start of a session without rules names the command that adds one (%r)" % r.stderr)
    r = strata("snapshot", "e", ok=False)
    check(r.returncode == 1 and "session 'e' has recorded nothing yet" in r.stderr and r.stdout == "",
          "snapshot of a session that recorded nothing says so, exit 1 (%d, %r)" % (r.returncode, r.stderr))
    check(not [f for f in os.listdir(work) if f.startswith("empty-snapshot")],
          "and leaves no snapshot directory (%s)" % sorted(os.listdir(work)))
    strata("destroy", "e")
    strata("enable-event", "s", "snap:*")
    r = strata("start", "s")
    check(r.stderr == "", "start of a session with a rule says nothing on stderr (%r)" % r.stderr)
    app = subprocess.Popen([a.app], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        check(app.stdout.readline().strip() == "ready", "the process started")
        r = strata("snapshot", "--help")
        check("Usage: strata snapshot" in r.stdout, "snapshot --help")
        check(strata("snapshot", "s", "-x", ok=False).returncode == 2, "unknown option: exit 2")
        check(strata("snapshot", "nosuch", ok=False).returncode == 1, "unknown session: exit 1")
        taken = []
        for batch in (100, 5000, 3):
            app.stdin.write("%d\n" % batch)
            app.stdin.flush()
            last = int(app.stdout.readline())
            snap = os.path.join(work, "snap%d" % len(taken))
            r = strata("snapshot", "s", "-o", snap)
            check(r.stdout.strip() == snap, "snapshot %d printed its directory (%s)" % (len(taken), r.stdout.strip()))
            taken.append((snap, last))
        # the default name, next to the session's output
        r = strata("snapshot", "s")
        check(r.stdout.strip().startswith(out + "-snapshot-") and os.path.isdir(r.stdout.strip()),
              "default snapshot directory %s" % r.stdout.strip())
        taken.append((r.stdout.strip(), last))
        check(strata("snapshot", "s", "-o", taken[0][0], ok=False).returncode == 1,
              "an existing output directory is refused: exit 1")
        check(app.poll() is None, "the process kept running through the snapshots")
        for snap, last in taken:
            bt = subprocess.run([a.babeltrace2, snap], capture_output=True, text=True, timeout=60)
            other = [ln for ln in bt.stderr.splitlines() if ln.strip() and not
                     ln.startswith(("WARNING: Tracer discarded", "WARNING: Tracer may have discarded"))]
            check(bt.returncode == 0 and not other,
                  "babeltrace2 reads %s with nothing on stderr but its discarded-events warnings (%r)" %
                  (os.path.basename(snap), bt.stderr[:300]))
            seqs, dpk, dev = read_trace(snap)
            ok = bool(seqs) and seqs == list(range(seqs[0], last + 1))
            check(ok, "%s: a contiguous newest tail %s..%s ending at the last emitted seq %d (%d events)" %
                  (os.path.basename(snap), seqs[0] if seqs else None, seqs[-1] if seqs else None, last, len(seqs)))
            p0 = first_packet_seq(snap)
            check(p0 is not None and dpk == 0 and (p0 > 0) == (bool(seqs) and seqs[0] > 0),
                  "%s: what was overwritten (seq < %s) is counted by the first packet's sequence number %s "
                  "and nothing inside the stream is missing (%d packets discarded)" %
                  (os.path.basename(snap), seqs[0] if seqs else None, p0, dpk))
            check(len(seqs) + dev == last + 1,
                  "%s: recorded + overwritten == emitted (%d + %d == %d)" %
                  (os.path.basename(snap), len(seqs), dev, last + 1))
        app.stdin.close()
        check(app.wait(timeout=30) == 0, "the process exited normally")
        strata("stop", "s")
        seqs, _, dev = read_trace(out)
        check(bool(seqs) and seqs == list(range(seqs[0], taken[-1][1] + 1)),
              "the session's own trace still ends at the last event (%d events)" % len(seqs))
        check(len(seqs) + dev == taken[-1][1] + 1,
              "and counts what the ring overwrote: recorded + overwritten == emitted (%d + %d == %d)" %
              (len(seqs), dev, taken[-1][1] + 1))
        strata("destroy", "s")
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=30)
    check.finish()


if __name__ == "__main__":
    main()
