#!/usr/bin/python3
"""`strata export` of a real program: pt_workload's contend mode recorded
under the pthread preload.  Oracles: babeltrace2's event count, and `strata
analyze mutex --format=json` (acquisitions, contended acquisitions, total
wait of each lock) against the slices of the decoded Perfetto trace; the
JSON output passes the schema and structural checks.

usage: check_export_pthread.py STRATA PT_WORKLOAD WORKDIR"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timeline_check import check_json, fail, one, packets, protoc_decode, record_contend, run  # noqa: E402


KINDS = ("mutex ", "rwlock ", "semaphore ")


def main():
    strata, workload, work = sys.argv[1:4]
    trace = record_contend(strata, workload, work, 4)
    rep = json.loads(run([strata, "analyze", "mutex", trace, "--format=json"]).stdout)
    if rep["discarded"]:
        print("SKIP: the tracer lost events; counts would not be exact")
        return 77
    bt = run(["babeltrace2", trace]).stdout.count("\n")

    pf = os.path.join(work, "out.perfetto-trace")
    r = run([strata, "export", trace, "-o", pf])
    m = re.search(r"(\d+) events \(0 discarded\)", r.stderr)
    if not m or int(m.group(1)) != bt:
        fail("export counted %r, babeltrace2 %d" % (r.stderr, bt))
    tr = protoc_decode(pf)
    names = {}
    thread_tracks = set()
    begins = {}  # track -> stack of (name, ts, flow_in)
    per_lock = {}  # track name -> [holds, waits, wait_ns]
    flows_out, flows_in = {}, {}
    evs = []
    for i, p in enumerate(packets(tr)):
        if "track_descriptor" in p:
            td = one(p, "track_descriptor")
            names[one(td, "uuid")] = one(td, "name", "")
            if "thread" in td:
                thread_tracks.add(one(td, "uuid"))
        elif "track_event" in p:
            evs.append((one(p, "timestamp"), i, one(p, "track_event")))
    evs.sort(key=lambda x: (x[0], x[1]))
    for ts, _, te in evs:
        track = one(te, "track_uuid")
        if one(te, "type") == "TYPE_SLICE_BEGIN":
            begins.setdefault(track, []).append((one(te, "name"), ts))
            for f in te.get("terminating_flow_ids", []):
                if f in flows_in:
                    fail("flow %s ends twice" % f)
                flows_in[f] = track
            for f in te.get("flow_ids", []):
                if f in flows_out:
                    fail("flow %s starts twice" % f)
                flows_out[f] = track
        elif one(te, "type") == "TYPE_SLICE_END":
            name, t0 = begins[track].pop()
            if te.get("flow_ids"):
                fail("a flow from a slice's end: %r" % te)
            # Holds on the lock's track (per thread), waits on the
            # waiter's own track, named after the lock (its kind and
            # address: the rwlock is contended too when the host is busy).
            if names[track].startswith(KINDS) and name == "hold":
                per_lock.setdefault(names[track], [0, 0, 0])[0] += 1
            elif name.startswith(tuple("wait " + k for k in KINDS)):
                if track not in thread_tracks:
                    fail("%s not on a thread's own track: %r" % (name, names.get(track)))
                st = per_lock.setdefault(name[5:], [0, 0, 0])
                st[1] += 1
                st[2] += ts - t0
    checked = 0
    for lk in rep["locks"]:
        key = "%s 0x%x" % (lk["kind"], int(lk["address"], 16))
        if key not in per_lock:
            continue
        holds, waits, wait_ns = per_lock[key]
        if (holds, waits, wait_ns) != (lk["acquisitions"], lk["contended"], lk["wait_total_ns"]):
            fail("%s: export holds/waits/wait %r, analyze %r" %
                 (key, (holds, waits, wait_ns), (lk["acquisitions"], lk["contended"], lk["wait_total_ns"])))
        checked += 1
    if not checked:
        fail("no lock of the analysis found in the export: %r" % sorted(per_lock))
    # Flows: each from a release on one thread's track to a wait on
    # another's, paired exactly (no flow from a release nobody waited
    # for), and at least one (the program contends).
    bad = [(f, t, flows_out.get(f)) for f, t in flows_in.items() if flows_out.get(f) in (None, t)]
    if not flows_in or bad or set(flows_out) != set(flows_in):
        fail("%d flows in, %d out; not from another thread's release: %r" %
             (len(flows_in), len(flows_out), bad[:10]))
    if len(flows_in) > sum(v[1] for v in per_lock.values()):
        fail("%d flows for %d waits" % (len(flows_in), sum(v[1] for v in per_lock.values())))

    js = os.path.join(work, "out.json")
    run([strata, "export", "--format=json", trace, "-o", js])
    evs = check_json(js)
    b = sum(1 for e in evs if e["ph"] == "b" and e["name"].startswith(tuple("hold " + k for k in KINDS)))
    if b != sum(v[0] for v in per_lock.values()):
        fail("JSON holds %d, Perfetto %d" % (b, sum(v[0] for v in per_lock.values())))
    x = sum(1 for e in evs if e["ph"] == "X" and e["name"].startswith(tuple("wait " + k for k in KINDS)))
    if x != sum(v[1] for v in per_lock.values()):
        fail("JSON waits %d, Perfetto %d" % (x, sum(v[1] for v in per_lock.values())))
    # A release names the thread it gave the lock to: "tid N" here, a
    # user space trace knows no thread's name (another thread's tid).
    for e in evs:
        if e["ph"] == "X" and e["name"].startswith("release "):
            m = re.match(r"^tid (\d+)$", e.get("args", {}).get("to", ""))
            if not m or int(m.group(1)) == e["tid"]:
                fail("a release's receiver: %r" % e)
    s_, f_ = (sorted(e["id"] for e in evs if e["ph"] == ph) for ph in "sf")
    if s_ != f_ or len(f_) != len(flows_in):
        fail("JSON flows: %d starts, %d ends, Perfetto %d" % (len(s_), len(f_), len(flows_in)))
    print("ok: %d events exported; %d locks agree with analyze mutex; %d flows" % (bt, checked, len(flows_in)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
