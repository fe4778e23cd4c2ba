"""Live readers of a relay session whose processes come one after another
(docs/relay.md, "Live"), against a real lttng-relayd on loopback.

The workload is control_snap_app (numbered snap:tick events on command,
seq from 0 in each process).

Oracles:
  - session Q, a babeltrace2 lttng-live reader attached before anything
    records: three processes run one after the other, each emitting 100
    events and exiting before the next starts; after each one the reader
    shows exactly 100, 200, 300 events while the session still records
    (without the fix it showed the second process's events only at the
    session's end, or never: babeltrace2 2.0.4 reads no further stream of a
    trace while one's inactivity time stands still, and nothing beaconed the
    ended processes' streams any more).  Then a fourth process emits 50 and
    stays: the reader shows them while it runs (350).  After stop and
    destroy the reader ends by itself, exit 0, with exactly seq 0..99 three
    times then 0..49, in that order, and no warning or error logged;
  - session R, a reader attached after `strata stop` (lttng-relayd serves
    it from the newest packets, where babeltrace2 2.0.4 always asks to
    start: docs/relay.md): it ends by itself after destroy, exit 0, no
    warning or error, and the relay's output directory holds the session's
    100 events (what such a reader is told to read instead).
  - session S, on a second daemon whose every sub-trace is published 1.5 s
    late (STRATA_TEST_PUBLISH_DELAY_MS, a drain held up on a loaded
    machine), a reader attached before anything records: process A emits 10
    and stays, process B emits 100 and exits (its records are then 1.5 s
    older than its streams on the relay, while A's drain beacons its lanes
    every second), then A emits 10 more.  The reader shows all 120 while
    the session records, and after stop and destroy it ends by itself, exit
    0, with seq 0..9, 0..99, 10..19 in that order, no warning or error.
    Without the live gate (docs/relay.md, "The gate") babeltrace2 2.0.4
    went past B's records on A's beacons and failed on them, exit 1
    ("cycles=9223372036854775808"; 3 runs of 3).
Each wait is a bounded poll of what the reader printed; the check takes
about 20 s.
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import (Checks, control_setup, free_ports, listening, payload_ints, poll, start_daemon,  # noqa: E402
                            stop_all, strata_cli, wait_for)


def main():
    def optional(ap):
        ap.add_argument("--relayd", default="/usr/bin/lttng-relayd")

    a, work, env, _ = control_setup("strata-relay-live-", "app", "babeltrace2", more=optional)
    renv = dict(os.environ, LTTNG_HOME=work)  # the relayd's own sockets stay in our directory
    check = Checks()
    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    ctrl, data, live = free_ports(3)
    out = os.path.join(work, "relayd-out")
    relayd = None
    readers = []
    strata = strata_cli(a.strata, env, timeout=60)

    def reader(host, session, tag, attached=True):
        """A babeltrace2 live reader of host/session: (process, its log,
        the snap:tick seqs it printed).  With attached, returned once it
        says it is attached to a session without streams ("Getting 0 new
        streams" at log level INFO)."""
        out_f = open(os.path.join(work, "live-%s.out" % tag), "w+")
        err_f = open(os.path.join(work, "live-%s.err" % tag), "w+")
        proc = subprocess.Popen(["stdbuf", "-oL", "-eL", a.babeltrace2, "-l", "I", "--input-format=lttng-live",
                                 "net://127.0.0.1:%d/host/%s/%s" % (live, host, session)],
                                stdout=out_f, stderr=err_f)
        readers.append(proc)

        def log():
            with open(err_f.name) as f:
                return f.read()

        def seqs():
            with open(out_f.name) as f:
                return [int(m) for m in re.findall(r"snap:tick: .*seq = (\d+)", f.read())]
        if attached:
            wait_for(lambda: re.search(r"Getting \d+ new streams", log()) or proc.poll() is not None,
                     "%s: the live reader attached" % tag)
        return proc, log, seqs

    def bad_lines(log):
        return [line for line in log().splitlines() if re.search(r" [WEF] [A-Z]", line)]

    try:
        relayd = subprocess.Popen([a.relayd, "-C", "tcp://127.0.0.1:%d" % ctrl, "-D", "tcp://127.0.0.1:%d" % data,
                                   "-L", "tcp://127.0.0.1:%d" % live, "-o", out],
                                  env=renv, stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(work, "relayd.err"), "w"))
        wait_for(lambda: listening(ctrl) and listening(live), "lttng-relayd listening")
        relay = "127.0.0.1:%d:%d" % (ctrl, data)

        # Q: processes one after the other, read live.
        strata("create", "sq", "--relay", relay, "--hostname", "hostQ")
        strata("enable-event", "sq", "snap:*")
        strata("start", "sq")
        qreader, q_log, q_seqs = reader("hostQ", "sq", "Q")
        for k in range(3):
            r = subprocess.run([a.app], env=env, input="100\n", capture_output=True, text=True, timeout=30)
            check(r.returncode == 0, "Q: process %d ran and exited" % k)
            n = 100 * (k + 1)
            poll(lambda: len(q_seqs()) >= n or qreader.poll() is not None, 15)
            check(len(q_seqs()) == n and qreader.poll() is None,
                  "Q: after process %d exited, the live reader shows exactly %d events (%d), still running" %
                  (k, n, len(q_seqs())))
        app = subprocess.Popen([a.app], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        check(app.stdout.readline().strip() == "ready", "Q: a fourth process started")
        app.stdin.write("50\n")
        app.stdin.flush()
        app.stdout.readline()
        poll(lambda: len(q_seqs()) >= 350 or qreader.poll() is not None, 15)
        check(len(q_seqs()) == 350 and app.poll() is None,
              "Q: the running fourth process's 50 events shown while it runs (%d)" % len(q_seqs()))
        app.stdin.close()
        check(app.wait(timeout=30) == 0, "Q: the fourth process exited normally")
        strata("stop", "sq")
        strata("destroy", "sq")
        check(qreader.wait(timeout=60) == 0, "Q: the live reader ended by itself")
        want = list(range(100)) * 3 + list(range(50))
        bad = bad_lines(q_log)
        check(q_seqs() == want and not bad,
              "Q: the reader's whole output is seq 0..99 three times then 0..49 (%d events), no warning or "
              "error (%r)" % (len(q_seqs()), bad[:3]))

        # R: a reader attached after stop.
        strata("create", "sr", "--relay", relay, "--hostname", "hostR")
        strata("enable-event", "sr", "snap:*")
        strata("start", "sr")
        r = subprocess.run([a.app], env=env, input="100\n", capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "R: the process ran and exited")
        strata("stop", "sr")
        rreader, r_log, r_seqs = reader("hostR", "sr", "R", attached=False)
        # Attached: it asked the relay for the session's streams (at INFO,
        # babeltrace2 2.0.4 logs "Getting N new streams" at each answer).
        wait_for(lambda: "new streams" in r_log() or rreader.poll() is not None, "R: the reader attached")
        strata("destroy", "sr")
        check(rreader.wait(timeout=60) == 0 and not bad_lines(r_log),
              "R: a reader attached after stop ends by itself after destroy, exit 0, no warning or error "
              "(%d events shown; %r)" % (len(r_seqs()), bad_lines(r_log)[:3]))
        sr = [f["seq"] for _, f in payload_ints(os.path.join(out, "hostR"), "seq", names={"snap:tick"})[0]]
        check(sr == list(range(100)), "R: the relay's output holds the session's 100 events (%d)" % len(sr))
        # S: a process's streams published long after its first records.
        env_s = dict(env, STRATA_CONSUMERD_SOCKET=os.path.join(work, "sock-s"), STRATA_TEST_PUBLISH_DELAY_MS="1500")
        d_s = start_daemon(a.consumerd, env_s["STRATA_CONSUMERD_SOCKET"], env_s)
        strata_s = strata_cli(a.strata, env_s, timeout=60)
        strata_s("create", "ss", "--relay", relay, "--hostname", "hostS")
        strata_s("enable-event", "ss", "snap:*")
        strata_s("start", "ss")
        sreader, s_log, s_seqs = reader("hostS", "ss", "S")
        app = subprocess.Popen([a.app], env=env_s, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        check(app.stdout.readline().strip() == "ready", "S: process A started")

        def emit(n):
            app.stdin.write("%d\n" % n)
            app.stdin.flush()
            app.stdout.readline()
        emit(10)
        poll(lambda: len(s_seqs()) >= 10 or sreader.poll() is not None, 15)
        check(len(s_seqs()) == 10, "S: A's first 10 events shown (%d)" % len(s_seqs()))
        r = subprocess.run([a.app], env=env_s, input="100\n", capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "S: process B ran and exited")
        emit(10)
        poll(lambda: len(s_seqs()) >= 120 or sreader.poll() is not None, 15)
        check(len(s_seqs()) == 120 and sreader.poll() is None,
              "S: B's 100 and A's next 10 shown while the session records, the reader still running (%d)" %
              len(s_seqs()))
        app.stdin.close()
        check(app.wait(timeout=30) == 0, "S: process A exited normally")
        strata_s("stop", "ss")
        strata_s("destroy", "ss")
        check(sreader.wait(timeout=60) == 0, "S: the live reader ended by itself (exit %s)" % sreader.poll())
        want = list(range(10)) + list(range(100)) + list(range(10, 20))
        bad = bad_lines(s_log)
        check(s_seqs() == want and not bad,
              "S: the reader's whole output is seq 0..9, 0..99, 10..19 (%d events), no warning or error (%r)" %
              (len(s_seqs()), bad[:3]))
        stop_all([], d_s)
    finally:
        stop_all(readers + [relayd], d)
    check.finish()


if __name__ == "__main__":
    main()
