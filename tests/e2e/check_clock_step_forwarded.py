#!/usr/bin/python3
"""A step in the clock of a follower whose trace another program writes: a
serial follower (`strata receive`) or a relayed one (lttng-relayd), split
by clock piece for babeltrace2 (docs/clocks.md, "Serial followers",
"Relayed followers").

usage: check_clock_step_forwarded.py STRATA PINGPONG WORKDIR serial|relay [MESSAGES [RELAYD]]

As check_clock_step.py: two daemons stand for a host and a guest (skewed,
following the host over a TCP clock link); a host client and a guest
server exchange MESSAGES messages each way, and half-way the guest's clock
jumps STEP_NS ahead (STRATA_TEST_CLOCK_STEP), so its map has two segments.
The host's session is on its disk; the guest's streams over a serial line
(a FIFO, to `strata receive` run here) or to an lttng-relayd started here.

Oracles.  serial: the receiver ends at the line's end, exit 0, and says it
split the sub-trace by clock piece.  relay: `strata split` refuses a
directory with no clocks.json and a trace a process holds open for
writing, and splits nothing with its clocks.json cut (each exit 1, said
why); `strata split DIR -o OUT` splits a copy
and leaves DIR byte for byte as it was; `strata split DIR` splits in
place, and a second run changes no byte; babeltrace2 reads the guest's
syncpp events exactly once before and after the split (2 x MESSAGES).
Both: the guest's trace has a `~seg<k>` piece directory; babeltrace2's
merge of the host's trace and the guest's (python3-bt2 and the CLI) holds
every syncpp event exactly once (4 x MESSAGES), in time order, and inverts
none of the messages outside the step's gap; `strata view` of both
collected together inverts none.  Exit 77 (skipped) where the TSC cannot
back a page, or (relay) lttng-relayd is missing.
"""
import atexit
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import check_clock_link as ccl  # noqa: E402
import check_clock_link_relay as ccr  # noqa: E402
from check_clock_step import STEP_NS, bt2_check, cli_check, tree_bytes  # noqa: E402
from strata_testlib import (end_daemon, e2e_setup, free_ports, kill_at_exit, listening, start_daemon,  # noqa: E402
                            strata_checked, trace_messages, clock_link_env, wait_for)

BAUD = 3000000


def guest_events(path):
    """babeltrace2's syncpp events under path: (count, distinct)."""
    keys = [(m.name, m.fields["k"], m.fields["from"]) for m in trace_messages(path)
            if m.kind == "event" and m.name.startswith("syncpp:")]
    return len(keys), len(set(keys))


def relay_split(check, strata, work, top, n):
    """`strata split` on the relayd's trace of the guest: refusals, a copy,
    in place, idempotent; every guest event once before and after."""
    before = guest_events(top)
    check(before == (2 * n, 2 * n), "babeltrace2 reads the guest's relayed trace before the split: %d syncpp "
          "events (%d distinct, of %d)" % (before[0], before[1], 2 * n))
    empty = os.path.join(work, "no-clocks")
    os.makedirs(empty, exist_ok=True)
    r = subprocess.run([strata, "split", empty], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "no clocks.json" in r.stderr, "strata split refuses a directory without "
          "clocks.json (exit %d: %s)" % (r.returncode, r.stderr.strip()[-200:]))
    streams = [os.path.join(dp, f) for dp, _, fs in os.walk(top) for f in fs
               if f.startswith("channel") and "index" not in dp]
    check(bool(streams), "the relayed trace has stream files (%d)" % len(streams))
    if not streams:
        return
    unsplit = tree_bytes(top)
    unsplit_copy = os.path.join(work, "unsplit")
    shutil.copytree(top, unsplit_copy)
    with open(streams[0], "ab"):
        r = subprocess.run([strata, "split", top], capture_output=True, text=True, timeout=60)
    check(r.returncode == 1 and "being written" in r.stderr and tree_bytes(top) == unsplit,
          "strata split refuses a trace a process holds open for writing, changing nothing (exit %d: %s)" %
          (r.returncode, r.stderr.strip()[-200:]))
    copy = os.path.join(work, "split-copy")
    r = subprocess.run([strata, "split", top, "-o", copy], capture_output=True, text=True, timeout=120)
    pieces = [d for d in glob.glob(os.path.join(copy, "**", "*~seg*"), recursive=True)]
    check(r.returncode == 0 and pieces and tree_bytes(top) == unsplit,
          "strata split -o OUT splits a copy (%d piece dir(s)), the relayed trace untouched: %s" %
          (len(pieces), (r.stdout + r.stderr).strip()[-300:]))
    r = subprocess.run([strata, "split", top], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and "2 on a map of several clock pieces, split" in r.stdout, "strata split DIR in place: %s" %
          (r.stdout + r.stderr).strip()[-300:])
    once = tree_bytes(top)
    check(once == tree_bytes(copy), "the split in place and the split copy are the same bytes")
    r = subprocess.run([strata, "split", top], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and tree_bytes(top) == once, "a second strata split changes no byte (%s)" %
          (r.stdout + r.stderr).strip()[-200:])
    cut = os.path.join(work, "cut-clocks")
    shutil.copytree(unsplit_copy, cut)
    text = open(os.path.join(cut, "clocks.json")).read()
    with open(os.path.join(cut, "clocks.json"), "w") as f:
        f.write(text[:len(text) // 2])
    r = subprocess.run([strata, "split", cut], capture_output=True, text=True, timeout=120)
    check(r.returncode == 1 and "not JSON" in r.stderr and "2 left as they were" in r.stdout and
          not glob.glob(os.path.join(cut, "**", "*~seg*"), recursive=True),
          "strata split with clocks.json cut: exit 1, says why, splits nothing (%s)" %
          (r.stdout + r.stderr).strip()[-300:])
    after = guest_events(top)
    check(after == before, "babeltrace2 reads the guest's split trace: %d syncpp events (%d distinct), as before "
          "the split" % after)


def main():
    strata, prog, work, consumerd, check = e2e_setup()
    mode = sys.argv[4] if len(sys.argv) > 4 else "serial"
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 1000
    if mode not in ("serial", "relay"):
        print("usage: check_clock_step_forwarded.py STRATA PINGPONG WORKDIR serial|relay [MESSAGES [RELAYD]]")
        sys.exit(2)
    base = clock_link_env()
    relayd_exe = sys.argv[6] if len(sys.argv) > 6 else shutil.which("lttng-relayd")
    if mode == "relay" and (not relayd_exe or not os.path.exists(relayd_exe)):
        print("SKIP: no lttng-relayd")
        sys.exit(77)
    port, ctrl, data, live = free_ports(4)
    step_file = os.path.join(work, "step-now")
    envs = {}
    for who in ("host", "guest"):
        envs[who] = dict(base, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=os.path.join(work, who + ".sock"),
                         STRATA_TEST_HOSTNAME="sim-" + who)
    envs["guest"]["STRATA_TEST_CLOCK_SKEW"] = "%d,%d" % (ccl.SKEW_NS, ccl.SKEW_PPM)
    envs["guest"]["STRATA_TEST_CLOCK_STEP"] = "%d:%s" % (STEP_NS, step_file)
    link = ["--sync-period", str(ccl.PERIOD_MS)]
    daemons = {
        "host": start_daemon(consumerd, envs["host"]["STRATA_CONSUMERD_SOCKET"], envs["host"],
                             link + ["--sync-guest", "guest=listen:tcp:127.0.0.1:%d" % port]),
        "guest": start_daemon(consumerd, envs["guest"]["STRATA_CONSUMERD_SOCKET"], envs["guest"],
                              link + ["--sync", "host=tcp:127.0.0.1:%d" % port]),
    }
    host_out = os.path.join(work, "host-trace")
    strata_checked(check, strata, envs["host"], "host", "create", "S", "-o", host_out)
    if mode == "serial":
        guest_top = os.path.join(work, "received")
        fifo = os.path.join(work, "line")
        os.mkfifo(fifo)
        rx_err = os.path.join(work, "receive.err")
        rx = subprocess.Popen([strata, "receive", fifo, "-o", guest_top], stderr=open(rx_err, "w"))
        atexit.register(lambda: rx.poll() is None and rx.kill())
        w = os.open(fifo, os.O_WRONLY)  # returns once the receiver has it open
        strata_checked(check, strata, envs["guest"], "guest", "create", "S", "--serial", "%s,%d" % (fifo, BAUD))
        os.close(w)  # the daemon holds the line now: the receiver ends when it closes it
    else:
        relay_out = os.path.join(work, "relayd-out")
        relayd = subprocess.Popen([relayd_exe, "-C", "tcp://127.0.0.1:%d" % ctrl, "-D", "tcp://127.0.0.1:%d" % data,
                                   "-L", "tcp://127.0.0.1:%d" % live, "-o", relay_out],
                                  env=dict(os.environ, LTTNG_HOME=work), stdout=subprocess.DEVNULL,
                                  stderr=open(os.path.join(work, "relayd.err"), "w"))
        atexit.register(lambda: relayd.poll() is None and relayd.kill())
        wait_for(lambda: listening(ctrl) and listening(data), "lttng-relayd listening")
        strata_checked(check, strata, envs["guest"], "guest", "create", "S", "--relay", "127.0.0.1:%d:%d" % (ctrl, data))
    for who in ("host", "guest"):
        strata_checked(check, strata, envs[who], who, "enable-event", "S", "syncpp:*")
        strata_checked(check, strata, envs[who], who, "start", "S")

    def used():
        m = re.search(r"(\d+) of both ends' used", ccl.status_of(strata, envs["guest"], "S"))
        return int(m.group(1)) if m else 0
    # Half a second of probes before the exchange (check_clock_step.py).
    wait_for(lambda: used() >= 50, "half a second of probes on the link", 30)
    app = os.path.join(work, "app.sock")
    server = kill_at_exit(subprocess.Popen([prog, "serve", "listen:" + app, str(n), "pause"], env=envs["guest"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    check(server.stdout.readline().strip() == "listening", "the server listens")
    client = kill_at_exit(subprocess.Popen([prog, "client", "unix:" + app, str(n)], env=envs["host"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True))
    check(server.stdout.readline().strip() == "half", "the exchange is half-way")
    open(step_file, "w").close()
    wait_for(lambda: "2 segments" in ccl.status_of(strata, envs["guest"], "S"), "the guest's link to see the step", 20)
    server.stdin.write("go on\n")
    server.stdin.flush()
    client_out = client.communicate(timeout=120)[0]
    server_out = server.communicate(timeout=120)[0]
    check(client.returncode == 0 and server.returncode == 0, "both programs ran (%s; %s)" %
          (client_out.strip(), server_out.strip()))
    # Probes after the last message, so that its time lies inside the map.
    t_end = time.monotonic() + 20 * ccl.PERIOD_MS / 1000.0
    wait_for(lambda: time.monotonic() > t_end, "probes after the exchange", 10)
    for who in ("guest", "host"):
        strata_checked(check, strata, envs[who], who, "stop", "S")
        strata_checked(check, strata, envs[who], who, "destroy", "S")
    if mode == "serial":
        try:
            rc = rx.wait(timeout=60)
        except subprocess.TimeoutExpired:
            rx.kill()
            rc = None
        err = open(rx_err).read()
        check(rc == 0 and "1 sub-trace(s) split by clock piece" in err,
              "the receiver ends at the line's end, exit 0, and splits the sub-trace by clock piece (%s): %s" %
              (rc, " | ".join(ln for ln in err.splitlines() if "clock" in ln)))
    for who in ("host", "guest"):
        end_daemon(daemons[who], check)
    if mode == "relay":
        relayd.terminate()
        check(relayd.wait(timeout=30) == 0, "lttng-relayd exits 0")
        tops = glob.glob(os.path.join(relay_out, "sim-guest", "S-*"))
        check(len(tops) == 1, "one relay trace of the guest (%s)" % tops)
        if len(tops) != 1:
            check.finish()
        guest_top = tops[0]
        # Before the split: babeltrace2 places the guest on one line (its
        # metadata's, the longest segment's), the rest off by the step.
        inv = set()
        ccl.timeline(check, [host_out, guest_top], n, client_on_guest=False, expect_inversions=True,
                     inverted_out=inv)
        print("babeltrace2 before the split: %d of %d messages inverted" % (len(inv), 2 * n))
        relay_split(check, strata, work, guest_top, n)

    p = os.path.join(guest_top, "clocks.json")
    gclocks = json.load(open(p)) if os.path.exists(p) else {"links": []}
    glink = [lk for lk in gclocks["links"] if lk["role"] == "follower"]
    check(len(glink) == 1 and glink[0]["correlated"] and len(glink[0]["segments"]) >= 2,
          "the guest's clocks.json has a new segment at the step (%s)" %
          (", ".join(s["start"] for s in glink[0]["segments"]) if glink else "no follower link"))
    if not glink:
        check.finish()
    pieces = glob.glob(os.path.join(guest_top, "**", "*~seg*"), recursive=True)
    check(bool(pieces), "the guest's trace has a piece directory (%s)" %
          ", ".join(os.path.relpath(d, guest_top) for d in pieces))
    _, raw = ccl.timeline(check, [host_out, guest_top], n, client_on_guest=False, expect_inversions=True)
    bt2_check(check, [host_out, guest_top], n, glink[0], raw)
    cli_check(check, [host_out, guest_top], n)
    both = os.path.join(work, "collected")
    shutil.copytree(host_out, os.path.join(both, "host"))
    shutil.copytree(guest_top, os.path.join(both, "guest"))
    inv, total = ccr.view_inversions(check, strata, both, 2 * n)
    check(inv == 0, "strata view: 0 causal inversions (%d of %d messages inverted)" % (inv, total))
    check.finish()


if __name__ == "__main__":
    main()
