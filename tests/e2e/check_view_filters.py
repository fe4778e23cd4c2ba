#!/usr/bin/python3
"""`strata view --pid/--tid/-e/--since/--until` on the known kernel + pthread
+ JVM trace of tests/export/make_timeline_fixture.py: each filter shows
exactly the events babeltrace2 shows that match it (babeltrace2's own
output, filtered here, is the oracle), with -n counting shown events.

usage: check_view_filters.py STRATA WORKDIR"""
import fnmatch
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "export"))
import make_timeline_fixture  # noqa: E402
from check_view_fixture import check, run  # noqa: E402

def main():
    strata, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    trace = os.path.join(work, "trace")
    make_timeline_fixture.make(trace)

    # The oracle: every event as babeltrace2 decodes it (time in ns after
    # 1 s, process, tid, name).
    bt = subprocess.run(["babeltrace2", "--clock-seconds", trace], capture_output=True, text=True, timeout=60)
    events = []
    for line in bt.stdout.splitlines():
        m = re.match(r"^\[1\.(\d{9})\] \(\S+\) (?:(\w+):\((\d+)\) )?([\w:]+): .*vtid = (\d+)", line)
        check(m is not None, "babeltrace2 line parsed: %r" % line)
        if m:
            events.append((int(m.group(1)), m.group(2) or "kernel", int(m.group(3) or -1), m.group(4),
                           int(m.group(5))))
    check(len(events) == 24, "babeltrace2 shows the fixture's 24 events (%d)" % len(events))

    def view(*args):
        r = run([strata, "view"] + list(args) + [trace])
        check(r.returncode == 0 and r.stderr == "", "view %r exits 0 silently (%d %r)" % (args, r.returncode, r.stderr))
        got = []
        for line in r.stdout.splitlines():
            if "***" in line:
                got.append(("loss", line.split("*** ")[1].split(" discarded")[0]))
                continue
            m = re.match(r"^\[00:00:01\.(\d{9})\] (\w+)\[[\d?]+\] tid=(\d+) cpu=\d+ (\S+?)(?:: |$)", line)
            check(m is not None, "view line parsed: %r" % line)
            if m:
                got.append((int(m.group(1)), m.group(4), int(m.group(3))))
        return got

    def want(pred):
        return [(ts, name, tid) for ts, _, _, name, tid in events if pred(ts, name, tid)]

    got = view("--tid", "702")
    check(got == want(lambda ts, n, t: t == 702), "--tid 702: %r" % got)
    got = view("--tid", "702", "--tid", "701")
    check(got == want(lambda ts, n, t: t in (701, 702)), "--tid 702 --tid 701: %r" % got)
    # --pid: the process's own events and losses, and kernel events of its
    # threads, from their first (502 is named by the app's events only at
    # 1600; its syscalls and switches from 1140 on are shown).
    app_tids = {tid for ts, proc, pid, name, tid in events if pid == 500}
    got = view("--pid", "500")
    exp = [(ts, name, tid) for ts, proc, pid, name, tid in events
           if pid == 500 or (proc == "kernel" and tid in app_tids)]
    exp.insert([i for i, e in enumerate(exp) if e[0] >= 2000][0] + 1, ("loss", "3 events"))
    check(got == exp, "--pid 500:\n got %r\nwant %r" % (got, exp))
    got = view("--pid", "700", "-e", "jvm:monitor_*")
    check(got == want(lambda ts, n, t: fnmatch.fnmatchcase(n, "jvm:monitor_*")), "--pid 700 -e jvm:monitor_*: %r" % got)
    got = view("-e", "kernel:sched_*", "-e", "syscall_*")
    check(got == want(lambda ts, n, t: n.startswith("sched_") or n.startswith("syscall_")),
          "-e kernel:sched_* -e syscall_*: %r" % got)
    got = view("-e", "sys_e*")
    check(got == want(lambda ts, n, t: n in ("sys_enter", "sys_exit")) and len(got) == 4, "-e sys_e*: %r" % got)
    got = view("--since", "+0.0000005", "--until", "00:00:01.0000019")
    check(got == want(lambda ts, n, t: 1500 <= ts <= 1900), "--since +0.0000005 --until 00:00:01.0000019: %r" % got)
    got = view("--since", "00:00:01.000002", "-n", "2")
    check(got == want(lambda ts, n, t: ts >= 2000)[:1] + [("loss", "3 events")] + want(lambda ts, n, t: ts >= 2000)[1:2],
          "--since 00:00:01.000002 -n 2 (the loss shown, two events): %r" % got)
    got = view("--until", "+0")
    check(got == want(lambda ts, n, t: ts == 1000), "--until +0: the first event only: %r" % got)
    # A filter that matches nothing: no line, said on stderr, exit 0 (--help).
    r = run([strata, "view", "--tid", "1234", "--since", "+0.5", trace])
    check(r.returncode == 0 and r.stdout == "" and
          r.stderr == "strata view: no event matched the filters (--pid, --tid, -e, --since, --until)\n",
          "a filter that matches nothing says so on stderr, exit 0 (%d %r %r)" % (r.returncode, r.stdout, r.stderr))
    for bad in (["--pid", trace], ["--pid", "x", trace], ["--tid", "-3", trace], ["--since", "1:2", trace],
                ["--until", "+x", trace], ["-e"]):
        r = run([strata, "view"] + bad)
        check(r.returncode == 2 and "usage" in r.stderr, "usage error %r exits 2 (got %d %r)" % (bad, r.returncode, r.stderr))
    check.finish()


if __name__ == "__main__":
    sys.exit(main())
