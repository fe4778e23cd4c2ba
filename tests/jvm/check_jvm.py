#!/usr/bin/python3
"""The JVM agent and the Java API under `strata record --jvm` (docs/jvm.md).

usage: check_jvm.py SCENARIO STRATA JAVA CLASSPATH WORKDIR

Runs tests/jvm/Contend.java (agent with STRATA_JVM_OWNER=1) (Java API events, two threads contending for
Contend$Hot, a timed-out wait on Contend$Cold, System.gc()) and checks the
trace with babeltrace2 as the oracle:
  nojar   as return, with only the program's jar on the class path (a
          new user's `java -cp app.jar Main`): strata record --jvm puts
          strata.jar on the boot class path.
  return  normal end: exact Java API counts and field values; the thread map
          (jvm:thread_start name, java_tid, os_tid) equals what each thread
          read from /proc/thread-self, and os_tid is the event's vtid; every
          contended enter has its entered on the same thread after it; the
          hottest monitor (most wait time) is Contend$Hot, with Java call
          sites in Contend.contend; a GC between the marks around
          System.gc(); vm_start first and vm_death last.
  exit    System.exit(3): the same trace, vm_death included.
  halt    Runtime.halt(4): readable, exact counts (OpenJDK 17 still posts VMDeath).
  kill    SIGKILL once the program says "ready": readable, exact counts, no vm_death;
          a record in flight at the kill may be counted lost (one a stream at
          most), and strata record says so.
  plain   java alone, no agent: runs, every Java check says disabled.
  off     only japp:mark enabled: no jvm event, no japp:step (the Java check
          says disabled), both marks.
"""
import json
import os
import re
import signal
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_testlib import Checks, bt_text, trace_messages  # noqa: E402
from jvm_testlib import fresh_work  # noqa: E402

N_STEP, ROUNDS = 3000, 20
END = {"return": ("return", 0), "nojar": ("return", 0), "exit": ("exit", 3), "halt": ("halt", 4), "kill": ("hang", 128 + 9),
       "off": ("return", 0)}


def run(strata, java, cp, out, scenario, env):
    pats = ["-e", "japp:mark"] if scenario == "off" else ["-e", "jvm:*", "-e", "japp:*"]
    cmd = [strata, "record", "--jvm", "--subbuf-size", "256K", "--subbuf-count", "16"] + pats + \
          ["-o", out, "--", java, "-Xshare:auto", "-cp", cp, "Contend", END[scenario][0], str(N_STEP), str(ROUNDS)]
    p = subprocess.Popen(cmd, env=dict(env, STRATA_JVM_OWNER="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines = []
    if scenario == "kill":
        pid = None
        for line in p.stdout:
            lines.append(line)
            if line.startswith("pid="):
                pid = int(line.split("=")[1])
            if line.strip() == "ready":
                break
        if pid:
            os.kill(pid, signal.SIGKILL)
    rest, err = p.communicate(timeout=240)
    lines += rest.splitlines(True)
    return p.returncode, lines, err


def check_kill_losses(check, rc, bt_stderr, record_stderr):
    """SIGKILL can land inside a record: that thread's record, reserved and
    never committed, is cut at the stop and counted discarded (a JVM thread
    woken by the GC's reference processing, 1 in many runs).  So babeltrace2
    may warn of discarded events, but of at most one per stream (an owned
    lane: one writer, one record in flight), and strata record must have
    said the same count."""
    per_stream, other = {}, []
    for line in bt_stderr.splitlines():
        m = re.match(r'WARNING: Tracer discarded (\d+) events? between .* within stream "([^"]+)"', line)
        if m:
            per_stream[m.group(2)] = per_stream.get(m.group(2), 0) + int(m.group(1))
        elif line.strip():
            other.append(line)
    check(rc == 0 and not other, "babeltrace2 reads the trace, nothing but discard counts (rc %d, %r)" % (rc, other[:2]))
    check(all(n <= 1 for n in per_stream.values()),
          "at most the one record in flight per stream lost at the kill (%r)" % per_stream)
    said = re.search(r"(\d+) event\(s\) and \d+ packet\(s\) discarded", record_stderr)
    total = sum(per_stream.values())
    check((int(said.group(1)) if said else 0) == total,
          "strata record said the trace's discards (%s, trace %d)" % (said.group(0) if said else "none said", total))


def main():
    scenario, strata, java, cp, work = sys.argv[1:6]
    out, env = fresh_work(work)
    check = Checks()
    if scenario == "plain":  # no agent, no strata: the Java API is inert
        r = subprocess.run([java, "-cp", cp, "Contend", "return", str(N_STEP), "2"], env=env,
                           capture_output=True, text=True, timeout=240)
        check(r.returncode == 0, "the program runs without the agent (status %d, %r)" % (r.returncode, r.stderr[-300:]))
        check("step=0" in r.stdout.split(), "every Java check says disabled (%r)" % r.stdout[:200])
        check.finish()
    rc, lines, err = run(strata, java, cp, out, scenario, env)
    sys.stderr.write(err)
    check(rc == END[scenario][1], "strata record exits with the JVM's status %d (got %d)" % (END[scenario][1], rc))
    kv = {}
    threads = {}
    for line in lines:
        k, _, v = line.strip().partition("=")
        if k == "thread":
            name, jtid, tid = v.split(":")
            threads[name] = (int(jtid), int(tid))
        elif k:
            kv[k] = v
    rc, _, _, stderr = bt_text(out, timeout=300)
    if scenario == "kill":
        check_kill_losses(check, rc, stderr, err)
    else:
        check(rc == 0 and stderr.strip() == "", "babeltrace2 reads the trace silently (rc %d, stderr %r)" % (rc, stderr[:300]))

    evs = []  # (ns, name, vtid, payload dict)
    for msg in trace_messages(out):
        if msg.kind == "event":
            evs.append((msg.ts, msg.name, msg.tid, msg.fields))
    names = [e[1] for e in evs]
    count = {n: names.count(n) for n in set(names)}
    ts = [e[0] for e in evs]
    check(ts == sorted(ts), "timestamps in order over the whole trace")

    steps = [e[3] for e in evs if e[1] == "japp:step"]
    marks = [str(e[3]["what"]) for e in evs if e[1] == "japp:mark"]
    if scenario == "off":
        check(kv.get("step") == "0", "Java sees japp:step disabled (step=%s)" % kv.get("step"))
        check(not steps, "no japp:step recorded (%d)" % len(steps))
        check(not any(n.startswith("jvm:") for n in names), "no jvm event recorded")
        check(marks == ["before_gc", "after_gc"], "both marks (%r)" % marks)
        check.finish()
    check(kv.get("step") == str(N_STEP), "the program emitted %d japp:step (said %s)" % (N_STEP, kv.get("step")))
    bad = 0
    for i, p in enumerate(steps):
        want_tag = "zero" if i % 3 == 0 else "\u00e9%d" % i
        if (int(p["i"]) != i or int(p["big"]) != (1 << 40 | i) or float(p["half"]) != i / 2.0 or
                int(p["odd"]) != (i & 1) or str(p["tag"]) != want_tag):
            bad += 1
    check(len(steps) == N_STEP, "exactly %d japp:step in the trace (%d)" % (N_STEP, len(steps)))
    check(bad == 0, "every japp:step field as emitted, in order (%d wrong)" % bad)
    check(marks == ["before_gc", "after_gc"], "both japp:mark, in order (%r)" % marks)
    # Record.java's room: 16384 - 1 - 8 x 3 later fields for the first
    # string; after it and the 4-byte int, 16384 - 16364 - 1 - 8 for the
    # second (11 bytes), then the 8-byte long fills the record exactly.
    big = [(len(str(p["s"])), int(p["after"]), str(p["s2"]), int(p["z"])) for _, n, _, p in evs if n == "japp:big"]
    check(big == [(16359, 7, "y" * 11, 9)], "strings past the record truncated, later fields intact (%r)" % big)
    nul = [(str(p["a"]), str(p["b"]), str(p["c"]), int(p["n"])) for _, n, _, p in evs if n == "japp:nul"]
    check(nul == [("ab", "\u00e9", "(null)", 1)], "strings stop at U+0000, null is (null) (%r)" % nul)
    check(count.get("jvm:vm_start") == 1 and names.index("jvm:vm_start") < names.index("japp:step"),
          "one jvm:vm_start, before the program's events")
    # Runtime.halt still posts VMDeath on OpenJDK 17 (observed); SIGKILL cannot.
    want_death = 0 if scenario == "kill" else 1
    check(count.get("jvm:vm_death", 0) == want_death, "%d jvm:vm_death (%d)" % (want_death, count.get("jvm:vm_death", 0)))

    # The thread map against /proc.
    starts = {str(e[3]["name"]): (int(e[3]["java_tid"]), int(e[3]["os_tid"]), e[2]) for e in evs
              if e[1] == "jvm:thread_start"}
    for name in ("main", "contender-a", "contender-b"):
        got = starts.get(name)
        check(name in threads and got is not None and got[:2] == threads[name] and got[1] == got[2],
              "thread map %s: java_tid, os_tid %r from /proc/thread-self, trace %r" %
              (name, threads.get(name), got))

    # The session was on at VMInit: the agent listed the threads alive then
    # (thread_exists), among them the JVM's own that started before
    # ThreadStart is posted, named from /proc comm (docs/jvm.md).
    exists = {str(e[3]["name"]): int(e[3]["os_tid"]) for e in evs if e[1] == "jvm:thread_exists"}
    early = ("Reference Handler", "Finalizer", "Signal Dispatcher")
    check(exists.get("main") == threads.get("main", (0, -1))[1] and all(exists.get(n) for n in early) and
          len(set(exists.values())) == len(exists),
          "thread_exists at VMInit: main with its tid, the early JVM threads with distinct tids (%r)" % exists)

    # Monitors: pairs per thread, causal order, the hottest one.
    pending, unpaired, inversions, wait = {}, 0, 0, {}
    sites, owners = set(), set()
    for t, n, vtid, p in evs:
        if n == "jvm:monitor_contended_enter":
            if vtid in pending:
                unpaired += 1
            pending[vtid] = (t, str(p["class"]), int(p["hash"]))
            if str(p["class"]) == "Contend$Hot":
                sites.add(str(p["stack"]).split(";")[0])
                owners.add(int(p["owner_java_tid"]))
        elif n == "jvm:monitor_contended_entered":
            e = pending.pop(vtid, None)
            if e is None or e[1:] != (str(p["class"]), int(p["hash"])):
                unpaired += 1
                continue
            if t < e[0]:
                inversions += 1
            wait[e[1]] = wait.get(e[1], 0) + int(p["wait_ns"])
    n_enter = count.get("jvm:monitor_contended_enter", 0)
    if scenario != "kill":
        check(not pending and unpaired == 0,
              "every contended enter has its entered on the same thread (%d open, %d unpaired)" %
              (len(pending), unpaired))
    check(n_enter >= 1, "contention recorded (%d contended enters)" % n_enter)
    check(inversions == 0, "entered never before its enter (%d inversions)" % inversions)
    hottest = max(wait, key=wait.get) if wait else None
    check(hottest == "Contend$Hot", "hottest monitor is Contend$Hot (%s; %r)" % (hottest, wait))
    check(sites and all(s.startswith("Contend.contend:") for s in sites),
          "Java call site of the Hot enters is Contend.contend (%r)" % sites)
    contenders = {threads[n][0] for n in ("contender-a", "contender-b") if n in threads}
    # -1: the owner had left the monitor by the time the agent asked.
    known = owners - {-1}
    check(known and known <= contenders, "Hot's owner at a contended enter is a contender (%r)" % owners)
    # strata analyze monitor: the same monitor first, the same counts.
    html = os.path.join(os.path.dirname(out), "monitors.html")
    an = subprocess.run([strata, "analyze", "monitor", out, "--format=json", "--report=" + html],
                        capture_output=True, text=True, timeout=120)
    mons = json.loads(an.stdout)["locks"] if an.returncode == 0 else []
    top = mons[0] if mons else {}
    hot_enters = sum(1 for e in evs if e[1] == "jvm:monitor_contended_enter" and str(e[3]["class"]) == "Contend$Hot")
    who = {"contender-a", "contender-b"}
    check(top.get("class") == "Contend$Hot" and top.get("contended") == hot_enters and
          top.get("wait_total_ns") == wait.get("Contend$Hot"),
          "analyze monitor: hottest Contend$Hot, %d contended enters, its total wait (%r)" %
          (hot_enters, {k: top.get(k) for k in ("class", "contended", "wait_total_ns")}))
    check(set(top.get("waiters", {})) <= who and set(top.get("holders", {})) <= who and top.get("holders") and
          all(s["function"].startswith("Contend.contend:") for s in top.get("sites", [])),
          "analyze monitor: waiters and holders are the contenders, sites in Contend.contend (%r, %r)" %
          (top.get("waiters"), top.get("holders")))
    check(os.path.exists(html) and "Contend$Hot" in open(html).read(), "the HTML report names Contend$Hot")
    # strata export: a flow from the thread that released Hot to the waiter
    # that got it (inferred from the owners the agent saw, cmd_export.cpp):
    # both contenders, never a thread to itself, at most one per entered.
    js = os.path.join(os.path.dirname(out), "export.json")
    ex = subprocess.run([strata, "export", "--format=json", "-o", js, out], capture_output=True, text=True,
                        timeout=120)
    tev = json.load(open(js))["traceEvents"] if ex.returncode == 0 else []
    tname = {e.get("tid"): e["args"]["name"] for e in tev if e["ph"] == "M" and e["name"] == "thread_name"}
    acq = [e for e in tev if e["ph"] in "BX" and e["name"].startswith("monitor acquired Contend$Hot@")]
    rel = [e for e in tev if e["ph"] in "BX" and e["name"].startswith("monitor released Contend$Hot@")]
    starts = {e["id"]: e for e in tev if e["ph"] == "s"}
    ends = [e for e in tev if e["ph"] == "f" and e["id"] in starts and
            any(a["tid"] == e["tid"] and a["ts"] == e["ts"] for a in acq)]
    pairs = {(tname.get(starts[e["id"]]["tid"]), tname.get(e["tid"])) for e in ends}
    entered = sum(1 for e in evs if e[1] == "jvm:monitor_contended_entered" and str(e[3]["class"]) == "Contend$Hot")
    check(ex.returncode == 0 and acq and len(acq) == len(rel) == len(ends) <= entered and
          all(a != b and a in who and b in who for a, b in pairs),
          "export: %d monitor flows on Contend$Hot (of %d entered), releaser -> waiter %r" %
          (len(ends), entered, sorted(pairs)))
    waited = [e[3] for e in evs if e[1] == "jvm:monitor_waited" and str(e[3]["class"]) == "Contend$Cold"]
    check(len(waited) == 1 and int(waited[0]["timed_out"]) == 1, "Cold's wait timed out once (%r)" % waited)

    # GC around System.gc().
    t_before = next(e[0] for e in evs if e[1] == "japp:mark" and str(e[3]["what"]) == "before_gc")
    t_after = next(e[0] for e in evs if e[1] == "japp:mark" and str(e[3]["what"]) == "after_gc")
    gcs = [e for e in evs if e[1] in ("jvm:gc_start", "jvm:gc_finish") and t_before < e[0] < t_after]
    check(len(gcs) >= 2 and gcs[0][1] == "jvm:gc_start" and gcs[-1][1] == "jvm:gc_finish" and
          gcs[0][3]["gc"] == gcs[-1][3]["gc"] if gcs else False,
          "a GC starts and finishes between the marks around System.gc() (%d events)" % len(gcs))
    check(count.get("jvm:method_load", 0) + count.get("jvm:code_generated", 0) > 0,
          "compiled and generated code recorded (%d, %d)" %
          (count.get("jvm:method_load", 0), count.get("jvm:code_generated", 0)))
    check.finish()


main()
