#!/usr/bin/python3
"""An I/O error under a running session (issue 32: "Same for EIO").

usage: check_eio.py STRATA PROG WORKDIR
       (STRATA_CONSUMERD: the daemon; STRATA_TEST_EIO_LIB: eio_inject.so)

The daemon runs with eio_inject.so preloaded: its writes under OUT fail with
EIO while the file FLAG exists (this machine has no device-mapper `error`
target; see eio_inject.c).  PROG is strata-test-record-loop (bursts of 10
events a millisecond, i = 0, 1, ...).
  1. EIO while a process records, then writes work again: `strata status`
     names the error and the stream file; once FLAG is gone recording
     resumes by itself: the events after the gap are in the trace up to the
     last one, and babeltrace2 reads the trace with no error and counts
     the lost packets; `strata stop` names the error.
  2. EIO when a sub-trace is created: no empty metadata is left and status
     names the metadata; once FLAG is gone a later process of the session
     records all its events, and babeltrace2 reads the session.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import bt_clean, e2e_setup, payload_ints, end_daemon, start_daemon, wait_for  # noqa: E402

EIO = "Input/output error"


def main():
    os.environ["STRATA_TEST_CONSUMERD"] = os.environ.get("STRATA_CONSUMERD", "")
    strata, prog, work, consumerd, check = e2e_setup()
    out, flag = os.path.join(work, "out"), os.path.join(work, "eio")
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "sock")
    denv = dict(env, LD_PRELOAD=os.environ["STRATA_TEST_EIO_LIB"], STRATA_TEST_EIO_DIR=out,
                STRATA_TEST_EIO_FLAG=flag)
    d = start_daemon(consumerd, env["STRATA_CONSUMERD_SOCKET"], denv)

    def cli(*args):
        return subprocess.run([strata] + list(args), env=env, capture_output=True, text=True, timeout=60)

    def session(name, path):
        for args in (["create", name, "-o", path], ["enable-event", name, "rloop:*"], ["start", name]):
            r = cli(*args)
            check(r.returncode == 0, "strata %s (%s)" % (" ".join(args), r.stderr.strip()))

    # 1. EIO while recording, then writes work again.
    t1 = os.path.join(out, "t1")
    session("s", t1)
    p = subprocess.Popen([prog, "6000"], env=env)
    pid_dir = os.path.join(t1, "ust", "pid")
    wait_for(lambda: os.path.isdir(pid_dir) and any(
        os.path.getsize(os.path.join(pid_dir, s, "channel0_0")) > 0 for s in os.listdir(pid_dir)
        if os.path.exists(os.path.join(pid_dir, s, "channel0_0"))), "the first packets on disk")
    open(flag, "w").close()
    wait_for(lambda: EIO in cli("status", "s").stdout, "status to name the I/O error")
    st = cli("status", "s").stdout
    check(EIO in st and os.path.join(t1, "ust") in st, "1: strata status names the error and the file:\n" + st)
    os.unlink(flag)
    check(p.wait(timeout=120) == 0, "1: the process ran to its end")
    stop = cli("stop", "s")
    check(EIO in stop.stdout + stop.stderr, "1: strata stop names it: " + (stop.stdout + stop.stderr).strip())
    ok, rc, why = bt_clean(t1)
    check(ok, "1: babeltrace2 reads the trace with no error (rc %d) %s" % (rc, why))
    recs, lost_packets, _ = payload_ints(t1, "i")
    seen = [f["i"] for _, f in recs]
    last = seen[-1] if seen else -1
    check(seen == sorted(set(seen)) and last % 10 == 9 and 0 < len(seen) <= last,
          "1: events in order, each once, a gap, and the last burst there (%d events, last %d)" % (len(seen), last))
    check(lost_packets > 0, "1: the lost packets are counted in the trace (%d)" % lost_packets)
    cli("destroy", "s")

    # 2. EIO when a sub-trace is created.
    t2 = os.path.join(out, "t2")
    session("s2", t2)
    open(flag, "w").close()
    r = subprocess.run([prog, "10"], env=env, timeout=60)
    check(r.returncode == 0, "2: the process ran")
    wait_for(lambda: EIO in cli("status", "s2").stdout, "status to name the I/O error at creation")
    st = cli("status", "s2").stdout
    check("metadata" in st and EIO in st, "2: status names the metadata that could not be written:\n" + st)
    empty = [os.path.join(dp, f) for dp, _, fs in os.walk(t2) for f in fs
             if f == "metadata" and os.path.getsize(os.path.join(dp, f)) == 0]
    check(not empty, "2: no empty metadata left (%s)" % empty)
    os.unlink(flag)
    r = subprocess.run([prog, "50"], env=env, timeout=60)
    cli("stop", "s2")
    ok, rc, why = bt_clean(t2)
    check(ok, "2: babeltrace2 reads the session with no error (rc %d) %s" % (rc, why))
    n = len(payload_ints(t2)[0])
    check(n == 500, "2: the later process's 500 events are there (%d)" % n)
    end_daemon(d, check)
    check.finish()


main()
