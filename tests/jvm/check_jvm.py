#!/usr/bin/python3
"""The JVM agent and the Java API under `strata record --jvm` (docs/jvm.md).

usage: check_jvm.py STRATA CLASSPATH WORKDIR MODE [N]

Runs `strata record --jvm -- java -cp CLASSPATH JvmApp MODE N` (MODE:
return, exit, halt or kill; kill: SIGKILL to the JVM once it printed
"ready").  babeltrace2 is the oracle:
- it reads the trace with nothing on stderr;
- japp:step: exactly N events, i = 0..N-1 in order, every field as emitted;
- the thread map: jvm:thread_start of worker-0 and worker-1 carry the OS
  tids that /proc/self/task showed the program for those names, and their
  Java thread ids are distinct;
- JvmApp$Hot: at least one jvm:monitor_contended_enter of that class with
  a Java stack naming JvmApp, each followed on the same OS thread by a
  jvm:monitor_contended_entered of the same monitor (class, hash);
- a timed-out monitor_wait/monitor_waited pair on JvmApp$Hot;
- jvm:gc_start and jvm:gc_finish between japp:mark before_gc and after_gc;
- jvm:vm_start; jvm:vm_death when the JVM ended by return or exit;
- `strata analyze monitor`: JvmApp$Hot is the hottest monitor, with the
  trace's count of contended enters and its total wait, waiters (and, with
  STRATA_JVM_OWNER=1 in the return run, holders) among the workers, call
  sites in JvmApp's lambda, and the HTML report names it.
"""
import json
import os
import shutil
import signal
import subprocess
import sys

import bt2

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks  # noqa: E402


def main():
    strata, cp, work, mode = sys.argv[1:5]
    n = int(sys.argv[5]) if len(sys.argv) > 5 else 5000
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    out = os.path.join(work, "trace")
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env.pop("JAVA_TOOL_OPTIONS", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "consumerd.sock")
    owner = mode == "return"  # the owner lookup (a safepoint per enter) in one run
    if owner:
        env["STRATA_JVM_OWNER"] = "1"
    check = Checks()
    cmd = [strata, "record", "--jvm", "-e", "jvm:*", "-e", "japp:*", "--subbuf-size", "256K",
           "--subbuf-count", "16", "-o", out, "--", "java", "-Xmx256m", "-cp", cp, "JvmApp", mode,
           str(n)]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    if mode == "kill":
        for ln in p.stdout:
            lines.append(ln)
            if ln.startswith("ready pid="):
                os.kill(int(ln.split("=")[1]), signal.SIGKILL)
                break
    so, se = p.communicate(timeout=300)
    lines += so.splitlines(True)
    sys.stderr.write(se)
    rc_ok = p.returncode == (128 + signal.SIGKILL if mode == "kill" else 0)
    check(rc_ok, "strata record exits with the JVM's status (got %d)" % p.returncode)
    tasks = {}
    for ln in lines:
        w = ln.split()
        if len(w) >= 3 and w[0] == "task":
            tasks[" ".join(w[2:])] = int(w[1])
    check("worker-0" in tasks and "worker-1" in tasks,
          "the program listed its worker threads in /proc (%r)" % sorted(tasks))

    bt = subprocess.run(["babeltrace2", out], capture_output=True, text=True, timeout=300)
    check(bt.returncode == 0 and bt.stderr.strip() == "",
          "babeltrace2 reads the trace silently (rc %d, stderr %r)" % (bt.returncode, bt.stderr[:300]))
    steps, bad = [], 0
    evs = []  # (ts, name, vtid, payload dict)
    for msg in bt2.TraceCollectionMessageIterator(out):
        if type(msg) is not bt2._EventMessageConst:
            continue
        ev = msg.event
        name = ev.name
        if not (name.startswith("jvm:") or name.startswith("japp:")):
            continue
        pl = {str(k): ev.payload_field[k] for k in ev.payload_field.keys()} if ev.payload_field else {}
        vtid = int(ev.common_context_field["vtid"]) if ev.common_context_field is not None else -1
        evs.append((msg.default_clock_snapshot.ns_from_origin, name, vtid, pl))
        if name == "japp:step":
            i = int(pl["i"])
            steps.append(i)
            if (int(pl["big"]) != i * 1000000007 or float(pl["ratio"]) != i / 4.0 or
                    int(pl["flag"]) != (1 if i % 2 == 0 else 0) or str(pl["what"]) != "s%d" % (i % 3)):
                bad += 1
    check(steps == list(range(n)), "japp:step: %d events in order (read %d)" % (n, len(steps)))
    check(bad == 0, "japp:step: every field as emitted (%d wrong)" % bad)

    starts = {str(p["name"]): (int(p["os_tid"]), int(p["java_tid"]), vt)
              for _, nm, vt, p in evs if nm == "jvm:thread_start"}
    for w in ("worker-0", "worker-1"):
        got = starts.get(w)
        check(got is not None and got[0] == tasks.get(w),
              "thread map: %s has OS tid %s in the trace, %s in /proc" % (w, got and got[0], tasks.get(w)))
        check(got is not None and got[2] == got[0],
              "thread map: %s's thread_start was emitted on that OS thread" % w)
    jt = [starts[w][1] for w in ("worker-0", "worker-1") if w in starts]
    check(len(set(jt)) == 2, "worker Java thread ids are distinct (%r)" % jt)

    hot = "JvmApp$Hot"
    enters = [(t, vt, p) for t, nm, vt, p in evs if nm == "jvm:monitor_contended_enter" and str(p["class"]) == hot]
    entered = [(t, vt, p) for t, nm, vt, p in evs if nm == "jvm:monitor_contended_entered" and str(p["class"]) == hot]
    check(len(enters) >= 1, "contended enters on %s (%d)" % (hot, len(enters)))
    check(all("JvmApp" in str(p["stack"]) for _, _, p in enters),
          "each contended enter carries a Java stack naming JvmApp")
    unmatched = 0
    for t, vt, p in enters:
        if not any(t2 >= t and vt2 == vt and int(p2["hash"]) == int(p["hash"]) for t2, vt2, p2 in entered):
            unmatched += 1
    check(unmatched == 0, "every contended enter is followed by its entered on the same thread (%d not)" % unmatched)
    waits = [p for _, nm, _, p in evs if nm == "jvm:monitor_waited" and str(p["class"]) == hot]
    check(any(int(p["timed_out"]) == 1 for p in waits), "a timed-out monitor_waited on %s" % hot)

    marks = {str(p["what"]): t for t, nm, _, p in evs if nm == "japp:mark"}
    b, a = marks.get("before_gc"), marks.get("after_gc")
    gcs = [t for t, nm, _, _ in evs if nm == "jvm:gc_start"]
    gcf = [t for t, nm, _, _ in evs if nm == "jvm:gc_finish"]
    check(b is not None and a is not None and any(b <= s <= a for s in gcs) and any(b <= f <= a for f in gcf),
          "jvm:gc_start and gc_finish between the System.gc() marks")
    names = {nm for _, nm, _, _ in evs}
    check("jvm:vm_start" in names, "jvm:vm_start recorded")
    if mode in ("return", "exit"):
        check("jvm:vm_death" in names, "jvm:vm_death recorded")
    html = os.path.join(work, "monitors.html")
    an = subprocess.run([strata, "analyze", "monitor", out, "--format=json", "--report=" + html],
                        capture_output=True, text=True, timeout=120)
    mons = json.loads(an.stdout)["monitors"] if an.returncode == 0 else []
    top = mons[0] if mons else {}
    total = sum(int(p["wait_ns"]) for _, _, p in entered)
    check(top.get("class") == hot and top.get("contended") == len(enters) and top.get("total_wait_ns") == total,
          "analyze monitor: hottest %s, %d contended enters, total wait %d (%r)" %
          (hot, len(enters), total, {k: top.get(k) for k in ("class", "contended", "total_wait_ns")}))
    workers = {"worker-0", "worker-1"}
    check(top and set(top.get("waiters", {})) <= workers and set(top.get("holders", {})) <= workers and
          (bool(top.get("holders")) or not owner) and
          all(x["site"].startswith("JvmApp.lambda$main$") for x in top.get("sites", [])),
          "analyze monitor: waiters%s among the workers, sites in JvmApp's lambda (%r, %r)" %
          (" and holders" if owner else "", top.get("waiters"), top.get("holders")))
    check(os.path.exists(html) and hot in open(html).read(), "the HTML report names %s" % hot)
    check.finish()


main()
