#!/usr/bin/python3
"""A clock follower streaming over a serial line, on the host's timeline
(docs/clocks.md "Serial followers", docs/serial.md).

usage: check_clock_link_serial.py STRATA PINGPONG WORKDIR [MESSAGES]

Two daemons on this machine stand for a host and a guest (the guest's
clock skewed by STRATA_TEST_CLOCK_SKEW, each its own host name), the guest
following the host over a TCP clock link, as in check_clock_link.py.  The
host's session is on its disk; the guest's streams over a serial line (a
FIFO standing in for the cable, `--serial FIFO,3000000`) to `strata
receive` run here.  A client traced by the host and a server traced by
the guest exchange MESSAGES messages each way (sync_pingpong).

Oracles, the line intact to the guest's stop and destroy: the receiver
ends by itself (the line's end), exit 0, and says it wrote clocks.json and
put the sub-trace onto the host's clock; the received metadata say
sync_state = "correlated" (mapped onto the host's), clocks.json sits at the
received trace's top (the follower's link, correlated, ctf rewritten), no
temporary file is left; babeltrace2's merge of the received trace and the
host's holds every syncpp event exactly once and inverts none of the
2 x MESSAGES messages; the bound read from the received clocks.json holds
for every message; `strata view` of both inverts none.

The line cut before the stop: a second pair of sessions (MESSAGES / 10
messages), the receiver stopped (SIGTERM) once it holds every event of the
guest, then the guest's stop and destroy (its daemon lives on, its line
broken): the receiver said the sub-trace stays on the sender's own clock;
the received trace reads (babeltrace2, every guest event), its metadata say
sync_state = "uncorrelated" (sync_serial: rewritten at a stop) with the
clock unchanged, no clocks.json; and its events are on the guest's own
clock: each message the guest sent prints its skew after the host's
receive.

One receiver across a stop and start of the guest's session (the rule of
docs/clocks.md "Serial followers"): two exchanges of MESSAGES / 10, the
guest's session stopped and started between them: the receiver ends at
the line's end with clocks.json written, both programs' sub-traces on the
host's clock, every event once, 0 inversions in babeltrace2's merge and
in `strata view`, the bound holding for every message.  Exit 77 (skipped) where the TSC cannot back a page.
"""
import collections
import json
import os
import shutil
import signal
import subprocess
import sys
import time


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import check_clock_link as ccl  # noqa: E402
import check_clock_link_relay as ccr  # noqa: E402
from strata_testlib import (end_daemon, e2e_setup, free_ports, start_daemon, strata_checked,  # noqa: E402
                            trace_messages, clock_link_env, wait_for)

BAUD = 3000000


def receiver(work, tag, out):
    """`strata receive FIFO -o out`, and the FIFO's writer end opened here
    (returned) once it reads: a session's create then finds its reader."""
    fifo = os.path.join(work, tag + ".line")
    os.mkfifo(fifo)
    err = open(os.path.join(work, tag + ".receive.err"), "w+")
    rx = subprocess.Popen([sys.argv[1], "receive", fifo, "-o", out], stderr=err)
    rx.err = err.name
    w = os.open(fifo, os.O_WRONLY)  # returns once the receiver has it open
    return rx, fifo, w


def syncpp(path):
    """(name, k) -> [(from, ns, clock value)] of the syncpp events under path."""
    ev = collections.defaultdict(list)
    for m in trace_messages(path):
        if m.kind == "event" and m.name.startswith("syncpp:"):
            ev[(m.name, m.fields["k"])].append((m.fields["from"], m.ts, m.clock_value))
    return ev


def metas(top):
    return [open(p).read() for p in ccr.metadata_files(top)]


def sessions(check, strata, work, envs, name, suffix, tag):
    """The host's session NAME on its disk (host-traceSUFFIX) and the
    guest's streaming over a fresh line to a receiver (receivedSUFFIX),
    both recording syncpp:* and started: (host_out, rx_out, rx)."""
    host_out, rx_out = os.path.join(work, "host-trace" + suffix), os.path.join(work, "received" + suffix)
    strata_checked(check, strata, envs["host"], "host", "create", name, "-o", host_out)
    rx, fifo, w = receiver(work, tag, rx_out)
    strata_checked(check, strata, envs["guest"], "guest", "create", name, "--serial", "%s,%d" % (fifo, BAUD))
    os.close(w)  # the daemon holds the line now: the receiver ends when it closes it
    for who in ("host", "guest"):
        strata_checked(check, strata, envs[who], who, "enable-event", name, "syncpp:*")
        strata_checked(check, strata, envs[who], who, "start", name)
    return host_out, rx_out, rx


def intact(check, strata, prog, work, n, envs, port):
    host_out, rx_out, rx = sessions(check, strata, work, envs, "S", "", "a")
    wait_for(lambda: "bound width" in ccl.status_of(strata, envs["host"], "S"), "the link to have a bound", 30)
    ccl.run_pair(check, prog, n, envs["guest"], envs["host"], os.path.join(work, "app.sock"), 0)
    # Probes after the last message, so that its time lies inside the map.
    t_end = time.monotonic() + 20 * ccl.PERIOD_MS / 1000.0
    wait_for(lambda: time.monotonic() > t_end, "probes after the exchange", 10)
    for who in ("guest", "host"):
        strata_checked(check, strata, envs[who], who, "stop", "S")
        strata_checked(check, strata, envs[who], who, "destroy", "S")
    try:
        rc = rx.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rx.kill()
        rc = None
    err = open(rx.err).read()
    check(rc == 0, "the receiver ends at the line's end, exit 0 (%s)" % rc)
    check("clocks.json written" in err and "on its clock link's reference's clock" in err and
          "1 sub-trace(s) put onto the sender's clock reference's clock at its stop (clocks.json written)" in err,
          "the receiver says it wrote clocks.json and put the sub-trace onto the host's clock: " +
          " | ".join(ln for ln in err.splitlines() if "clock" in ln))
    check(not os.path.exists(os.path.join(rx_out, ".strata-receive.tmp")), "no temporary file left")
    texts = metas(rx_out)
    check(len(texts) == 1 and all('sync_state = "correlated";' in t and "sync_serial" not in t and
                                  "mapped onto host's (sim-host)" in t for t in texts),
          "the received metadata (%d) is on the host's clock (sync_state = correlated)" % len(texts))
    p = os.path.join(rx_out, "clocks.json")
    check(os.path.exists(p), "clocks.json at the received trace's top")
    clocks = json.load(open(p)) if os.path.exists(p) else {"links": []}
    check(clocks.get("ctf", {}).get("rewritten") is True, "clocks.json says the metadata was rewritten")
    glink = [lk for lk in clocks["links"] if lk["role"] == "follower" and lk["correlated"]]
    check(len(glink) == 1, "the received clocks.json holds the guest's correlated follower link")

    # Every syncpp event exactly once in babeltrace2's merge; 0 inversions.
    ev = syncpp([host_out, rx_out])
    dup = sum(1 for v in ev.values() if len(v) != 1)
    check(len(ev) == 4 * n and dup == 0, "every syncpp event exactly once in babeltrace2's merge (%d distinct of %d,"
          " %d more than once)" % (len(ev), 4 * n, dup))
    sends, raw = ccl.timeline(check, [host_out, rx_out], n, client_on_guest=False)
    if glink:
        ccl.bounds(check, "received", glink[0], sends, raw)
    both = os.path.join(work, "collected")
    shutil.copytree(host_out, os.path.join(both, "host"))
    shutil.copytree(rx_out, os.path.join(both, "received"))
    inv, total = ccr.view_inversions(check, strata, both, 2 * n)
    check(inv == 0, "strata view: 0 causal inversions (%d of %d messages inverted)" % (inv, total))


def cut(check, strata, prog, work, n, envs):
    host_out, rx_out, rx = sessions(check, strata, work, envs, "S2", "2", "b")
    kb = ccl.KBASE2
    ccl.run_pair(check, prog, n, envs["guest"], envs["host"], os.path.join(work, "app2.sock"), kb)

    def received_all():
        r = subprocess.run(["babeltrace2", rx_out], capture_output=True, text=True, timeout=60)
        return r.returncode == 0 and r.stdout.count("syncpp:") == 2 * n
    # The drains close each open packet every second on a serial line.
    wait_for(received_all, "the receiver to hold every guest event (babeltrace2 of what it wrote)", 30)
    rx.send_signal(signal.SIGTERM)
    rc = rx.wait(timeout=30)
    err = open(rx.err).read()
    check(rc == 0, "the receiver stopped by SIGTERM exits 0 (%s)" % rc)
    check("1 sub-trace(s) stay on the sender's own clock" in err and "clocks.json written" not in err,
          "the receiver says the sub-trace stays on the sender's own clock: " +
          " | ".join(ln for ln in err.splitlines() if "clock" in ln))
    for who in ("guest", "host"):
        strata_checked(check, strata, envs[who], who, "stop", "S2")
        strata_checked(check, strata, envs[who], who, "destroy", "S2")
    texts = metas(rx_out)
    check(len(texts) == 1 and all('sync_state = "uncorrelated";' in t and "sync_serial = " in t and
                                  "freq = 1000000000;" in t and "mapped onto" not in t for t in texts),
          "the received metadata (%d) says sync_state = uncorrelated, its clock the guest's own" % len(texts))
    check(not os.path.exists(os.path.join(rx_out, "clocks.json")), "no clocks.json in the cut trace")
    r = subprocess.run(["babeltrace2", rx_out], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and not r.stderr.strip() and r.stdout.count("syncpp:") == 2 * n,
          "babeltrace2 reads the cut trace: %d guest events (expected %d), silent" %
          (r.stdout.count("syncpp:"), 2 * n))
    # On the guest's own clock: a message the guest sent prints its skew
    # after the host received it (merged naively).
    ev = syncpp([host_out, rx_out])
    ds = [ev[("syncpp:send", k)][0][1] - ev[("syncpp:recv", k)][0][1] for (name, k) in list(ev)
          if name == "syncpp:send" and ev[(name, k)][0][0] == 1 and ("syncpp:recv", k) in ev]
    check(len(ds) == n and all(abs(d - ccl.SKEW_NS) < 2 * 10**8 for d in ds),
          "the cut trace is on the guest's own clock: each of its %d sends %.3f to %.3f s after the host's receive"
          " (its skew: %.3f s)" % (len(ds), min(ds or [0]) / 1e9, max(ds or [0]) / 1e9, ccl.SKEW_NS / 1e9))


def restarted(check, strata, prog, work, n, envs):
    """One receiver across the guest session's stop and start: two
    exchanges of n messages each way, the guest stopped and started again
    between them (a new sub-trace for the second program), the host's
    session running throughout."""
    host_out, rx_out, rx = sessions(check, strata, work, envs, "S3", "3", "c")
    for run, kb in enumerate((2 * ccl.KBASE2, 3 * ccl.KBASE2)):
        if run:
            strata_checked(check, strata, envs["guest"], "guest", "start", "S3")
        ccl.run_pair(check, prog, n, envs["guest"], envs["host"], os.path.join(work, "app3.sock"), kb)
        t_end = time.monotonic() + 20 * ccl.PERIOD_MS / 1000.0
        wait_for(lambda: time.monotonic() > t_end, "probes after the exchange", 10)
        strata_checked(check, strata, envs["guest"], "guest", "stop", "S3")
    strata_checked(check, strata, envs["guest"], "guest", "destroy", "S3")
    for what in ("stop", "destroy"):
        strata_checked(check, strata, envs["host"], "host", what, "S3")
    try:
        rc = rx.wait(timeout=60)
    except subprocess.TimeoutExpired:
        rx.kill()
        rc = None
    err = open(rx.err).read()
    check(rc == 0 and "clocks.json written" in err, "restarted: the receiver ends at the line's end, exit 0, "
          "clocks.json written (%s: %s)" % (rc, " | ".join(ln for ln in err.splitlines() if "clock" in ln)))
    texts = metas(rx_out)
    check(len(texts) == 2 and all('sync_state = "correlated";' in t and "mapped onto host's (sim-host)" in t
                                  for t in texts),
          "restarted: both programs' received metadata (%d) are on the host's clock" % len(texts))
    ev = syncpp([host_out, rx_out])
    dup = sum(1 for v in ev.values() if len(v) != 1)
    check(len(ev) == 8 * n and dup == 0, "restarted: every syncpp event of both runs exactly once (%d distinct of %d,"
          " %d more than once)" % (len(ev), 8 * n, dup))
    sends, raw = ccl.timeline(check, [host_out, rx_out], 2 * n, client_on_guest=False)
    p = os.path.join(rx_out, "clocks.json")
    clocks = json.load(open(p)) if os.path.exists(p) else {"links": []}
    glink = [lk for lk in clocks["links"] if lk["role"] == "follower" and lk["correlated"]]
    check(len(glink) == 1, "restarted: the received clocks.json holds the guest's correlated follower link")
    if glink:
        ccl.bounds(check, "restarted", glink[0], sends, raw)
    both = os.path.join(work, "collected3")
    shutil.copytree(host_out, os.path.join(both, "host"))
    shutil.copytree(rx_out, os.path.join(both, "received"))
    inv, total = ccr.view_inversions(check, strata, both, 4 * n)
    check(inv == 0, "restarted: strata view: 0 causal inversions (%d of %d messages inverted)" % (inv, total))


def main():
    strata, prog, work, consumerd, check = e2e_setup()
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
    base = clock_link_env()
    port = free_ports(1)[0]
    envs, daemons = {}, {}
    for who in ("host", "guest"):
        envs[who] = dict(base, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=os.path.join(work, who + ".sock"),
                         STRATA_TEST_HOSTNAME="sim-" + who)
    envs["guest"]["STRATA_TEST_CLOCK_SKEW"] = "%d,%d" % (ccl.SKEW_NS, ccl.SKEW_PPM)
    link = ["--sync-period", str(ccl.PERIOD_MS)]
    daemons["host"] = start_daemon(consumerd, envs["host"]["STRATA_CONSUMERD_SOCKET"], envs["host"],
                                   link + ["--sync-guest", "guest=listen:tcp:127.0.0.1:%d" % port])
    daemons["guest"] = start_daemon(consumerd, envs["guest"]["STRATA_CONSUMERD_SOCKET"], envs["guest"],
                                    link + ["--sync", "host=tcp:127.0.0.1:%d" % port])
    intact(check, strata, prog, work, n, envs, port)
    cut(check, strata, prog, work, max(10, n // 10), envs)
    restarted(check, strata, prog, work, max(10, n // 10), envs)
    for who in ("host", "guest"):
        end_daemon(daemons[who], check)
    check.finish()


if __name__ == "__main__":
    main()
