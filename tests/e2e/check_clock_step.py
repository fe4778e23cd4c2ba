#!/usr/bin/python3
"""A step in a follower's clock, on one timeline (docs/clocks.md), on one machine.

usage: check_clock_step.py STRATA PINGPONG WORKDIR [MESSAGES]

As check_clock_link.py: two daemons stand for a host and a guest whose
clock runs SKEW_NS ahead and SKEW_PPM fast; the guest follows the host
over a TCP clock link; a host client and a guest server exchange MESSAGES
messages each way.  Half-way (the server's `pause`), the guest's clock
jumps STEP_NS ahead (STRATA_TEST_CLOCK_STEP: its page steps, as a guest's
clock does when its TSC is written or a paused VM's is caught up), and the
exchange goes on once the link has seen the step: the guest's map gets a
second segment, and its metadata keeps one line (the longest segment's).

Oracles: the stored bound holds against every message (check_clock_link.py's
`bounds`); at the stop the guest's daemon splits each sub-trace into one CTF
trace per clock piece (docs/clocks.md, "babeltrace2 across a step"): a
`~seg<k>` sibling per earlier piece, with its own clock line; a second
start/stop leaves the split trace byte for byte as it was, and so does
`strata split` (the CLI's split, its pieces rebuilt from clocks.json).  babeltrace2's
merge of the session's whole output directories (python3-bt2 and the
`babeltrace2` CLI) holds every syncpp event exactly once (4 x MESSAGES), in
time order, and inverts none of the messages outside the gap around the
step (those in the gap are counted and printed); `strata view` of the host's
and the guest's traces together, which applies the guest's clocks.json
segment by segment, prints every message's receive after its send (0
inversions of 2 x MESSAGES), every event once, its times in order;
`strata export` (JSON) gives every receive a later time than its send;
`strata check --clean-copy` copies the guest's clocks.json along (its view
inverts none either); with the guest's clocks.json damaged, `strata view`
says so and still prints every event once (on each piece's metadata
line).  Exit 77 (skipped) where the TSC cannot back a page.
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
from strata_testlib import (end_daemon, e2e_setup, kill_at_exit, start_daemon, trace_messages,  # noqa: E402
                            clock_link_env, wait_for)
from check_clock_link import bounds, in_gap, status_of, timeline  # noqa: E402

SKEW_NS = 2700000000
SKEW_PPM = 80
STEP_NS = 1500000000
PERIOD_MS = 20

LINE = re.compile(r"^\[(\d\d):(\d\d):(\d\d)\.(\d{9})\] .*? (syncpp:send|syncpp:recv): \{ k = (\d+), from = (\d+) \}$")


def view_order(strata, trace, env=None):
    """`strata view TRACE` (TZ=UTC): (returncode, stderr, {(name, k): line
    index}, events, times in order).  The order is the user's: a receive
    printed before its send is an inversion."""
    r = subprocess.run([strata, "view", trace], capture_output=True, text=True, timeout=300,
                       env=dict(env or os.environ, TZ="UTC"))
    pos, prev, ordered, n = {}, None, True, 0
    for i, ln in enumerate(r.stdout.splitlines()):
        m = LINE.match(ln)
        if not m:
            continue
        n += 1
        t = ((int(m.group(1)) * 60 + int(m.group(2))) * 60 + int(m.group(3))) * 1000000000 + int(m.group(4))
        # a merge across midnight wraps the time of day: not a disorder
        if prev is not None and t < prev and prev - t < 43200 * 1000000000:
            ordered = False
        prev = t
        pos[(m.group(5), int(m.group(6)))] = i
    return r.returncode, r.stderr, pos, n, ordered


def tree_bytes(root):
    """{relative path: bytes} of every file under root."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = open(p, "rb").read()
    return out


def bt2_check(check, dirs, n, link, sends_raw):
    """babeltrace2 (python3-bt2, its own muxer) over the sessions' whole
    output directories: every syncpp event exactly once, in time order, and
    no message outside the step's gap inverted.  sends_raw: {(name, k):
    (on_guest, raw value)} from timeline(), for the gap test."""
    seen, at, prev, ordered = {}, {}, None, True
    for m in trace_messages(dirs):
        if m.kind != "event" or not m.name.startswith("syncpp:"):
            continue
        ns = m.ts
        if prev is not None and ns < prev:
            ordered = False
        prev = ns
        key = (m.name, m.fields["k"], m.fields["from"])
        seen[key] = seen.get(key, 0) + 1
        at[key[:2]] = ns
    total = sum(seen.values())
    check(total == 4 * n and len(seen) == 4 * n, "babeltrace2 reads every syncpp event exactly once (%d events, %d "
          "distinct, of %d)" % (total, len(seen), 4 * n))
    check(ordered, "babeltrace2's merged order is by time")
    out_gap, in_gap_n, inv_out, inv_in = 0, 0, 0, 0
    inv_at = []  # (guest's raw value, direction) of each inverted message in the gap
    for (name, k) in list(at):
        if name != "syncpp:send" or ("syncpp:recv", k) not in at:
            continue
        bad = not at[("syncpp:send", k)] < at[("syncpp:recv", k)]
        g_send, s_val = sends_raw[("syncpp:send", k)]
        _, r_val = sends_raw[("syncpp:recv", k)]
        if in_gap(link, s_val if g_send else r_val):
            in_gap_n += 1
            inv_in += bad
            if bad:
                inv_at.append((s_val if g_send else r_val, "guest->host" if g_send else "host->guest"))
        else:
            out_gap += 1
            inv_out += bad
    check(inv_out == 0, "babeltrace2 (one CTF trace per clock piece): %d of %d messages outside the step's gap "
          "inverted" % (inv_out, out_gap))
    print("babeltrace2 in the step's gap: %d of %d messages inverted" % (inv_in, in_gap_n))
    if inv_at:
        # Where they lie (the guest's raw ns, from the gap's start), against
        # the segments (and a stored handover): what placed them wrong.
        segs = [sg for sg in link["segments"] if sg["bounded"]]
        x0 = max((sg["x_last"] for sg in segs if sg["x_last"] < min(x for x, _ in inv_at)), default=0)
        print("  segments (start, x_first, x_last, messages, piece_from; ms from the gap's start): " +
              "; ".join("%s %.3f %.3f %d %s" % (sg["start"], (sg["x_first"] - x0) / 1e6, (sg["x_last"] - x0) / 1e6,
                                                 sg["messages"], sg.get("piece_from", "-")) for sg in segs))
        for d in ("guest->host", "host->guest"):
            xs = sorted((x - x0) / 1e6 for x, dd in inv_at if dd == d)
            if xs:
                print("  inverted %s: %d, from %.3f to %.3f ms" % (d, len(xs), xs[0], xs[-1]))


def cli_check(check, dirs, n):
    """The `babeltrace2` CLI over the same directories: every syncpp event
    once, no warning, times in order (its text output, TZ=UTC)."""
    r = subprocess.run(["babeltrace2", "--clock-gmt", "--clock-date"] + dirs, capture_output=True, text=True,
                       timeout=300)
    stamps = re.findall(r"^\[\d{4}-\d\d-\d\d (\d\d):(\d\d):(\d\d)\.(\d{9})\] .*? syncpp:(send|recv):.*?k = (\d+), "
                        r"from = (\d+)", r.stdout, re.M)
    keys = set((e, k, f) for (_, _, _, _, e, k, f) in stamps)
    ts = [((int(h) * 60 + int(mi)) * 60 + int(se)) * 10 ** 9 + int(ns) for (h, mi, se, ns, _, _, _) in stamps]
    ordered = all(b >= a or a - b > 43200 * 10 ** 9 for a, b in zip(ts, ts[1:]))
    check(r.returncode == 0 and len(stamps) == 4 * n and len(keys) == 4 * n and ordered and "W " not in r.stderr,
          "babeltrace2 CLI on the output directories: %d syncpp events (%d distinct, of %d), in order: %s%s" %
          (len(stamps), len(keys), 4 * n, ordered, (": " + r.stderr.strip()[-300:]) if r.stderr.strip() else ""))


def view_inversions(pos):
    """Messages whose receive `strata view` printed before the send."""
    sends = [k for (name, k) in pos if name == "syncpp:send"]
    return sum(1 for k in sends if ("syncpp:recv", k) in pos and pos[("syncpp:recv", k)] < pos[("syncpp:send", k)])


def collect(work, host_out, guests):
    """The host's trace with each guest's copied beside it (as a shared
    folder or relay would bring them): one directory for `strata view`."""
    both = os.path.join(work, "collected")
    shutil.rmtree(both, ignore_errors=True)
    shutil.copytree(host_out, both)
    for name, out in guests:
        shutil.copytree(out, os.path.join(both, name))
    return both


def export_inversions(strata, trace, work):
    """`strata export --format json`: messages whose receive's time is not
    after its send's."""
    js = os.path.join(work, "export.json")
    r = subprocess.run([strata, "export", "--format", "json", "-o", js, trace], capture_output=True, text=True,
                       timeout=300)
    if r.returncode != 0:
        return r.returncode, r.stderr, None, 0
    doc = json.load(open(js))
    evs = doc["traceEvents"] if isinstance(doc, dict) else doc
    at = {}
    for e in evs:
        if e.get("name") in ("syncpp:send", "syncpp:recv", "send", "recv") and "k" in e.get("args", {}):
            at[(e["name"].split(":")[-1], int(e["args"]["k"]))] = float(e["ts"])
    sends = [k for (name, k) in at if name == "send"]
    inv = sum(1 for k in sends if ("recv", k) in at and not at[("send", k)] < at[("recv", k)])
    return 0, "", inv, len(sends)


def aligned(check, strata, work, outs, n):
    """`strata align` on a copy of the split guest trace (docs/clocks.md,
    "Traced messages as constraints"): the map refined segment by segment
    with the program's messages, every piece directory's metadata put onto
    its refined line, no packet moved (the handovers kept), and
    babeltrace2's merge and `strata view` still invert none outside the
    step's gap."""
    guest = os.path.join(work, "aligned-guest")
    shutil.rmtree(guest, ignore_errors=True)
    shutil.copytree(outs["guest"], guest)
    before = tree_bytes(guest)
    r = subprocess.run([strata, "align", outs["host"], guest, "--match", "syncpp:send,syncpp:recv,k+from"],
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "strata align on the split guest trace" +
          ("" if r.returncode == 0 else ": " + r.stderr.strip()[-300:]))
    after = tree_bytes(guest)
    moved = [f for f in before if os.path.basename(f) not in ("metadata", "clocks.json") and
             before[f] != after.get(f)]
    check(not moved and set(before) == set(after), "no stream file changed or moved (%s)" % (moved[:3] or "none"))
    link = [lk for lk in json.load(open(os.path.join(guest, "clocks.json")))["links"] if lk["role"] == "follower"][0]
    segs = link["segments"]
    # (a segment whose messages all lie in the step's gap has none to use)
    ref = link.get("refined", {})
    check(ref.get("segments_refined", 0) >= 1 and ref.get("segments_contradicted") == 0 and
          ref["segments_refined"] == sum(1 for s in segs if s.get("matched_messages")) and
          all(s.get("piece_from") is not None for s in segs[1:] if s["bounded"]),
          "clocks.json: the segments with messages refined, none contradicted, the handovers kept (%s)" % ref)
    off = []
    for d, _, files in os.walk(guest):
        if "metadata" not in files:
            continue
        text = open(os.path.join(d, "metadata")).read()
        piece = re.search(r"^\tsync_piece = (\d+);$", text, re.M)
        freq = re.search(r"^\tfreq = (\d+);$", text, re.M)
        if piece and freq and int(freq.group(1)) != round(1e9 / segs[int(piece.group(1))]["slope"]):
            off.append(os.path.relpath(d, guest))
    check(not off, "every piece's metadata carries its refined segment's rate (%s)" % (", ".join(off) or "all"))
    sends, raw = timeline(check, [outs["host"], guest], n, client_on_guest=False, expect_inversions=True)
    bt2_check(check, [outs["host"], guest], n, link, raw)
    bounds(check, "refined", link, sends, raw)
    both = collect(os.path.join(work, "aligned"), outs["host"], [("guest", guest)])
    rc, err, pos, events, ordered = view_order(strata, both)
    check(rc == 0 and events == 4 * n and view_inversions(pos) == 0,
          "strata view after strata align: %d of %d messages inverted" % (view_inversions(pos), 2 * n))


def main():
    strata, prog, work, consumerd, check = e2e_setup()
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 2000
    base = clock_link_env()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    step_file = os.path.join(work, "step-now")
    envs, outs = {}, {}
    for who in ("host", "guest"):
        envs[who] = dict(base, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=os.path.join(work, who + ".sock"),
                         STRATA_TEST_HOSTNAME="sim-" + who)
        outs[who] = os.path.join(work, who + "-trace")
    envs["guest"]["STRATA_TEST_CLOCK_SKEW"] = "%d,%d" % (SKEW_NS, SKEW_PPM)
    envs["guest"]["STRATA_TEST_CLOCK_STEP"] = "%d:%s" % (STEP_NS, step_file)
    link = ["--sync-period", str(PERIOD_MS)]
    daemons = {
        "host": start_daemon(consumerd, envs["host"]["STRATA_CONSUMERD_SOCKET"], envs["host"],
                             link + ["--sync-guest", "guest=listen:tcp:127.0.0.1:%d" % port]),
        "guest": start_daemon(consumerd, envs["guest"]["STRATA_CONSUMERD_SOCKET"], envs["guest"],
                              link + ["--sync", "host=tcp:127.0.0.1:%d" % port]),
    }
    for who in ("host", "guest"):
        for cmd in (["create", "S", "-o", outs[who]], ["enable-event", "S", "syncpp:*"], ["start", "S"]):
            r = subprocess.run([strata] + cmd, env=envs[who], capture_output=True, text=True, timeout=30)
            check(r.returncode == 0, "%s: strata %s" % (who, cmd[0]) + ("" if r.returncode == 0 else
                                                                     ": " + r.stderr.strip()))
    # Half a second of probes (25 periods, each end's) before the exchange:
    # the messages before the step are mapped by the first segment's line,
    # and in the gap before the step (where the probes of a loaded machine
    # may all be too slow to be fed) by that line carried on.  A first
    # segment of two or three probes knows its slope to a few hundred ppm
    # only: carried 100 ms on, tens of us off, where a message takes 5.
    def used(who):
        m = re.search(r"(\d+) of both ends' used", status_of(strata, envs[who], "S"))
        return int(m.group(1)) if m else 0

    wait_for(lambda: used("guest") >= 50, "half a second of probes on the link", 30)

    # The guest's server pauses half-way; the guest's clock steps there.
    app = os.path.join(work, "app.sock")
    server = kill_at_exit(subprocess.Popen([prog, "serve", "listen:" + app, str(n), "pause"], env=envs["guest"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    check(server.stdout.readline().strip() == "listening", "the server listens")
    client = kill_at_exit(subprocess.Popen([prog, "client", "unix:" + app, str(n)], env=envs["host"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True))
    check(server.stdout.readline().strip() == "half", "the exchange is half-way")
    open(step_file, "w").close()
    seen = {}

    def segments():
        seen["status"] = status_of(strata, envs["guest"], "S")
        m = re.search(r", (\d+) segments", seen["status"])
        return int(m.group(1)) if m else 1

    wait_for(lambda: segments() >= 2, "the guest's link to see the step", 20)
    # One step, one new segment: a probe from before the step, told after
    # it, starts none (sync_link_test's SyncLinkResults).
    check(segments() == 2, "the guest's link sees one step as one new segment (%s)" % seen["status"].strip())
    server.stdin.write("go on\n")
    server.stdin.flush()
    client_out = client.communicate(timeout=120)[0]
    server_out = server.communicate(timeout=120)[0]
    check(client.returncode == 0 and server.returncode == 0, "both programs ran (%s; %s)" %
          (client_out.strip(), server_out.strip()))
    # Probes after the last message, so that its time lies inside the map.
    t_end = time.monotonic() + 20 * PERIOD_MS / 1000.0
    wait_for(lambda: time.monotonic() > t_end, "probes after the exchange", 10)
    for who in ("guest", "host"):
        r = subprocess.run([strata, "stop", "S"], env=envs[who], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, who + ": strata stop")
    # The split is idempotent: started and stopped again (nothing
    # recorded meanwhile), the guest's trace is the same bytes but
    # clocks.json and, in the base directory's metadata, the last piece's
    # line (the link's current segment, refined by the probes since), its
    # handover (where the earlier line meets that line: clock_map.h) and
    # the map's segment count (a step seen meanwhile adds one).
    def line_free(path, data):
        if "~seg" in path or not path.endswith("metadata"):
            return data
        return b"\n".join(ln for ln in data.split(b"\n") if not re.search(
            rb"^\t(offset|offset_s|freq|sync_segments|sync_piece_from|sync_valid_from|sync_valid_to|sync_bound_ns|sync_rate_rounding_ns) = ", ln))

    first = tree_bytes(outs["guest"])
    for cmd in ("start", "stop"):
        r = subprocess.run([strata, cmd, "S"], env=envs["guest"], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "guest: strata %s again" % cmd)
    again = tree_bytes(outs["guest"])
    pieces = sorted(p for p in first if "~seg" in p)
    differ = [p for p in set(first) | set(again)
              if p != "clocks.json" and line_free(p, first.get(p, b"")) != line_free(p, again.get(p, b""))]
    check(bool(pieces) and set(first) == set(again) and not differ,
          "the guest's split trace (%s) is unchanged by a second stop (%s)" %
          (", ".join(pieces) or "no piece directory",
           ", ".join(differ) or "same bytes"))
    for who in ("host", "guest"):
        end_daemon(daemons[who], check)

    # `strata split` rebuilds the pieces from clocks.json (the CLI's path for
    # relayed and received traces): on the daemon's split trace it changes
    # no byte, so both write the same lines and the same directories.
    resplit = os.path.join(work, "resplit")
    r = subprocess.run([strata, "split", outs["guest"], "-o", resplit], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0 and tree_bytes(resplit) == tree_bytes(outs["guest"]),
          "strata split of the daemon's split trace changes no byte (%s)" % (r.stdout + r.stderr).strip()[-300:])

    p = os.path.join(outs["guest"], "clocks.json")
    gclocks = json.load(open(p)) if os.path.exists(p) else {"links": []}
    glink = [lk for lk in gclocks["links"] if lk["role"] == "follower"]
    check(len(glink) == 1 and glink[0]["correlated"] and len(glink[0]["segments"]) >= 2,
          "the guest's map has a new segment at the step (%s)" %
          (", ".join(s["start"] for s in glink[0]["segments"]) if glink else "no follower link"))
    if not glink:
        check.finish()

    # Each piece's metadata took its line from the map clocks.json holds
    # (one state of it: the link refines its last segment meanwhile).
    stale = []
    for d, _, files in os.walk(outs["guest"]):
        if "metadata" not in files:
            continue
        text = open(os.path.join(d, "metadata")).read()
        env = dict(re.findall(r"^\t(sync_piece|sync_valid_from|sync_valid_to) = (-?\d+);$", text, re.M))
        seg = glink[0]["segments"][int(env["sync_piece"])] if "sync_piece" in env else None
        if not seg or (int(env["sync_valid_from"]), int(env["sync_valid_to"])) != (seg["x_first"], seg["x_last"]):
            stale.append(os.path.relpath(d, outs["guest"]))
    check(not stale, "every guest sub-trace's metadata has its piece's line from clocks.json's map (%s)" %
          (", ".join(stale) or "all"))

    # babeltrace2: one CTF trace per clock piece.
    sends, raw = timeline(check, [outs["host"], outs["guest"]], n, client_on_guest=False, expect_inversions=True)
    bt2_check(check, [outs["host"], outs["guest"]], n, glink[0], raw)
    cli_check(check, [outs["host"], outs["guest"]], n)
    # The stored bound against every message, across the step too.
    bounds(check, "guest's", glink[0], sends, raw)
    both = collect(work, outs["host"], [("guest", outs["guest"])])
    rc, err, pos, events, ordered = view_order(strata, both)
    inv = view_inversions(pos)
    check(rc == 0 and "clocks.json" not in err, "strata view of the host's and guest's traces" +
          ("" if rc == 0 and "clocks.json" not in err else ": " + err.strip()))
    check(events == 4 * n and len(pos) == 4 * n, "strata view prints every syncpp event once (%d, %d distinct, of %d)" % (events, len(pos), 4 * n))
    check(ordered, "strata view prints them in time order")
    check(inv == 0, "strata view (clocks.json, segment by segment): %d of %d messages inverted" % (inv, 2 * n))
    # The guest's piece directories are one process to the reader: one
    # row of `processes` and of `threads` for the guest's server.
    r = subprocess.run([strata, "query", both, "SELECT machine, pid FROM processes UNION ALL "
                        "SELECT machine, tid FROM threads"], capture_output=True, text=True, timeout=120)
    rows = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("sim-guest")]
    check(r.returncode == 0 and len(rows) == 2, "strata query: the guest's process and thread once each, its "
          "piece directories with it (%s)" % (rows if r.returncode == 0 else r.stderr.strip()))
    rc, err, einv, esends = export_inversions(strata, both, work)
    check(rc == 0 and einv == 0 and esends == 2 * n, "strata export --format json: %s of %d messages inverted%s" %
          (einv, esends, ": " + err.strip() if rc else ""))

    # `strata check --clean-copy` carries the guest's clocks.json along.
    clean = os.path.join(work, "clean")
    r = subprocess.run([strata, "check", both, "--clean-copy", clean], capture_output=True, text=True, timeout=300)
    rc, err, pos, events, _ = view_order(strata, clean)
    inv = view_inversions(pos)
    check(r.returncode == 0 and os.path.exists(os.path.join(clean, "guest", "clocks.json")) and events == 4 * n and
          inv == 0, "strata check's clean copy has the guest's clocks.json; its view inverts %d of %d messages (%s)" %
          (inv, 2 * n, (r.stdout + r.stderr).strip()[-200:]))

    # A split cut short by a kill (a piece directory written, the base not
    # yet cut): the base holds its earlier packets again.  Strata's reader
    # skips those outside the base's piece range: every event once.
    shown = os.path.join(work, "interrupted")
    shutil.rmtree(shown, ignore_errors=True)
    shutil.copytree(both, shown)
    restored = 0
    for d, _, files in os.walk(shown):
        if "~seg" not in os.path.basename(d):
            continue
        base = d[:d.rindex("~seg")]
        for f in files:
            if f != "metadata" and os.path.exists(os.path.join(base, f)):
                data = open(os.path.join(d, f), "rb").read() + open(os.path.join(base, f), "rb").read()
                open(os.path.join(base, f), "wb").write(data)
                restored += 1
    rc, err, pos, events, ordered = view_order(strata, shown)
    check(restored > 0 and rc == 0 and events == 4 * n and len(pos) == 4 * n and view_inversions(pos) == 0,
          "a split cut short (%d stream file(s) holding their moved packets again): strata view prints every "
          "event once (%d, %d distinct, of %d), %d inverted" % (restored, events, len(pos), 4 * n,
                                                                view_inversions(pos)))

    # The guest's clocks.json damaged: said, the metadata's line used.
    cj = os.path.join(both, "guest", "clocks.json")
    text = open(cj).read()
    with open(cj, "w") as f:
        f.write(text[:len(text) // 2])
    rc, err, pos, events, _ = view_order(strata, both)
    check(rc == 1 and "clocks.json" in err and events == 4 * n,
          "with the guest's clocks.json cut, strata view says so, prints every event (%d), exits 1: %s" %
          (events, " ".join(err.split())[:300]))
    print("strata view on each piece's metadata line (clocks.json cut): %d of %d messages inverted" %
          (view_inversions(pos), 2 * n))
    aligned(check, strata, work, outs, n)
    check.finish()


if __name__ == "__main__":
    main()
