#!/usr/bin/python3
"""Aggregation in the process (STRATA_AGGREGATE) read by `strata top`.

usage: check_agg_top.py STRATA PROG WORKDIR PTHREAD_PRELOAD

strata-test-agg-target runs four workers of N requests (aggdemo:req, known
latency and route) under the pthread preload, aggregating
  aggdemo:req:latency_ns by route;  aggdemo:req by $tid;
  pthread:mutex_lock:wait_ns by lock
then waits.  Oracles, exact, from what the program did:
  - `strata top --pid P --once --json`: per route count, sum, min, max and
    log2 histogram; four threads of N each; lock A taken 3N times per worker,
    lock B N times (their addresses printed by the program);
  - the text view names every route with its count;
  - live in tmux (send-keys, capture-pane): the counts on screen, sorting
    by key with 'k', and, once the program exits, "exited: last values"
    with the same counts still shown; 'q' quits.
"""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, wait_for  # noqa: E402

N = 1000
WORKERS = 4
ROUTES = ["/api/users", "/api/orders", "/static"]


def expected_routes(ns=(N,)):
    """Per route what the programs of N requests per worker (one per N in
    ns) aggregated, together."""
    want = {r: {"count": 0, "sum": 0, "min": None, "max": None, "hist": {}} for r in ROUTES}
    for w, n in ((w, n) for n in ns for w in range(WORKERS)):
        for i in range(n):
            v = (i * 37 % 1000) * 1000 + w
            e = want[ROUTES[i % 3]]
            e["count"] += 1
            e["sum"] += v
            e["min"] = v if e["min"] is None else min(e["min"], v)
            e["max"] = v if e["max"] is None else max(e["max"], v)
            b = str(0 if v <= 0 else v.bit_length())
            e["hist"][b] = e["hist"].get(b, 0) + 1
    return want


def main():
    strata, prog, work, preload = sys.argv[1:5]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check = Checks()
    env = dict(os.environ)
    env["STRATA_AGGREGATE"] = ("aggdemo:req:latency_ns by route; aggdemo:req by $tid; "
                               "pthread:mutex_lock:wait_ns by lock limit 64")
    env["LD_PRELOAD"] = preload
    env.pop("STRATA_CONSUMERD_SOCKET", None)
    env["XDG_RUNTIME_DIR"] = work  # no daemon there: the program records nothing
    p = subprocess.Popen([prog, str(N)], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        words = p.stdout.readline().split()
        check(len(words) == 4 and words[0] == "ready", "the program is ready (%r)" % words)
        pid, lock_a, lock_b = int(words[1]), int(words[2], 16), int(words[3], 16)
        top_env = dict(os.environ)
        r = subprocess.run([strata, "top", "--pid", str(pid), "--once", "--json"], capture_output=True, text=True,
                           timeout=60, env=top_env)
        check(r.returncode == 0, "strata top --once --json exits 0 (%d, %s)" % (r.returncode, r.stderr.strip()))
        snap = json.loads(r.stdout)
        check(snap["pid"] == pid and snap["alive"], "the snapshot is of the live process")
        regions = {reg["pattern"] + ":" + reg["value"] + " by " + reg["key"]: reg for reg in snap["regions"]}
        check(sorted(regions) == sorted(["aggdemo:req:latency_ns by route", "aggdemo:req: by $tid",
                                         "pthread:mutex_lock:wait_ns by lock"]),
              "three regions found: %s" % sorted(regions))
        by_route = regions.get("aggdemo:req:latency_ns by route", {"keys": []})
        check(by_route.get("hits") == WORKERS * N and by_route.get("overflow") == 0,
              "by route: %d hits, no overflow" % (WORKERS * N))
        got = {k["name"]: k for k in by_route["keys"]}
        for route, e in expected_routes().items():
            k = got.get(route, {})
            same = all(k.get(f) == e[f] for f in ("count", "sum", "min", "max", "hist"))
            check(same, "route %s: count %d sum %d min %d max %d and histogram exact (got %s)"
                  % (route, e["count"], e["sum"], e["min"], e["max"],
                     {f: k.get(f) for f in ("count", "sum", "min", "max")}))
        by_tid = regions.get("aggdemo:req: by $tid", {"keys": []})
        counts = sorted(k["count"] for k in by_tid["keys"])
        check(counts == [N] * WORKERS, "by $tid: %d threads of %d (got %s)" % (WORKERS, N, counts))
        locks = {k["key"]: k["count"] for k in regions.get("pthread:mutex_lock:wait_ns by lock", {"keys": []})["keys"]}
        check(locks.get(lock_a) == 3 * N * WORKERS and locks.get(lock_b) == N * WORKERS,
              "pthread:mutex_lock by lock: A %d, B %d times (got %s, %s)"
              % (3 * N * WORKERS, N * WORKERS, locks.get(lock_a), locks.get(lock_b)))
        t = subprocess.run([strata, "top", "--pid", str(pid), "--once"], capture_output=True, text=True, timeout=60)
        check(t.returncode == 0 and all(r in t.stdout for r in ROUTES) and "hits" in t.stdout,
              "the text snapshot names every route")
        bad = subprocess.run([strata, "top", "--pid"], capture_output=True, text=True, timeout=60)
        check(bad.returncode == 2, "a usage error exits 2")

        # Live, in tmux: the counts on screen, sort keys, the process's exit.
        if shutil.which("tmux"):
            live(check, strata, pid, p, work)
        else:
            print("skip tmux: not installed")
    finally:
        if p.poll() is None:
            p.stdin.close()
            p.wait(timeout=60)
    check(p.returncode == 0, "the program exits 0")
    check.finish()


def live(check, strata, pid, p, work):
    sock = os.path.join(work, "tmux.sock")
    tmux = ["tmux", "-S", sock]
    subprocess.run(tmux + ["new-session", "-d", "-x", "200", "-y", "60", strata, "top", "--pid", str(pid),
                           "--interval", "100", "--limit", "5"], check=True, timeout=30)

    def pane():
        return subprocess.run(tmux + ["capture-pane", "-p"], capture_output=True, text=True, timeout=30).stdout

    try:
        per_route = expected_routes()["/api/users"]["count"]
        try:
            # 60 s: once, on a loaded CI machine, 30 s passed without them.
            wait_for(lambda: "/api/users" in pane() and str(per_route) in pane(), "tmux: the routes on screen",
                     timeout=60.0)
        except SystemExit:
            # What was on screen, and whether strata top still ran, for the log.
            print("pane at the deadline:\n" + pane())
            print(subprocess.run(tmux + ["list-panes", "-F", "pane_dead=#{pane_dead} pid=#{pane_pid}"],
                                 capture_output=True, text=True, timeout=30).stdout)
            raise
        check(True, "tmux: the live view shows the routes with their counts")
        # A window shorter than the view: the title and the first keys stay
        # on screen, the last line says how many lines did not fit.
        small = ["tmux", "-S", sock + ".small"]
        subprocess.run(small + ["new-session", "-d", "-x", "80", "-y", "12", strata, "top", "--pid", str(pid),
                                "--interval", "100", "--limit", "5"], check=True, timeout=30)
        try:
            def small_pane():
                return subprocess.run(small + ["capture-pane", "-p"], capture_output=True, text=True,
                                      timeout=30).stdout
            wait_for(lambda: "more lines" in small_pane(), "tmux: a short window says what did not fit",
                     timeout=60.0)
            lines = small_pane().rstrip("\n").split("\n")
            check(len(lines) == 12 and lines[0].startswith("strata top: pid %d" % pid)
                  and "more lines: a taller window" in lines[-1],
                  "tmux: a 12-row, 80-column window keeps the title on its first row (lines cut, not "
                  "wrapped) and says what did not fit (%r)"
                  % lines)
        finally:
            subprocess.run(small + ["kill-server"], capture_output=True, timeout=30)
        subprocess.run(tmux + ["send-keys", "k"], check=True, timeout=30)
        wait_for(lambda: "sort: key" in pane(), "tmux: sort by key")
        screen = pane()
        order = [screen.find(r) for r in sorted(ROUTES)]
        check(all(x >= 0 for x in order) and order == sorted(order), "tmux: 'k' sorts the keys by name")
        p.stdin.close()  # the program exits
        p.wait(timeout=60)
        wait_for(lambda: "exited: last values" in pane(), "tmux: the exit shown")
        screen = pane()
        check(str(per_route) in screen and "/static" in screen, "tmux: the last values stay after the exit")
        subprocess.run(tmux + ["send-keys", "q"], check=True, timeout=30)
        wait_for(lambda: subprocess.run(tmux + ["has-session"], capture_output=True).returncode != 0,
                 "tmux: 'q' quits")
        check(True, "tmux: 'q' quits strata top")
    finally:
        subprocess.run(tmux + ["kill-server"], capture_output=True, timeout=30)


if __name__ == "__main__":
    main()
