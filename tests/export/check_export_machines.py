#!/usr/bin/python3
"""`strata export` and `strata analyze` of two machines whose pids, tids and
lock addresses coincide (docs/viewing.md, "Several machines").

usage: check_export_machines.py STRATA WORKDIR

The trace of make_timeline_fixture.py written twice side by side, as
machine "sim-host" and machine "sim-guest" (env.hostname; the guest's env
says it follows the clock link "host", and its directory sorts first): the
same processes (app 500, java 700), threads (501, 502, 701, 702), mutex
0xa000 and monitor int[]@7645a180 on both, the guest with two events more
(a note on tid 501, an irq on its idle task).  Oracles:
  * Perfetto (decoded by protoc): the host is machine 1 (its ids 1 << 22 |
    id, its CPUs 1000 + cpu), the guest machine 2; every packet of the
    guest's (track descriptors of its machine, processes, threads, lock
    and counter tracks; its events; its sched events) carries
    TracePacket.machine_id 2 on sequence 3, every packet of the host's none
    on sequence 1.  One top-level track per machine, named by it; four
    processes with four distinct pids and tracks, app 500 and java 700 on
    each machine, each named "machine: procname (pid N)"; eight threads,
    each under a process of its own machine; the guest's idle-task irq on a
    "kernel" track under the guest's machine track; sched events on each
    machine's own CPU numbers; every flow within one machine.  Each
    machine's part, its ids taken back to the real ones, is exactly the
    export of the host's trace alone, plus the guest's two events for the
    guest: 22 and 24 items, counted by machine_id.
  * JSON: the same, per machine: each machine a process of its own (its
    CPUs), every other event equal to the single machine's export.
  * analyze mutex and monitor: one lock and one monitor per machine, each
    with the single machine's figures (not one of both with their sum).
"""
import json
import os
import re
import shutil
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import make_timeline_fixture  # noqa: E402
from strata_testlib import run_ok  # noqa: E402
from timeline_check import check_json, fail, one, protoc_decode  # noqa: E402
from check_export_fixture import timeline  # noqa: E402

SHIFT = 22  # exp::kMachineShift: machine m's ids are m << 22 | id
MASK = (1 << SHIFT) - 1
CPU_SPAN = 1000  # exp::kCpuSpan
HOSTS = ("sim-host", "sim-guest")
PROC_NAME = re.compile(r"^(sim-host|sim-guest): (\w+) \(pid (\d+)\)$")


def perfetto_parts(path, multi):
    """(machine -> Counter of the export's items (slices, instants, counters,
    sched events) with real ids, TracePacket.machine_id -> how many items);
    machine None for a one-machine export.  Checks the structure of a
    several-machine export on the way."""
    machine_of = {}  # ("track", uuid) or ("ftrace", index) -> its packet's machine_id
    tracks, slices, instants, counters, ftrace = timeline(protoc_decode(path), machine_of)
    groups = {u: one(td, "name") for u, td in tracks.items()
              if set(td) == {"uuid", "name"}}  # a machine's track: a name, nothing else
    # Perfetto's machine of each machine: the host's machine_id left out.
    pmach = {None: 0}
    if multi:
        pmach = {name: machine_of[("track", u)] for u, name in groups.items()}
        if pmach != {"sim-host": 0, "sim-guest": 2}:
            fail("machine tracks' machine_id %r, want the host's none (0) and the guest's 2" % pmach)
    elif set(machine_of.values()) != {0}:
        fail("a one-machine export with a machine_id: %r" % sorted(set(machine_of.values())))
    procs = {}  # pid -> (machine, real pid)
    for uuid, td in tracks.items():
        if "process" in td:
            pd = one(td, "process")
            pid, name = one(pd, "pid"), one(pd, "process_name")
            if not multi:
                procs[pid] = (None, pid)
                continue
            m = PROC_NAME.match(name)
            if not m or int(m.group(3)) != pid & MASK or "parent_uuid" in td:
                fail("process %r named %r" % (pid, name))
            procs[pid] = (m.group(1), int(m.group(3)))
            if machine_of[("track", uuid)] != pmach[m.group(1)]:
                fail("process %r of %s with machine_id %d" % (name, m.group(1), machine_of[("track", uuid)]))
    machine_of_num = {pid >> SHIFT: mach for pid, (mach, _) in procs.items()}
    if multi:
        if machine_of_num != {1: "sim-host", 2: "sim-guest"}:
            fail("machine numbers %r: want the host (the guest follows its clock link) first" % machine_of_num)
        # The same pid on two machines: two process tracks, one per machine_id.
        for rpid in (500, 700):
            same = [(u, machine_of[("track", u)]) for u, td in tracks.items()
                    if "process" in td and one(one(td, "process"), "pid") & MASK == rpid]
            if len(same) != 2 or len({u for u, _ in same}) != 2 or sorted(pm for _, pm in same) != [0, 2]:
                fail("pid %d: process tracks %r, want one on each machine_id (0, 2)" % (rpid, same))
        if sorted(groups.values()) != sorted(HOSTS):
            fail("machine tracks %r, want one per machine %r" % (groups, HOSTS))
        if sorted(procs.values()) != sorted((h, p) for h in HOSTS for p in (500, 700)) or len(procs) != 4:
            fail("processes %r: want app 500 and java 700 on each machine, four pids" % procs)
        if len(machine_of_num) != 2 or any(pid >> SHIFT == 0 for pid in procs):
            fail("machines' pid ranges %r" % machine_of_num)

    def where(uuid):
        """(machine, what the track is, with real ids)."""
        td = tracks[uuid]
        if "thread" in td:
            th = one(td, "thread")
            pid, tid = one(th, "pid"), one(th, "tid")
            parent = tracks[one(td, "parent_uuid")]
            if one(one(parent, "process"), "pid") != pid or (multi and tid >> SHIFT != pid >> SHIFT):
                fail("thread %r not under its process of its machine" % td)
            mach, rpid = procs[pid]
            return mach, ("thread", rpid, tid & MASK if multi else tid)
        if "process" in td:
            mach, rpid = procs[one(one(td, "process"), "pid")]
            return mach, ("process", rpid)
        if "parent_uuid" not in td:
            return None, ("global", one(td, "name"))
        p = one(td, "parent_uuid")
        if p in groups:
            return groups[p], ("machine", one(td, "name"))
        mach, what = where(p)
        return mach, what + (one(td, "name"),)

    parts = {}
    per_machine_id = Counter()

    def add(mach, item, machine_id):
        if machine_id != pmach[mach]:
            fail("%s's item %r in a packet of machine_id %d, want %d" % (mach, item, machine_id, pmach[mach]))
        per_machine_id[machine_id] += 1
        parts.setdefault(mach, Counter())[item] = parts.setdefault(mach, Counter())[item] + 1

    flows = {}
    for s in slices:
        mach, w = where(s["track"])
        for f in s["flow_in"] + s["flow_out"]:
            flows.setdefault(f, set()).add(mach)
        add(mach, ("slice", s["name"], s["begin"], s["end"], w, tuple(sorted(s["args"].items())),
                   tuple(sorted(s["end_args"].items())), bool(s["flow_in"]), bool(s["flow_out"])), s["machine"])
    if any(len(ms) != 1 for ms in flows.values()):
        fail("a flow between machines: %r" % flows)
    for i in instants:
        mach, w = where(i["track"])
        if w == ("global", "kernel"):  # one machine's kernel track: its machine's in the other
            w = ("machine", "kernel")
        add(mach, ("instant", i["name"], i["ts"], w, tuple(sorted(i["args"].items()))), i["machine"])
    for c in counters:
        mach, w = where(c["track"])
        add(mach, ("counter", c["ts"], c["value"], w), c["machine"])
    for k, (cpu, fe) in enumerate(ftrace):
        kind = [k for k in fe if k not in ("timestamp", "pid")][0]
        fields = one(fe, kind)
        real = {k: (v[0] & MASK if multi and k.endswith("pid") else v[0]) for k, v in fields.items()}
        if "target_cpu" in real and multi:
            if real["target_cpu"] // CPU_SPAN != cpu // CPU_SPAN:
                fail("a wakeup's target CPU on another machine: %r" % fe)
            real["target_cpu"] %= CPU_SPAN
        ids = [v[0] for k, v in fields.items() if k.endswith("pid") and v[0]] + [one(fe, "pid")]
        mach = None
        if multi:
            mach = machine_of_num.get(cpu // CPU_SPAN)
            if mach is None or any(i and i >> SHIFT != cpu // CPU_SPAN for i in ids):
                fail("sched event on CPU %d of no machine or with another machine's threads: %r" % (cpu, fe))
        add(mach, ("ftrace", cpu % CPU_SPAN if multi else cpu, one(fe, "timestamp"), kind,
                   one(fe, "pid") & MASK if multi else one(fe, "pid"), tuple(sorted(real.items()))),
            machine_of[("ftrace", k)])
    return parts, per_machine_id


def json_parts(path, multi):
    """machine -> Counter of the JSON's events but its metadata, with real
    ids (flow and async ids left out: numbered across the trace)."""
    evs = check_json(path)
    names = {e["pid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    procs = {}  # pid -> (machine, real pid, or "machine" for a machine's own process)
    for pid, name in names.items():
        if not multi:
            procs[pid] = (None, "machine" if name == "CPUs" else pid)
            continue
        m = PROC_NAME.match(name)
        if m and int(m.group(3)) == pid & MASK and pid >> SHIFT:
            procs[pid] = (m.group(1), int(m.group(3)))
        elif name in HOSTS and pid & MASK == 0 and pid:
            procs[pid] = (name, "machine")
        else:
            fail("JSON process %d named %r" % (pid, name))
    if multi:
        if sorted(procs.values(), key=str) != sorted([(h, p) for h in HOSTS for p in (500, 700, "machine")], key=str):
            fail("JSON processes %r" % procs)
        sort = {e["pid"]: e["args"]["sort_index"] for e in evs if e["ph"] == "M" and e["name"] == "process_sort_index"}
        if set(sort) != set(procs) or any(sort[p] != p >> SHIFT for p in procs):
            fail("JSON processes' sort index is not their machine's: %r" % sort)
    parts = {}
    for e in evs:
        if e["ph"] == "M":
            if e["pid"] not in procs:
                fail("JSON metadata of no process %r" % e)
            continue
        mach, rpid = procs[e["pid"]]
        tid = e.get("tid")
        if tid is not None and multi and rpid != "machine":
            if tid >> SHIFT != e["pid"] >> SHIFT:
                fail("JSON thread %d in a process of another machine: %r" % (tid, e))
            tid &= MASK
        args = dict(e.get("args", {}))
        if "tid" in args and multi:
            args["tid"] &= MASK
        item = tuple(sorted((k, json.dumps(v, sort_keys=True)) for k, v in e.items()
                            if k not in ("pid", "tid", "id", "args")))
        parts.setdefault(mach, Counter())[(item, rpid, tid, json.dumps(args, sort_keys=True))] += 1
    return parts


def check_analyze(strata, trace):
    """One lock and one monitor per machine, each as in the single machine's
    trace."""
    for what, name in (("mutex", "0xa000"), ("monitor", "int[]@7645a180")):
        rep = json.loads(run_ok([strata, "analyze", what, trace, "--format=json"]).stdout)
        procs = {p["index"]: p for p in rep["processes"]}
        if sorted(p.get("machine") for p in procs.values()) != sorted(HOSTS):
            fail("analyze %s: processes %r, want one per machine" % (what, rep["processes"]))
        locks = [lk for lk in rep["locks"] if lk["name"] == name]
        if sorted(procs[lk["process"]]["machine"] for lk in locks) != sorted(HOSTS) or len(rep["locks"]) != 2:
            fail("analyze %s: locks %r, want %s once per machine" % (what, rep["locks"], name))
        for lk in locks:
            want = {"contended": 1, "wait_total_ns": 400 if what == "mutex" else 500}
            if what == "mutex":
                want.update(acquisitions=2, holds=2, hold_total_ns=700)
            else:
                want.update(waiters={"Worker-1": 1}, holders={"main": 1})
            got = {k: lk[k] for k in want}
            if got != want:
                fail("analyze %s on %s: %r, want %r" % (what, procs[lk["process"]]["machine"], got, want))
        text = run_ok([strata, "analyze", what, trace]).stdout
        if not all(h + ": " in text for h in HOSTS):
            fail("analyze %s names no machine in its text:\n%s" % (what, text))


def guest_extra(what, parts, single):
    """The host's part must be the one machine's export, the guest's hold
    it: what the guest's has more."""
    if set(parts) != set(HOSTS):
        fail("%s: items of machines %r" % (what, sorted(parts, key=str)))
    if parts["sim-host"] != single:
        fail("%s: the host's part differs from its trace alone:\n only there %r\n only alone %r" %
             (what, parts["sim-host"] - single, single - parts["sim-host"]))
    if single - parts["sim-guest"]:
        fail("%s: the guest's part lacks %r" % (what, single - parts["sim-guest"]))
    return parts["sim-guest"] - single


def main():
    strata, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    one_trace, both = os.path.join(work, "one"), os.path.join(work, "both")
    make_timeline_fixture.make(one_trace, "sim-host")
    make_timeline_fixture.make(os.path.join(both, "host"), "sim-host", 32)
    make_timeline_fixture.make(os.path.join(both, "guest"), "sim-guest", 96, extra=True, follows="host")

    pf1, pf2 = os.path.join(work, "one.perfetto-trace"), os.path.join(work, "both.perfetto-trace")
    run_ok([strata, "export", "-o", pf1, one_trace])
    r = run_ok([strata, "export", "-o", pf2, both])
    if "50 events (6 discarded)" not in r.stderr:
        fail("summary line: %r" % r.stderr)
    single = perfetto_parts(pf1, False)[0][None]
    parts, per_machine_id = perfetto_parts(pf2, True)
    extra = guest_extra("Perfetto", parts, single)
    S = make_timeline_fixture.S
    want = Counter({("instant", "app:note", S + 1950, ("thread", 500, 501), (("msg", "guest only"),)): 1,
                    ("instant", "irq_handler_entry", S + 2550, ("machine", "kernel"),
                     (("irq", 6), ("name", "virtio0"))): 1})
    if extra != want:
        fail("Perfetto: the guest's part is not its trace's: more %r" % extra)
    n = sum(single.values())
    if n != 22:  # check_export_fixture.py: 10 slices, 6 instants, 1 counter, 5 sched events
        fail("Perfetto: %d items in the one machine's export, want 22" % n)
    if per_machine_id != Counter({0: 22, 2: 24}):
        fail("Perfetto: items per machine_id %r, want the host's 22 (none) and the guest's 24 (2)" %
             dict(per_machine_id))

    js1, js2 = os.path.join(work, "one.json"), os.path.join(work, "both.json")
    run_ok([strata, "export", "--format", "json", "-o", js1, one_trace])
    run_ok([strata, "export", "--format", "json", "-o", js2, both])
    jsingle = json_parts(js1, False)[None]
    jextra = guest_extra("JSON", json_parts(js2, True), jsingle)
    if sorted((str(k[1]), k[2] or 0) for k in jextra) != [("500", 501), ("machine", 0)] or sum(jextra.values()) != 2:
        fail("JSON: the guest's part is not its trace's: more %r" % jextra)
    if sum(jsingle.values()) != 34:
        fail("JSON: %d events in the one machine's export, want 34" % sum(jsingle.values()))
    # Thread names carry the real tid: "tid N" until the name is known.
    for e in check_json(js2):
        if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] & MASK:
            want = r"^(tid %d|\S+ \(tid %d\))$" % (e["tid"] & MASK, e["tid"] & MASK)
            if not re.match(want, e["args"]["name"]):
                fail("JSON thread name %r" % e)
    check_analyze(strata, both)
    print("ok: two machines with equal pids, tids and locks kept apart: Perfetto %d + %d items (the guest's "
          "with machine_id 2), JSON %d + %d events, one group each, analyze one lock and one monitor each" %
          (n, n + 2, sum(jsingle.values()), sum(jsingle.values()) + 2))


if __name__ == "__main__":
    main()
