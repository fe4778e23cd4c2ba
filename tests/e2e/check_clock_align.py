#!/usr/bin/python3
"""`strata align`: a follower's clock map refined with traced messages
(docs/clocks.md, "Traced messages as constraints"), as a user runs it.

usage: check_clock_align.py STRATA PINGPONG WORKDIR [MESSAGES]

Two daemons stand for a host and a guest (the guest's clock SKEW_NS ahead
and SKEW_PPM fast, STRATA_TEST_CLOCK_SKEW) linked over TCP loopback, as in
check_clock_link.py; a client traced by the host and a server traced by the
guest exchange MESSAGES messages each way (syncpp:send, syncpp:recv with
k and from).  After the stop:

* `strata align HOST GUEST --match syncpp:send,syncpp:recv,k+from` exits 0,
  says how many messages it used; the guest's clocks.json says it was
  refined (by what, how many), keeps each segment's probes' map and hulls;
  every message keeps send before receive under the refined map and its
  stated bound holds for every one; babeltrace2's merge and `strata view`
  of both traces invert none; the guest's metadata clock is the refined
  line (clocks.json's "ctf").
* A second run changes no byte of the guest's trace (idempotent).
* Bad matches are usage errors that say what is wrong: an unknown event, a
  key field the event lacks, a --match without three parts.
* Replies that carry their request's id (SYNCPP_REPLY_ID=1), matched by k
  alone: every message used, counted per direction.
* On a copy, the events swapped (each receive taken for the send): every
  message contradicts the probes; the command says so per segment, exits 1,
  and the segment keeps the probes' map.
Exit 77 (skipped) where the TSC cannot back a page.
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import end_daemon, e2e_setup, start_daemon, clock_link_env, wait_for  # noqa: E402
from check_clock_link import bounds, run_pair, status_of, timeline  # noqa: E402
from check_clock_step import collect, tree_bytes, view_inversions, view_order  # noqa: E402

SKEW_NS = 2700000000
SKEW_PPM = 80
PERIOD_MS = 100  # few probes over the exchange: the messages have something to add
MATCH = "syncpp:send,syncpp:recv,k+from"


def align(strata, *args):
    r = subprocess.run([strata, "align"] + list(args), capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def record(check, strata, prog, consumerd, work, n, extra_env=None):
    """Two linked daemons (host, guest) record a ping-pong of n messages
    each way; returns the host's and the guest's trace directories."""
    base = dict(clock_link_env(), **(extra_env or {}))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    envs, outs, daemons = {}, {}, {}
    os.makedirs(work, exist_ok=True)
    for who in ("host", "guest"):
        sock = os.path.join(work, who + ".sock")
        envs[who] = dict(base, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=sock,
                         STRATA_TEST_HOSTNAME="sim-" + who)
        outs[who] = os.path.join(work, who + "-trace")
    envs["guest"]["STRATA_TEST_CLOCK_SKEW"] = "%d,%d" % (SKEW_NS, SKEW_PPM)
    link = ["--sync-period", str(PERIOD_MS)]
    daemons["host"] = start_daemon(consumerd, envs["host"]["STRATA_CONSUMERD_SOCKET"], envs["host"],
                                   link + ["--sync-guest", "guest=listen:tcp:127.0.0.1:%d" % port])
    daemons["guest"] = start_daemon(consumerd, envs["guest"]["STRATA_CONSUMERD_SOCKET"], envs["guest"],
                                    link + ["--sync", "host=tcp:127.0.0.1:%d" % port])
    # Before any session: `strata status` shows the daemon's links.
    for who in ("host", "guest"):
        st = []
        wait_for(lambda: st.append(subprocess.run([strata, "status"], env=envs[who], capture_output=True,
                                                  text=True, timeout=30).stdout) or
                 ("0 session(s)\nclocks:\n  clock link " in st[-1] and "bound width" in st[-1]),
                 "%s: strata status with no session to show the link's bound" % who, 30)
    for who in ("host", "guest"):
        for cmd in (["create", "S", "-o", outs[who]], ["enable-event", "S", "syncpp:*"], ["start", "S"]):
            r = subprocess.run([strata] + cmd, env=envs[who], capture_output=True, text=True, timeout=30)
            check(r.returncode == 0, "%s: strata %s" % (who, cmd[0]) + ("" if r.returncode == 0 else
                                                                        ": " + r.stderr.strip()))
    wait_for(lambda: "bound width" in status_of(strata, envs["host"], "S"), "the link to have a bound", 30)
    run_pair(check, prog, n, envs["guest"], envs["host"], os.path.join(work, "app.sock"), 0)
    t_end = time.monotonic() + 4 * PERIOD_MS / 1000.0
    wait_for(lambda: time.monotonic() > t_end, "probes after the exchange", 10)
    for who in ("guest", "host"):
        r = subprocess.run([strata, "stop", "S"], env=envs[who], capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, who + ": strata stop")
    for who in ("host", "guest"):
        end_daemon(daemons[who], check)
    return outs


def request_reply(check, strata, prog, consumerd, work):
    """Replies that carry their request's id (SYNCPP_REPLY_ID): matched by
    k alone, each id names two messages, one per direction."""
    n = 200
    outs = record(check, strata, prog, consumerd, os.path.join(work, "rpc"), n, {"SYNCPP_REPLY_ID": "1"})
    rc, out, err = align(strata, outs["host"], outs["guest"], "--match", "syncpp:send,syncpp:recv,k")
    print(out.strip())
    want = "%d message(s) between %s and its guest trace(s) matched by syncpp:send,syncpp:recv,k (by sender and " \
        "key: %d guest to host, %d host to guest, 0 between two guests)\n" % (2 * n, outs["host"], n, n)
    check(rc == 0 and want in out, "request and reply sharing an id: %d messages matched, %d each way, none "
          "left unused (exit %d: %s)" % (2 * n, n, rc, (out + err).strip()[:300]))
    check("used by direction: %d guest to host, %d host to guest, 0 with another guest" % (n, n) in out and
          "under the refined map 0 of %d used" % (2 * n) in out,
          "the report says per direction how many it used, and the refined map inverts none")


def main():
    strata, prog, work, consumerd, check = e2e_setup()
    n = int(sys.argv[4]) if len(sys.argv) > 4 else 1000
    outs = record(check, strata, prog, consumerd, work, n)
    gjson = os.path.join(outs["guest"], "clocks.json")
    if not check(os.path.exists(gjson), "the guest's clocks.json written"):
        check.finish()
    before = json.load(open(gjson))
    flink = [lk for lk in before["links"] if lk["role"] == "follower"][0]
    check(all(s.get("hull_lower") and s.get("hull_upper") for s in flink["segments"] if s["bounded"]),
          "the daemon stores each bounded segment's probe hulls (%s)" %
          ", ".join("%d+%d points" % (len(s.get("hull_lower", [])), len(s.get("hull_upper", [])))
                    for s in flink["segments"]))
    pristine = os.path.join(work, "guest-pristine")
    shutil.copytree(outs["guest"], pristine)

    # Bad matches: usage errors that say what is wrong, nothing written.
    for args, want in (([MATCH.replace("syncpp:recv", "syncpp:nope")], "no event named 'syncpp:nope'"),
                       ([MATCH.replace("k+from", "k+bogus")], "has no field 'bogus'"),
                       (["syncpp:send,syncpp:recv"], "three parts")):
        rc, out, err = align(strata, outs["host"], outs["guest"], "--match", args[0])
        check(rc == 2 and want in err, "--match %s: exit 2 saying \"%s\" (exit %d: %s)" %
              (args[0], want, rc, err.strip()[-200:]))
    rc, out, err = align(strata, outs["host"], outs["guest"])
    check(rc == 2 and "--match" in err, "no --match: exit 2 (%s)" % err.strip()[-120:])
    rc, out, err = align(strata, outs["guest"], outs["host"], "--match", MATCH)
    check(rc == 1 and "HOST_TRACE must be the reference" in err, "host and guest swapped: exit 1 (%s)" %
          err.strip()[-160:])
    # A trace a process still writes (here this one, holding its
    # clocks.json open for appending): refused, a dry run excepted.
    with open(gjson, "a"):
        rc, out, err = align(strata, outs["host"], outs["guest"], "--match", MATCH)
        check(rc == 1 and "is being written (process %d " % os.getpid() in err,
              "a trace being written: exit 1 naming the writer (exit %d: %s)" % (rc, err.strip()[-200:]))
        rc, out, err = align(strata, outs["host"], outs["guest"], "--match", MATCH, "--dry-run")
        check(rc == 0, "a trace being written: --dry-run still reports (exit %d: %s)" % (rc, err.strip()[-200:]))
    check(tree_bytes(outs["guest"]) == tree_bytes(pristine), "the refused runs changed no byte of the guest's trace")

    # The refinement with every message.
    rc, out, err = align(strata, outs["host"], outs["guest"], "--match", MATCH)
    print(out.strip())
    check(rc == 0, "strata align --match %s: exit 0%s" % (MATCH, "" if rc == 0 else " (%d: %s)" % (rc, err.strip())))
    check("%d message(s) between" % (2 * n) in out, "it matched all %d messages" % (2 * n))
    after = json.load(open(gjson))
    glink = [lk for lk in after["links"] if lk["role"] == "follower"][0]
    ref = glink.get("refined", {})
    check(ref.get("by") == "strata align" and ref.get("match") == MATCH and ref.get("messages") == 2 * n and
          ref.get("used", 0) > 0 and ref.get("segments_contradicted") == 0,
          "clocks.json says the map was refined, by what and with how many messages (%s)" % ref)
    segs = [s for s in glink["segments"] if s["bounded"]]
    old = [s for s in flink["segments"] if s["bounded"]]
    check(sum(s.get("matched_messages", 0) for s in segs) == ref.get("used") and
          all(s.get("probes_map", {}).get("y0") == o["y0"] and s["probes_map"]["slope"] == o["slope"] and
              s["probes_map"]["knots"] == o["knots"] and s["hull_lower"] == o["hull_lower"]
              for s, o in zip(segs, old)) and len(segs) == len(old),
          "each refined segment counts its messages and keeps the probes' map and hulls")
    sends, raw = timeline(check, [outs["host"], outs["guest"]], n, client_on_guest=False)
    widths = bounds(check, "refined", glink, sends, raw)
    widths0 = bounds(check, "probes'", flink, sends, raw, count_only=True)
    print("bound width at the messages: %.1f us median with the messages, %.1f us with the probes alone" %
          (widths[len(widths) // 2] / 1e3, widths0[len(widths0) // 2] / 1e3))
    check(widths[-1] <= widths0[-1] + 2, "the refined bound is no wider than the probes' (%d vs %d ns)" %
          (widths[-1], widths0[-1]))
    both = collect(work, outs["host"], [("guest", outs["guest"])])
    rc, err, pos, nev, ordered = view_order(strata, both)
    check(rc == 0 and nev == 4 * n and ordered and view_inversions(pos) == 0,
          "strata view of both traces: %d syncpp events of %d, in time order: %s, %d inverted" %
          (nev, 4 * n, ordered, view_inversions(pos)))
    ctf = after["ctf"]
    metas = [open(os.path.join(d, "metadata")).read() for d, _, fs in os.walk(outs["guest"]) if "metadata" in fs]
    check(bool(metas) and all("freq = %d;" % ctf["freq"] in m and "offset_s = %d;" % ctf["offset_s"] in m and
                              "offset = %d;" % ctf["offset"] in m for m in metas),
          "the guest's %d metadata clock block(s) carry the refined line (freq %d, offset_s %d, offset %d)" %
          (len(metas), ctf["freq"], ctf["offset_s"], ctf["offset"]))

    # Idempotent.
    snap = tree_bytes(outs["guest"])
    rc, out2, err = align(strata, outs["host"], outs["guest"], "--match", MATCH)
    check(rc == 0 and "unchanged" in out2 and tree_bytes(outs["guest"]) == snap,
          "a second run changes no byte of the guest's trace (exit %d)" % rc)
    # A held-out run, not written: counts what the map orders unseen.
    rc, out3, err = align(strata, outs["host"], outs["guest"], "--match", MATCH, "--hold-out", "odd", "--dry-run")
    check(rc == 0 and "held out" in out3 and tree_bytes(outs["guest"]) == snap,
          "--hold-out odd --dry-run reports and writes nothing: " +
          " ".join(ln for ln in out3.splitlines() if "inverted" in ln))

    rc, out5, err = align(strata, outs["host"], outs["guest"], "--match", MATCH, "--hold-out", "alternate", "-n")
    check(rc == 0 and "%d used, %d held out" % (n, n) in out5 and "closest to an inversion" in out5 and
          tree_bytes(outs["guest"]) == snap,
          "--hold-out alternate -n: every second message of each direction held out, none written: " +
          " ".join(ln for ln in out5.splitlines() if "closest" in ln))
    # Contradicting messages: said, and the segment keeps the probes' map.
    swapped = os.path.join(work, "guest-swapped")
    shutil.copytree(pristine, swapped)
    rc, out4, err4 = align(strata, outs["host"], swapped, "--match", "syncpp:recv,syncpp:send,k+from")
    sj = json.load(open(os.path.join(swapped, "clocks.json")))
    slink = [lk for lk in sj["links"] if lk["role"] == "follower"][0]
    ssegs = [s for s in slink["segments"] if s["bounded"]]
    check(rc == 1 and "contradict its probes" in err4 and "keeps the probes' map" in err4 and
          slink["refined"]["segments_contradicted"] >= 1 and
          all(s["y0"] == o["y0"] and s["slope"] == o["slope"] and s["knots"] == o["knots"]
              for s, o in zip(ssegs, old) if s.get("contradicting_messages")),
          "receives matched as sends contradict the probes: said per segment, exit 1, the probes' map kept (%s)" %
          err4.strip()[-300:])
    request_reply(check, strata, prog, consumerd, work)
    check.finish()


if __name__ == "__main__":
    main()
