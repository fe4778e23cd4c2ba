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
is silent.
"""
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from strata_testlib import Checks, start_daemon  # noqa: E402
from jvm_testlib import fresh_work  # noqa: E402

N = 2000


def main():
    strata, consumerd, java, agent, cp, work = sys.argv[1:7]
    jopts = sys.argv[7:8]
    out, env = fresh_work(work)
    check = Checks()

    def strata_cmd(*args):
        r = subprocess.run([strata] + list(args), env=env, capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "strata %s (%s)" % (" ".join(args), r.stderr.strip()[:200]))

    d = start_daemon(consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    jvm = subprocess.Popen([java, "-agentpath:" + agent] + jopts + ["-cp", cp, "Live", str(N)],
                           env=dict(env, STRATA_JVM_VERBOSE="1"), stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    said = {}

    def phase(p):
        jvm.stdin.write(p + "\n")
        jvm.stdin.flush()
        line = jvm.stdout.readline().strip()
        k, _, v = line.partition("=")
        said[k] = int(v) if v.isdigit() else -1

    def agent_says(pred, what):
        for line in jvm.stderr:  # blocks until the agent prints (the test's timeout bounds it)
            if line.startswith("strata-jvm: notifications for:"):
                events = line.split(":", 2)[2].split()
                if pred(events):
                    return True
        check(False, "the agent said " + what)
        return False

    try:
        phase("a")
        strata_cmd("create", "s", "-o", out)
        strata_cmd("enable-event", "s", "jvm:*")
        strata_cmd("enable-event", "s", "japp:*")
        strata_cmd("start", "s", "--wait=20")
        agent_says(lambda ev: "monitor_contended_enter" in ev, "monitor notifications are on")
        phase("b")
        strata_cmd("stop", "s", "--wait=20")
        agent_says(lambda ev: not ev, "every notification is off")
        phase("c")
        strata_cmd("destroy", "s")
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
    check.finish()


main()
