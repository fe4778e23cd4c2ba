#!/usr/bin/python3
"""A host's daemon restarted over its sessions keeps one wall-clock offset
with its guests (docs/crash.md, "The daemon dies"; docs/clocks.md).

usage: check_clock_link_restart.py STRATA PINGPONG WORKDIR

A host daemon and a guest daemon joined by a clock link (as
check_clock_link.py); the host's session S is active when its daemon is
killed with SIGKILL.  The next host daemon takes S up, with the REALTIME
offset S's trace began with, and its wall clock is made to look stepped
5 ms since the first one's start (STRATA_TEST_REALTIME_SHIFT_NS: NTP, a
VM's resume).  A guest session made after the restart learns the host's
offset from the new daemon's link.  Oracle: the guest's clocks.json says
the host's offset is the one the host's trace has (clocks.json
`clock_offset_ns`); a new measurement would differ by the 5 ms.
Exit 77 (skipped) where the TSC cannot back a page.
"""
import json
import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import clock_link_env, e2e_setup, end_daemon, start_daemon, wait_for  # noqa: E402

SHIFT_NS = 5000000


def main():
    strata, _, work, consumerd, check = e2e_setup()
    base = clock_link_env()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env, out = {}, {}
    for who in ("host", "guest"):
        env[who] = dict(base, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=os.path.join(work, who + ".sock"),
                        STRATA_TEST_HOSTNAME="sim-" + who)
        out[who] = os.path.join(work, who + "-trace")
    hargs = ["--sync-period", "20", "--sync-guest", "guest=listen:tcp:127.0.0.1:%d" % port]
    host = start_daemon(consumerd, env["host"]["STRATA_CONSUMERD_SOCKET"], env["host"], hargs)
    guest = start_daemon(consumerd, env["guest"]["STRATA_CONSUMERD_SOCKET"], env["guest"],
                         ["--sync-period", "20", "--sync", "host=tcp:127.0.0.1:%d" % port])

    def strata_ok(who, *args):
        r = subprocess.run([strata] + list(args), env=env[who], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "%s: strata %s" % (who, " ".join(args[:2])) +
              ("" if r.returncode == 0 else ": " + (r.stdout + r.stderr).strip()[-300:]))
        return r.stdout

    def bound(who, name):
        r = subprocess.run([strata, "status", name], env=env[who], capture_output=True, text=True, timeout=30)
        return "bound width" in r.stdout

    for args in (["create", "S", "-o", out["host"]], ["enable-event", "S", "syncpp:*"], ["start", "S"]):
        strata_ok("host", *args)
    wait_for(lambda: bound("host", "S"), "the host's link to have a bound", 30)
    host.send_signal(signal.SIGKILL)
    host.wait()
    host = start_daemon(consumerd, env["host"]["STRATA_CONSUMERD_SOCKET"],
                        dict(env["host"], STRATA_TEST_REALTIME_SHIFT_NS=str(SHIFT_NS)), hargs)
    st = strata_ok("host", "status", "S")
    check("Session S [active]" in st, "the restarted host daemon takes S up (active)")
    wait_for(lambda: bound("host", "S"), "the restarted host's link to have a bound", 30)
    for args in (["create", "G", "-o", out["guest"]], ["enable-event", "G", "syncpp:*"], ["start", "G"]):
        strata_ok("guest", *args)
    wait_for(lambda: bound("guest", "G"), "the guest's link to have a bound", 30)
    strata_ok("guest", "stop", "G")
    strata_ok("host", "stop", "S")
    end_daemon(guest, check)
    end_daemon(host, check)

    clocks = {}
    for who in ("host", "guest"):
        p = os.path.join(out[who], "clocks.json")
        check(os.path.exists(p), who + ": clocks.json written")
        clocks[who] = json.load(open(p)) if os.path.exists(p) else {"links": []}
    glink = [lk for lk in clocks["guest"]["links"] if lk["role"] == "follower"]
    if check(len(glink) == 1 and "clock_offset_ns" in clocks["host"], "the guest's link and the host's offset"):
        told, kept = glink[0]["peer_clock_offset_ns"], clocks["host"]["clock_offset_ns"]
        check(told == kept, "the restarted host told the guest the offset its kept session has (%d), not a new "
              "measurement %d ns apart (%d)" % (told, SHIFT_NS, kept))
    check.finish()


if __name__ == "__main__":
    main()
