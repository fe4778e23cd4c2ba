#!/usr/bin/python3
"""`strata record` against a daemon older than the process-tree session
(protocol < 10) records with a private daemon instead, and says so.

usage: check_record_old_daemon.py STRATA LOOP WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

The running "daemon" is this check: a socket that answers a controller's
HELLO as a version 9 strata-consumerd does (HELLO_REPLY choosing 9) and
counts every other message it gets.  `strata record -- LOOP 1` must say
that daemon is too old to limit a session to LOOP's tree, record with a
private daemon of its own (under TMPDIR, a directory of the check's), and
write exactly LOOP's 10 events; the old daemon is sent nothing past HELLO
(no session is created there), and TMPDIR is empty after.
"""
import os
import socket
import struct
import subprocess
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import e2e_setup  # noqa: E402

MAGIC = 0x4C435453  # "STCL" (docs/control-protocol.md, "Framing")
HELLO, HELLO_REPLY = 1, 2
OLD = 9


class OldDaemon:
    """A version 9 daemon's HELLO on `path`; what else it was sent."""

    def __init__(self, path):
        self.hellos, self.others = [], []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.conn, args=(c,), daemon=True).start()

    def conn(self, c):
        with c:
            while True:
                hdr = self.read(c, 16)
                if not hdr:
                    return
                magic, _, mtype, length, seq = struct.unpack("<IHHII", hdr)
                payload = self.read(c, length) if length else b""
                if magic != MAGIC or payload is None:
                    self.others.append(("bad frame", mtype))
                    return
                if mtype != HELLO:
                    self.others.append(mtype)
                    return  # an old daemon would answer; nothing may be sent here
                lo, hi = struct.unpack_from("<HH", payload)
                self.hellos.append((lo, hi))
                reply = struct.pack("<HI", min(hi, OLD), os.getpid())
                c.sendall(struct.pack("<IHHII", MAGIC, min(hi, OLD), HELLO_REPLY, len(reply), seq) + reply)

    @staticmethod
    def read(c, n):
        b = b""
        while len(b) < n:
            x = c.recv(n - len(b))
            if not x:
                return None
            b += x
        return b


def main():
    strata, loop, work, consumerd, check = e2e_setup()
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp)
    sock = os.path.join(work, "old.sock")
    old = OldDaemon(sock)
    env = dict(os.environ, STRATA_CONSUMERD=consumerd, TMPDIR=tmp, STRATA_CONSUMERD_SOCKET=sock)
    for v in ("STRATA_EARLY", "LD_PRELOAD", "STRATA_AGGREGATE", "XDG_RUNTIME_DIR"):
        env.pop(v, None)
    out = os.path.join(work, "rec")
    r = subprocess.run([strata, "record", "-o", out, "--", loop, "1"], env=env, capture_output=True, text=True,
                       timeout=120)
    sys.stdout.write(r.stderr)
    said = ("the running strata-consumerd speaks protocol %d, too old to limit a session to %s and its "
            "descendants (10): recording with a private daemon" % (OLD, loop))
    check(r.returncode == 0, "record exits 0")
    check(said in r.stderr, "record says the daemon is too old and that it records with its own")
    check(len(old.hellos) >= 1 and not old.others,
          "the old daemon got a controller's HELLO and nothing else (HELLOs %r, others %r)" % (old.hellos, old.others))
    b = subprocess.run(["babeltrace2", out], capture_output=True, text=True, timeout=60)
    subs = os.path.join(out, "ust", "pid")
    procs = len(os.listdir(subs)) if os.path.isdir(subs) else 0
    check(b.returncode == 0 and b.stdout.count("rloop:tick") == 10 and procs == 1,
          "the private daemon's trace holds exactly CMD's 10 events, one process (%d, %d)"
          % (b.stdout.count("rloop:tick"), procs))
    check(os.listdir(tmp) == [], "the private daemon left nothing in TMPDIR (%r)" % os.listdir(tmp))
    check.finish()


if __name__ == "__main__":
    main()
