#!/usr/bin/python3
"""Host-side oracle of jvm.vm_crosslayer: the trace guest-jvm.sh recorded in
the kernel VM with `-e 'jvm:*' -e 'japp:*' -e 'kernel:*'` around
Contend.java (two threads contending for Contend$Hot).

usage: check_crosslayer.py VMOUT [STRATA [NPM_CACHE]]

- `strata record` exited 0; babeltrace2 reads the session (ust and kernel
  sub-traces) with an empty stderr; every japp:step (exactly 300) is there.
- Causal order on one clock, over the whole run: following each Java
  thread's kernel state in babeltrace2's merged order (sys_enter/sys_exit,
  sched_switch out/in), no jvm or japp event of a thread is stamped while
  that thread is inside a system call or switched out: zero inversions
  (all counted; only events of threads whose state is known are judged).
- Contended enters of Contend$Hot that waited over 1 ms (the holder sleeps
  2 ms inside): at least half have the same OS thread's kernel events
  between enter and entered, and futex calls of the waiting thread show.
- With STRATA: `strata export` of the session (issue 36) converts every
  event babeltrace2 reads; protoc decodes it against Perfetto's field
  numbers; each Java thread of jvm:thread_start/thread_exists is the OS
  thread's track, named by its Java name, in the JVM's process; one
  sched_switch per kernel:sched_switch; one monitor-wait slice per paired
  contended enter; the JSON export passes the schema and structural checks.
- With NPM_CACHE: the JSON opened in speedscope (a viewer from the npm
  registry) in headless Chromium (tests/export/speedscope_harness.py):
  every Java thread with slices is a profile named by its Java name, and
  speedscope's parsed profile of each holds its kernel syscall slices and
  monitor waits, each name as many times as the JSON has them (futex on
  the contending threads among them); its screenshot is a picture.
Exit 77 (skip) when the VM run did not happen (no qemu or kernel image).
"""
import os
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import bt_text, trace_messages  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "export"))

SYS_FUTEX = 202  # x86-64


def main():
    vmout = sys.argv[1]
    d = os.path.join(vmout, "crosslayer")
    if not os.path.exists(os.path.join(d, "record.rc")):
        print("SKIP: no cross-layer run in %s (did jvm.vm run?)" % vmout)
        sys.exit(77)
    fails = []

    def check(ok, what):
        print(("ok   " if ok else "FAIL ") + what)
        if not ok:
            fails.append(what)

    rc = open(os.path.join(d, "record.rc")).read().strip()
    check(rc == "0", "strata record --jvm exited 0 in the guest (%s; %s)" %
          (rc, open(os.path.join(d, "record.err")).read()[-300:]))
    out = os.path.join(d, "trace")
    rc, _, _, stderr = bt_text(out, timeout=600)
    check(rc == 0 and stderr.strip() == "", "babeltrace2 reads the session silently (%r)" % stderr[:300])
    evs, lost = [], 0
    procnames = {}  # vpid -> procname of the user sub-traces
    for msg in trace_messages(out):
        if msg.kind == "discarded_events":
            lost += msg.count
            continue
        if msg.kind != "event":
            continue
        # Kernel events are named as lttng-modules names them (no provider).
        name = msg.name
        if msg.env_get("domain") != "kernel":
            procnames[msg.env_int("vpid")] = msg.env_get("procname")
        else:
            name = "kernel:" + name
        evs.append((name, msg.ts, msg.tid, msg.fields))
    steps = sum(1 for e in evs if e[0] == "japp:step")
    check(steps == 300, "exactly 300 japp:step (%d)" % steps)
    check(any(e[0].startswith("kernel:") for e in evs), "kernel events in the same session")
    print("info: %d events, %d discarded" % (len(evs), lost))

    java_tids = {e[2] for e in evs if e[0].startswith(("jvm:", "japp:"))}
    state = {}      # tid -> ("sys"|"out", since) or absent (running in user space)
    known = set()   # tids whose state has been seen change at least once
    inversions, judged = [], 0
    for name, ts, tid, p in evs:
        if name == "kernel:sys_enter" and tid in java_tids:
            state[tid] = ("in a system call", ts)
            known.add(tid)
        elif name == "kernel:sys_exit" and tid in java_tids:
            state.pop(tid, None)
            known.add(tid)
        elif name == "kernel:sched_switch":
            prev, nxt = int(p["prev_tid"]), int(p["next_tid"])
            if prev in java_tids and prev not in state:
                state[prev] = ("switched out", ts)
            if nxt in java_tids and state.get(nxt, ("",))[0] == "switched out":
                state.pop(nxt, None)
        elif name.startswith(("jvm:", "japp:")) and tid in known:
            judged += 1
            if tid in state:
                inversions.append("%s of %d at %d: %s since %d" % (name, tid, ts, state[tid][0], state[tid][1]))
    check(judged > 0 and not inversions, "zero inversions: no Java-side event while its thread is in the kernel "
          "or switched out (%d judged, %d inversions%s)" % (judged, len(inversions),
                                                             ": " + "; ".join(inversions[:3]) if inversions else ""))

    # Underneath each contended enter: the same thread's kernel events.  A
    # contended enter may still be won by spinning (no kernel event), so the
    # oracle is on the enters that waited more than 1 ms by the trace's own
    # clock: most have their thread's kernel events in between, and futex
    # calls show among them (the thread parked).
    pend, pairs, long_pairs, with_kernel, with_futex = {}, 0, 0, 0, 0
    for name, ts, tid, p in evs:
        if name.startswith("kernel:") and tid in pend:
            pend[tid][1].append((name, p))
        if name == "jvm:monitor_contended_enter" and str(p["class"]) == "Contend$Hot":
            pend[tid] = (ts, [])
        elif name == "jvm:monitor_contended_entered" and tid in pend and str(p["class"]) == "Contend$Hot":
            t0, ks = pend.pop(tid)
            pairs += 1
            if ts - t0 > 1000000:
                long_pairs += 1
                with_kernel += 1 if ks else 0
                if any(n == "kernel:sys_enter" and int(q["id"]) == SYS_FUTEX for n, q in ks):
                    with_futex += 1
    print("info: %d contended enters of Contend$Hot, %d waited over 1 ms, %d of those with kernel events of "
          "their thread in between, %d with a futex call" % (pairs, long_pairs, with_kernel, with_futex))
    check(long_pairs > 0 and 2 * with_kernel >= long_pairs and with_futex > 0,
          "contended enters that waited show their thread's kernel events (futex among them) before the entered")
    if len(sys.argv) > 2:
        check_export(sys.argv[2], out, evs, check, sys.argv[3] if len(sys.argv) > 3 else None, procnames)
    print("%d failure(s)" % len(fails))
    sys.exit(1 if fails else 0)


def check_export(strata, trace, evs, check, npm_cache, procnames):
    """The cross-layer session as one timeline (strata export, docs/viewing.md)."""
    import re
    import timeline_check as tc
    pf = trace + ".perfetto-trace"
    r = subprocess.run([strata, "export", trace, "-o", pf], capture_output=True, text=True, timeout=600)
    m = re.search(r"(\d+) events", r.stderr)
    check(r.returncode == 0 and m and int(m.group(1)) == len(evs),
          "strata export converts every event (%r, babeltrace2 %d)" % (r.stderr[-300:], len(evs)))
    if r.returncode != 0:
        return
    tr = tc.protoc_decode(pf)
    threads, procs, sw, monitor_waits = {}, {}, 0, 0
    for p in tc.packets(tr):
        if "track_descriptor" in p and "process" in tc.one(p, "track_descriptor"):
            pd = tc.one(tc.one(p, "track_descriptor"), "process")
            procs[tc.one(pd, "pid")] = tc.one(pd, "process_name", "")
        if "track_descriptor" in p and "thread" in tc.one(p, "track_descriptor"):
            th = tc.one(tc.one(p, "track_descriptor"), "thread")
            threads[tc.one(th, "tid")] = (tc.one(th, "pid"), tc.one(th, "thread_name", ""))
        elif "ftrace_events" in p:
            sw += sum(1 for fe in tc.one(p, "ftrace_events")["event"] if "sched_switch" in fe)
        elif "track_event" in p:
            te = tc.one(p, "track_event")
            if tc.one(te, "type") == "TYPE_SLICE_BEGIN" and tc.one(te, "name").startswith("monitor enter "):
                monitor_waits += 1
    java = {}
    for name, ts, tid, p in evs:
        if name in ("jvm:thread_start", "jvm:thread_exists") and int(p["os_tid"]) > 0:
            java[int(p["os_tid"])] = str(p["name"])
    pid = {threads.get(t, (None,))[0] for t in java}
    bad = {t: (n, threads.get(t)) for t, n in java.items() if threads.get(t, (0, ""))[1] != n}
    check(java and not bad and len(pid) == 1 and None not in pid,
          "every Java thread is its OS thread's track, named by its Java name, in one process (%d threads; %r)" %
          (len(java), dict(list(bad.items())[:3])))
    # Named by its user sub-trace, not by the comm the kernel saw first
    # (the JVM's before its exec was strata's).
    check(procnames and all(procs.get(p) == n for p, n in procnames.items()),
          "each traced process is named by its sub-trace's procname (%r; export %r)" %
          (procnames, {p: procs.get(p) for p in procnames}))
    nsw = sum(1 for e in evs if e[0] == "kernel:sched_switch")
    check(sw == nsw, "one Perfetto sched_switch per kernel sched_switch (%d, %d)" % (sw, nsw))
    pend, pairs = {}, 0
    for name, ts, tid, p in evs:
        if name == "jvm:monitor_contended_enter":
            pend[tid] = True
        elif name == "jvm:monitor_contended_entered" and pend.pop(tid, False):
            pairs += 1
    check(monitor_waits == pairs, "one monitor-wait slice per paired contended enter (%d, %d)" % (monitor_waits, pairs))
    js = trace + ".json"
    r = subprocess.run([strata, "export", "--format=json", trace, "-o", js], capture_output=True, text=True,
                       timeout=600)
    check(r.returncode == 0, "strata export --format json exits 0 (%r)" % r.stderr[-300:])
    if r.returncode == 0:
        tc.check_json(js)
        check(True, "the JSON export passes the schema and structural checks")
        if npm_cache:
            check_viewer(js, npm_cache, evs, check)


def check_viewer(js, npm_cache, evs, check):
    """The JSON in speedscope: Java threads by name, their syscall and
    monitor slices counted in speedscope's own parsed profiles."""
    import json
    import speedscope_harness as ss
    work = os.path.join(os.path.dirname(js), "speedscope")
    os.makedirs(work, exist_ok=True)
    try:
        site = ss.site(npm_cache, work)
    except ss.Skip as e:
        print("info: speedscope not checked: %s" % e)
        return
    java = {}
    for name, ts, tid, p in evs:
        if name in ("jvm:thread_start", "jvm:thread_exists") and int(p["os_tid"]) > 0:
            java[int(p["os_tid"])] = str(p["name"])
    syscalls = {name[len("kernel:syscall_entry_"):] for name, _, _, _ in evs
                if name.startswith("kernel:syscall_entry_")}
    with open(js) as f:
        tev = json.load(f)["traceEvents"]
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in tev if e["ph"] == "M"}
    # profile name -> {slice name: count} of the Java threads' closed
    # syscall and monitor slices (a slice the trace does not close, as
    # exit's, is not drawn)
    want, open_b = {}, {}
    for e in tev:
        if e["ph"] not in "BEX" or e.get("tid") not in java or (e["ph"] == "X" and not e["dur"]):
            continue
        prof = ss.thread_profile_name(names.get((e["pid"], None)), e["pid"], names.get((e["pid"], e["tid"])),
                                      e["tid"])
        calls = want.setdefault(prof, {})
        if e["ph"] == "B":
            open_b.setdefault(prof, []).append(e["name"])
            continue
        if e["ph"] == "E" and open_b.get(prof):
            open_b[prof].pop()
        if e["name"] in syscalls or e["name"].startswith(("monitor enter ", "syscall ")):
            calls[e["name"]] = calls.get(e["name"], 0) + 1
    png = os.path.join(work, "crosslayer.png")
    dom, parsed = ss.load(site, js, work, screenshot=png)
    got = {}
    for p in (parsed or {}).get("profiles", []):
        if p["name"] in want:
            got[p["name"]] = {k: v for k, v in ss.calls_by_name(p).items()
                              if k in syscalls or k.startswith(("monitor enter ", "syscall "))}
    named = sorted(n for n in want if any(", %s (tid " % j in n for j in java.values()))
    check(parsed is not None and set(got) == set(want) and len(named) == len(want),
          "speedscope has a profile, named by its Java name, for each of the %d Java threads with slices (%r)" %
          (len(want), sorted(set(want) ^ set(got)) or named[:6]))
    diff = {n: {k: (got.get(n, {}).get(k), c) for k, c in want[n].items() if got.get(n, {}).get(k) != c}
            for n in want}
    diff = {n: d for n, d in diff.items() if d}
    futex = sum(c.get("futex", 0) for n, c in got.items() if "contender" in n)
    check(not diff and futex > 0,
          "speedscope's parsed profiles hold each Java thread's syscall and monitor slices as the JSON has "
          "them (%d names; futex on the contenders %d times; differences (speedscope, JSON): %r)" %
          (sum(len(c) for c in want.values()), futex, dict(list(diff.items())[:3])))
    w, h, colours = ss.check_picture(png)
    check(True, "speedscope's screenshot is a picture (%dx%d, %d colours)" % (w, h, colours))


main()
