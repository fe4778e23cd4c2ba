#!/usr/bin/python3
"""`strata list`: the tracepoints of the registered processes and who is on
each, sessions and probes (issue 35).

usage: check_list.py STRATA LIST_TARGET WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

Session s records lt:b and, through a filter, lt:c; session t (not
started) records everything; list_target has its own probe count_a on lt:a
and aggregates lt:b (STRATA_AGGREGATE).  Oracle, line by line:
  lt:a  probe count_a
  lt:b  session s, aggregate
  lt:c  session s (filtered)
  lt:d  -           (debug level: s's rules stop at info)
and after the program unregistered its probe, lt:a shows "-".
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import e2e_setup, private_daemon  # noqa: E402


def main():
    strata, target, work, consumerd, check = e2e_setup()
    env, daemon = private_daemon(work, consumerd)

    def run(*args):
        r = subprocess.run([strata] + list(args), env=env, capture_output=True, text=True, timeout=60)
        print("+ strata %r -> %d\n%s%s" % (args, r.returncode, r.stdout, r.stderr))
        check(r.returncode == 0, "strata %r exits 0" % (args,))
        return r.stdout

    run("create", "s", "-o", os.path.join(work, "s"))
    run("enable-event", "s", "lt:b", "--loglevel", "info")
    run("enable-event", "s", "lt:c", "--filter", "v > 1")
    run("start", "s")
    run("create", "t", "-o", os.path.join(work, "t"))
    run("enable-event", "t", "*")
    p = subprocess.Popen([target], env=dict(env, STRATA_AGGREGATE="lt:b"), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    ready = p.stdout.readline().split()
    check(len(ready) == 2 and ready[0] == "ready", "the program is ready: %r" % ready)
    pid = int(ready[1])

    def on(out):
        got = {}
        for ln in out.splitlines()[1:]:
            m = re.match(r"(\d+) +(\S+) +(lt:\w) +(\w+) +(.*)$", ln)
            if m and int(m.group(1)) == pid:
                got[m.group(3)] = (m.group(4), m.group(5))
        return got
    out = run("list")
    check(out.splitlines()[0].split() == ["PID", "PROCESS", "TRACEPOINT", "LOGLEVEL", "ON"], "the header")
    want = {"lt:a": ("info", "probe count_a"), "lt:b": ("info", "session s, aggregate"),
            "lt:c": ("info", "session s (filtered)"), "lt:d": ("debug", "-")}
    check(on(out) == want, "who is on each tracepoint: %r" % on(out))
    p.stdin.write("x\n")
    p.stdin.flush()
    check(p.stdout.readline().strip() == "unregistered", "the program unregistered its probe")
    got = on(run("list"))
    check(got.get("lt:a") == ("info", "-") and got.get("lt:b") == want["lt:b"],
          "after unregister, nothing on lt:a: %r" % got)
    p.stdin.close()
    check(p.wait(timeout=30) == 0, "the probe was called once, for the one lt:a hit")
    run("destroy", "s")
    run("destroy", "t")
    daemon.terminate()
    daemon.wait(timeout=30)
    check.finish()


if __name__ == "__main__":
    main()
