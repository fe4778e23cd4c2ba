#!/usr/bin/python3
"""The update handler hammered: a tp-async process whose threads emit events
receives its update signal as fast as this script can send it (every one runs
a full state query in the handler: connect, register, re-arm, membarrier,
acknowledge) while its threads emit.  Run in the normal, ASan+UBSan and TSan
builds by scripts/test.sh.

Oracle: the process serves every batch and exits 0; each (thread, seq) is
recorded at most once, and recorded + discarded == emitted exactly; the
handler ran (the daemon saw re-queries); babeltrace2 reads the trace.
"""
import os
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, check_readable, control_setup, end_session, start_daemon, tick_tally, wait_for  # noqa: E402

THREADS, EVENTS, BATCHES = 4, 30000, 3


def main():
    a, work, env, strata = control_setup("strata-sigstorm-", "app")
    env.pop("STRATA_ASYNC_SIGNAL", None)
    out = os.path.join(work, "trace")

    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    strata("create", "s", "-o", out, "--subbuf-size", "1M")
    strata("enable-event", "s", "ctltest:*")
    strata("start", "s")
    app = subprocess.Popen([a.app, str(THREADS), str(EVENTS), "serve"], env=env, stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True, bufsize=1)
    try:
        sig = signal.SIGRTMAX - 3  # tp-async's default update signal

        def handler_installed():
            # Before tp-async's constructor ran, the signal's default action
            # would kill the process (the daemon only signals registered ones).
            with open("/proc/%d/status" % app.pid) as f:
                cgt = [l for l in f if l.startswith("SigCgt:")][0].split()[1]
            return (int(cgt, 16) >> (sig - 1)) & 1 == 1

        wait_for(handler_installed, "tp-async's handler in the process")
        sent = 0
        for _ in range(BATCHES):
            served = threading.Event()

            def storm():
                nonlocal sent
                n = 0
                while not served.is_set() and n < 20000:  # bounded storm
                    os.kill(app.pid, sig)
                    n += 1
                sent += n

            t = threading.Thread(target=storm)
            t.start()
            app.stdin.write("go\n")
            app.stdin.flush()
            line = app.stdout.readline()  # the batch is served while the storm runs
            served.set()
            t.join()
            if line.strip() != "ok":
                raise SystemExit("FAIL: the process did not serve its batch (%r)" % line)
        app.stdin.close()
        status = app.wait(timeout=120)
    except BaseException:
        # Never leave the app or the daemon behind: ctest would wait for
        # them (they hold its output pipe) until the timeout.
        if app.poll() is None:
            app.kill()
        d.kill()
        raise
    end_session(strata, d, timeout=30)

    check = Checks()
    check(status == 0, "the process served every batch and exited 0 (status %s) under %d signals" % (status, sent))
    ticks, lost = tick_tally(out)
    every = [k for t in ticks.values() for k in t]
    seen, discarded = set(every), sum(lost.values())
    dups = len(every) - len(seen)
    emitted = THREADS * EVENTS * BATCHES
    check(dups == 0, "each event recorded at most once (%d duplicates)" % dups)
    check(len(seen) + discarded == emitted,
          "recorded %d + discarded %d == emitted %d" % (len(seen), discarded, emitted))
    check(sent >= BATCHES, "signals were sent while threads emitted (%d)" % sent)
    check_readable(check, out)
    check.finish()


if __name__ == "__main__":
    main()
