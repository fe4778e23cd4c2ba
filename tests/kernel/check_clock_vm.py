#!/usr/bin/python3
"""A host and a qemu guest on one timeline (docs/clocks.md): its own VM boot.

usage: check_clock_vm.py plain|pause|kernel|two|defaults|defaults_tcp STRATA CONSUMERD PINGPONG BUILD_ROOT WORKDIR [MESSAGES]

The host's daemon maps the guest's clock onto its own over a virtio-serial
port (`--sync-guest vm1=unix:WORK/sync.sock`, qemu's chardev); the guest's
daemon follows it (`--sync host=virtio:/dev/vportNpM`, guest-clocks.sh) and
writes its trace into a folder shared with the host.  A host program and a
guest program exchange MESSAGES messages each way over a second port, each
recording syncpp:send and syncpp:recv.  `pause`: the VM is stopped for
PAUSE_S seconds (qemu monitor stop/cont) in the middle of the exchange:
the guest's clock stands still meanwhile, so the map steps.  `kernel`: the
guest's module is loaded and its session also records the guest kernel's
write and read system calls: in the merged trace each guest write of a
message comes before the host's receive, and each host send before the
guest kernel's read that returns it.  `two`: two VMs at once, each
following the host over its own port and exchanging with its own host
program: the three traces merge in one order.  `defaults`: docs/clocks.md's
Usage as written: two vCPUs, no --sync-period on either daemon (the
link's own adaptive probe rate); requires the probes' map alone to invert
none of the messages (nor bring one within 1 us of an inversion), and
prints the
bound's width against the fastest round trip of the program's own
messages in the same run, and whether it is within TARGET_WIDTH_RATIO of
it (printed, not required).  `defaults_tcp`: the same with the link over
TCP (the Usage's `listen:tcp:` on the host, `tcp:` in the guest), through
qemu's user networking (run-vm.sh --net: the guest's 10.0.2.2:PORT is the
host's 127.0.0.1:PORT); the program's messages cross TCP too, by the same
path (the server listens on the host's 127.0.0.1, the guest's client
connects to 10.0.2.2), so that the bound is judged against the fastest
message of its own link kind.

Oracles (check_clock_link.py's): every stated bound holds against every
message; without a pause, no segment of either end's map begins with a
lost link; the maps' inversions within a segment are counted and printed
(under TCG, and more so on a loaded host, the program's host->guest
messages can cross faster than the probes' fastest legs, the guest's
spinning for its answers notwithstanding, and no line can order those:
docs/clocks.md, "What the measurements say"; the loopback checks, e2e.clock_*,
and the `defaults` modes require none); in the
gap around a step they are counted and printed too; babeltrace2's merge
inverts nothing the guest's map does not (with a pause: the guest's
daemon split each sub-trace into one CTF trace per clock piece at its
stop, so that babeltrace2 holds every syncpp event exactly once and
inverts nothing outside the gap that the map does not; those in it are
counted and printed); `strata view` of the host's and guests' traces
collected together likewise (Strata's reader applies each guest's
clocks.json segment by segment, across the pause too); `strata status`
shows the link, and the guest's its spin (some, at most half the probe period a probe);
with a pause the maps have a new segment.  Prints the
widths beside the minimum RTT and the closest messages to an inversion.
Then `strata align` with the program's messages (aligned()): refined with
the even keys only, how many odd ones still invert (printed); refined with
all, none inverted by the maps, babeltrace2 or `strata view` (outside a
step's gap), every bound holding.
Exit 77 when the VM cannot boot here.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "e2e"))
from strata_testlib import Checks, end_daemon, start_daemon, trace_messages, wait_for  # noqa: E402
from check_clock_link import bounds, in_gap, status_of, timeline  # noqa: E402
from check_clock_step import collect, view_order  # noqa: E402

PAUSE_S = 1.5
TARGET_WIDTH_RATIO = 1.5  # `defaults`: the bound's median width at the messages / their fastest round trip
KBASE2 = 1000000000  # k of the second VM's messages


def monitor(path, cmd):
    """One HMP command on qemu's monitor socket (run-vm.sh's)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(path)
        s.settimeout(5)
        s.recv(4096)  # the banner
        s.sendall(cmd.encode() + b"\n")
        time.sleep(0.2)  # the reply echoes; nothing waits on it


def free_tcp_ports(count):
    """`count` distinct ports of the host's loopback that nothing listens on
    now (the host's daemon and program listen there next)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def kernel_order(check, host_out, guest_out, n, width):
    """The guest kernel's system calls against the host's events, in
    babeltrace2's merge: the guest client (one thread) writes message k
    (even) after its syncpp:send k, so its first syscall_entry_write after
    that send must come before the host's syncpp:recv k; it reads message
    k (odd) before its syncpp:recv k, so its last syscall_exit_read before
    that recv must come after the host's syncpp:send k.  As for the
    program's messages (main), the map cannot order a read that came
    faster than the probes' fastest host->guest legs: such inversions are
    counted, and each must be smaller than `width` (the guest's widest
    stated bound at the messages), else the map is off beyond its bound."""
    client_tid = None
    last_exit_read = None
    pending_send = None  # k of the guest's last send, waiting for its write
    write_at, read_at, host = {}, {}, {}
    for m in trace_messages([host_out, guest_out]):
        if m.kind != "event":
            continue
        name, ns = m.name, m.ts
        on_guest = m.env_get("sync_state") is not None
        if name.startswith("syncpp:"):
            k = m.fields["k"]
            if not on_guest:
                host[k] = ns
            elif name == "syncpp:send":
                client_tid, pending_send = m.tid, k
            else:
                read_at[k] = last_exit_read
            continue
        if client_tid is None or m.tid != client_tid:
            continue
        if name.endswith("syscall_entry_write") and pending_send is not None:
            write_at[pending_send], pending_send = ns, None
        elif name.endswith("syscall_exit_read"):
            last_exit_read = ns
    bad_w = sum(1 for k, w in write_at.items() if k in host and not w < host[k])
    inv_r = [host[k] - r for k, r in read_at.items() if k in host and r is not None and not host[k] < r]
    bad_r = sum(1 for d in inv_r if d >= width)
    print("the guest kernel's reads before the host's sends, as mapped: %d, by at most %.1f us (the widest "
          "bound: %.1f us)" % (len(inv_r), max(inv_r, default=0) / 1e3, width / 1e3))
    check(len(write_at) == n and len(read_at) == n and all(r is not None for r in read_at.values()),
          "the guest kernel's write for each of the %d messages out and read for each in (%d, %d)" %
          (n, len(write_at), len(read_at)))
    check(bad_w == 0 and bad_r == 0, "the guest kernel's writes before the host's receives (%d inverted), no read "
          "before the host's send by the widest bound or more (%d)" % (bad_w, bad_r))


def bt2_pieces(check, dirs, n, in_gaps, map_inv):
    """With a pause: babeltrace2's merge of the host's trace and the
    guests' whole output directories (each guest sub-trace split by clock
    piece, its `~seg<k>` siblings beside it): every syncpp event exactly
    once, none of the messages outside the gaps inverted."""
    seen, at = {}, {}
    for m in trace_messages(dirs):
        if m.kind != "event" or not m.name.startswith("syncpp:"):
            continue
        key = (m.name, m.fields["k"], m.fields["from"])
        seen[key] = seen.get(key, 0) + 1
        at[key[:2]] = m.ts
    total = sum(seen.values())
    check(total == 4 * n and len(seen) == 4 * n, "babeltrace2 reads every syncpp event exactly once (%d events, "
          "%d distinct, of %d)" % (total, len(seen), 4 * n))
    inverted = [k for (name, k) in at if name == "syncpp:send" and ("syncpp:recv", k) in at and
                not at[("syncpp:send", k)] < at[("syncpp:recv", k)]]
    out = set(k for k in inverted if k not in in_gaps)
    check(out <= map_inv, "babeltrace2 (one CTF trace per clock piece): %d of %d messages outside the gaps "
          "inverted, all of them inverted by the guest's map too (%d not; in the gaps: %d of %d)" %
          (len(out), 2 * n - len(in_gaps), len(out - map_inv), len(inverted) - len(out), len(in_gaps)))


def strata_view_order(check, strata, work, host_out, guests, n, in_gaps, map_inv):
    """`strata view` of the host's trace and the guests' collected beside
    it: Strata's reader applies each guest's clocks.json segment by
    segment, so that across a pause too every receive prints after its
    send: none of the 2 x n messages inverted outside the gaps around a
    step (`in_gaps`: the messages whose guest time lies in one, where the
    map is either segment's; counted and printed, as bounds() does)."""
    both = collect(work, host_out, guests)
    rc, err, pos, events, ordered = view_order(strata, both)
    sends = [k for (name, k) in pos if name == "syncpp:send"]
    inverted = [k for k in sends if ("syncpp:recv", k) in pos and pos[("syncpp:recv", k)] < pos[("syncpp:send", k)]]
    out = set(k for k in inverted if k not in in_gaps)
    check(rc == 0 and "clocks.json" not in err, "strata view of the host's and guests' traces" +
          ("" if rc == 0 and "clocks.json" not in err else ": " + err.strip()[-500:]))
    check(events == 4 * n and ordered, "strata view prints the %d syncpp events in time order (%d)" % (4 * n, events))
    check(out <= map_inv, "strata view (clocks.json, segment by segment): %d of %d messages outside the gaps "
          "inverted, all of them inverted by the guests' maps too (%d not; in the gaps: %d of %d)" %
          (len(out), 2 * n - len(in_gaps), len(out - map_inv), len(inverted) - len(out), len(in_gaps)))


def main():
    mode, strata, consumerd, prog, build_root, work = sys.argv[1:7]
    n = int(sys.argv[7]) if len(sys.argv) > 7 else 2000
    check = Checks()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # The VMs: name -> (out dir, sync socket, app socket, k base).
    names = ["vm1", "vm2"] if mode == "two" else ["vm1"]
    vms = {v: (os.path.join(work, v), os.path.join(work, v + "-sync.sock"), os.path.join(work, v + "-app.sock"),
               i * KBASE2) for i, v in enumerate(names)}
    host_out = os.path.join(work, "host-trace")
    env = dict(os.environ, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=os.path.join(work, "h.sock"))
    for v in ("STRATA_EARLY", "LD_PRELOAD", "STRATA_AGGREGATE", "XDG_RUNTIME_DIR", "STRATA_TEST_CLOCK_SKEW"):
        env.pop(v, None)
    # 4 ms probes and (below) one vCPU, except in `defaults`, which takes
    # the Usage's commands as they are: two vCPUs, the link's own rate.
    defaults = mode in ("defaults", "defaults_tcp")
    tcp = mode == "defaults_tcp"
    args = [] if defaults else ["--sync-period", "4"]
    tcp_port, app_port = free_tcp_ports(2) if tcp else (0, 0)
    for v in names:
        args += ["--sync-guest", "%s=listen:tcp:127.0.0.1:%d" % (v, tcp_port) if tcp else
                 "%s=unix:%s" % (v, vms[v][1])]
    d = start_daemon(consumerd, env["STRATA_CONSUMERD_SOCKET"], env, args)
    for cmd in (["create", "S", "-o", host_out], ["enable-event", "S", "syncpp:*"], ["start", "S"]):
        r = subprocess.run([strata] + cmd, env=env, capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, "host: strata " + cmd[0] + ("" if r.returncode == 0 else ": " + r.stderr))
    servers, guests = {}, {}
    for v in names:
        out, sync_sock, app_sock, kbase = vms[v]
        app_ep = "listen:tcp:127.0.0.1:%d" % app_port if tcp else "unix:" + app_sock
        servers[v] = subprocess.Popen([prog, "serve", app_ep, str(n)] +
                                      (["pause"] if mode == "pause" else []),
                                      env=dict(env, SYNCPP_KBASE=str(kbase)), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, text=True)
        guests[v] = subprocess.Popen([os.path.join(HERE, "run-vm.sh"), "--out", out, "--build-root", build_root,
                                      "--timeout", "300", "--smp", "2" if defaults else "1"]
                                     + (["--net"] if tcp else ["--port", "org.strata.sync=" + sync_sock,
                                                               "--port", "org.strata.app=" + app_sock])
                                     + (["--build-module"] if mode == "kernel" else [])
                                     + ["--", os.path.join(HERE, "guest-clocks.sh"), strata, consumerd, prog, str(n),
                                        "kernel" if mode == "kernel" else "plain", str(kbase),
                                        "default" if defaults else "4"]
                                     + (["tcp:10.0.2.2:%d" % tcp_port, "tcp:10.0.2.2:%d" % app_port] if tcp
                                        else []),
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    vm = vms["vm1"][0]
    half = servers["vm1"].stdout.readline().strip()
    if mode == "pause" and half == "half":
        monitor(os.path.join(vm, "monitor.sock"), "stop")
        paused_at = time.monotonic()
        wait_for(lambda: time.monotonic() - paused_at >= PAUSE_S, "the pause's length", 10)
        monitor(os.path.join(vm, "monitor.sock"), "cont")
        servers["vm1"].stdin.write("go on\n")
        servers["vm1"].stdin.flush()
    for v in names:
        vm_log = guests[v].communicate(timeout=400)[0]
        if guests[v].returncode == 77:
            print(vm_log)
            print("SKIP: the VM cannot boot here")
            for srv in servers.values():
                srv.kill()
            sys.exit(77)
        server_out = servers[v].communicate(timeout=60)[0]
        check(guests[v].returncode == 0, "%s ran (run-vm.sh exit %d)" % (v, guests[v].returncode))
        if guests[v].returncode != 0:
            print(vm_log[-3000:])
        check(servers[v].returncode == 0 and "messages each way" in server_out,
              "the host's program for %s ran: %s" % (v, server_out.strip()))
    status = status_of(strata, env, "S")
    for v in names:
        line = [ln.strip() for ln in status.splitlines() if "clock link %s " % v in ln]
        check(bool(line) and "bound width" in line[0], "strata status shows the link and its bound: %s" %
              (line[0] if line else "(none)"))
        p = os.path.join(vms[v][0], "guest-status.txt")
        gstatus = open(p).read() if os.path.exists(p) else ""
        print("%s's status: " % v + (gstatus.strip().replace("\n", " | ") or "none"))
        # The guest's end spins for its probes' answers (a virtio: link's
        # default), each spin at most 1 ms (a quarter of the 4 ms period)
        # by the wall clock.  The guest counts its thread's CPU clock, and
        # under TCG a vCPU the host preempts mid-spin still counts that
        # time as run (2.3 ms a probe measured with two VMs on a loaded
        # host), so the oracle is 3 ms: a spin without its bound would
        # spend the whole period, 4 ms a probe or more.  With two vCPUs
        # (`defaults`) one host thread runs both in turn, and the spinning
        # vCPU's clock runs on while the other one executes: 3.5 ms.
        spin_max = 3.5 if defaults else 3.0
        if tcp:  # a tcp: link does not spin by default
            check("spinning" not in gstatus, "%s: the guest's tcp: link did not spin (its default)" % v)
            continue
        m = re.search(r"(\d+) of (\d+) probe\(s\) answered.*; ([0-9.]+) ms of CPU spent spinning", gstatus)
        check(bool(m) and 0 < float(m.group(3)) <= spin_max * int(m.group(2)) + 1,
              "%s: the guest's link spun for its answers, at most %.1f ms a probe (%s)" %
              (v, spin_max, "%s ms over %s probes" % (m.group(3), m.group(2)) if m else "not said"))
    r = subprocess.run([strata, "stop", "S"], env=env, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "host: strata stop")
    end_daemon(d, check)

    p = os.path.join(host_out, "clocks.json")
    check(os.path.exists(p), "host: clocks.json written")
    hclocks = json.load(open(p)) if os.path.exists(p) else {"links": []}
    links = []
    for v in names:
        guest_out = os.path.join(vms[v][0], "guest-trace")
        p = os.path.join(guest_out, "clocks.json")
        check(os.path.exists(p), v + ": clocks.json written")
        gclocks = json.load(open(p)) if os.path.exists(p) else {"links": []}
        glink = [lk for lk in gclocks["links"] if lk["role"] == "follower"]
        hlink = [lk for lk in hclocks["links"] if lk["role"] == "reference" and lk["name"] == v]
        check(len(glink) == 1 and glink[0]["correlated"], v + ": the guest's link is correlated")
        check(len(hlink) == 1 and hlink[0]["correlated"], v + ": the host's link is correlated")
        if not glink or not hlink:
            check.finish()
        if mode != "pause":
            # No pause, no lost link: answers that come late (a loaded
            # host, a halted vCPU) are still answers (docs/clocks.md,
            # "Early sight of a step"), and a silence starts no segment
            # ("Faults"); a link-lost segment here is a link that stopped
            # believing its peer while the peer answered.
            lost = [(name, s["note"]) for name, lk in (("guest", glink[0]), ("host", hlink[0]))
                    for s in lk["segments"] if s["start"] == "link-lost"]
            check(not lost, "%s: neither end's map lost the link (%s)" % (v, lost or "none"))
        links.append((v, vms[v][3], glink[0], hlink[0]))
    # The maps' lines cannot order a message that crossed faster than
    # the probes' fastest legs in its direction (docs/clocks.md,
    # "What the measurements say": under TCG the program's host->guest messages can):
    # the maps' inversions within a segment are counted, every stated
    # bound must hold, and every reader must invert nothing the guest's
    # map does not (babeltrace2 on the metadata's line, on the split
    # trace, and `strata view`).
    bt2_inv, map_inv, widest = set(), set(), 0
    sends, raw = timeline(check, [host_out] + [os.path.join(vms[v][0], "guest-trace") for v in names],
                          n * len(names), client_on_guest=True, expect_inversions=True, inverted_out=bt2_inv)
    for v, kbase, glink, hlink in links:
        mine = {k: t for k, t in sends.items() if kbase <= k < kbase + KBASE2}
        for name, lk in ((v + ": the guest's", glink), (v + ": the host's", hlink)):
            w = bounds(check, name, lk, mine, raw, map_inverted=map_inv if lk is glink else set(),
                       count_only=True)
            if lk is glink and w:
                widest = max(widest, w[-1])
            if lk is glink and defaults:
                width_against_messages(check, lk, w, mine, raw)
            if mode == "pause" and v == "vm1":
                check(len(lk["segments"]) >= 2, "the %s map has a new segment after the pause (%s)" %
                      (name, ", ".join(s["start"] for s in lk["segments"])))
    in_gaps = set()
    for v, kbase, glink, hlink in links:
        for k in sends:
            if kbase <= k < kbase + KBASE2:
                (g_send_side, s_val), (_, r_val) = raw[("syncpp:send", k)], raw[("syncpp:recv", k)]
                if in_gap(glink, s_val if g_send_side else r_val):
                    in_gaps.add(k)
    if mode == "pause":
        bt2_pieces(check, [host_out] + [os.path.join(vms[v][0], "guest-trace") for v in names], n * len(names),
                   in_gaps, map_inv)
    else:
        check(bt2_inv <= map_inv, "babeltrace2's merge (the metadata's line): %d of %d messages inverted, all of "
              "them inverted by the guest's map too (%d not)" % (len(bt2_inv), len(sends), len(bt2_inv - map_inv)))
    strata_view_order(check, strata, work, host_out, [(v, os.path.join(vms[v][0], "guest-trace")) for v in names],
                      n * len(names), in_gaps, map_inv)
    if mode == "kernel":
        kernel_order(check, host_out, os.path.join(vm, "guest-trace"), n, widest)
    if defaults:
        check(not map_inv, "defaults: the probes' map alone inverts none of the %d messages (%d)" %
              (len(sends), len(map_inv)))
    aligned(check, strata, work, host_out, names, vms, links, sends, raw, in_gaps, n, mode)
    check.finish()


def width_against_messages(check, lk, widths, sends, raw):
    """`defaults`: the guest's stated bound against the program's own
    messages' fastest round trip (the guest's send of 2i to its receive of
    2i+1 less the host's turnaround between them, each on its own clock),
    which is what the probes could at best have measured; printed, with
    the probes' and the messages' fastest legs in each direction as the
    probes' line maps them (a difference within one direction does not
    depend on where the line lies: how much slower the probes' legs were
    than the program's), and whether the median width at the messages is
    within TARGET_WIDTH_RATIO of the fastest round trip."""
    rtts = []
    for k in sends:
        if k % 2 == 0 and ("syncpp:recv", k + 1) in raw and ("syncpp:send", k + 1) in raw:
            (_, g1), (_, h1) = raw[("syncpp:send", k)], raw[("syncpp:recv", k)]
            (_, h2), (_, g2) = raw[("syncpp:send", k + 1)], raw[("syncpp:recv", k + 1)]
            rtts.append((g2 - g1) - (h2 - h1))
    fastest = min(rtts) if rtts else 0
    median = widths[len(widths) // 2] if widths else 0
    check(fastest > 0, "the program's fastest message round trip measured (%.1f us)" % (fastest / 1e3))
    print("bound width at the messages %.1f us median, %.1f us max; the program's fastest message round trip "
          "%.1f us; the probes' fastest %.1f us; width / fastest message RTT %.2f (median), %.2f (max): the "
          "target of %.1fx %s" %
          (median / 1e3, widths[-1] / 1e3 if widths else 0, fastest / 1e3, lk["min_rtt_ns"] / 1e3,
           median / max(1, fastest), (widths[-1] if widths else 0) / max(1, fastest), TARGET_WIDTH_RATIO,
           "met" if median <= TARGET_WIDTH_RATIO * fastest else "NOT met"))
    seg = [s for s in lk["segments"] if s["bounded"]][-1]
    if seg.get("hull_lower") and seg.get("hull_upper"):
        f = lambda x: seg["y0"] + seg["slope"] * (x - seg["x0"])  # noqa: E731
        legs = (min(f(x) - y for x, y in seg["hull_lower"]), min(y - f(x) for x, y in seg["hull_upper"]))
        msgs = ([], [])
        for k in sends:
            (_, s_val), (_, r_val) = raw[("syncpp:send", k)], raw[("syncpp:recv", k)]
            if k % 2:
                msgs[0].append(f(r_val) - s_val)
            else:
                msgs[1].append(r_val - f(s_val))
        print("fastest legs as the probes' last line maps them: host->guest probes %.1f us, messages %.1f us; "
              "guest->host probes %.1f us, messages %.1f us" %
              (legs[0] / 1e3, min(msgs[0]) / 1e3, legs[1] / 1e3, min(msgs[1]) / 1e3))


def aligned(check, strata, work, host_out, names, vms, links, sends, raw, in_gaps, n, mode):
    """`strata align` (docs/clocks.md, "Traced messages as constraints"):
    the guests' maps refined with the program's own messages.  First the
    held-out figures, not written, printed, not required: refined with the
    even keys only (the guest->host direction here), how many of the odd
    ones (host->guest) the refined map inverts; refined with every second
    message of each direction, how many of the others.  Then with every message, written:
    0 inversions required of the maps within their segments, of
    babeltrace2's merge and of `strata view` (outside the gaps around a
    step, whose messages no segment owns: counted and printed), and every
    refined bound holds."""
    guest_outs = [os.path.join(vms[v][0], "guest-trace") for v in names]
    match = "syncpp:send,syncpp:recv,k+from"
    for how, words in (("odd", "refined with the even keys only (guest->host)"),
                       ("alternate", "refined with every second message of each direction")):
        r = subprocess.run([strata, "align", host_out] + guest_outs + ["--match", match, "--hold-out", how,
                                                                       "--dry-run"],
                           capture_output=True, text=True, timeout=300)
        check(r.returncode == 0, "strata align --hold-out %s --dry-run" % how +
              ("" if r.returncode == 0 else ": " + r.stderr.strip()[-500:]))
        for ln in r.stdout.splitlines():
            m = re.search(r"inverted: (\d+) of (\d+) under the probes' map; under the refined map (\d+) of (\d+) "
                          r"used, (\d+) of (\d+) held out", ln)
            if m:
                print("held out (%s): %s of %s held-out messages inverted by the refined map (the probes' map: "
                      "%s of all %s)" % (words, m.group(5), m.group(6), m.group(1), m.group(2)))
            if "held-out messages closest" in ln:
                print(ln)
    r = subprocess.run([strata, "align", host_out] + guest_outs + ["--match", match], capture_output=True, text=True,
                       timeout=300)
    print(r.stdout.strip())
    check(r.returncode == 0, "strata align --match %s with every message" % match +
          ("" if r.returncode == 0 else ": " + r.stderr.strip()[-500:]))
    for v, kbase, _, _ in links:
        gclocks = json.load(open(os.path.join(vms[v][0], "guest-trace", "clocks.json")))
        glink = [lk for lk in gclocks["links"] if lk["role"] == "follower"][0]
        check(glink.get("refined", {}).get("segments_contradicted") == 0 and glink["refined"]["used"] > 0,
              "%s: clocks.json says refined by %s messages (%s)" % (v, glink.get("refined", {}).get("used"),
                                                                 glink.get("refined")))
        mine = {k: t for k, t in sends.items() if kbase <= k < kbase + KBASE2}
        bounds(check, v + ": the refined", glink, mine, raw)
    dirs = [host_out] + guest_outs
    if mode == "pause":
        bt2_pieces(check, dirs, n * len(names), in_gaps, set())
    else:
        timeline(check, dirs, n * len(names), client_on_guest=True)
    strata_view_order(check, strata, work, host_out, list(zip(names, guest_outs)), n * len(names), in_gaps, set())


if __name__ == "__main__":
    main()
