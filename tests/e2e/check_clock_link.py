#!/usr/bin/python3
"""Two machines' clocks on one timeline (docs/clocks.md), on one machine.

usage: check_clock_link.py STRATA PINGPONG WORKDIR [MESSAGES [two|defaults]]

Two daemons stand for a host and a guest: the guest's clock is made to run
SKEW_NS ahead and SKEW_PPM faster (STRATA_TEST_CLOCK_SKEW, its clock page
and so its processes' stamps).  The guest's daemon follows the host's over
a TCP clock link (`--sync host=tcp:...`, the host `--sync-guest
guest=listen:tcp:...`).  A client traced by the host and a server traced by
the guest exchange MESSAGES messages each way over a unix socket, each
recording syncpp:send before writing and syncpp:recv after reading.

The host's wall clock is made to step 5 ms between its daemon's start
and its session's (STRATA_TEST_REALTIME_STEP_NS).
Oracles: babeltrace2 merging the two sessions' traces puts every receive
after its send (0 inversions); the host's trace keeps the REALTIME offset
its link told the guest; the stored map's bound (clocks.json, read
here as a reader would, docs/clocks.md "Stored format") holds against every
one of those messages, which the link never saw; the guest's metadata says
it is correlated and names the host; `strata status` shows the link with
its bound.  Prints the bound's width beside the link's minimum RTT.
Each daemon has its own host name (STRATA_TEST_HOSTNAME): with the guest's
trace copied beside the host's, `strata export` (JSON and Perfetto) and
`strata view` name each process's machine; in Perfetto (decoded by protoc)
the host's packets carry no machine_id and each guest's its own, on its
processes' tracks and every event on them.
`two`: a second guest (another skew) follows the host too, and the first
guest's client exchanges MESSAGES more with the second guest's server:
the merge of the three traces must invert none of those either.
`defaults`: no --sync-period on either daemon (the adaptive rate,
docs/clocks.md "Probe rate"): the same oracles, and `strata status` says
each end probes densely while the map is learnt ("every 4 ms (dense") and,
once it has settled within its target, every 100 ms, within 30 s.
Exit 77 (skipped) where the TSC cannot back a page.
"""
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "export"))
from strata_testlib import (end_daemon, e2e_setup, kill_at_exit, start_daemon, trace_messages,  # noqa: E402
                            clock_link_env, poll, wait_for)

SKEW_NS = 2700000000
SKEW_PPM = 80
PERIOD_MS = 20
KBASE2 = 1000000000  # k of the second pair (two guests)


def segment_bound(s, x):
    """[lo, hi] of the target time at source time x from one stored segment
    (docs/clocks.md, "Stored format"): knots interpolated, the extreme slopes
    beyond them."""
    k = s["knots"]
    f, l = k[0], k[-1]
    if x <= f[0]:
        d = f[0] - x
        return f[1] - math.ceil(s["slope_max"] * d), f[2] - math.floor(s["slope_min"] * d)
    if x >= l[0]:
        d = x - l[0]
        return l[1] + math.floor(s["slope_min"] * d), l[2] + math.ceil(s["slope_max"] * d)
    lo, hi = 0, len(k) - 1
    while hi - lo > 1:
        m = (lo + hi) // 2
        if k[m][0] <= x:
            lo = m
        else:
            hi = m
    a, b = k[lo], k[hi]
    t = (x - a[0]) / (b[0] - a[0])
    return math.floor(a[1] + t * (b[1] - a[1])), math.ceil(a[2] + t * (b[2] - a[2]))


def link_bound(link, x):
    """The bound at x from a link's segments: its segment's, or between two
    segments the union of both (a step lies there)."""
    segs = [s for s in link["segments"] if s["bounded"] and s["knots"]]
    for s in segs:
        if s["x_first"] <= x <= s["x_last"]:
            return segment_bound(s, x)
    before = [s for s in segs if s["x_last"] < x]
    after = [s for s in segs if s["x_first"] > x]
    bs = [segment_bound(s, x) for s in (before[-1:] + after[:1])]
    return min(b[0] for b in bs), max(b[1] for b in bs)


def timeline(check, dirs, n, client_on_guest, expect_inversions=False, inverted_out=None):
    """babeltrace2's merge of the traces in `dirs` (its own muxer): order by
    time, the syncpp events all there, 0 inversions (unless
    expect_inversions: then only counted), the guest's sub-traces marked
    correlated.  Returns (sends {k: ns}, raw {(name, k): (on_guest,
    clock value)})."""
    sends, recvs, raw, envs_seen = {}, {}, {}, set()
    prev = None
    order_ok = True
    for m in trace_messages(dirs):
        if m.kind != "event" or not m.name.startswith("syncpp:"):
            continue
        ns = m.ts
        if prev is not None and ns < prev:
            order_ok = False
        prev = ns
        k, frm = m.fields["k"], m.fields["from"]
        # the client sends from 0 and receives from 1, the server the other way
        on_client = (m.name == "syncpp:send") == (frm == 0)
        on_guest = on_client == client_on_guest
        envs_seen.add((on_guest, m.env_get("sync_state", "")))
        (sends if m.name == "syncpp:send" else recvs)[k] = ns
        raw[(m.name, k)] = (on_guest, m.clock_value)
    check(order_ok, "babeltrace2's merged order is by time")
    check(len(sends) == 2 * n and len(recvs) == 2 * n, "%d sends and %d receives (expected %d each)" %
          (len(sends), len(recvs), 2 * n))
    inv = sum(1 for k in sends if k in recvs and not sends[k] < recvs[k])
    if inverted_out is not None:
        inverted_out.update(k for k in sends if k in recvs and not sends[k] < recvs[k])
    if expect_inversions:
        print("babeltrace2's merge: %d of %d messages inverted (counted; the caller checks)" % (inv, len(sends)))
    else:
        check(inv == 0, "0 causal inversions after merging (%d of %d messages inverted)" % (inv, len(sends)))
    check((True, "correlated") in envs_seen and (False, "") in envs_seen,
          "the guest's sub-traces say sync_state = correlated, the host's nothing (%s)" % sorted(envs_seen))
    return sends, raw


def line_at(seg, x):
    return seg["y0"] + round(seg["slope"] * (x - seg["x0"]))


def handover(a, b):
    """Where segment b's line takes over from a's (processor/ctf/clock_map.h):
    where a's line reaches b's target time at b's first message, within
    (a's last, b's first]."""
    lo = a["x_last"] + 1 if a["x_last"] < b["x_first"] else b["x_first"]
    x = a["x0"] + (line_at(b, b["x_first"]) - a["y0"]) / a["slope"]
    return lo if not x > lo else b["x_first"] if not x < b["x_first"] else math.ceil(x)


def link_map(link, x):
    """The map of a link at source time x, as Strata's reader applies it
    (docs/clocks.md, "Across a step"): its segment's line; in the gap
    between two the earlier one's up to the handover, the later one's
    after it."""
    segs = [s for s in link["segments"] if s["bounded"]]
    seg = segs[0]
    for a, b in zip(segs, segs[1:]):
        if x >= handover(a, b):
            seg = b
    return line_at(seg, x)


def in_gap(link, x):
    """True if source time x lies between two bounded segments (around a
    step), where the map is either segment's (docs/clocks.md)."""
    segs = [s for s in link["segments"] if s["bounded"]]
    return (not any(s["x_first"] <= x <= s["x_last"] for s in segs) and
            any(s["x_last"] < x for s in segs) and any(s["x_first"] > x for s in segs))


def bounds(check, name, lk, sends, raw, map_inverted=None, count_only=False):
    """The stated bound against every message (the link never saw them): a
    message from the host at h received by the guest at g says f(g) > h,
    so the bound's hi(g) must exceed h; one from the guest at g received
    by the host at h says f(g) < h: lo(g) must be below h.  Also the
    inversions left once the guest's times are mapped segment by segment
    (what a reader of clocks.json does): none within a segment; in a gap
    between two (a step lies somewhere in it: its map is either segment's,
    its bound the union) they are counted and printed, and the stated
    bound must still hold there.  Prints the widths, the gaps and the
    closest message to an inversion in each direction (its delay once
    mapped).  `map_inverted`, a set: the k of the messages the map inverts
    within a segment (or leaves within 1 us of it) are put in it (the
    readers' checks allow those a reader's rounding may tip).
    `count_only`: the inversions are counted and printed, not checked."""
    bad, widths, inv, gap_msgs, gap_inv = 0, [], 0, 0, 0
    closest = {True: None, False: None}  # guest->host, host->guest: least delay as mapped
    for k in sends:
        (g_send_side, s_val), (_, r_val) = raw[("syncpp:send", k)], raw[("syncpp:recv", k)]
        g = s_val if g_send_side else r_val
        h = r_val if g_send_side else s_val
        lo, hi = link_bound(lk, g)
        widths.append(hi - lo)
        if (g_send_side and not lo < h) or (not g_send_side and not hi > h):
            bad += 1
        mg = link_map(lk, g)
        inverted = (g_send_side and not mg < h) or (not g_send_side and not h < mg)
        if in_gap(lk, g):
            gap_msgs += 1
            gap_inv += inverted
        else:
            inv += inverted
            d = (h - mg) if g_send_side else (mg - h)
            if closest[g_send_side] is None or d < closest[g_send_side]:
                closest[g_send_side] = d
            # Within 1 us of inverted: a reader's own rounding (the CTF
            # clock line's rate, its integer ns) may tip it.
            if map_inverted is not None and (inverted or abs(mg - h) < 1000):
                map_inverted.add(k)
    widths.sort()
    check(bad == 0, "the %s stated bound holds for all %d messages (%d violations)" % (name, len(sends), bad))
    if not count_only:
        check(inv == 0, "the %s map, segment by segment, inverts none of the %d messages within a segment (%d)" %
              (name, len(sends) - gap_msgs, inv))
    else:
        print("the %s map, segment by segment, inverts %d of the %d messages within a segment (counted)" %
              (name, inv, len(sends) - gap_msgs))
    segs = [s for s in lk["segments"] if s["bounded"]]
    gaps = ["%.2f ms" % ((b["x_first"] - a["x_last"]) / 1e6) for a, b in zip(segs, segs[1:])]
    print("%s map: min RTT %.1f us, bound width at the messages %.1f us median, %.1f us max (%.2fx min RTT);"
          " %d segment(s) (%s), %d probes used; gaps between segments %s (source time), %d message(s) in"
          " them, %d of those inverted by the map" %
          (name, lk["min_rtt_ns"] / 1e3, widths[len(widths) // 2] / 1e3, widths[-1] / 1e3,
           widths[-1] / max(1, lk["min_rtt_ns"]), len(lk["segments"]),
           ", ".join(s["start"] for s in lk["segments"]), lk["used"], ", ".join(gaps) or "none",
           gap_msgs, gap_inv))
    print("%s map: the closest messages to an inversion took %s (guest->host) and %s (host->guest) once mapped" %
          (name, *("%.1f us" % (closest[d] / 1e3) if closest[d] is not None else "-" for d in (True, False))))
    return widths


def status_of(strata, env, name):
    r = subprocess.run([strata, "status", name], env=env, capture_output=True, text=True, timeout=30)
    return r.stdout + r.stderr


def run_pair(check, prog, n, server_env, client_env, app, kbase):
    """The ping-pong between a server and a client program, k from kbase."""
    server = kill_at_exit(subprocess.Popen([prog, "serve", "listen:" + app, str(n)], env=dict(server_env, SYNCPP_KBASE=str(kbase)),
                              stdout=subprocess.PIPE, text=True))
    check(server.stdout.readline().strip() == "listening", "the server listens")
    client = subprocess.run([prog, "client", "unix:" + app, str(n)], env=dict(client_env, SYNCPP_KBASE=str(kbase)),
                            capture_output=True, text=True, timeout=120)
    server_out = server.communicate(timeout=120)[0]
    check(client.returncode == 0 and server.returncode == 0, "both programs ran (%s; %s)" %
          (client.stdout.strip() + client.stderr.strip(), server_out.strip()))


def uncorrelated(check, strata, prog, consumerd, work, base):
    """A follower whose link never comes up (nobody listens): its trace
    says so (env sync_state = "uncorrelated", clocks.json correlated
    false), its clock left as it was, and `strata status` says why."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    sock = os.path.join(work, "lonely.sock")
    env = dict(base, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=sock)
    out = os.path.join(work, "lonely-trace")
    d = start_daemon(consumerd, sock, env, ["--sync", "host=tcp:127.0.0.1:%d" % port])
    for cmd in (["create", "S", "-o", out], ["enable-event", "S", "syncpp:*"], ["start", "S"]):
        subprocess.run([strata] + cmd, env=env, capture_output=True, timeout=30)
    run_pair(check, prog, 10, env, env, os.path.join(work, "app3.sock"), 0)
    st = status_of(strata, env, "S")
    check("uncorrelated" in st and "connect to 127.0.0.1" in st, "status says the lonely link is uncorrelated, and why: "
          + " ".join(ln.strip() for ln in st.splitlines() if "clock link" in ln))
    subprocess.run([strata, "stop", "S"], env=env, capture_output=True, timeout=60)
    end_daemon(d, check)
    j = json.load(open(os.path.join(out, "clocks.json")))
    check(j["links"][0]["correlated"] is False and j["ctf"]["rewritten"] is False,
          "its clocks.json says uncorrelated, nothing rewritten")
    metas = [open(os.path.join(dp, "metadata")).read() for dp, _, fs in os.walk(out) if "metadata" in fs]
    check(bool(metas) and all('sync_state = "uncorrelated";' in m and "freq = 1000000000;" in m for m in metas),
          "its metadata says sync_state = uncorrelated, its clock unchanged (%d sub-traces)" % len(metas))


def machines_named(check, strata, work, outs, guests):
    """The guests' traces collected beside the host's: `strata export`
    names each process's machine ("sim-host: ...", "sim-guest: ..."), in
    JSON (process_name) and in Perfetto (the names as strings), and
    `strata view` its sub-traces (host:procname[pid])."""
    both = os.path.join(work, "collected")
    shutil.copytree(outs["host"], both)
    for g in guests:
        shutil.copytree(outs[g], os.path.join(both, g))
    hosts = ["sim-host"] + ["sim-" + g for g in guests]
    js = os.path.join(work, "collected.json")
    r = subprocess.run([strata, "export", "--format", "json", "-o", js, both], capture_output=True, text=True,
                       timeout=120)
    check(r.returncode == 0, "strata export --format json of the collected traces" + ("" if r.returncode == 0 else
                                                                                      ": " + r.stderr.strip()))
    names = set()
    if r.returncode == 0:
        doc = json.load(open(js))
        evs = doc["traceEvents"] if isinstance(doc, dict) else doc
        names = {e["args"]["name"] for e in evs if e.get("ph") == "M" and e.get("name") == "process_name"}
    for h in hosts:
        check(any(n.startswith(h + ": sync-pingpong") or n.startswith(h + ": strata-test") for n in names),
              "the JSON export names a process of %s (%s)" % (h, sorted(names)))
    pf = os.path.join(work, "collected.perfetto-trace")
    r = subprocess.run([strata, "export", "-o", pf, both], capture_output=True, text=True, timeout=120)
    data = open(pf, "rb").read() if r.returncode == 0 else b""
    check(r.returncode == 0 and all((h + ": ").encode() in data for h in hosts),
          "the Perfetto export names every machine's processes (%s)" % ", ".join(hosts))
    if r.returncode == 0:
        perfetto_machines(check, pf, hosts)
    r = subprocess.run([strata, "view", both], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and all(h + ":" in r.stdout for h in hosts),
          "strata view names every machine's sub-traces" + ("" if r.returncode == 0 else ": " + r.stderr.strip()))
    guest_between(check, strata, [both])
    several_as_one(check, strata, work, [outs["host"]] + [outs[g] for g in guests], both, r.stdout, js)


def several_as_one(check, strata, work, dirs, both, view_out, both_json):
    """The machines' traces named one by one, where they were recorded (as
    babeltrace2 takes several): view, export, check and query read them as
    one, exactly as the common parent they were collected under."""
    r = subprocess.run([strata, "view"] + dirs, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and r.stdout == view_out and view_out,
          "strata view HOST GUEST... prints what view of their collected copy prints (%d lines)%s" %
          (len(view_out.splitlines()), "" if r.returncode == 0 else ": " + r.stderr.strip()[-300:]))
    js = os.path.join(work, "several.json")
    r = subprocess.run([strata, "export", "--format", "json", "-o", js] + dirs, capture_output=True, text=True,
                       timeout=120)
    same = r.returncode == 0 and open(js, "rb").read() == open(both_json, "rb").read()
    check(same, "strata export HOST GUEST... writes the collected copy's JSON byte for byte" +
          ("" if r.returncode == 0 else ": " + r.stderr.strip()[-300:]))
    r = subprocess.run([strata, "check"] + dirs, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "strata check HOST GUEST... finds no damage" +
          ("" if r.returncode == 0 else ": " + (r.stdout + r.stderr).strip()[-300:]))
    r = subprocess.run([strata, "analyze", "mutex"] + dirs, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and "no pthread events in " + " ".join(dirs) in r.stderr,
          "strata analyze mutex HOST GUEST... reads both and names them: %r" % r.stderr.strip()[-300:])
    guest_between(check, strata, dirs)


def perfetto_machines(check, pf, hosts):
    """Each process track's TracePacket.machine_id by its name's host: none
    (0) for the host, one of its own for each guest; timeline() checks
    that every event has its track's machine_id, each machine's packets on
    their own sequence."""
    from check_export_fixture import timeline
    from timeline_check import one, protoc_decode
    machine_of = {}
    tracks, slices, instants, _, _ = timeline(protoc_decode(pf), machine_of)
    ids = {}  # host -> the machine_ids of its processes
    for uuid, td in tracks.items():
        if "process" in td:
            name = one(one(td, "process"), "process_name", "")
            host = name.split(": ")[0]
            ids.setdefault(host, set()).add(machine_of[("track", uuid)])
    guest_ids = [ids.get(h, set()) for h in hosts[1:]]
    check(ids.get(hosts[0]) == {0} and all(len(g) == 1 and 0 not in g for g in guest_ids) and
          len(set().union(*guest_ids)) == len(guest_ids),
          "Perfetto machine_id: the host's processes none, each guest's its own (%r)" % ids)
    on = {}
    for e in slices + instants:
        on[e["machine"]] = on.get(e["machine"], 0) + 1
    check(set(on) == set().union(*ids.values()), "Perfetto events on every machine_id (%r)" % on)


def guest_between(check, strata, traces):
    """docs/query.md's worked question "events of a guest between two host
    events", run as written (the machines' names put in) on the collected
    traces, against babeltrace2's merge of the same traces."""
    doc = open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "query.md")).read()
    m = re.search(r"<!-- query-test: guest-between -->\s*```sql\n(.*?)```", doc, re.S)
    if not check(m is not None, "docs/query.md holds the guest-between question"):
        return
    sql = m.group(1).replace("'host'", "'sim-host'").replace("'guest'", "'sim-guest'")
    r = subprocess.run([strata, "query", "--csv"] + traces + [sql], capture_output=True, text=True, timeout=120)
    rows = [ln.split(",") for ln in r.stdout.splitlines()[1:] if ln]
    got = [(name, int(k)) for _, name, k in rows] if r.returncode == 0 else None
    # babeltrace2: the host's sends in time order, the guest's events strictly between the 11th and 21st.
    evs = []
    for msg in trace_messages(traces):
        if msg.kind == "event" and msg.name.startswith("syncpp:"):
            evs.append((msg.ts, msg.env_get("hostname", ""), msg.name, msg.fields["k"]))
    sends = sorted(t for t, h, n, _ in evs if h == "sim-host" and n == "syncpp:send")
    want = [(n, k) for t, h, n, k in sorted(evs) if h == "sim-guest" and sends[10] < t < sends[20]] \
        if len(sends) > 20 else []
    check(got == want and len(want) > 0, "the guest-between question: %s rows, babeltrace2's merge %d%s" %
          (len(got) if got is not None else r.stderr.strip()[-300:], len(want),
           "" if got == want else " (first rows %s vs %s)" % ((got or [])[:3], want[:3])))


# STRATA_TEST_REALTIME_STEP_NS on the host: far above a message's latency.
REALTIME_STEP_NS = 5000000


def main():
    strata, prog, work, consumerd, check = e2e_setup()
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
    two = len(sys.argv) > 5 and sys.argv[5] == "two"
    defaults = len(sys.argv) > 5 and sys.argv[5] == "defaults"
    base = clock_link_env()
    # The guests, each with its skew (offset, ppm) and a free port for its link.
    guests = {"guest": (SKEW_NS, SKEW_PPM)}
    if two:
        guests["guest2"] = (5100000000, -60)
    ports = {}
    for g in guests:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports[g] = s.getsockname()[1]
    machines = ["host"] + list(guests)
    envs, outs, daemons = {}, {}, {}
    for who in machines:
        sock = os.path.join(work, who + ".sock")
        envs[who] = dict(base, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=sock)
        envs[who]["STRATA_TEST_HOSTNAME"] = "sim-" + who
        if who in guests:
            envs[who]["STRATA_TEST_CLOCK_SKEW"] = "%d,%d" % guests[who]
        else:
            # The host's wall clock stepped 5 ms between its daemon's
            # start and its session (NTP, a VM's resume): its trace must
            # keep the offset its links told the guests.
            envs[who]["STRATA_TEST_REALTIME_STEP_NS"] = str(REALTIME_STEP_NS)
        outs[who] = os.path.join(work, who + "-trace")
    link = [] if defaults else ["--sync-period", str(PERIOD_MS)]
    hargs = link[:]
    for g in guests:
        hargs += ["--sync-guest", "%s=listen:tcp:127.0.0.1:%d" % (g, ports[g])]
    daemons["host"] = start_daemon(consumerd, envs["host"]["STRATA_CONSUMERD_SOCKET"], envs["host"], hargs)
    for g in guests:
        daemons[g] = start_daemon(consumerd, envs[g]["STRATA_CONSUMERD_SOCKET"], envs[g],
                                  link + ["--sync", "host=tcp:127.0.0.1:%d" % ports[g]])
    for who in machines:
        for cmd in (["create", "S", "-o", outs[who]], ["enable-event", "S", "syncpp:*"], ["start", "S"]):
            r = subprocess.run([strata] + cmd, env=envs[who], capture_output=True, text=True, timeout=30)
            check(r.returncode == 0, "%s: strata %s" % (who, " ".join(cmd[:1])) + ("" if r.returncode == 0 else
                                                                                   ": " + r.stderr.strip()))
    wait_for(lambda: status_of(strata, envs["host"], "S").count("bound width") == len(guests),
             "the links to have a bound", 30)
    if defaults:
        st = status_of(strata, envs["host"], "S")
        check("probing every 4 ms (dense" in st, "the host's link probes densely while its map is learnt: " +
              " ".join(ln.strip() for ln in st.splitlines() if "clock link" in ln))
    # The host's client and the guest's server; with two guests also the
    # first guest's client and the second's server (a guest-to-guest order
    # that only the two maps onto the host's clock can get right).
    run_pair(check, prog, n, envs["guest"], envs["host"], os.path.join(work, "app.sock"), 0)
    if two:
        run_pair(check, prog, n, envs["guest2"], envs["guest"], os.path.join(work, "app2.sock"), KBASE2)
    # Probes after the last message, so that its time lies inside the map.
    t_end = time.monotonic() + 20 * PERIOD_MS / 1000.0
    wait_for(lambda: time.monotonic() > t_end, "probes after the exchange", 10)
    if defaults:
        for who in machines:
            ok = poll(lambda: re.search(r"probing every 100 ms(?! \()", status_of(strata, envs[who], "S")), 30,
                      step=0.2)
            check(ok, "%s: the link probes every 100 ms once its map has settled: %s" %
                  (who, " ".join(ln.strip() for ln in status_of(strata, envs[who], "S").splitlines()
                                 if "clock link" in ln)))
    status = status_of(strata, envs["host"], "S")
    for g in guests:
        line = [ln.strip() for ln in status.splitlines() if "clock link %s " % g in ln]
        check(bool(line) and "bound width" in line[0], "strata status shows the link and its bound: %s" %
              (line[0] if line else status[-300:]))
    for who in reversed(machines):
        r = subprocess.run([strata, "stop", "S"], env=envs[who], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, who + ": strata stop")
    for who in machines:
        end_daemon(daemons[who], check)

    clocks = {}
    for who in machines:
        p = os.path.join(outs[who], "clocks.json")
        check(os.path.exists(p), who + ": clocks.json written")
        clocks[who] = json.load(open(p)) if os.path.exists(p) else {"links": []}
    for g in guests:
        check(clocks[g].get("ctf", {}).get("rewritten") is True, g + ": the metadata clocks were rewritten")
    glink = [lk for lk in clocks["guest"]["links"] if lk["role"] == "follower"]
    hlink = [lk for lk in clocks["host"]["links"] if lk["role"] == "reference" and lk["name"] == "guest"]
    check(len(glink) == 1 and glink[0]["correlated"], "the guest's link is correlated")
    check(len(hlink) == 1 and hlink[0]["correlated"], "the host's link is correlated")
    if not glink or not hlink:
        check.finish()
    check(glink[0]["peer_clock_offset_ns"] == clocks["host"]["clock_offset_ns"],
          "the host's trace has the REALTIME offset its link told the guest (%d), its wall clock stepped "
          "%d ns meanwhile (%d)" % (glink[0]["peer_clock_offset_ns"], REALTIME_STEP_NS,
                                    clocks["host"]["clock_offset_ns"]))

    if two:
        uncorrelated(check, strata, prog, consumerd, work, base)
    sends, raw = timeline(check, [outs[m] for m in machines], n * (2 if two else 1), client_on_guest=False)
    first = {k: v for k, v in sends.items() if k < KBASE2}
    for name, lk in (("guest's", glink[0]), ("host's", hlink[0])):
        bounds(check, name, lk, first, raw)
        seg = lk["segments"][-1]
        off = seg["y0"] - seg["x0"]  # host - guest at the anchor
        check(abs(off + SKEW_NS) < 2000000, "the %s map shows the guest %.6f s ahead (the skew: %.6f s; rate %+.1f ppm)"
              % (name, -off / 1e9, SKEW_NS / 1e9, (1 / seg["slope"] - 1) * 1e6))
    machines_named(check, strata, work, outs, guests)
    check.finish()


if __name__ == "__main__":
    main()
