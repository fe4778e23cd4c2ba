#!/usr/bin/python3
"""A buffer whose hand-over fails is handed over later (issue 38): a
traced process (tp-sync) joins a running session, then its daemon's socket
is moved away before the process's first event, so that the hand-over at
that event fails (ENOENT).  The process keeps recording into its buffer;
the socket comes back; the process emits a second batch and exits, and its
exit hands the buffer over.  Before, such a process printed "tracing
disabled" and its events were lost and counted nowhere.

Oracle: the process said the hand-over failed and then that it succeeded
on a retry; the trace holds its 2 x EVENTS events with distinct seq (or
counts the missing ones as discarded: recorded + discarded == emitted);
babeltrace2 reads the trace.  Then a second process whose daemon's socket
never comes back: it says on stderr how many bytes and discarded events
its unhanded buffer held (the only place left to count them).
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, check_readable, control_setup, end_session, start_daemon, tick_tally, wait_for  # noqa: E402

THREADS, EVENTS = 1, 50


def waits_on_stdin(pid):
    """True once the process sits in poll() (x86-64 syscall 7) on stdin
    or read(0, ...): its constructor (the join) is done and it waits for
    its first line."""
    try:
        with open("/proc/%d/syscall" % pid) as f:
            w = f.read().split()
    except OSError:
        return False
    return len(w) > 1 and (w[0] == "7" or (w[0] == "0" and int(w[1], 16) == 0))


def start_app(app, env):
    p = subprocess.Popen([app, str(THREADS), str(EVENTS), "serve"], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    wait_for(lambda: waits_on_stdin(p.pid) or p.poll() is not None, "the app to wait on stdin")
    return p


def batch(p):
    p.stdin.write("go\n")
    p.stdin.flush()
    return p.stdout.readline().strip() == "ok"


def finish(p):
    """Close its stdin (it exits), then its status and what it said."""
    p.stdin.close()
    rc = p.wait(timeout=60)
    err = p.stderr.read()
    p.stdout.close()
    p.stderr.close()
    return rc, err


def main():
    a, work, env, strata = control_setup("strata-handoff-", "app")
    sock = env["STRATA_CONSUMERD_SOCKET"]
    out = os.path.join(work, "trace")

    d = start_daemon(a.consumerd, sock, env)
    check = Checks()
    try:
        strata("create", "s", "-o", out, "--subbuf-size", "64K", "--subbuf-count", "4")
        strata("enable-event", "s", "ctltest:*")
        strata("start", "s")
        # 1. The socket away at the first event, back before the exit.
        p = start_app(a.app, env)
        os.rename(sock, sock + ".away")
        ok1 = batch(p)
        os.rename(sock + ".away", sock)
        ok2 = batch(p)
        rc, err = finish(p)
        check(ok1 and ok2 and rc == 0, "the process served both batches and exited 0 (%s %s %d)" % (ok1, ok2, rc))
        check("cannot hand the buffer" in err, "its first hand-over failed (%r)" % err.strip()[:300])
        check("handed to the consumer daemon on a retry" in err,
              "it handed the buffer over on a retry (%r)" % err.strip()[:300])
        # 2. The socket never comes back: the loss is said, with its size.
        q = start_app(a.app, env)
        os.rename(sock, sock + ".away")
        okq = batch(q)
        rcq, errq = finish(q)
        os.rename(sock + ".away", sock)
        check(okq and rcq == 0, "the second process served its batch and exited 0")
        check("never received a buffer" in errq and " bytes of events and 0 discarded" in errq,
              "the second process said what its unhanded buffer held (%r)" % errq.strip()[-300:])
    except BaseException:
        d.kill()
        raise
    end_session(strata, d)

    ticks, lost = tick_tally(out)
    seqs, discarded = set(ticks.get(p.pid, ())), lost.get(p.pid, 0)
    check(len(seqs) + discarded == 2 * THREADS * EVENTS,
          "the first process: recorded %d + discarded %d == %d" % (len(seqs), discarded, 2 * THREADS * EVENTS))
    check_readable(check, out)
    check.finish()


if __name__ == "__main__":
    main()
