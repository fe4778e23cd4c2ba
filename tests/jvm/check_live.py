#!/usr/bin/python3
"""A running JVM follows sessions started and stopped under it (tp-async,
the agent's change hook and its notification thread; docs/jvm.md).

usage: check_live.py STRATA CONSUMERD JAVA AGENT CLASSPATH WORKDIR [JVM_OPTION]

(JVM_OPTION -Dstrata.no_unsafe=true: the Java check reads the state word
through its direct ByteBuffer instead of sun.misc.Unsafe.)

The JVM (java -agentpath:AGENT, STRATA_JVM_VERBOSE) starts with no session.
Phase a runs untraced; then a session enabling jvm:* and japp:* starts
(--wait); once the agent says its JVMTI notifications include the monitor
events, phase b runs; the session stops (--wait); once the agent says no
notification is left on, phase c runs.  Oracle: the Java check saw japp:live
disabled in a and c and enabled in b (exactly N emitted); the trace holds
exactly those N events and monitor events of Live$MonB only; babeltrace2
is silent.  Then a slot reused while the agent sleeps: session s2 enables
jvm:thread_exists; with the JVM stopped (SIGSTOP) s2 stops and s3 starts in
the same slot; after SIGCONT the agent sees both changes in one wake-up and
must replay the thread map into s3 too.

The thread map of threads older than the session: main and three workers
start before it (each prints its tid from /proc/thread-self), and the JVM's
own threads before VMInit.  The session's jvm:thread_exists events are
exactly the threads Java lists at phase b plus the agent's own thread, one
each; the program's threads carry the tids they printed; every other
thread's os_tid is a task of the JVM whose /proc comm is the first 15 bytes
of its Java name (read while the JVM runs).
"""
import os
import queue
import signal
import subprocess
import sys
import threading
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_testlib import Checks, start_daemon, trace_messages  # noqa: E402
from jvm_testlib import fresh_work  # noqa: E402

N = 2000


def main():
    strata, consumerd, java, agent, cp, work = sys.argv[1:7]
    jopts = sys.argv[7:8]
    out, env = fresh_work(work)
    out2, out3 = out + "-s2", out + "-s3"
    check = Checks()

    def strata_cmd(*args):
        r = subprocess.run([strata] + list(args), env=env, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "strata %s (%s)" % (" ".join(args), r.stderr.strip()[:200]))

    d = start_daemon(consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    jvm = subprocess.Popen([java, "-agentpath:" + agent] + jopts + ["-cp", cp, "Live", str(N)],
                           env=dict(env, STRATA_JVM_VERBOSE="1"), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    said, printed, listed = {}, {}, []

    def read_until(pred):
        for line in jvm.stdout:
            line = line.strip()
            k, _, v = line.partition("=")
            if k == "thread":
                name, jtid, tid = v.split(":")
                printed[name] = (int(jtid), int(tid))
            elif k == "live":
                name, _, jtid = v.rpartition(":")
                listed.append((name, int(jtid)))
            if pred(line):
                return line
        return ""

    def phase(p):
        jvm.stdin.write(p + "\n")
        jvm.stdin.flush()
        k, _, v = read_until(lambda ln: ln.startswith(p + "=")).partition("=")
        said[k] = int(v) if v.isdigit() else -1

    def tasks():  # tid -> comm of the JVM's threads, now
        d = "/proc/%d/task" % jvm.pid
        out = {}
        for t in os.listdir(d):
            try:
                out[int(t)] = open(os.path.join(d, t, "comm"), "rb").read().rstrip(b"\n")
            except OSError:
                pass
        return out

    errs = queue.Queue()  # the JVM's stderr lines, read on a thread so that waits have a deadline

    def pump():
        for line in jvm.stderr:
            errs.put(line)
        errs.put(None)
    threading.Thread(target=pump, daemon=True).start()

    def agent_line(pred, what, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = errs.get(timeout=max(deadline - time.monotonic(), 0.001))
            except queue.Empty:
                line = None
            if line is None:
                check(False, "the agent said " + what)
                return False
            if pred(line):
                return True

    def agent_says(pred, what):
        def notif(line):
            return line.startswith("strata-jvm: notifications for:") and pred(line.split(":", 2)[2].split())
        return agent_line(notif, what)

    def replayed(what):
        return agent_line(lambda ln: ln.startswith("strata-jvm: thread_exists replayed"), what, timeout=30)

    def stopped():  # polls until the JVM is in state T (SIGSTOP taken), 10 s at most
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if open("/proc/%d/stat" % jvm.pid).read().rpartition(")")[2].split()[0] == "T":
                return True
            time.sleep(0.001)
        return False

    comm = {}
    try:
        read_until(lambda ln: ln == "started")
        phase("a")
        strata_cmd("create", "s", "-o", out)
        strata_cmd("enable-event", "s", "jvm:*")
        strata_cmd("enable-event", "s", "japp:*")
        strata_cmd("start", "s", "--wait=20")
        agent_says(lambda ev: "monitor_contended_enter" in ev, "monitor notifications are on")
        phase("b")
        comm = tasks()
        strata_cmd("stop", "s", "--wait=20")
        agent_says(lambda ev: not ev, "every notification is off")
        phase("c")
        strata_cmd("destroy", "s")
        # A slot reused by another session while the agent sleeps: s2
        # stops and s3 starts in the same slot while the JVM is stopped,
        # so the agent sees both changes in one wake-up.  s3 must still get
        # the thread map (the slot's generation changed).
        strata_cmd("create", "s2", "-o", out2)
        strata_cmd("enable-event", "s2", "jvm:thread_exists")
        strata_cmd("start", "s2", "--wait=20")
        replayed("thread_exists replayed for s2")
        jvm.send_signal(signal.SIGSTOP)
        check(stopped(), "the JVM stopped")
        strata_cmd("stop", "s2")
        strata_cmd("destroy", "s2")
        strata_cmd("create", "s3", "-o", out3)
        strata_cmd("enable-event", "s3", "jvm:thread_exists")
        strata_cmd("start", "s3")
        jvm.send_signal(signal.SIGCONT)
        replayed("thread_exists replayed for s3, in the slot s2 had")
        strata_cmd("stop", "s3", "--wait=20")
        strata_cmd("destroy", "s3")
    finally:
        jvm.stdin.close()
        jvm.wait(timeout=60)
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=30)
    check(jvm.returncode == 0, "the JVM ran to its end (status %s)" % jvm.returncode)
    check(said == {"a": 0, "b": N, "c": 0}, "the Java check: disabled, enabled, disabled (%r)" % said)
    bt = subprocess.run(["babeltrace2", out], capture_output=True, text=True, timeout=120)
    check(bt.returncode == 0 and bt.stderr == "", "babeltrace2 reads the trace silently (%r)" % bt.stderr[:300])
    lines = bt.stdout.splitlines()
    live = [ln for ln in lines if " japp:live:" in ln]
    check(len(live) == N and all('phase = "b"' in ln for ln in live),
          "exactly %d japp:live, all of phase b (%d)" % (N, len(live)))
    mon = [ln for ln in lines if " jvm:monitor_contended_" in ln]
    check(mon and all("Live$MonB" in ln for ln in mon),
          "contended monitor events, of Live$MonB only (%d; others: %r)" %
          (len(mon), [ln for ln in mon if "Live$MonB" not in ln][:2]))
    check_thread_map(check, out, printed, listed, comm)
    for o in (out2, out3):
        names = {m.fields["name"] for m in trace_messages(o) if m.kind == "event" and m.name == "jvm:thread_exists"}
        check({"main", "live-worker-0"} <= names, "%s: the thread map of the running JVM (%d threads)" %
              (os.path.basename(o), len(names)))
    check.finish()


def check_thread_map(check, out, printed, listed, comm):
    ours = ["main"] + ["live-worker-%d" % k for k in range(3)]
    check(sorted(printed) == sorted(ours), "the program's threads said their tids (%r)" % printed)
    exists = []  # (name, java_tid, os_tid)
    for msg in trace_messages(out):
        if msg.kind == "event" and msg.name == "jvm:thread_exists":
            p = msg.fields
            exists.append((p["name"], p["java_tid"], p["os_tid"]))
    agent = [e for e in exists if e[0] == "Strata JVM agent"]
    want = sorted(jt for _, jt in listed) + [e[1] for e in agent]
    check(len(agent) == 1 and sorted(e[1] for e in exists) == sorted(want),
          "thread_exists: once each, exactly the %d threads Java lists and the agent's (%d: %r; listed %r)" %
          (len(listed), len(exists), sorted(exists), sorted(listed)))
    check(all(n in {e[0] for e in exists} for n in ours), "main and the workers are in the map")
    bad = []
    for name, jtid, tid in exists:
        if name in printed:
            ok = printed[name] == (jtid, tid)
        else:
            ok = comm.get(tid) == name.encode()[:15]
        if not ok:
            bad.append((name, jtid, tid, printed.get(name), comm.get(tid)))
    check(exists and not bad and len({e[2] for e in exists}) == len(exists),
          "every os_tid is right: the program's as /proc/thread-self said, the JVM's a task whose comm is "
          "its name; all distinct (%d wrong: %r)" % (len(bad), bad[:4]))


main()
