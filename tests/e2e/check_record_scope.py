#!/usr/bin/python3
"""`strata record -- CMD` records CMD's process tree only, on a daemon that
serves other programs too; `--all-processes` records them as well.

usage: check_record_scope.py STRATA LOOP WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

One daemon; record's command is a shell that runs LOOP 1 (10 events, a
child of CMD: its tree), says so on a FIFO and waits on another.  Meanwhile
the check starts a bystander, LOOP 3 (30 events), on the same daemon: a
child of the check, outside record's tree, started while record's session
is active (so without the scope it would join it).  Once the bystander
exited, the command is let go.  babeltrace2 counts: the trace holds exactly
the 10 events of CMD's tree, from one process; with --all-processes, the
40 of both, from two.  The same with --aggregate (its JSON's processes and
hits: 1 and 10, 2 and 40).
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import e2e_setup, end_daemon, start_daemon  # noqa: E402


def ticks(out):
    """(babeltrace2's exit status, rloop:tick events, processes: sub-traces)."""
    b = subprocess.run(["babeltrace2", out], capture_output=True, text=True, timeout=120)
    subs = os.path.join(out, "ust", "pid")
    procs = len(os.listdir(subs)) if os.path.isdir(subs) else 0
    return b.returncode, b.stdout.count("rloop:tick"), procs, b.stderr


def run(strata, loop, work, env, name, extra, stdout=None):
    ready, go = os.path.join(work, name + ".ready"), os.path.join(work, name + ".go")
    os.mkfifo(ready)
    os.mkfifo(go)
    out = os.path.join(work, name)
    script = '"$0" 1 && echo ready > "$1" && read x < "$2"'
    rec = subprocess.Popen([strata, "record", "-o", out] + extra + ["--", "sh", "-c", script, loop, ready, go],
                           env=env, stdout=stdout, stderr=subprocess.PIPE, text=True)
    with open(ready) as f:  # CMD's child ran: record's session is active
        f.read()
    by = subprocess.run([loop, "3"], env=env, capture_output=True, text=True, timeout=60)
    with open(go, "w") as f:
        f.write("go\n")
    got, err = rec.communicate(timeout=120)
    sys.stdout.write(err)
    return rec.returncode, by.returncode, out, got if stdout else err


def main():
    strata, loop, work, consumerd, check = e2e_setup()
    sock = os.path.join(work, "d.sock")
    env = dict(os.environ, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=sock)
    for v in ("STRATA_EARLY", "LD_PRELOAD", "STRATA_AGGREGATE"):
        env.pop(v, None)
    d = start_daemon(consumerd, sock, env)

    rc, brc, out, err = run(strata, loop, work, env, "tree", [])
    bt, n, pids, bterr = ticks(out)
    check(rc == 0 and brc == 0 and bt == 0, "record and the bystander exit 0, the trace reads (%d %d %d %s)" %
          (rc, brc, bt, bterr[:300]))
    check(n == 10 and pids == 1, "record -- CMD holds CMD's tree only: 10 events of 1 process (%d of %d)" %
          (n, pids))
    check("nothing discarded" in err, "record tells its loss")

    rc, brc, out, err = run(strata, loop, work, env, "all", ["--all-processes"])
    bt, n, pids, bterr = ticks(out)
    check(rc == 0 and brc == 0 and bt == 0, "--all-processes: record and the bystander exit 0, the trace reads")
    check(n == 40 and pids == 2, "record --all-processes holds both: 40 events of 2 processes (%d of %d)" %
          (n, pids))

    # --aggregate: the same scope; its JSON lists the processes aggregated.
    for name, extra, want in (("agg", [], (1, 10)), ("agg-all", ["--all-processes"], (2, 40))):
        rc, brc, out, got = run(strata, loop, work, env, name, ["--aggregate", "rloop:tick", "--json"] + extra,
                                stdout=subprocess.PIPE)
        try:
            js = json.loads(got)
            seen = (len(js["processes"]), sum(p["hits"] for p in js["processes"]))
        except (ValueError, KeyError, TypeError):
            seen = None
        check(rc == 0 and seen == want, "record --aggregate %s: %d process(es), %d hits (%r)" %
              (" ".join(extra), want[0], want[1], seen))

    end_daemon(d, check)
    check.finish()


if __name__ == "__main__":
    main()
