#!/usr/bin/python3
"""Blocks allocated ahead of the stream files, and given back (docs/consumerd.md,
"Blocks ahead of the stream files").

usage: check_blocks_ahead.py STRATA LOOP WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

A file system that refuses fallocate(FALLOC_FL_KEEP_SIZE) in WORKDIR skips
the check (77).  A daemon on WORKDIR/d.sock; a session of 256 KiB x 16
sub-buffers records LOOP (3,000 bursts of 200 rloop:tick events a
millisecond apart, each a sequence number), twice:

  1. While LOOP runs, polled until a stream file holds 2 MiB: its blocks
     reach at least 1 MiB past its end, its size being whole packets (the
     size is the bytes written: KEEP_SIZE).  LOOP ends, `strata stop`:
     every stream file's blocks are its bytes' (rounded to 4 KiB, plus 64
     KiB for an extent tree) again; exactly 600,000 events recorded, none
     discarded, their sequence numbers in order (babeltrace2), nothing on
     babeltrace2's stderr.
  2. The same until the blocks ahead are seen, then the daemon is killed
     (SIGKILL) and LOOP stopped: the file keeps its blocks ahead.  A new
     daemon on the same socket repairs the session's output at its start:
     the blocks are given back, the file's whole packets unchanged (then
     at most the 88-byte packet that marks the lost tail), and babeltrace2
     reads the trace with no error (its index included).
"""
import ctypes
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import TraceScan, bt_clean, e2e_setup, poll, start_daemon, stream_files  # noqa: E402

BURSTS, BURST = 3000, 200
N = BURSTS * BURST
MIB = 1 << 20


def keep_size_works(work):
    """Whether fallocate(FALLOC_FL_KEEP_SIZE) allocates past the end here."""
    path = os.path.join(work, "probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_long, ctypes.c_long]
        ok = libc.fallocate(fd, 1, 0, MIB) == 0  # FALLOC_FL_KEEP_SIZE
        return ok and os.fstat(fd).st_blocks * 512 >= MIB and os.fstat(fd).st_size == 0
    finally:
        os.close(fd)
        os.unlink(path)


def ahead(path):
    """Bytes allocated past the file's end (0 at most: none)."""
    st = os.stat(path)
    return st.st_blocks * 512 - ((st.st_size + 4095) // 4096 * 4096)


def big_file_ahead(out):
    """A stream file of 2 MiB or more with 1 MiB or more allocated past its end."""
    for f in stream_files(out):
        try:
            if os.path.getsize(f) >= 2 * MIB and ahead(f) >= MIB:
                return f
        except OSError:
            pass
    return None


def scan_whole(b):
    """Bytes of the whole packets at the start of b (packet_size in bits at 56)."""
    off = 0
    while off + 88 <= len(b):
        size = int.from_bytes(b[off + 56:off + 64], "little") // 8
        if size < 88 or off + size > len(b):
            break
        off += size
    return off


def wait_ahead(out):
    """big_file_ahead's file, polled for (deadline 60 s), or None."""
    found = []
    poll(lambda: found.append(big_file_ahead(out)) or found[-1], 60)
    return found[-1] if found else None


def session(strata, env, name, out, check):
    for args in (["create", name, "-o", out, "--subbuf-size", "262144", "--subbuf-count", "16"],
                 ["enable-event", name, "rloop:*"], ["start", name]):
        r = subprocess.run([strata] + args, capture_output=True, text=True, timeout=60, env=env)
        check(r.returncode == 0, "%s: strata %s" % (name, args[0]), r.stderr)


def main():
    strata, loop, work, consumerd, check = e2e_setup()
    if not keep_size_works(work):
        print("SKIP: fallocate(FALLOC_FL_KEEP_SIZE) refused in " + work)
        sys.exit(77)
    sock = os.path.join(work, "d.sock")
    env = dict(os.environ, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=sock)
    d = start_daemon(consumerd, sock, env)

    # 1. ahead while recording, given back at the stop
    out = os.path.join(work, "a")
    session(strata, env, "a", out, check)
    p = subprocess.Popen([loop, str(BURSTS), str(BURST)], env=env)
    check(wait_ahead(out),
          "a: a stream file of 2 MiB or more has 1 MiB or more allocated past its end while recording",
          "%s" % [(f, os.path.getsize(f), ahead(f)) for f in stream_files(out)])
    check(p.wait(timeout=120) == 0, "a: LOOP exits 0")
    r = subprocess.run([strata, "stop", "a"], capture_output=True, text=True, timeout=120, env=env)
    check(r.returncode == 0, "a: strata stop", r.stderr)
    files = list(stream_files(out))
    over = [(os.path.basename(f), ahead(f)) for f in files if ahead(f) > 64 << 10]
    check(files and not over, "a: after the stop no stream file keeps blocks past its end (%d files)" % len(files),
          "%s" % over)
    scan = TraceScan(out)
    seqs = [int(m.event.payload_field["i"]) for m, _ in scan if m.event.name == "rloop:tick"]
    check(len(seqs) == N, "a: exactly %d events recorded (got %d)" % (N, len(seqs)))
    check(seqs == list(range(N)), "a: sequence numbers 0..%d in order" % (N - 1))
    check(scan.discarded == 0, "a: none discarded (%d)" % scan.discarded)
    ok, status, other = bt_clean(out)
    check(ok, "a: babeltrace2 exits 0 and says nothing (status %d)" % status, other)
    subprocess.run([strata, "destroy", "a"], capture_output=True, timeout=60, env=env)

    # 2. a killed daemon's blocks ahead, given back by the next one's repair
    out = os.path.join(work, "b")
    session(strata, env, "b", out, check)
    p = subprocess.Popen([loop, str(BURSTS), str(BURST)], env=env)
    f = wait_ahead(out)
    check(f, "b: a stream file with blocks past its end while recording")
    d.send_signal(signal.SIGKILL)
    d.wait(timeout=60)
    p.kill()
    p.wait(timeout=60)
    before = open(f, "rb").read() if f else b""
    kept = ahead(f) if f else 0
    check(kept >= MIB, "b: the killed daemon's file keeps its blocks ahead (%d bytes)" % kept)
    d = start_daemon(consumerd, sock, env)
    check(f is not None and ahead(f) <= 64 << 10,
          "b: the next daemon's repair gives them back (%d bytes past the end)" % (ahead(f) if f else -1))
    after = open(f, "rb").read() if f else b""
    whole = scan_whole(before)
    check(f is not None and after[:whole] == before[:whole] and len(after) - whole in (0, 88),
          "b: the file keeps its whole packets (%d bytes), then at most the lost tail's mark (%d bytes after)"
          % (whole, len(after) - whole))
    ok, status, other = bt_clean(out)
    check(ok, "b: babeltrace2 reads the repaired trace (status %d)" % status, other)
    d.terminate()
    d.wait(timeout=60)
    check.finish()


if __name__ == "__main__":
    main()
