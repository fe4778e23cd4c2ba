#!/usr/bin/python3
"""`strata record --preload pthread -- memcached -d` records the daemon
(issue 31): the command's first process exits at once, leaving the server it
detached (fork, setsid); `record` follows it until it exits or ^C.

usage: check_memcached.py kill|int --strata CLI --consumerd DIR --memcached BIN --work DIR

The server listens on a unix socket of the work directory (no port), gets
N `set` requests from this script, then either it is killed (kill: record
ends when it exits) or `record` gets SIGINT (int: a user's ^C; record ends
the server and then itself).  Oracle: record exits 0 naming the server's
pid (the one memcached writes to its -P file) as the process it follows, and
its trace; babeltrace2 reads the trace with an empty stderr; the server's
sub-trace holds at least N mutex lock/unlock pairs (each `set` locks the
item and stats locks of its worker thread) from at least one thread that is
not the main one (a worker: threads started after the detach are followed);
the server is gone at the end and no daemon or session is left.
"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, wait_for  # noqa: E402

N = 200


def alive(pid):
    try:
        return open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("how", choices=("kill", "int"))
    ap.add_argument("--strata", required=True)
    ap.add_argument("--consumerd", required=True)
    ap.add_argument("--memcached", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    check = Checks()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    env = dict(os.environ, PATH=a.consumerd + ":" + os.environ.get("PATH", ""),
               STRATA_CONSUMERD_SOCKET=os.path.join(a.work, "consumerd.sock"))
    for v in ("LD_PRELOAD", "STRATA_EARLY", "STRATA_AGGREGATE"):
        env.pop(v, None)
    env["STRATA_PTHREAD_COUNT"] = "0"  # every pair a record: the oracle below counts records
    trace, sock, pidfile = (os.path.join(a.work, n) for n in ("trace", "mc.sock", "mc.pid"))
    errlog = os.path.join(a.work, "record.err")
    cmd = [a.strata, "record", "--preload", "pthread", "-o", trace, "--",
           a.memcached, "-d", "-s", sock, "-P", pidfile, "-t", "2"] + (["-u", "root"] if os.getuid() == 0 else [])
    with open(errlog, "w") as err:
        rec = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
    # record says whom it follows once the command's first process has exited.
    wait_for(lambda: "recording until" in open(errlog).read() or rec.poll() is not None,
             "record to say it follows the detached server", 60)
    m = re.search(r"still run \(pid (\d+)\)", open(errlog).read())
    check(m is not None, "record follows the process memcached detached: %r" % open(errlog).read().strip())
    if m is None:
        rec.kill()
        check.finish()
    server = int(m.group(1))
    wait_for(lambda: os.path.exists(pidfile) and open(pidfile).read().strip() != "", "memcached's pid file", 30)
    check(int(open(pidfile).read()) == server, "it is the server (memcached's -P file names pid %d)" % server)

    def connect():
        try:
            s = socket.socket(socket.AF_UNIX)
            s.connect(sock)
            return s
        except OSError:
            return None
    conn = []
    wait_for(lambda: conn.append(connect()) or conn[-1] is not None, "memcached's socket", 30)
    s = conn[-1]
    stored = 0
    for i in range(N):
        s.sendall(b"set k%d 0 0 5\r\nvalue\r\n" % i)
        reply = b""
        while not reply.endswith(b"\r\n"):
            reply += s.recv(64)
        stored += reply == b"STORED\r\n"
    s.close()
    check(stored == N, "%d of %d sets stored" % (stored, N))

    if a.how == "kill":
        os.kill(server, signal.SIGTERM)
    else:
        rec.send_signal(signal.SIGINT)
    try:
        rc = rec.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rec.kill()
        rc = None
    out = open(errlog).read()
    check(rc == 0, "record exits 0 (got %r)" % rc)
    check("trace written to " + trace in out, "record names the trace")
    check(not alive(server), "the server has ended")

    bt = subprocess.run(["babeltrace2", trace], capture_output=True, text=True)
    check(bt.returncode == 0 and bt.stderr == "", "babeltrace2 reads the trace, empty stderr (%s)"
          % bt.stderr.strip()[:200])
    mine = [ln for ln in bt.stdout.splitlines() if ":memcached:(%d)" % server in ln]
    # An uncontended lock or successful trylock and its unlock may be one
    # compact record (mutex_held, mutex_tryheld: docs/pthread.md).
    held = sum(" pthread:mutex_held: " in ln or " pthread:mutex_tryheld: " in ln for ln in mine)
    locks = held + sum(" pthread:mutex_lock: " in ln or " pthread:mutex_trylock: " in ln for ln in mine)
    unlocks = held + sum(" pthread:mutex_unlock: " in ln for ln in mine)
    tids = {int(t) for t in re.findall(r"vtid = (\d+)", "\n".join(mine))}
    check(unlocks >= N, "the server's sub-trace has >= %d mutex unlocks (%d; %d lock/trylock)" % (N, unlocks, locks))
    check(bool(tids - {server}), "events from the server's worker threads (tids %s)" % sorted(tids)[:8])
    st = subprocess.run([a.strata, "status"], env=env, capture_output=True, text=True)
    check("no strata-consumerd" in st.stderr or "no session" in (st.stdout + st.stderr).lower(),
          "no daemon or session left: %r" % (st.stdout + st.stderr).strip()[:200])
    check.finish()


if __name__ == "__main__":
    main()
