"""Streaming to a real lttng-relayd (strata create/record --relay), issue 13.

A relayd is started on free loopback ports with its own output directory.
The workload is control_snap_app (numbered snap:tick events on command).

Oracles:
  - no relayd listening: `strata create --relay` exits 1 saying it cannot
    connect, and no session is left behind;
  - session A (hostname hostA, small sub-buffers) is followed live by
    `babeltrace2 --input-format=lttng-live`: once it shows an event (seq
    `first`: a viewer attaching to a running session starts at its newest
    packets), a batch of 1000 is read live, in order, while the process is
    still running; after stop/destroy the live reader ends by itself with
    exactly seq first..last in order and nothing on stderr;
  - session M: strata-demo with 4 threads (4 lanes) followed live: all 8001
    events shown before stop (quiet and ended lanes do not hold the reader:
    beacons), no warning or error logged by the reader;
  - session B (`strata record --relay --hostname hostB`) streams 500 events;
  - session P: control_snap_app emits 10 events and keeps running,
    strata-demo (1 thread, 101 events) runs and exits: the live reader
    (attached first) shows its 101 events while the first process stays
    quiet; then the first process emits 500 more: the reader shows all of
    them while the first process still runs (the ended process's streams,
    still open on the relay, do not hold it back), ends by itself and logs
    no warning or error;
  - the relayd's output directory holds hostA/ and hostB/; babeltrace2 reads
    it whole with nothing on stderr, and each host's trace is exactly its
    events in order (3000 and 500);
  - session E (`strata record --relay --hostname hostE -- exe 2 100
    execserve`, exe a link to control_async_app): one process that execs
    itself (/proc/self/exe), so its two images have the same comm ("exe"),
    pid and registration date, i.e. the same sub-trace path: the relay gets two sub-traces (the second with ".1"), 200 events
    each, read back whole with nothing on stderr;
  - session N: a process records (x, 10 events shown), a second one joins
    (y, 10), x records 10 more, then a new thread of y records 10 on a lane
    of its own and x 10 more: each step's events are shown by the live
    reader while both run (50 in all), it ends by itself and logs no
    warning or error (every lane's stream is on the relay from the
    sub-trace's start: docs/relay.md, "Live");
  - relayd killed mid-session: the traced process keeps answering and exits
    normally, `strata stop` returns in bounded time, and `strata status`
    reports the link down and a non-zero count of packets not sent;
  - relayd restarted on the same ports while that session still records:
    no reconnection (docs/relay.md): the link stays down, the new relayd
    receives nothing from the session, and a new session streams to it
    (exactly 100 events read back).
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import (Checks, control_setup, free_ports, listening, payload_ints, start_daemon, stop_all,  # noqa: E402
                            strata_cli, wait_for)


def seqs_of(path):
    return [f["seq"] for _, f in payload_ints(path, "seq", names={"snap:tick"})[0]]


def main():
    def optional(ap):
        ap.add_argument("--relayd", default="/usr/bin/lttng-relayd")
        ap.add_argument("--demo", default="")
        ap.add_argument("--async-app", default="")

    a, work, env, _ = control_setup("strata-relay-", "app", "babeltrace2", more=optional)
    renv = dict(os.environ)
    renv["LTTNG_HOME"] = work  # the relayd's own sockets stay in our directory
    check = Checks()
    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    ctrl, data, live, dead = free_ports(4)
    out = os.path.join(work, "relayd-out")
    relayd = None
    readers = []

    strata = strata_cli(a.strata, env, timeout=60)

    try:
        # 1. nothing listening
        r = strata("create", "nobody", "--relay", "127.0.0.1:%d:%d" % (dead, dead + 1), ok=False)
        check(r.returncode == 1 and "cannot connect to lttng-relayd" in r.stderr,
              "no relayd: create exits 1 with a clear error (%r)" % r.stderr.strip())
        check("nobody" not in strata("status").stdout, "no relayd: no session left behind")
        check(strata("create", "bad", "--relay", "127.0.0.1:x", ok=False).returncode == 1,
              "a malformed relay address is refused")

        relayd = subprocess.Popen([a.relayd, "-C", "tcp://127.0.0.1:%d" % ctrl, "-D", "tcp://127.0.0.1:%d" % data,
                                   "-L", "tcp://127.0.0.1:%d" % live, "-o", out],
                                  env=renv, stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(work, "relayd.err"), "w"))
        wait_for(lambda: listening(ctrl) and listening(live), "lttng-relayd listening")
        relay = "127.0.0.1:%d:%d" % (ctrl, data)

        # 2. session A, followed live
        strata("create", "sa", "--relay", relay, "--hostname", "hostA", "--subbuf-size", "4096",
               "--subbuf-count", "32")
        strata("enable-event", "sa", "snap:*")
        strata("start", "sa")
        live_out = open(os.path.join(work, "live.out"), "w+")
        live_err = open(os.path.join(work, "live.err"), "w+")
        # Line-buffered so that what it printed can be polled while it runs.
        reader = subprocess.Popen(["stdbuf", "-oL", a.babeltrace2, "--input-format=lttng-live",
                                   "net://127.0.0.1:%d/host/hostA/sa" % live], stdout=live_out, stderr=live_err)
        readers.append(reader)
        app = subprocess.Popen([a.app], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        check(app.stdout.readline().strip() == "ready", "A: the process started")

        def live_seqs():
            with open(live_out.name) as f:
                return [int(m) for m in re.findall(r"seq = (\d+)", f.read())]

        def emit(n):
            app.stdin.write("%d\n" % n)
            app.stdin.flush()
            return int(app.stdout.readline())
        # A viewer attaching to a running session starts at its newest
        # packets (lttng-live "seek last"): emit small batches until the
        # reader shows one, wherever it started.
        last = -1
        for _ in range(120):
            last = emit(10)
            deadline = time.monotonic() + 1.5  # one live period (1 s) and margin
            while not live_seqs() and time.monotonic() < deadline:
                time.sleep(0.01)
            if live_seqs():
                break
        first = live_seqs()[0] if live_seqs() else None
        check(first is not None, "A: the live reader shows events while the session records (from seq %s)" % first)
        last = emit(1000)
        wait_for(lambda: live_seqs() and live_seqs()[-1] == last, "A: the live reader follows to seq %d" % last)
        check(live_seqs() == list(range(first, last + 1)) and app.poll() is None,
              "A: seq %d..%d read live, in order, while the process runs" % (first, last))
        last = emit(2000)
        app.stdin.close()
        check(app.wait(timeout=30) == 0, "A: the process exited normally")
        strata("stop", "sa")
        # Stopped: every packet is on the relay (stop waits for that) and
        # the streams are closed; the reader gets them all before the
        # session goes (babeltrace2 2.0 drops what it has not read yet when
        # the session closes under it: docs/relay.md).
        wait_for(lambda: reader.poll() is not None or (live_seqs() and live_seqs()[-1] == last),
                 "A: the live reader reaches seq %d after stop" % last)
        strata("destroy", "sa")
        check(reader.wait(timeout=60) == 0, "A: the live reader ended by itself when the session closed")
        live_err.seek(0)
        err = live_err.read()
        s = live_seqs()
        check(s == list(range(first, last + 1)) and err == "",
              "A: live reader got exactly seq %d..%d in order (%d events), stderr empty (%r)" %
              (first, last, len(s), err[:300]))
        n_a = last + 1

        # 2b. several lanes (threads) followed live: lanes that go quiet
        # or end must not hold the reader back (beacons), nor make it warn.
        def attached_reader(host, session, tag):
            """A live reader of a new session, attached before any stream:
            (process, its log, count of its output lines holding a text)."""
            out_f = open(os.path.join(work, "live-%s.out" % tag), "w+")
            err_f = open(os.path.join(work, "live-%s.err" % tag), "w+")
            # At log level INFO the reader says when it is attached ("Getting
            # 2 new streams": the live gate's): the workload starts after that, so the reader
            # sees its streams from their start (a reader attaching to
            # existing streams starts at their newest packets).
            proc = subprocess.Popen(["stdbuf", "-oL", "-eL", a.babeltrace2, "-l", "I", "--input-format=lttng-live",
                                     "net://127.0.0.1:%d/host/%s/%s" % (live, host, session)],
                                    stdout=out_f, stderr=err_f)
            readers.append(proc)

            def log():
                with open(err_f.name) as f:
                    return f.read()

            def count(what):
                with open(out_f.name) as f:
                    return sum(1 for line in f if what in line)
            wait_for(lambda: re.search(r"Getting \d+ new streams", log()), "%s: the live reader attached" % tag)
            return proc, log, count

        def end_live(session, proc, log, tag):
            """Stop and destroy a session read live: its reader ends by
            itself; returns the warnings and errors it logged."""
            strata("stop", session)
            strata("destroy", session)
            check(proc.wait(timeout=60) == 0, "%s: the live reader ended by itself" % tag)
            return [line for line in log().splitlines() if re.search(r" [WEF] [A-Z]", line)]

        if a.demo:
            strata("create", "sm", "--relay", relay, "--hostname", "hostM")
            strata("enable-event", "sm", "demo:*")
            strata("start", "sm")
            mreader, m_log, m_count = attached_reader("hostM", "sm", "M")
            r = subprocess.run([a.demo, "--threads", "4", "--events", "2000"], env=env, capture_output=True,
                               text=True, timeout=60)
            check(r.returncode == 0, "M: strata-demo with 4 threads ran")

            def m_events():
                return m_count(" demo:")
            wait_for(lambda: m_events() >= 8001, "M: the live reader shows all 8001 demo events", timeout=30)
            check(m_events() == 8001, "M: 4 lanes read live, 8001 events, before stop (%d)" % m_events())
            bad = end_live("sm", mreader, m_log, "M")
            check(not bad and m_events() == 8001, "M: no warning or error from the live reader (%r)" % bad[:3])

        # 3. session B through strata record
        r = strata("record", "--relay", relay, "--hostname", "hostB", "-e", "snap:*", "--", a.app, input="500\n")
        check("streamed to lttng-relayd" in r.stderr, "B: record says where the trace went")
        check("strata record: nothing discarded\n" in r.stderr, "B: record tells the loss, as a disk record does")

        # 3b. two sub-traces with the same path: a process and its exec'd
        # image (same comm, pid and registration date)
        if a.async_app:
            # The app re-executes /proc/self/exe, whose image is named "exe":
            # started through a link of that name, both images are "exe".
            exe = os.path.join(work, "exe")
            os.symlink(a.async_app, exe)
            strata("record", "--relay", relay, "--hostname", "hostE", "-e", "ctltest:*", "--",
                   exe, "2", "100", "execserve", input="go\n")
            e_dir = os.path.join(out, "hostE")
            # (live-gate: the session's gate for live readers, no events.)
            subs = sorted(os.path.relpath(root, e_dir) for root, _, files in os.walk(e_dir)
                          if "metadata" in files and not root.endswith("/live-gate"))
            base = subs[0] if subs else ""
            check(len(subs) == 2 and subs[1] == base + ".1",
                  "E: the exec'd image's sub-trace gets its own relay path (%s)" % subs)
            counts = []
            for sub in subs:
                counts.append(len(payload_ints(os.path.join(e_dir, sub), names={"ctltest:tick"})[0]))
            bt = subprocess.run([a.babeltrace2, e_dir], capture_output=True, text=True, timeout=120)
            check(counts == [200, 200] and bt.returncode == 0 and bt.stderr == "",
                  "E: each image's 200 events read back, babeltrace2 silent (%s, %r)" % (counts, bt.stderr[:300]))

        # 4. what the relayd wrote
        hosts = sorted(os.listdir(out))
        want = ["hostA", "hostB"] + (["hostE"] if a.async_app else []) + (["hostM"] if a.demo else [])
        check(hosts == want, "one relayd output directory with every host (%s)" % hosts)
        bt = subprocess.run([a.babeltrace2, out], capture_output=True, text=True, timeout=120)
        n_m = 8001 if a.demo else 0
        check(bt.returncode == 0 and bt.stderr == "" and bt.stdout.count("snap:tick") == n_a + 500 and
              bt.stdout.count(" demo:") == n_m,
              "babeltrace2 reads the relayd's whole output: %d + %d events, stderr empty (%r)" %
              (n_a + 500, n_m, bt.stderr[:300]))
        sa, sb = seqs_of(os.path.join(out, "hostA")), seqs_of(os.path.join(out, "hostB"))
        check(sa == list(range(n_a)), "hostA's trace on the relayd: exactly seq 0..%d in order (%d)" % (n_a - 1, len(sa)))
        check(sb == list(range(500)), "hostB's trace on the relayd: exactly seq 0..499 in order (%d)" % len(sb))

        # 4b. one process ends, another records on: the ended one's streams
        # stay open on the relay and must not hold the live reader back
        # (their beacons go on: docs/relay.md, "Live").
        if a.demo:
            strata("create", "sp", "--relay", relay, "--hostname", "hostP")
            strata("enable-event", "sp", "demo:*")
            strata("enable-event", "sp", "snap:*")
            strata("start", "sp")
            preader, p_log, p_count = attached_reader("hostP", "sp", "P")
            app = subprocess.Popen([a.app], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            check(app.stdout.readline().strip() == "ready", "P: the long-running process started")
            app.stdin.write("10\n")
            app.stdin.flush()
            app.stdout.readline()
            wait_for(lambda: p_count(" snap:tick") >= 10, "P: the live reader shows the first 10 ticks")
            r = subprocess.run([a.demo, "--threads", "1", "--events", "100"], env=env, capture_output=True,
                               text=True, timeout=60)
            check(r.returncode == 0, "P: strata-demo ran and exited")
            # lttng-relayd 2.13 tells a reader of new streams only with a
            # packet of a stream it reads: the demo's sub-trace, published
            # while every stream the reader knows is quiet, is made known by
            # a packet without records on the session's oldest stream
            # (docs/relay.md, "Live"), not by the other process's next events.
            wait_for(lambda: p_count(" demo:") >= 101 or preader.poll() is not None,
                     "P: the live reader shows the demo's events while the other process is quiet", timeout=30)
            check(p_count(" demo:") == 101 and p_count(" snap:tick") == 10,
                  "P: the demo's 101 events shown while the other process is quiet (%d, %d)" %
                  (p_count(" demo:"), p_count(" snap:tick")))
            app.stdin.write("500\n")
            app.stdin.flush()
            app.stdout.readline()
            wait_for(lambda: p_count(" snap:tick") >= 510,
                     "P: the live reader shows the running process's events after the other one ended", timeout=30)
            check(p_count(" demo:") == 101 and p_count(" snap:tick") == 510 and app.poll() is None,
                  "P: live, while the process runs: the ended one's 101 events and the running one's 510 "
                  "(%d, %d)" % (p_count(" demo:"), p_count(" snap:tick")))
            app.stdin.close()
            check(app.wait(timeout=30) == 0, "P: the long-running process exited normally")
            bad = end_live("sp", preader, p_log, "P")
            check(not bad, "P: no warning or error from the live reader (%r)" % bad[:3])

        # 4c. a process joins while another records, and a thread of it
        # starts later on a lane of its own.  The live reader must learn of
        # every stream of a sub-trace before it shows the other streams'
        # later events: a stream published with its first packet (as
        # before) came after the first process's events that followed it,
        # and the reader failed ("Message's timestamp is less than ...",
        # shown by babeltrace2 2.0.4 as a clock value of 2^63; seen in the
        # kernel VM test).  Each step waits for what the reader shows.
        strata("create", "sn", "--relay", relay, "--hostname", "hostN")
        strata("enable-event", "sn", "snap:*")
        strata("start", "sn")
        nreader, n_log, n_count = attached_reader("hostN", "sn", "N")
        procs = {}

        def n_emit(who, what):
            procs[who].stdin.write(what + "\n")
            procs[who].stdin.flush()
            procs[who].stdout.readline()

        def n_shows(n, what):
            wait_for(lambda: n_count(" snap:tick") >= n or nreader.poll() is not None, "N: " + what, timeout=30)
            check(n_count(" snap:tick") == n and nreader.poll() is None,
                  "N: %s: %d events shown, the reader runs (%d, exit %s)" %
                  (what, n, n_count(" snap:tick"), nreader.poll()))
        for who in ("x", "y"):
            procs[who] = subprocess.Popen([a.app], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            check(procs[who].stdout.readline().strip() == "ready", "N: process %s started" % who)
            n_emit(who, "10")
            if who == "x":
                n_shows(10, "the first process's 10 events")
        # (The reader hears of the second process's streams with a packet
        # of a stream it reads: docs/relay.md, "Live".)
        n_emit("x", "10")
        n_shows(30, "both processes' events")
        n_emit("y", "t 10")
        n_emit("x", "10")
        n_shows(50, "a new thread's events, then the first process's later ones")
        for p in procs.values():
            p.stdin.close()
            check(p.wait(timeout=30) == 0, "N: a process exited normally")
        bad = end_live("sn", nreader, n_log, "N")
        check(not bad and n_count(" snap:tick") == 50,
              "N: 50 events, no warning or error from the live reader (%r)" % bad[:3])

        # 5. relayd killed mid-session
        strata("create", "sk", "--relay", relay, "--hostname", "hostK", "--subbuf-size", "4096",
               "--subbuf-count", "32")
        strata("enable-event", "sk", "snap:*")
        strata("start", "sk")
        app = subprocess.Popen([a.app], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        check(app.stdout.readline().strip() == "ready", "K: the process started")
        app.stdin.write("2000\n")
        app.stdin.flush()
        app.stdout.readline()

        def packets_sent():
            m = re.search(r"recorded: \d+ buffer\(s\), (\d+) packet", strata("status", "sk").stdout)
            return int(m.group(1)) if m else 0
        wait_for(lambda: packets_sent() > 0, "K: packets reach the relay before it dies")
        relayd.kill()
        relayd.wait()
        t0 = time.monotonic()
        for _ in range(5):  # keeps emitting full packets towards a dead relay
            app.stdin.write("5000\n")
            app.stdin.flush()
            app.stdout.readline()
        check(time.monotonic() - t0 < 20, "K: the traced process is not slowed down by the dead relay")
        # 6. a relayd back on the same ports: no reconnection (docs/relay.md,
        # "Faults and reconnection"), the session's link stays down.
        out2 = os.path.join(work, "relayd-out2")
        relayd = subprocess.Popen([a.relayd, "-C", "tcp://127.0.0.1:%d" % ctrl, "-D", "tcp://127.0.0.1:%d" % data,
                                   "-L", "tcp://127.0.0.1:%d" % live, "-o", out2],
                                  env=renv, stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(work, "relayd2.err"), "w"))
        wait_for(lambda: listening(ctrl) and listening(live), "lttng-relayd listening again")
        for _ in range(3):  # more full packets, with a relayd there again
            app.stdin.write("5000\n")
            app.stdin.flush()
            app.stdout.readline()
        app.stdin.close()
        check(app.wait(timeout=30) == 0, "K: the process exited normally")
        t0 = time.monotonic()
        strata("stop", "sk", timeout=60)
        check(time.monotonic() - t0 < 30, "K: stop returned in bounded time (%.1f s)" % (time.monotonic() - t0))
        st = strata("status", "sk").stdout
        m = re.search(r"(\d+) rejected packet", st)
        check(m is not None and int(m.group(1)) > 0 and "link down" in st,
              "K: status reports the link down and the packets not sent (%s)" %
              " / ".join(l.strip() for l in st.splitlines() if "recorded" in l or "relay" in l))
        strata("destroy", "sk")
        check(not os.path.exists(os.path.join(out2, "hostK")),
              "K: the restarted relayd received nothing of the session (%s)" %
              (os.listdir(out2) if os.path.isdir(out2) else "no output"))
        strata("record", "--relay", relay, "--hostname", "hostR", "-e", "snap:*", "--", a.app, input="100\n")
        sr = seqs_of(os.path.join(out2, "hostR")) if os.path.isdir(os.path.join(out2, "hostR")) else []
        check(sr == list(range(100)), "R: a new session streams to the restarted relayd: seq 0..99 (%d)" % len(sr))
    finally:
        stop_all(readers + [relayd], d)
    check.finish()


if __name__ == "__main__":
    main()
