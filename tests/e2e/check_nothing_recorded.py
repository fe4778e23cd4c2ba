#!/usr/bin/python3
"""Each "nothing recorded" case named (issue 31), and record following the
processes its command leaves behind.

usage: check_nothing_recorded.py STRATA LOOP WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

  - a daemonizing command (LOOP 300 daemon: fork, setsid, fork, the first
    two exit at once): record says it follows the process left, returns
    only after it exited, and the trace holds all of its 3000 events;
  - the same with a daemon that would run 100 s: SIGINT to record (what ^C
    does; the daemon is in a session of its own, the terminal's ^C would not
    reach it) ends the daemon and record, and the trace reads;
  - a pattern matching none of the program's events (its providers
    listed), a program that does not link libstrata, a preloaded program
    that took no lock: each its own message;
  - nothing recorded leaves no empty directory that record made (with -o,
    or the default strata-record-* in the working directory; also a run
    that only aggregates), and keeps one that was there before;
  - a static executable (busybox): a warning before it runs, and "nothing
    recorded: ... statically linked" after;
  - kernel:* with no kernel module loaded: record and enable-event warn,
    naming the module (skipped where /dev/strata exists).
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import e2e_setup, end_daemon, start_daemon  # noqa: E402

FOLLOW = re.compile(r"strata record: .* exited, and 1 process\(es\) it started still run \(pid (\d+)\): "
                    r"recording until they exit \(\^C ends them\)")


def events(out):
    b = subprocess.run(["babeltrace2", out], capture_output=True, text=True, timeout=120)
    return b.returncode, b.stdout.count("rloop:tick"), b.stderr


def gone(pid, timeout=20):
    deadline = time.monotonic() + timeout
    while os.path.exists("/proc/%d" % pid):
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def main():
    strata, loop, work, consumerd, check = e2e_setup()
    env = dict(os.environ, STRATA_CONSUMERD=consumerd,
               STRATA_CONSUMERD_SOCKET=os.path.join(work, "nobody.sock"))  # record's own daemon
    env.pop("STRATA_EARLY", None)

    # Only words a user can act on (issue 52): record's private daemon keeps
    # its internal notices to itself, on either kernel path (Linux 6.1's
    # futex_waitv threads forced, or this kernel's own).
    for futex in ("waitv", None):
        out = os.path.join(work, "quiet-%s" % futex)
        e = dict(env)
        if futex:
            e["STRATA_CONSUMERD_FUTEX"] = futex
        r = subprocess.run([strata, "record", "-o", out, "--", loop, "5"], env=e, capture_output=True,
                           text=True, timeout=120)
        sys.stdout.write(r.stderr)
        notices = [l for l in r.stderr.splitlines() if l.startswith("strata-consumerd:")]
        check(r.returncode == 0 and not notices and events(out)[1] == 50,
              "record (STRATA_CONSUMERD_FUTEX=%s) records 5 bursts of 10 events and shows no daemon notice (%r)" %
              (futex, notices))

    # A program that fires at once and exits (one burst of 10 events, then
    # 1 ms): record asks the daemon right after it exited, and the daemon
    # must count the buffer the program sent before it went, not say that
    # nothing was recorded (once in ~100 runs under load it did, the
    # program's BUFFER still unread on its connection).  40 runs, against
    # one running daemon (a private daemon's start would cost each run more
    # than the program under the sanitizers; the race is the same).
    told = []
    qenv = dict(env, STRATA_CONSUMERD_SOCKET=os.path.join(work, "quick.sock"))
    qd = start_daemon(consumerd, qenv["STRATA_CONSUMERD_SOCKET"], qenv)
    for k in range(40):
        out = os.path.join(work, "quick")
        shutil.rmtree(out, ignore_errors=True)
        r = subprocess.run([strata, "record", "-o", out, "--", loop, "1"], env=qenv, capture_output=True,
                           text=True, timeout=120)
        n = events(out)[1]
        if r.returncode != 0 or "nothing recorded" in r.stderr or n != 10:
            told.append((k, r.returncode, n, r.stderr.strip()[-300:]))
    end_daemon(qd, check)
    check(not told, "40 records of a program that fires 10 events and exits: each trace holds the 10, none "
          "says nothing was recorded (%r)" % told[:3])

    # A daemon that ends by itself.
    out = os.path.join(work, "daemon")
    r = subprocess.run([strata, "record", "-o", out, "--", loop, "300", "daemon"], env=env, capture_output=True,
                       text=True, timeout=120)
    sys.stdout.write(r.stderr)
    m = FOLLOW.search(r.stderr)
    check(r.returncode == 0 and m is not None, "record says it follows the daemonized process")
    check(m is not None and gone(int(m.group(1)), 0), "record returned after the daemon exited")
    rc, n, err = events(out)
    check(rc == 0 and n == 3000, "the daemon's 3000 events are all recorded (%d, babeltrace2 exit %d %s)" %
          (n, rc, err[:300]))

    # A daemon ended by ^C (SIGINT to record).
    out = os.path.join(work, "daemon-int")
    p = subprocess.Popen([strata, "record", "-o", out, "--", loop, "100000", "daemon"], env=env,
                         stderr=subprocess.PIPE, text=True)
    line = p.stderr.readline()  # blocks until record says it follows (or exits)
    sys.stdout.write(line)
    m = FOLLOW.search(line)
    check(m is not None, "record follows the long-running daemon")
    # Once the daemon's buffer has reached the session (its sub-trace made).
    deadline = time.monotonic() + 30
    while not os.path.isdir(os.path.join(out, "ust")) and time.monotonic() < deadline:
        time.sleep(0.01)
    p.send_signal(signal.SIGINT)
    try:
        rest = p.communicate(timeout=60)[1]
    except subprocess.TimeoutExpired:
        p.kill()
        rest = p.communicate()[1]
    sys.stdout.write(rest)
    check(p.returncode == 0, "record exits with its command's status (%s)" % p.returncode)
    check(m is not None and gone(int(m.group(1))), "SIGINT to record ended the daemon")
    rc, n, err = events(out)
    check(rc == 0 and n > 0,
          "the daemon's events until ^C are recorded (%d, babeltrace2 exit %d %s)" % (n, rc, err[:300]))

    # Who joined and what they declare (the daemon's STATUS, version 5).
    def record(*args):
        r = subprocess.run([strata, "record", "-o", os.path.join(work, "n%d" % len(args))] + list(args), env=env,
                           capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stderr)
        return r

    r = record("-e", "nosuch:*", "--", loop, "5")
    check(("strata record: nothing recorded: no event matched the patterns (nosuch:*); the 1 process(es) of %s "
           "that joined declare the providers rloop (e.g. -e 'rloop:*'" % loop) in r.stderr,
          "a pattern that matches nothing is named, with the program's providers")
    check("strata record: no event was recorded (no enabled tracepoint fired): no trace written" in r.stderr and
          not os.path.exists(os.path.join(work, "n4")), "the directory record made for it is not left behind")

    # Nothing recorded in a working directory, with record's default
    # output: no empty strata-record-* left there; nor by a run that only
    # aggregates (no trace asked for).  A directory that was there before
    # (-o) is the user's: kept, and said to hold no trace.
    cwd = os.path.join(work, "cwd")
    os.makedirs(cwd)
    for args in (["-e", "nosuch:*"], ["--aggregate", "rloop:tick"]):
        r = subprocess.run([strata, "record"] + args + ["--", loop, "5"], env=env, cwd=cwd,
                           capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stderr)
        check(r.returncode == 0 and os.listdir(cwd) == [],
              "record %s: nothing left in the working directory (%r)" % (" ".join(args), os.listdir(cwd)))
    kept = os.path.join(work, "kept")
    os.makedirs(kept)
    r = subprocess.run([strata, "record", "-o", kept, "-e", "nosuch:*", "--", loop, "5"], env=env,
                       capture_output=True, text=True, timeout=120)
    sys.stdout.write(r.stderr)
    check(("no event was recorded (no enabled tracepoint fired): %s holds no trace" % kept) in r.stderr and
          os.path.isdir(kept), "an output directory that was there before is kept, and said empty")

    r = record("--", "true")
    check("strata record: nothing recorded: true did not join the session: no process of it asked the daemon "
          "for its state" in r.stderr, "a program that does not link libstrata is named")
    r = record("--preload", "pthread", "--", "true")
    if r.returncode == 0:
        check(re.search(r"strata record: nothing recorded: \d+ event\(s\) matched the patterns \(pthread:.*\) but "
                        r"none fired while true ran: a preloaded library records only the calls it wraps, and "
                        r"the program made none \(with --preload pthread: it took no pthread lock\)",
                        r.stderr) is not None, "a preloaded program that took no lock is named")
        # A counting setting the preload would not understand: refused
        # before the program runs, exit 1, no directory made.
        bad = dict(env, STRATA_PTHREAD_COUNT="lots")
        out = os.path.join(work, "badcount")
        r = subprocess.run([strata, "record", "-o", out, "--preload", "pthread", "--", "true"], env=bad,
                           capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stderr)
        check(r.returncode == 1 and "strata record: STRATA_PTHREAD_COUNT=lots: give 0 (a record per lock pair)" in
              r.stderr and not os.path.exists(out), "a STRATA_PTHREAD_COUNT the preload cannot read is refused")
    else:
        print("skip: no libstrata-pthread.so")

    # A static executable.
    busybox = shutil.which("busybox")
    if busybox and b"ld-linux" not in open(busybox, "rb").read(4096):
        out = os.path.join(work, "static")
        r = subprocess.run([strata, "record", "-o", out, "--", "busybox", "true"], env=env, capture_output=True,
                           text=True, timeout=120)
        sys.stdout.write(r.stderr)
        check(("strata record: warning: %s is statically linked (no ELF interpreter)" % busybox) in r.stderr,
              "a static executable is named before it runs")
        check("strata record: nothing recorded: busybox is statically linked (see the warning above)" in r.stderr,
              "and named again as the reason nothing was recorded")
    else:
        print("skip: no static busybox")

    # Kernel events with no module.
    if not os.path.exists("/dev/strata"):
        out = os.path.join(work, "kernel")
        r = subprocess.run([strata, "record", "-o", out, "-e", "kernel:*", "--", "true"], env=env,
                           capture_output=True, text=True, timeout=120)
        sys.stdout.write(r.stderr)
        want = ("warning: kernel:* names kernel events, and the kernel module is not loaded (no /dev/strata): "
                "nothing of it is recorded until `modprobe strata` loads strata.ko")
        check("strata record: " + want in r.stderr, "record warns that kernel:* needs the module")
        sock = os.path.join(work, "d.sock")
        denv = dict(env, STRATA_CONSUMERD_SOCKET=sock)
        d = start_daemon(consumerd, sock, denv)
        subprocess.run([strata, "create", "k", "-o", os.path.join(work, "k")], env=denv, check=True,
                       capture_output=True)
        r = subprocess.run([strata, "enable-event", "k", "kernel:sched_switch"], env=denv,
                           capture_output=True, text=True, timeout=60)
        sys.stdout.write(r.stdout + r.stderr)
        check(r.returncode == 0 and "strata enable-event: warning: kernel:sched_switch names kernel events" in
              r.stderr, "enable-event warns that kernel events need the module")
        d.terminate()
        check(d.wait(timeout=60) == 0, "the daemon exits cleanly")
    else:
        print("skip: /dev/strata exists")

    if not check.failures:
        shutil.rmtree(work, ignore_errors=True)
    check.finish()


if __name__ == "__main__":
    main()
