#!/usr/bin/python3
"""How long a stop takes with N live writers.

usage: bench/stop_live.py [--keep] [BUILD_DIR] [N...]      (default: ../build, N = 100)

For each N: a private strata-consumerd, a session (4 x 64 KiB sub-buffers per
lane) enabling bench:*, started with --wait, then `strata-bench-async spin N`:
N threads emitting bench:ints as fast as they can.  Once every thread has
emitted (and half a second more), `strata stop` is timed, wall clock, from
its start to its exit.  The daemon's log (-v, stamped as it arrives) splits
it: until the daemon begins the stop (the CLI's start and its STATUS), the
daemon's stop (its processes told, every buffer flushed), and after its
answer (the CLI's loss count from the trace).  Every thread competes for the
two CPUs with N writers: each part is mostly waiting for a CPU.  The load
average before the stop is printed: N = 1000 drives it to several hundred
for the minute the run takes, so run that by hand on a machine nobody else
is using.  Builds nothing: strata-consumerd, strata and strata-bench-async
from BUILD_DIR (docs/consumerd.md, "Stopping a session").  `bench/run.py
--only stop_live BUILD_DIR` runs it with N = 1,000 as a row of the
benchmark table (100 with --smoke).
"""
import os
import subprocess
import sys
import tempfile
import threading
import time


def one(build, n, keep):
    work = tempfile.mkdtemp(prefix="strata-stop-live-")
    sock = work + "/consumerd.sock"
    env = dict(os.environ, STRATA_CONSUMERD_SOCKET=sock)
    t0 = time.monotonic()
    rfd, wfd = os.pipe()
    d = subprocess.Popen([build + "/consumerd/strata-consumerd", "--socket", sock, "--ready-fd", str(wfd), "-v"],
                         env=env, pass_fds=(wfd,), stderr=subprocess.PIPE)
    os.close(wfd)
    if os.read(rfd, 16).strip() != b"ready":
        sys.exit("stop_live: the daemon did not get ready")
    os.close(rfd)
    stamps = {}

    def pump():  # the daemon's log, each line stamped as it arrives
        with open(work + "/daemon.log", "w") as log:
            for raw in d.stderr:
                line = raw.decode(errors="replace")
                t = time.monotonic() - t0
                log.write("%.3f %s" % (t, line))
                for key in ("stopping: its processes are told first", "stopped: "):
                    if key in line and key not in stamps:
                        stamps[key] = t

    pumper = threading.Thread(target=pump, daemon=True)
    pumper.start()

    def strata(*args):
        r = subprocess.run([build + "/cli/strata"] + list(args), env=env, capture_output=True, text=True,
                           timeout=600)
        if r.returncode:
            sys.exit("stop_live: strata %s: %s" % (" ".join(args), r.stderr.strip()))
        return r

    strata("create", "s", "-o", work + "/out", "--subbuf-size", "64K", "--subbuf-count", "4")
    strata("enable-event", "s", "bench:*")
    strata("start", "s", "--wait")
    app = subprocess.Popen([build + "/bench/strata-bench-async", "spin", str(n)], env=env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    while app.stdout.readline().strip() != "ready=1":
        pass
    time.sleep(0.5)
    load = os.getloadavg()[0]
    t1 = time.monotonic()
    strata("stop", "s")
    t2 = time.monotonic()
    app.stdin.close()
    app.wait(timeout=600)
    strata("destroy", "s")
    d.terminate()
    d.wait(timeout=60)
    pumper.join()  # the daemon is gone: its log ends
    begin = stamps.get("stopping: its processes are told first")
    end = stamps.get("stopped: ")
    ms = lambda a, b: "%.0f" % ((b - a) * 1e3) if a is not None and b is not None else "n/a"  # noqa: E731
    print("stop with %d live writers: %.0f ms (before the daemon's stop %s ms, its stop %s ms, "
          "after its answer %s ms; load average %.1f before)" %
          (n, (t2 - t1) * 1e3, ms(t1 - t0, begin), ms(begin, end), ms(end, t2 - t0), load))
    if keep:
        print("  kept: " + work)
    else:
        subprocess.run(["rm", "-rf", work])


def main():
    args = [a for a in sys.argv[1:] if a != "--keep"]
    keep = len(args) != len(sys.argv) - 1
    build = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build")
    if args and not args[0].isdigit():
        build = args.pop(0)
    if not os.access(build + "/bench/strata-bench-async", os.X_OK):
        sys.exit("stop_live: %s/bench/strata-bench-async not found: build it first" % build)
    for n in [int(a) for a in args] or [100]:
        one(os.path.abspath(build), n, keep)


if __name__ == "__main__":
    main()
