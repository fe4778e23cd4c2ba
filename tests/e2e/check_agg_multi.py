#!/usr/bin/python3
"""`strata top` over several processes (issue 35): every process of a
command name, the ones that start later found at the next refresh, the ones
that exit kept with their last values, aggregates merged per spec.

usage: check_agg_multi.py STRATA PROG WORKDIR

PROG (strata-test-agg-target) is copied under a name of this run's own, so
that --name finds only the processes started here.  Oracles, exact, from
what the programs did (N1 and N2 requests per worker, aggdemo:req:latency_ns
by route):
  - live (`--interval 50`, not a terminal: screen after screen): one
    process, 4 N1 hits; a second one started: 2 processes, 4 (N1 + N2);
    the first one exited: "1 exited: last values", still 4 (N1 + N2);
  - `--once --json` with both running: per route count, sum, min, max and
    log2 histogram of both together, and both pids.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_testlib import Checks, wait_for  # noqa: E402
from check_agg_top import WORKERS, expected_routes  # noqa: E402

N1, N2 = 300, 500
SPEC = "aggdemo:req:latency_ns by route"


def main():
    strata, prog, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check = Checks()
    name = "aggm%d" % os.getpid()
    exe = os.path.join(work, name)
    shutil.copy(prog, exe)
    env = dict(os.environ, STRATA_AGGREGATE=SPEC, XDG_RUNTIME_DIR=work)  # no daemon there
    for v in ("STRATA_CONSUMERD_SOCKET", "LD_PRELOAD", "STRATA_EARLY"):
        env.pop(v, None)

    def start(n):
        p = subprocess.Popen([exe, str(n)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        check(p.stdout.readline().startswith("ready "), "program of %d requests per worker ready" % n)
        return p

    a = start(N1)
    top = subprocess.Popen([strata, "top", "--name", name, "--interval", "50"], stdout=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, text=True)
    screens = []

    def reader():
        buf = ""
        for ch in iter(lambda: top.stdout.read(1), ""):
            buf += ch
            if buf.endswith("\033[H\033[2J"):
                screens.append(buf[:-7])
                buf = ""
    t = threading.Thread(target=reader, daemon=True)
    t.start()

    def shows(procs, hits, exited=None):
        head = "strata top: %d process(es) named %s" % (procs, name)
        if exited:
            head += " (%d exited: last values)" % exited
        line = "%s: %d hits" % (SPEC, hits)
        return lambda: any(s.startswith(head + "   ") and line in s for s in screens[-3:])
    b = None
    try:
        wait_for(shows(1, WORKERS * N1), "the live view of one process", 60)
        check(True, "live: 1 process, %d hits" % (WORKERS * N1))
        b = start(N2)
        wait_for(shows(2, WORKERS * (N1 + N2)), "the second process in the live view", 60)
        check(True, "live: a process started later joins: 2 processes, %d hits" % (WORKERS * (N1 + N2)))
        r = subprocess.run([strata, "top", "--name", name, "--once", "--json"], capture_output=True, text=True,
                           timeout=60)
        j = json.loads(r.stdout)
        check(sorted(j["pids"]) == sorted([a.pid, b.pid]) and j["exited"] == [], "JSON: both pids, none exited")
        reg = [x for x in j["regions"] if x["pattern"] == "aggdemo:req"]
        got = {k["name"]: {"count": k["count"], "sum": k["sum"], "min": k["min"], "max": k["max"], "hist": k["hist"]}
               for k in reg[0]["keys"]} if len(reg) == 1 else {}
        check(len(reg) == 1 and reg[0]["hits"] == WORKERS * (N1 + N2), "JSON: one merged region, %d hits"
              % (WORKERS * (N1 + N2)))
        check(got == expected_routes((N1, N2)), "JSON: per route count, sum, min, max, histogram of both")
        a.stdin.close()
        check(a.wait(timeout=30) == 0, "the first program exited")
        wait_for(shows(2, WORKERS * (N1 + N2), exited=1), "the exited process's last values", 60)
        check(True, "live: the exited process's last values kept, still %d hits" % (WORKERS * (N1 + N2)))
    finally:
        top.send_signal(signal.SIGINT)
        check(top.wait(timeout=30) == 0, "top ends on SIGINT")
        for p in (a, b):
            if p and p.poll() is None:
                p.stdin.close()
                p.wait(timeout=30)
    check.finish()


if __name__ == "__main__":
    main()
