#!/usr/bin/python3
"""Strata's Java API beside LTTng's Java interface, and the JVM agent's cost
on a monitor-heavy program (docs/jvm.md, "Figures").

usage: jvm_bench.py STRATA JAVA STRATA_JAR AGENT WORKDIR [N]

Compiles JvmBench.java, then runs each case in its own JVM (best of 5 runs
after a warm-up, JvmBench prints ns per operation):
  strata enabled   `strata record --jvm -e 'jbench:*'`, discard mode
  strata disabled  the agent loaded, no daemon: enabled() is false
  lttng enabled    a private lttng-sessiond, session enabling lttng_ust_java:*
  lttng disabled   the same daemon, no session
  monitor x3       no agent / agent, no session / agent under -e 'jvm:*'
Same event shape on both sides: a string and two ints (LTTngUst.tracepointIntInt).
"""
import os
import re
import shutil
import subprocess
import sys

LTTNG_JAR = "/usr/share/java/liblttng-ust-java.jar"
LTTNG_JNI = "/usr/lib/x86_64-linux-gnu/jni"


def ns(out):
    m = re.search(r"ns_per_op=([0-9.]+)", out)
    return float(m.group(1)) if m else float("nan")


def main():
    strata, java, jar, agent, work = sys.argv[1:6]
    n = int(sys.argv[6]) if len(sys.argv) > 6 else 2000000
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    here = os.path.dirname(os.path.abspath(__file__))
    javac = os.path.join(os.path.dirname(java), "javac")
    subprocess.run([javac, "-d", work, "-cp", jar + ":" + LTTNG_JAR, os.path.join(here, "JvmBench.java")], check=True)
    cp = ":".join([work, jar, LTTNG_JAR])
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env.pop("JAVA_TOOL_OPTIONS", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "consumerd.sock")
    env["LTTNG_HOME"] = work
    jv = [java, "-Djava.library.path=" + LTTNG_JNI, "-cp", cp, "JvmBench"]
    rows = []

    def run(label, cmd, e=env):
        r = subprocess.run(cmd, env=e, capture_output=True, text=True, timeout=600)
        v = ns(r.stdout)
        rows.append((label, v))
        print("%-40s %9.2f ns/op" % (label, v), flush=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-2000:])

    rec = [strata, "record", "--jvm", "--subbuf-size", "1M", "--subbuf-count", "8"]
    run("strata Java API, enabled", rec + ["-e", "jbench:*", "-o", os.path.join(work, "t1"), "--"] + jv + ["strata", str(n)])
    run("strata Java API, disabled", [java, "-agentpath:" + agent] + jv[1:] + ["strata", str(n * 50)])

    sess = None
    if shutil.which("lttng-sessiond"):
        log = open(os.path.join(work, "sessiond.log"), "w")
        sess = subprocess.Popen(["lttng-sessiond", "--no-kernel"], env=env, stdout=log, stderr=log)
        lt = lambda *a: subprocess.run(["lttng"] + list(a), env=env, capture_output=True, text=True, timeout=60)
        for _ in range(100):  # until the daemon answers (bounded)
            if lt("list").returncode == 0:
                break
            subprocess.run(["sleep", "0.1"])
        lt("create", "jb", "--output=" + os.path.join(work, "lttng-trace"))
        lt("enable-event", "-u", "lttng_ust_java:*")
        lt("start")
        run("LTTng Java (LTTngUst), enabled", jv + ["lttng", str(n)])
        lt("destroy", "jb")
        run("LTTng Java (LTTngUst), no session", jv + ["lttng", str(n)])
        sess.terminate()
        sess.wait(timeout=30)

    m = str(max(n // 4, 100000))
    run("monitor round, no agent", jv + ["monitor", m])
    run("monitor round, agent, no session", [java, "-agentpath:" + agent] + jv[1:] + ["monitor", m])
    run("monitor round, agent, -e 'jvm:*'",
        rec + ["-e", "jvm:*", "-o", os.path.join(work, "t2"), "--"] + jv + ["monitor", m])
    d = dict(rows)
    if "LTTng Java (LTTngUst), enabled" in d:
        print("strata enabled / LTTng enabled = %.2f" % (d["strata Java API, enabled"] / d["LTTng Java (LTTngUst), enabled"]))


main()
