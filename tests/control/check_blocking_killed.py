#!/usr/bin/python3
"""Blocking mode with its daemon SIGKILLed mid-run (docs/ring-buffer.md,
"Blocking mode"): the writers blocked on a full ring must come back.

A session with --blocking=300 and 2 x 4 KiB sub-buffers per lane records
strata-demo (4 threads, many events: at the consumer's pace, the writers
wait on the full ring again and again).  Once the daemon wrote packets, it
is killed.  Oracle: the demo then returns every tracepoint call and exits 0
(it prints what it emitted) within a bound: each thread waits at most one
timeout, then the channel is marked stalled and every later event is
discarded at once (without the mark, the remaining ~10^6 events would each
wait 300 ms).  Exact discard counts are unit.rb_blocking_test's: the
buffer is gone with the daemon, nothing reads it here.
"""
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, control_setup, start_daemon, wait_for  # noqa: E402


def trace_bytes(out):
    n = 0
    for root, _, files in os.walk(out):
        n += sum(os.path.getsize(os.path.join(root, f)) for f in files
                 if not f.startswith("metadata") and not f.endswith(".idx"))
    return n


def main():
    a, work, env, strata = control_setup("strata-blockkill-", "demo")
    out = os.path.join(work, "trace")

    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    strata("create", "s", "-o", out, "--blocking=300", "--subbuf-size", "4096", "--subbuf-count", "2",
           "--lanes", "4")
    strata("enable-event", "s", "*")
    strata("start", "s")
    threads, n = 4, 300000
    demo = subprocess.Popen([a.demo, "--threads", str(threads), "--events", str(n)], env=env,
                            stdout=subprocess.PIPE, text=True)
    # Many laps of the tiny rings done: the writers are blocking by now.
    wait_for(lambda: trace_bytes(out) > 64 * 4096 or demo.poll() is not None, "packets on disk", 60)
    check = Checks()
    check(demo.poll() is None, "the demo still runs when the daemon is killed")
    d.send_signal(signal.SIGKILL)
    d.wait()
    t0 = time.monotonic()
    try:
        stdout, _ = demo.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        demo.kill()
        stdout, _ = demo.communicate()
    took = time.monotonic() - t0
    check(demo.returncode == 0, "the demo exits 0 (got %s)" % demo.returncode)
    check("emitted %d events" % (threads * n) in stdout, "every tracepoint call returned (%r)" % stdout[-200:])
    # 4 threads, each at most one 300 ms wait before the mark, plus the rest
    # of the run discarding; a per-event wait would take days.
    check(took < 30, "the demo finished %.1f s after the kill" % took)
    check.finish()


if __name__ == "__main__":
    main()
