#!/usr/bin/python3
"""No session outlives its `strata record` (issue 31).

usage: check_record_kill.py STRATA LOOP WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

40 runs of `strata record -o DIR -- LOOP`, each ended at a random instant
(one in four within its first 30 ms, the others up to 1.5 s: before, while
and after its command starts) in one of five ways: SIGTERM; SIGTERM twice (the second
0..50 ms later, as `timeout` does); SIGHUP; SIGKILL; its terminal closing (it
runs as the leader of a session on a pseudo-terminal whose master is
closed).  Half the runs use a shared daemon (this test's), half the
private daemon `record` starts.  The runs go in two lanes side by side
(most of a run is waiting for its kill), each lane with its own runtime
directory for the private daemons.  Oracles:
  - `record` ends by itself (its exit status) except under SIGKILL, or when
    the signal came before it made anything (while it loads, before main):
    no default action of a caught signal is ever restored in it;
  - shared daemon: the session record-<pid> is gone (polled with a
    deadline), and `strata status` at the end says "0 session(s)";
  - private daemon: no process is left under the private runtime directory
    (polled with a deadline);
  - every trace directory with a sub-trace reads in `babeltrace2` with exit
    status 0 and nothing on stderr but loss reports;
  - at least 5 runs recorded events (the kills did not all come first).
"""
import fcntl
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import termios
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import e2e_setup, poll, procs_under, start_daemon  # noqa: E402

RUNS = 40
LANES = 2  # runs side by side (lane(): each with its own private daemons' directory)
MODES = ["term", "term2", "hup", "kill", "pty"]


def status(strata, env):
    r = subprocess.run([strata, "status"], env=env, capture_output=True, text=True, timeout=60)
    return r.stdout + r.stderr


def has_subtrace(out):
    return os.path.isdir(os.path.join(out, "ust")) or os.path.isdir(os.path.join(out, "kernel"))


def set_ctty():
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def one_run(strata, loop, out, mode, env, delay, delay2):
    """Start record, end it as `mode` says after `delay` s; its exit status."""
    cmd = [strata, "record", "-o", out, "--", loop, "3000"]
    log = open(out + ".log", "w")
    master = None
    if mode == "pty":
        master, slave = os.openpty()
        p = subprocess.Popen(cmd, env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                             preexec_fn=set_ctty)
        os.close(slave)
    else:
        p = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        p.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        pass
    if p.poll() is None:
        if mode == "pty":
            os.close(master)  # the terminal closes: SIGHUP to its session
            master = None
        else:
            p.send_signal({"term": signal.SIGTERM, "term2": signal.SIGTERM, "hup": signal.SIGHUP,
                           "kill": signal.SIGKILL}[mode])
            if mode == "term2":
                try:
                    p.wait(timeout=delay2)
                except subprocess.TimeoutExpired:
                    pass
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
    try:
        rc = p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        rc = p.wait()
    if master is not None:
        os.close(master)
    log.close()
    return p.pid, rc


def one_case(i, rng, strata, loop, work, xdg, env_shared, env_private):
    """Run i (its mode and daemon from i): (ok, recorded events?, its report)."""
    mode = MODES[i % len(MODES)]
    shared = (i // len(MODES)) % 2 == 0
    out = os.path.join(work, "run%02d" % i)
    # One in four in record's first 30 ms (daemon, session, fork).
    delay = rng.uniform(0.0, 0.03) if rng.random() < 0.25 else rng.uniform(0.03, 1.5)
    delay2 = rng.uniform(0.0, 0.05)
    pid, rc = one_run(strata, loop, out, mode, env_shared if shared else env_private, delay, delay2)
    what = "run %d (%s, %s daemon, %.3f s)" % (i, mode, "shared" if shared else "private", delay)
    ok, recorded, report = True, False, []
    if mode == "kill":
        pass  # whatever it was doing: the daemon ends its session
    elif rc < 0 and os.path.exists(out):
        # Killed with a session made: its handlers were installed, and
        # should have kept it alive.  (A signal before they are, while
        # the program loads, kills it before it made anything.)
        report.append("FAIL %s: record was killed by signal %d" % (what, -rc))
        ok = False
    if shared:
        gone = poll(lambda: "record-%d " % pid not in status(strata, env_shared), 20)
        if not gone:
            report.append("FAIL %s: session record-%d still there:\n%s" % (what, pid, status(strata, env_shared)))
        ok &= gone
    else:
        left = poll(lambda: not procs_under(xdg), 20)
        if not left:
            report.append("FAIL %s: processes left under %s: %s" % (what, xdg, procs_under(xdg)))
        ok &= left
    if has_subtrace(out):
        b = subprocess.run(["babeltrace2", out], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=120)
        other = [ln for ln in b.stderr.splitlines() if not ln.startswith("WARNING: Tracer discarded ")]
        if b.returncode != 0 or other:
            report.append("FAIL %s: babeltrace2 %s exits %d: %s" % (what, out, b.returncode, "\n".join(other[:10])))
            ok = False
        n = b.stdout.count("rloop:tick")
        recorded = n > 0
        what += ", %d events" % n
    else:
        what += ", no trace"
    report.append(("ok   " if ok else "FAIL ") + what + ", record exit %d" % rc)
    if not ok and os.path.exists(out + ".log"):
        report.append(open(out + ".log").read())
    return ok, recorded, "\n".join(report)


def lane(k, seed, strata, loop, work, env_shared, base):
    """Lane k's runs (every LANES-th from k), in a process of its own, with
    its own runtime directory for the private daemons (a lane's check that
    none is left must not see another lane's): (failed runs, runs that
    recorded events)."""
    xdg = os.path.join(work, "xdg%d" % k)
    os.makedirs(xdg, mode=0o700)
    # Nobody listens there: record starts its own daemon, under xdg.
    env_private = dict(base, STRATA_CONSUMERD_SOCKET=os.path.join(work, "nobody.sock"), XDG_RUNTIME_DIR=xdg)
    rng = random.Random("%d/%d" % (seed, k))
    bad = recorded = 0
    for i in range(k, RUNS, LANES):
        ok, rec, report = one_case(i, rng, strata, loop, work, xdg, env_shared, env_private)
        print(report, flush=True)
        bad += 0 if ok else 1
        recorded += 1 if rec else 0
    return bad, recorded


def main():
    strata, loop, work, consumerd, check = e2e_setup()
    seed = int(os.environ.get("STRATA_TEST_SEED", time.time_ns() % 1000000))
    print("seed %d (STRATA_TEST_SEED to replay each lane's delays)" % seed, flush=True)

    base = dict(os.environ, STRATA_CONSUMERD=consumerd)
    base.pop("STRATA_EARLY", None)
    shared_sock = os.path.join(work, "shared.sock")
    env_shared = dict(base, STRATA_CONSUMERD_SOCKET=shared_sock)
    daemon = start_daemon(consumerd, shared_sock, env_shared)

    # The lanes run side by side, each a forked copy of this process (one
    # thread each: one_run's preexec_fn is safe only there); each reports
    # its two counts on a pipe and leaves by os._exit, so that the copy's
    # exit handlers do not kill the shared daemon.
    lanes = []
    for k in range(LANES):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            code = 1
            try:
                os.write(w, ("%d %d" % lane(k, seed, strata, loop, work, env_shared, base)).encode())
                code = 0
            except BaseException:
                traceback.print_exc()
            finally:
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(code)
        os.close(w)
        lanes.append((pid, r))
    bad = recorded = 0
    for k, (pid, r) in enumerate(lanes):
        with os.fdopen(r) as f:
            said = f.read().split()
        _, st = os.waitpid(pid, 0)
        if len(said) != 2 or not os.WIFEXITED(st) or os.WEXITSTATUS(st) != 0:
            check(False, "lane %d finished its runs (status %d, said %r)" % (k, st, said))
            bad += 1
            continue
        bad += int(said[0])
        recorded += int(said[1])

    check(bad == 0, "%d of %d runs left nothing behind and a whole trace" % (RUNS - bad, RUNS))
    check(recorded >= 5, "at least 5 runs recorded events (%d)" % recorded)
    s = status(strata, env_shared)
    check(re.search(r": 0 session\(s\)", s) is not None, "strata status shows no session:\n" + s)
    left = [p for k in range(LANES) for p in procs_under(os.path.join(work, "xdg%d" % k))]
    check(not left, "no private daemon left (%s)" % left)
    daemon.send_signal(signal.SIGTERM)
    check(daemon.wait(timeout=60) == 0, "the shared daemon exits cleanly")
    if not check.failures:
        shutil.rmtree(work, ignore_errors=True)
    check.finish()


if __name__ == "__main__":
    main()
