#!/usr/bin/python3
"""Early tracing: a process that starts with no daemon and STRATA_EARLY set
records into a buffer of its own; the first session a daemon starts later
adopts it and drains it from its first event.

Oracle: the request ids recorded are exactly 0..k with no gap and nothing
discarded, id 0 (emitted before any daemon existed) included, k + 1 at least
the requests served before `strata stop` was issued and at most those served
after it returned; babeltrace2 reads the trace with nothing on stderr.
"""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, control_setup, counter, payload_ints, start_daemon, wait_for  # noqa: E402


def main():
    a, work, env, strata = control_setup("strata-early-", "svc")
    cnt = os.path.join(work, "counter")
    svc_env = dict(env, STRATA_EARLY="svc:*")
    svc = subprocess.Popen([a.svc, "--interval-us", "500", "--counter", cnt], env=svc_env,
                           stdout=subprocess.DEVNULL)
    check = Checks()
    try:
        # 1. no daemon: the service runs and records into its early buffer
        wait_for(lambda: os.path.exists(cnt) and counter(cnt) >= 100, "100 requests with no daemon")
        links = [os.readlink("/proc/%d/fd/%s" % (svc.pid, fd)) for fd in os.listdir("/proc/%d/fd" % svc.pid)]
        check(any(l.startswith("/memfd:strata-slot-15") for l in links),
              "with no daemon, the service holds an early buffer (%d descriptors)" % len(links))
        # 2. a daemon appears; a session starts and adopts the buffer
        d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env, ["--adopt-early"])
        out = os.path.join(work, "trace")
        strata("create", "s", "-o", out)
        strata("start", "s")
        c0 = counter(cnt)
        wait_for(lambda: counter(cnt) >= c0 + 100, "100 more requests once adopted")
        before = counter(cnt)
        strata("stop", "s")
        after = counter(cnt)
        strata("destroy", "s")
        d.terminate()
        d.wait(timeout=30)
    finally:
        svc.send_signal(signal.SIGTERM)
        svc.wait(timeout=30)

    recs, _, discarded = payload_ints(out, "id", names={"svc:request"})
    ids = [f["id"] for _, f in recs]


    check(bool(ids) and ids[0] == 0, "the first request (id 0, before any daemon) is recorded")
    check(ids == list(range(len(ids))), "ids are 0..%d with no gap (%d events)" % (len(ids) - 1, len(ids)))
    check(discarded == 0, "nothing discarded (%d)" % discarded)
    check(before <= len(ids) <= after, "recorded %d within [%d served before stop, %d after]" %
          (len(ids), before, after))
    p = subprocess.run(["babeltrace2", out], capture_output=True, text=True)
    check(p.returncode == 0 and p.stderr == "", "babeltrace2 reads it with nothing on stderr")
    check.finish()


if __name__ == "__main__":
    main()
