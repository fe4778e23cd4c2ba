#!/usr/bin/python3
"""`strata export` of the known three-part trace of make_timeline_fixture.py
(kernel + pthread program + JVM), checked field by field: the protobuf
output decoded by protoc against Perfetto's field numbers, the JSON output
by a JSON schema and structural checks, and the same timeline in both.

usage: check_export_fixture.py STRATA WORKDIR"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import make_timeline_fixture  # noqa: E402
from strata_testlib import run_ok  # noqa: E402
from timeline_check import check_json, fail, one, packets, protoc_decode  # noqa: E402

S = 1000000000


def ann(ev):
    out = {}
    for a in ev.get("debug_annotations", []):
        for k in ("uint_value", "int_value", "string_value", "double_value"):
            if k in a:
                out[one(a, "name")] = one(a, k)
    return out


def timeline(trace, machine_of=None):
    """Descriptors (last one per uuid wins, as for a renamed thread), slices
    rebuilt per track (begin/end stacks in time order), instants, counters,
    ftrace events.  Each slice, instant and counter has the "machine" of its
    packets (TracePacket.machine_id, 0 when absent); machine_of, a dict,
    gets ("track", uuid) and ("ftrace", index) -> machine.  Checked on the
    way: each machine's packets on sequence 1 + its id, the first of each
    clearing the incremental state (the trace processor reads a machine's
    packets apart); a track's events, a thread and a child track on their
    track's, process's or parent's machine."""
    tracks, slices, instants, counters, ftrace = {}, [], [], [], []
    seen = set()
    pending = {}
    evs = []
    machine_of = {} if machine_of is None else machine_of
    started = set()
    for i, p in enumerate(packets(trace)):
        mach = one(p, "machine_id", 0)
        if "machine_id" in p and not mach:
            fail("packet %d names machine 0 (the host's packets leave machine_id out)" % i)
        if one(p, "trusted_packet_sequence_id") != 1 + mach:
            fail("packet %d of machine %d not on sequence %d" % (i, mach, 1 + mach))
        if mach not in started:
            started.add(mach)
            if one(p, "sequence_flags", 0) != 1:
                fail("packet %d, the first of machine %d, does not clear the incremental state" % (i, mach))
        if "track_descriptor" in p:
            td = one(p, "track_descriptor")
            uuid = one(td, "uuid")
            tracks[uuid] = td
            seen.add(uuid)
            machine_of[("track", uuid)] = mach
            if "parent_uuid" in td and machine_of.get(("track", one(td, "parent_uuid"))) != mach:
                fail("track %r of machine %d under a track of machine %r" %
                     (td, mach, machine_of.get(("track", one(td, "parent_uuid")))))
        elif "track_event" in p:
            te = one(p, "track_event")
            if one(te, "track_uuid") not in seen:
                fail("track event on track %s before its descriptor" % one(te, "track_uuid"))
            if machine_of[("track", one(te, "track_uuid"))] != mach:
                fail("packet %d of machine %d: an event on a track of machine %d" %
                     (i, mach, machine_of[("track", one(te, "track_uuid"))]))
            evs.append((one(p, "timestamp"), i, te, mach))
        elif "ftrace_events" in p:
            fb = one(p, "ftrace_events")
            for fe in fb["event"]:
                machine_of[("ftrace", len(ftrace))] = mach
                ftrace.append((one(fb, "cpu"), fe))
        else:
            fail("unexpected packet %r" % p)
    evs.sort(key=lambda x: (x[0], x[1]))
    for ts, _, te, mach in evs:
        t = one(te, "type")
        track = one(te, "track_uuid")
        if t == "TYPE_SLICE_BEGIN":
            pending.setdefault(track, []).append(dict(name=one(te, "name"), begin=ts, args=ann(te),
                                                      flow_in=te.get("terminating_flow_ids", []),
                                                      flow_out=te.get("flow_ids", []), track=track,
                                                      machine=mach))
        elif t == "TYPE_SLICE_END":
            if not pending.get(track):
                fail("slice end without begin on %s at %d" % (track, ts))
            s = pending[track].pop()
            s["end"] = ts
            s["end_args"] = ann(te)
            s["flow_out"] = s["flow_out"] + te.get("flow_ids", [])
            slices.append(s)
        elif t == "TYPE_INSTANT":
            instants.append(dict(name=one(te, "name"), ts=ts, args=ann(te), track=track, machine=mach))
        elif t == "TYPE_COUNTER":
            counters.append(dict(track=track, ts=ts, value=one(te, "counter_value"), machine=mach))
    if any(pending.values()):
        fail("slices left open: %r" % pending)
    return tracks, slices, instants, counters, ftrace


def thread_of(tracks, uuid):
    """(pid, tid) of a thread track, or of the thread a child track is under."""
    td = tracks[uuid]
    if "thread" not in td:
        td = tracks[one(td, "parent_uuid")]
    th = one(td, "thread")
    return one(th, "pid"), one(th, "tid")


def check_perfetto(path):
    tracks, slices, instants, counters, ftrace = timeline(protoc_decode(path))
    procs = {one(one(td, "process"), "pid"): one(one(td, "process"), "process_name")
             for td in tracks.values() if "process" in td}
    if procs != {500: "app", 700: "java"}:
        fail("processes %r" % procs)
    threads = {}
    for uuid, td in tracks.items():
        if "thread" in td:
            th = one(td, "thread")
            threads[one(th, "tid")] = (one(th, "pid"), one(th, "thread_name", ""))
            if procs.get(one(th, "pid")) is None or tracks[one(td, "parent_uuid")].get("process") is None:
                fail("thread %r not under its process" % th)
    # Java threads by their Java names (not the kernel's "java"), joined to
    # the OS threads the kernel events are on; kernel-only threads named
    # by sched_switch; every thread in the right process.
    if threads != {501: (500, "app"), 502: (500, "worker"), 701: (700, "main"), 702: (700, "Worker-1")}:
        fail("threads %r" % threads)

    def sl(name):
        return [s for s in slices if s["name"] == name]

    work = sl("app:work")
    if len(work) != 1 or (work[0]["begin"], work[0]["end"]) != (S + 1000, S + 2000) or \
            thread_of(tracks, work[0]["track"]) != (500, 501) or work[0]["args"] != {"n": 1}:
        fail("app:work span %r" % work)
    futex = sl("futex")
    if len(futex) != 1 or (futex[0]["begin"], futex[0]["end"]) != (S + 1150, S + 1580) or \
            thread_of(tracks, futex[0]["track"]) != (500, 502) or \
            futex[0]["args"] != {"uaddr": 0xa000, "op": 128} or futex[0]["end_args"] != {"ret": 0}:
        fail("futex syscall slice %r" % futex)
    mon = sl("monitor enter int[]@7645a180")
    if len(mon) != 1 or (mon[0]["begin"], mon[0]["end"]) != (S + 1300, S + 1800) or \
            thread_of(tracks, mon[0]["track"]) != (700, 702) or mon[0]["args"].get("holder") != "main (tid 701)":
        fail("monitor wait %r" % mon)
    holds = sorted(sl("hold"), key=lambda s: s["begin"])
    waits = sl("wait mutex 0xa000")
    if [(s["begin"], s["end"], thread_of(tracks, s["track"])) for s in holds] != \
            [(S + 1100, S + 1500, (500, 501)), (S + 1600, S + 1900, (500, 502))]:
        fail("holds %r" % holds)
    for s in holds:
        if one(tracks[s["track"]], "name") != "mutex 0xa000":
            fail("lock track name %r" % tracks[s["track"]])
    # The wait (1200 to 1600) is on the waiter's own track, where it
    # encloses the raw and named futex syscalls it overlaps (1140 to 1590):
    # it begins 1 ns before them (cmd_export.cpp, nested_begin).
    if len(waits) != 1 or (waits[0]["begin"], waits[0]["end"]) != (S + 1139, S + 1600) or \
            "thread" not in tracks[waits[0]["track"]] or thread_of(tracks, waits[0]["track"]) != (500, 502) or \
            waits[0]["args"] != {}:
        fail("wait %r" % waits)
    # The flow: from a zero-length "release" slice on the thread that
    # unlocked (at its unlock, 1500) to the wait that got the mutex.
    rel = sl("release mutex 0xa000")
    if len(rel) != 1 or (rel[0]["begin"], rel[0]["end"]) != (S + 1500, S + 1500) or \
            "thread" not in tracks[rel[0]["track"]] or thread_of(tracks, rel[0]["track"]) != (500, 501) or \
            rel[0]["args"] != {"to": "worker (tid 502)"}:
        fail("release %r" % rel)
    if len(rel[0]["flow_out"]) != 1 or waits[0]["flow_in"] != rel[0]["flow_out"] or holds[0]["flow_out"]:
        fail("no flow from the release to the waiter: %r -> %r" % (rel[0], waits[0]))
    # The monitor's flow (cmd_export.cpp, "JVM monitor flows"): main (tid
    # 701) owned int[]@7645a180 at Worker-1's contended enter (owner_java_tid
    # 1) and no other thread got it before Worker-1's entered at 1800.
    rel, acq = sl("monitor released int[]@7645a180"), sl("monitor acquired int[]@7645a180")
    if len(rel) != 1 or (rel[0]["begin"], rel[0]["end"]) != (S + 1800, S + 1800) or \
            thread_of(tracks, rel[0]["track"]) != (700, 701) or rel[0]["args"] != {"to": "Worker-1 (tid 702)"}:
        fail("monitor release %r" % rel)
    if len(acq) != 1 or (acq[0]["begin"], acq[0]["end"]) != (S + 1800, S + 1800) or \
            thread_of(tracks, acq[0]["track"]) != (700, 702) or acq[0]["args"] != {"from": "main (tid 701)"}:
        fail("monitor acquisition %r" % acq)
    if len(rel[0]["flow_out"]) != 1 or acq[0]["flow_in"] != rel[0]["flow_out"] or \
            rel[0]["flow_out"] == waits[0]["flow_in"]:
        fail("no flow from the monitor's releaser to its waiter: %r -> %r" % (rel[0], acq[0]))
    raw = sl("syscall 202")
    if len(raw) != 1 or (raw[0]["begin"], raw[0]["end"]) != (S + 1140, S + 1590) or \
            thread_of(tracks, raw[0]["track"]) != (500, 502) or raw[0]["end_args"] != {"id": 202, "ret": 0}:
        fail("raw sys_enter/sys_exit slice %r" % raw)
    if len(slices) != 10:
        fail("%d slices, want 10 (the raw pair after named syscalls is left out): %r" % (len(slices), slices))

    got = sorted((i["ts"] - S, i["name"], thread_of(tracks, i["track"]) if "thread" in tracks[i["track"]]
                  else "process %d" % one(one(tracks[i["track"]], "process"), "pid"), sorted(i["args"].items()))
                 for i in instants)
    want = sorted([
        (1050, "jvm:thread_start", (700, 701), sorted({"name": "main", "java_tid": 1, "os_tid": 701, "daemon": 0}.items())),
        (1060, "jvm:thread_start", (700, 702),
         sorted({"name": "Worker-1", "java_tid": 12, "os_tid": 702, "daemon": 0}.items())),
        (1700, "app:note", (500, 502), [("msg", "hello")]),
        (2500, "irq_handler_entry", (500, 501), sorted({"irq": 5, "name": "eth0"}.items())),
        (3000, "app:note", (500, 501), [("msg", "after loss")]),
        (3000, "events discarded", "process 500", [("count", 3)]),
    ])
    if got != want:
        fail("instants\n got %r\nwant %r" % (got, want))
    if len(counters) != 1 or counters[0]["value"] != 3 or counters[0]["ts"] != S + 3000 or \
            "counter" not in tracks[counters[0]["track"]] or \
            one(tracks[counters[0]["track"]], "name") != "discarded events":
        fail("discarded counter %r" % counters)

    sw = [(cpu, one(fe, "timestamp") - S, one(fe, "pid"), one(fe, "sched_switch"))
          for cpu, fe in ftrace if "sched_switch" in fe]
    want_sw = [
        (1, 1200, 502, ("worker", 502, 120, 1, "swapper/1", 0, 120)),
        (0, 1250, 501, ("app", 501, 120, 0, "java", 702, 120)),
        (0, 1310, 702, ("java", 702, 120, 1, "app", 501, 120)),
        (1, 1560, 0, ("swapper/1", 0, 120, 0, "worker", 502, 120)),
    ]
    keys = ("prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid", "next_prio")
    got_sw = [(c, t, p, tuple(one(s, k, 0) for k in keys)) for c, t, p, s in sw]
    if got_sw != want_sw:
        fail("sched_switch\n got %r\nwant %r" % (got_sw, want_sw))
    wk = [(cpu, one(fe, "timestamp") - S, one(fe, "sched_waking")) for cpu, fe in ftrace if "sched_waking" in fe]
    if len(wk) != 1 or wk[0][:2] != (0, 1550) or \
            tuple(one(wk[0][2], k) for k in ("comm", "pid", "prio", "target_cpu")) != ("worker", 502, 120, 1):
        fail("sched_waking %r" % wk)
    if len(ftrace) != 5:
        fail("%d ftrace events, want 5" % len(ftrace))


def check_chrome_json(path):
    evs = check_json(path)
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in evs if e["ph"] == "M"}
    for k, v in {(500, None): "app", (700, None): "java", (700, 702): "Worker-1", (500, 502): "worker",
                 (0, None): "CPUs", (0, 0): "CPU 0", (0, 1): "CPU 1"}.items():
        if names.get(k) != v:
            fail("JSON name of %r: %r, want %r" % (k, names.get(k), v))
    # Times: microseconds after the trace's first time (1 s + 1000 ns).
    b = [e for e in evs if e["ph"] == "B" and e["name"] == "futex"]
    if len(b) != 1 or b[0]["ts"] != 0.15 or (b[0]["pid"], b[0]["tid"]) != (500, 502):
        fail("JSON futex slice %r" % b)
    # One B/E pair per time a thread ran on a CPU (the E's time the next
    # B's, digit for digit); the idle thread (tid 0) is not drawn, nor a
    # run whose start the trace missed; runs going at the end end at the
    # trace's last time (3000 ns: 2 us).
    runs, open_runs = [], {}
    for e in evs:
        if e["pid"] == 0 and e["ph"] == "B":
            open_runs[e["tid"]] = e
        elif e["pid"] == 0 and e["ph"] == "E":
            b = open_runs.pop(e["tid"])
            runs.append((e["tid"], b["name"], e["name"], b["ts"], e["ts"], b["args"]["tid"], e.get("args")))
    if runs != [(0, "java", "java", 0.25, 0.31, 702, {"tid": 702, "end_state": 1}),
                (0, "app", "app", 0.31, 2.0, 501, None), (1, "worker", "worker", 0.56, 2.0, 502, None)] or \
            open_runs or any(e["ph"] == "X" and e["pid"] == 0 for e in evs):
        fail("JSON CPU slices %r (left open %r)" % (runs, open_runs))
    # The lock wait: an X on the waiter's own thread (speedscope draws it),
    # its flow from the releaser's zero-length X.
    waits = [e for e in evs if e["ph"] == "X" and e["name"] == "wait mutex 0xa000"]
    rel = [e for e in evs if e["ph"] == "X" and e["name"] == "release mutex 0xa000"]
    flows = [e for e in evs if e["ph"] == "f"]
    starts = [e for e in evs if e["ph"] == "s"]
    if len(waits) != 1 or (waits[0]["pid"], waits[0]["tid"], waits[0]["ts"], waits[0]["dur"]) != \
            (500, 502, 0.139, 0.461) or len(flows) != 2 or flows[0]["ts"] != 0.139:
        fail("JSON wait and its flow %r %r" % (waits, flows))
    if len(rel) != 1 or (rel[0]["pid"], rel[0]["tid"], rel[0]["ts"], rel[0]["dur"]) != (500, 501, 0.5, 0) or \
            len(starts) != 2 or (starts[0]["tid"], starts[0]["ts"], starts[0]["id"]) != (501, 0.5, flows[0]["id"]):
        fail("JSON release and its flow %r %r" % (rel, starts))
    ends = [e for e in evs if e["ph"] == "E"]
    if [e["name"] for e in ends if e["tid"] == 502] != ["futex", "syscall 202"]:
        fail("JSON ends not named as their begins: %r" % ends)
    acq = [e for e in evs if e["ph"] == "X" and e["name"] == "monitor acquired int[]@7645a180"]
    if len(acq) != 1 or acq[0]["ts"] != 0.8 or flows[1]["ts"] != 0.8 or \
            (flows[1]["pid"], flows[1]["tid"]) != (700, 702) or (acq[0]["pid"], acq[0]["tid"]) != (700, 702):
        fail("JSON monitor flow %r %r" % (acq, flows))
    c = [e for e in evs if e["ph"] == "C"]
    if len(c) != 1 or c[0]["args"] != {"value": 3} or c[0]["name"] != "discarded events":
        fail("JSON counter %r" % c)


def main():
    strata, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    trace = os.path.join(work, "trace")
    make_timeline_fixture.make(trace)
    pf = os.path.join(work, "out.perfetto-trace")
    js = os.path.join(work, "out.json")
    r = run_ok([strata, "export", trace, "-o", pf])
    if "24 events (3 discarded)" not in r.stderr:
        fail("summary line: %r" % r.stderr)
    check_perfetto(pf)
    run_ok([strata, "export", "--format", "json", "-o", js, trace])
    check_chrome_json(js)
    # The default name, and to standard output.
    run_ok([strata, "export", trace])
    if not os.path.getsize(trace + ".perfetto-trace"):
        fail("no default output")
    out = subprocess.run([strata, "export", "--format=json", "-o", "-", trace], capture_output=True, timeout=60)
    with open(js, "rb") as f:
        if out.returncode != 0 or out.stdout != f.read():
            fail("-o - differs from the file")
    # Usage errors and a missing trace.
    for bad, code in ((["--format", "svg", trace], 2), (["--bogus"], 2), ([os.path.join(work, "nope")], 1)):
        r = subprocess.run([strata, "export"] + bad, capture_output=True, text=True, timeout=60)
        if r.returncode != code or "strata export" not in r.stderr:
            fail("export %r: exit %d %r" % (bad, r.returncode, r.stderr))
    print("ok: export of the fixture checked field by field (protoc, JSON schema)")


if __name__ == "__main__":
    main()
