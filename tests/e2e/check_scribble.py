#!/usr/bin/python3
"""A producer scribbling over its own trace buffer spoils nobody's data (issue 32).

usage: check_scribble.py STRATA PROG WORKDIR [ROUNDS]

Each round: `strata record` of strata-test-scribble SEED (seed = round), two
processes in one session; the parent writes random bytes over its own
`memfd:strata-slot-*` mapping (four ways, by seed: scribble.c) and goes on
emitting.  Oracle, every round:
  - `babeltrace2` reads the whole trace and exits 0 (and `strata view`, every
    tenth round), with nothing on stderr
    but its warnings of discarded events and packets (the cuts, counted);
  - the well-behaved child's sub-trace holds exactly its events: i = 0..N-1
    in order with s == "g<i>", and nothing discarded;
  - the daemon names the scribbling process once in its log ("wrote
    malformed data") when it cut or skipped anything, and never the child.
Then once in a long-running session (STRATA_CONSUMERD: the daemon to
start): `strata status` names the scribbling process under "problems", and
not the well-behaved ones.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, bt_clean, start_daemon, trace_messages  # noqa: E402


def one_round(strata, prog, work, check, k, good):
    out = os.path.join(work, "trace%d" % k)
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "consumerd.sock")
    r = subprocess.run([strata, "record", "--subbuf-size", "64K", "--subbuf-count", "16",
                        "-o", out, "--", prog, str(k), str(good)], env=env,
                       capture_output=True, text=True, timeout=120)
    kv = dict(w.split("=", 1) for w in r.stdout.split() if "=" in w)
    child = int(kv.get("child", -1))
    check(r.returncode == 0 and int(kv.get("good", -1)) == good,
          "round %d: strata record exits 0, the child emitted %d (rc %d, %r)" %
          (k, good, r.returncode, r.stdout))
    # Its only words: the losses counted in the trace.
    ok, rc, other = bt_clean(out)
    check(ok, "round %d: babeltrace2 reads the whole session cleanly (rc %d) %s" % (k, rc, other))
    if k % 10 == 0:  # `strata view` reads it too (the same reader, through the CLI)
        v = subprocess.run([strata, "view", out], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, timeout=120)
        check(v.returncode == 0, "round %d: strata view reads it (rc %d) %s" % (k, v.returncode, v.stderr[-500:]))
    got = []
    discarded = 0
    for msg in trace_messages(out):
        if msg.env_int("vpid") != child:
            continue
        if msg.kind == "event":
            got.append((msg.fields["i"], msg.fields["s"]))
        else:
            discarded += msg.count
    want = [(i, "g%d" % i) for i in range(good)]
    check(got == want, "round %d: the child's %d events exact (read %d)" % (k, good, len(got)))
    check(discarded == 0, "round %d: nothing of the child's discarded (%d)" % (k, discarded))
    named = [ln for ln in r.stderr.splitlines() if "wrote malformed data" in ln]
    check(all("pid %d)" % child not in ln for ln in named),
          "round %d: the child is never called malformed" % k)
    if k < 3 or named:
        sys.stderr.write("round %d: %s\n" % (k, named[0] if named else "(nothing malformed read)"))
    shutil.rmtree(out, ignore_errors=True)
    return bool(named)


def session_round(strata, prog, work, check, good):
    """The same in a long-running session: `strata status` names the
    scribbling process (and only it) under "problems"."""
    consumerd = os.environ.get("STRATA_CONSUMERD")
    if not consumerd:
        print("skip: the session round (STRATA_CONSUMERD not set)")
        return
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "session.sock")
    out = os.path.join(work, "session")
    d = start_daemon(consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    try:
        def cli(*args):
            return subprocess.run([strata] + list(args), env=env, capture_output=True, text=True, timeout=60)
        cli("create", "s", "-o", out)
        cli("enable-event", "s", "scrib:*")
        cli("start", "s")
        named = None
        children = []
        for seed in (1, 5, 9, 13, 17):  # mode 1: short writes, malformed data in 24 rounds of 25
            p = subprocess.Popen([prog, str(seed), str(good)], env=env, stdout=subprocess.PIPE, text=True)
            stdout, _ = p.communicate(timeout=60)
            children.append(dict(w.split("=", 1) for w in stdout.split() if "=" in w).get("child"))
            # The drains of exited processes finish on their own; stop/start
            # makes sure every packet went through the reader before STATUS.
            cli("stop", "s")
            st = cli("status", "s").stdout
            cli("start", "s")
            want = "process strata-test-scr (pid %d) wrote malformed data" % p.pid
            if want in st:
                named = st
                break
        cli("stop", "s")
        check(named is not None, "session: strata status names the scribbling process")
        check(named is not None and all("(pid %s)" % c not in named for c in children),
              "session: and not the well-behaved ones")
        if named:
            sys.stderr.write(named)
        ok, rc, other = bt_clean(out)
        check(ok, "session: babeltrace2 reads the session cleanly (rc %d) %s" % (rc, other))
    finally:
        d.terminate()
        d.wait()


def main():
    strata, prog, work = sys.argv[1:4]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else int(os.environ.get("STRATA_SCRIBBLE_ROUNDS", "30"))
    good = 20000
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    check = Checks()
    named = sum(one_round(strata, prog, work, check, k, good) for k in range(rounds))
    session_round(strata, prog, work, check, good)
    # The scribbles must have reached the reader, or the test proves nothing.
    check(named >= rounds // 2, "malformed data seen in %d of %d rounds" % (named, rounds))
    check.finish()


main()
