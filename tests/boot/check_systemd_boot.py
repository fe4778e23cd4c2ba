#!/usr/bin/python3
"""Oracles of the systemd boot (systemd-boot.sh), on the host, over what the
boot left on its disk (OUT/disk): the initramfs made by update-initramfs
with Strata's hook loaded strata.ko with the command line's
strata.boot_events; systemd started strata-consumerd.service, whose session
adopted the module's kernel events from boot into
/var/log/strata/boot-<date>/kernel-boot.

  - one trace directory, the one the unit's status names; the unit was
    active (running) once ready (Type=notify);
  - the module's boot_events parameter is the command line's;
  - PID 1 exec'd exactly twice after the module loaded: initramfs-tools'
    run-init, then /sbin/init (systemd), in that order;
  - the collector's chain, each exactly once and in time order: pid 1 forks
    C, C execs /usr/bin/strata-boot-collect, C forks D, D execs
    /usr/bin/strata-consumerd, and D is the daemon that was running;
  - the session's start stopped the boot recording: C's children exec'd
    /usr/bin/strata exactly three times (status: is there a session a
    restarted daemon took up?, create, start) and nothing after them,
    no exec of systemd-notify (C runs it after `strata start` returns), and
    none of the test unit (started after READY=1);
  - nothing discarded, timestamps ordered, one clock, babeltrace2 silent;
  - the unit's daemon serves other users (docs/security.md): a root session
    made by the test unit records all 2 x 1000 (+ demo:start) events of strata-demo run as
    uid 65534, whose `strata status` runs and names no session and whose
    `strata stop users` answers "no session named 'users'".
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, TraceScan  # noqa: E402


def check_other_user(notes, check):
    def note(name):
        p = os.path.join(notes, name)
        return open(p).read() if os.path.exists(p) else ""
    demo, status, stop = note("user-demo.txt"), note("user-status.txt"), note("user-stop.txt")
    check(demo.rstrip().endswith("rc=0"), "uid 65534's strata-demo ran: %r" % demo[-200:])
    check(status.rstrip().endswith("rc=0") and "users" not in status and "boot" not in status,
          "uid 65534's strata status runs and names none of root's sessions: %r" % status[-300:])
    check("no session named 'users'" in stop and not stop.rstrip().endswith("rc=0"),
          "uid 65534's strata stop of root's session answers as for a missing name: %r" % stop[-300:])
    users = os.path.join(notes, "users")
    n = 0
    if os.path.isdir(users):
        p = subprocess.run(["babeltrace2", users], capture_output=True, text=True)
        n = sum(1 for ln in p.stdout.splitlines() if " demo:" in ln)
        check(p.returncode == 0 and p.stderr == "", "babeltrace2 reads the users session: %r" % p.stderr[-300:])
    check(n == 2001, "root's session holds all 2001 events of uid 65534's process (2 x 1000 + demo:start: %d)" % n)


def main():
    out = sys.argv[1]
    if os.path.exists(os.path.join(out, "SKIPPED")):
        print("SKIP: " + open(os.path.join(out, "SKIPPED")).read().strip())
        sys.exit(77)
    notes = os.path.join(out, "disk", "strata-vmtest")
    if not os.path.isdir(notes):
        print("FAIL: no notes from the guest (the boot did not finish)")
        sys.exit(1)
    check = Checks()
    cmdline = open(os.path.join(out, "cmdline.txt")).read().split()
    want_events = [w.split("=", 1)[1] for w in cmdline if w.startswith("strata.boot_events=")]
    got_events = open(os.path.join(notes, "boot_events.txt")).read().strip()
    check(want_events == [got_events],
          "strata.ko loaded from the initramfs with boot_events=%s (%s)" % (got_events, want_events))

    unit = dict(line.split("=", 1) for line in open(os.path.join(notes, "unit.txt")).read().splitlines() if "=" in line)
    traces = os.listdir(os.path.join(out, "disk", "strata"))
    check(len(traces) == 1 and traces[0].startswith("boot-"), "one trace directory in /var/log/strata: %s" % traces)
    if len(traces) != 1:
        check.finish()
    check(unit.get("ActiveState") == "active" and unit.get("SubState") == "running" and
          unit.get("StatusText") == "early buffers adopted into /var/log/strata/" + traces[0],
          "strata-consumerd.service active (running), ready: %s" % unit)
    daemons = [int(x) for x in open(os.path.join(notes, "daemon.txt")).read().split()] \
        if os.path.exists(os.path.join(notes, "daemon.txt")) else []
    check(len(daemons) == 1, "one strata-consumerd running: %s" % daemons)
    trace = os.path.join(out, "disk", "strata", traces[0])
    check(os.path.isdir(os.path.join(trace, "kernel-boot")), "the session adopted the kernel events from boot (kernel-boot/)")

    kev = []       # (ts, name, payload) of the kernel-boot streams
    scan = TraceScan(trace)
    for m, ts in scan:
        ev = m.event
        if str(ev.stream.trace.environment["domain"]) == "kernel":
            kev.append((ts, ev.name.split(":")[-1],
                        {k: (str(v) if k.endswith("comm") or k == "filename" else int(v))
                         for k, v in ev.payload_field.items()}))
    kev.sort(key=lambda e: e[0])
    check(len(kev) > 0, "kernel events from boot: %d" % len(kev))
    execs = [(t, v) for t, n, v in kev if n == "sched_process_exec"]
    forks = [(t, v) for t, n, v in kev if n == "sched_process_fork"]

    by1 = [v["filename"] for t, v in execs if v["tid"] == 1]
    check(len(by1) == 2 and by1[0].endswith("/run-init") and by1[1] == "/sbin/init",
          "pid 1 exec'd run-init then /sbin/init, nothing else: %s" % by1)

    def exec_of(path):
        return [(t, v["tid"]) for t, v in execs if v["filename"] == path]

    def fork_of(child):
        return [(t, v["parent_pid"]) for t, v in forks if v["child_tid"] == child]

    t_init = max([t for t, v in execs if v["tid"] == 1] or [0])
    coll = exec_of("/usr/bin/strata-boot-collect")
    dmn = exec_of("/usr/bin/strata-consumerd")
    ok = len(coll) == 1 and len(dmn) == 1
    if ok:
        (tc, c), (td, d) = coll[0], dmn[0]
        fc, fd = fork_of(c), fork_of(d)
        ok = (len(fc) == 1 and fc[0][1] == 1 and len(fd) == 1 and fd[0][1] == c and
              t_init < fc[0][0] < tc < fd[0][0] < td and daemons == [d])
    check(ok, "pid 1 forked C, C exec'd strata-boot-collect, forked D, D exec'd strata-consumerd (the daemon "
          "running), once each and in order: collect %s, daemon %s" % (coll, dmn))
    if ok:
        kids = {v["child_tid"] for t, v in forks if v["parent_pid"] == c}
        cli = [f for t, f in sorted((t, v["filename"]) for t, v in execs if v["tid"] in kids)]
        check(cli.count("/usr/bin/strata") == 3 and cli[-3:] == ["/usr/bin/strata"] * 3 and
              not exec_of("/usr/bin/systemd-notify"),
              "the boot recording stopped at the session's start: the last of C's children's execs are "
              "strata status, create and start, systemd-notify (after them) is absent: %s" % cli)
    check(not exec_of("/usr/local/sbin/strata-vmtest"),
          "nothing from the unit started after READY=1 (the recording had stopped)")
    check(scan.discarded == 0, "nothing discarded (%d)" % scan.discarded)
    check(len(scan.clocks) == 1, "one clock in the whole trace (%d)" % len(scan.clocks))
    check(scan.ordered, "timestamps ordered in every stream")
    p = subprocess.run(["babeltrace2", trace], capture_output=True, text=True)
    check(p.returncode == 0 and p.stderr == "", "babeltrace2 reads it with nothing on stderr")
    print("kernel events from boot: %d, of which %d exec, %d fork" % (len(kev), len(execs), len(forks)))
    check_other_user(notes, check)
    check.finish()


if __name__ == "__main__":
    main()
