#!/usr/bin/python3
"""Aggregation sessions through the daemon (issue 35): `strata create S
--aggregate SPEC [--filter EXPR]`, start/stop/destroy as for any session,
and `strata top -s S` over every process the session reached.

usage: check_agg_session.py STRATA PROG WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

PROG is strata-test-agg-session (agg_target.c with tp-async): four workers
of N requests each, aggdemo:req {worker, latency_ns, route}.  On a private
daemon:
  - P0 runs, waiting, before anything exists; sessions a (SPEC) and f
    (`aggdemo:req by route --filter 'worker == 2'`) are created and started
    with --wait: P0 is signalled and its helper thread opens both regions
    before acknowledging, so its N0 requests, sent after, all count;
  - P1 (N1) starts after the start (its constructor opens the regions),
    works and exits before any snapshot: the daemon keeps its regions;
  - `strata top -s a` live in tmux (send-keys, capture-pane, polled with a
    deadline): the total of P0 and P1, P1 "exited: last values"; P2 (N2)
    started while it runs joins the view: the total of the three; 'k'
    sorts by key, 'q' quits;
  - `strata top -s a --once --json`: per route count, sum, min, max and log2
    histogram of the three processes together, exactly what they emitted,
    the three pids with P1 not alive and each one's hits; session f: per
    route the requests of worker 2 only;
  - `strata status a` names the aggregation and its 3 regions; after stop,
    the regions are still read (the last values); destroy forgets them;
  - refusals: a bad spec, --filter without --aggregate (usage, exit 2).
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_testlib import e2e_setup, end_daemon, private_daemon, strata_cli, wait_for  # noqa: E402
from check_agg_top import ROUTES, WORKERS, expected_routes  # noqa: E402

N0, N1, N2 = 200, 300, 500
SPEC = "aggdemo:req:latency_ns by route"


def one_worker_counts(ns):
    """Per route, the requests of one worker in programs of N per worker."""
    want = {}
    for n in ns:
        for i in range(n):
            want[ROUTES[i % 3]] = want.get(ROUTES[i % 3], 0) + 1
    return want


def main():
    strata, prog, work, consumerd, check = e2e_setup()
    env, daemon = private_daemon(work, consumerd)
    env["XDG_RUNTIME_DIR"] = work

    run = strata_cli(strata, env, ok=False, timeout=60, log=True)

    def ok(*args):
        r = run(*args)
        check(r.returncode == 0, "strata %s exits 0" % " ".join(args))
        return r

    check(run("create", "x", "--aggregate", "aggdemo").returncode == 2, "a spec without an event: usage error")
    check(run("create", "x", "--filter", "worker == 1").returncode == 2, "--filter without --aggregate: usage error")

    procs = []

    def start(n, wait=False):
        p = subprocess.Popen([prog, str(n)] + (["go"] if wait else []), env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
        procs.append(p)
        first = p.stdout.readline()
        check(first.startswith("waiting " if wait else "ready "), "program of %d requests per worker: %s"
              % (n, first.strip()))
        return p

    sock = os.path.join(work, "tmux.sock")
    tmux = ["tmux", "-S", sock]
    try:
        p0 = start(N0, wait=True)
        ok("create", "a", "--aggregate", SPEC, "-o", os.path.join(work, "a"))
        ok("create", "f", "--aggregate", "aggdemo:req by route", "--filter", "worker == 2",
           "-o", os.path.join(work, "f"))
        for s in ("a", "f"):
            r = ok("start", s, "--wait")
            check("acknowledged by 1 process" in r.stdout, "start %s --wait: P0 acknowledged" % s)
        p0.stdin.write("go\n")
        p0.stdin.flush()
        check(p0.stdout.readline().startswith("ready "), "P0 (running before the start) did its requests")
        p1 = start(N1)
        p1.stdin.close()
        check(p1.wait(timeout=60) == 0, "P1 (started after the start) did its requests and exited")

        # Live, in tmux: the sum of P0 and P1, P1's last values, P2 joining.
        if not shutil.which("tmux"):
            print("skip tmux: not installed")
            p2 = start(N2)
        else:
            subprocess.run(tmux + ["new-session", "-d", "-x", "200", "-y", "60", strata, "top", "-s", "a",
                                   "--interval", "100"], check=True, timeout=30, env=env)

            def pane():
                return subprocess.run(tmux + ["capture-pane", "-p"], capture_output=True, text=True,
                                      timeout=30).stdout

            def shows(*texts):
                return lambda: all(t in pane() for t in texts)
            wait_for(shows("session a: 2 process(es) (1 exited: last values)",
                           "%s: %d hits" % (SPEC, WORKERS * (N0 + N1)), "exited: last values"),
                     "tmux: P0 and P1, P1 exited", 60)
            check(True, "tmux: P0 and P1 together (%d hits), P1 shown exited with its last values"
                  % (WORKERS * (N0 + N1)))
            check("%d" % (WORKERS * N1) in pane() and str(p1.pid) in pane(), "tmux: P1's line with its hits")
            p2 = start(N2)
            wait_for(shows("session a: 3 process(es)", "%s: %d hits" % (SPEC, WORKERS * (N0 + N1 + N2))),
                     "tmux: P2 joins", 60)
            check(True, "tmux: P2, started while top runs, joins: %d hits" % (WORKERS * (N0 + N1 + N2)))
            subprocess.run(tmux + ["send-keys", "k"], check=True, timeout=30)
            wait_for(shows("sort: key"), "tmux: sort by key", 30)
            screen = pane()
            order = [screen.find("  " + r + " ") for r in sorted(ROUTES)]
            check(all(x >= 0 for x in order) and order == sorted(order), "tmux: 'k' sorts the keys by name")
            subprocess.run(tmux + ["send-keys", "q"], check=True, timeout=30)
            wait_for(lambda: subprocess.run(tmux + ["has-session"], capture_output=True).returncode != 0,
                     "tmux: 'q' quits", 30)
            check(True, "tmux: 'q' quits strata top -s")

        def snapshot(s):
            r = run("top", "-s", s, "--once", "--json")
            return json.loads(r.stdout) if r.returncode == 0 else {}

        def per_route(j):
            reg = j.get("regions", [])
            return {k["name"]: {x: k.get(x) for x in ("count", "sum", "min", "max", "hist")}
                    for k in reg[0]["keys"]} if len(reg) == 1 else {}

        for when in ("active", "stopped"):
            j = snapshot("a")
            check(sorted(j.get("pids", [])) == sorted([p0.pid, p1.pid, p2.pid]) and j.get("exited") == [p1.pid],
                  "%s: JSON names the three processes, P1 exited" % when)
            hits = {p["pid"]: (p["hits"], p["alive"]) for p in j.get("processes", [])}
            check(hits == {p0.pid: (WORKERS * N0, True), p1.pid: (WORKERS * N1, False),
                           p2.pid: (WORKERS * N2, True)}, "%s: each process's hits, P1's kept" % when)
            check(len(j["regions"]) == 1 and j["regions"][0]["hits"] == WORKERS * (N0 + N1 + N2),
                  "%s: one merged region, %d hits" % (when, WORKERS * (N0 + N1 + N2)))
            check(per_route(j) == expected_routes((N0, N1, N2)),
                  "%s: per route count, sum, min, max, histogram: exactly what the three emitted" % when)
            jf = snapshot("f")
            counts = {k["name"]: k["count"] for k in jf["regions"][0]["keys"]} if jf.get("regions") else {}
            check(counts == one_worker_counts((N0, N1, N2)) and "sum" not in str(jf["regions"][0]["keys"][0]),
                  "%s: session f (worker == 2): per route the requests of worker 2 only, counts only" % when)
            if when == "active":
                st = ok("status", "a").stdout
                check("aggregate: %s, 3 region(s)" % SPEC in st, "status names the aggregation and 3 regions")
                check("where worker == 2" in ok("status", "f").stdout, "status f names its filter")
                ok("stop", "a")
                ok("stop", "f")
        for s in ("a", "f"):
            ok("destroy", s)
        check(run("top", "-s", "a", "--once").returncode == 1, "top -s of a destroyed session fails")
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True, timeout=30)
        for p in procs:
            if p.poll() is None:
                p.stdin.close()
                p.wait(timeout=60)
    check(all(p.returncode == 0 for p in procs), "the programs exit 0")
    end_daemon(daemon, check)
    check.finish()


if __name__ == "__main__":
    main()
