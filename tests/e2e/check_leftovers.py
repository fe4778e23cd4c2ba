#!/usr/bin/python3
"""Nothing of Strata's is left behind but the traces asked for.

usage: check_leftovers.py STRATA LOOP WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

TMPDIR is a directory of the check's own (XDG_RUNTIME_DIR unset), and so
is the daemon's socket directory; each is listed before and after:

  - `strata record` with no daemon running (it starts its own under
    $TMPDIR/strata-record-XXXXXX): the directory is gone after, with
    everything the daemon kept beside its socket;
  - a daemon of the check's: an aggregation session (strata create
    --aggregate, no -o: its default directory, in the working directory)
    started, stopped and destroyed; an overwrite session with a snapshot
    trigger that never fires, the same; then the daemon's clean exit
    (SIGTERM): no empty session directory, no `<out>-triggers/`, nothing
    beside the socket (no `<socket>.state/`);
  - a recorded trace is kept: a record's -o directory holds its events;
  - a daemon killed with a session active keeps it in `<socket>.state/`:
    `strata status` with no daemon names it and where; the next daemon takes
    it up, and once it is destroyed a clean exit leaves nothing;
  - XDG_RUNTIME_DIR set (a directory of the check's, listed before and
    after), no socket named: `strata record` with no daemon there (its own
    daemon lives under XDG_RUNTIME_DIR), then a daemon at the default socket
    ($XDG_RUNTIME_DIR/strata/consumerd.sock, whose directory it makes) that
    serves a record and exits cleanly: XDG_RUNTIME_DIR is as it was;
  - a record killed by SIGKILL leaves its empty `strata-record-XXXXXX` (its
    daemon, told, ends and removes its socket and `.state/`): the next
    record with its own daemon removes it and every such directory of
    ours untouched for a minute with no socket and nothing but an empty
    `.state/`, and leaves the rest (a kept session, a socket, a fresh one,
    other names, a link).
"""
import os
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import e2e_setup, procs_under, start_daemon, strata_cli, wait_for  # noqa: E402


def listing(d):
    out = []
    for root, dirs, files in os.walk(d):
        out += [os.path.relpath(os.path.join(root, n), d) for n in dirs + files]
    return sorted(out)


def main():
    strata, loop, work, consumerd, check = e2e_setup()
    tmp, run, cwd, traces = (os.path.join(work, n) for n in ("tmp", "run", "cwd", "traces"))
    for d in (tmp, run, cwd, traces):
        os.makedirs(d)
    env = dict(os.environ, STRATA_CONSUMERD=consumerd, TMPDIR=tmp,
               STRATA_CONSUMERD_SOCKET=os.path.join(run, "none.sock"))  # no daemon: record starts its own
    for v in ("STRATA_EARLY", "LD_PRELOAD", "STRATA_AGGREGATE", "XDG_RUNTIME_DIR"):
        env.pop(v, None)

    # 1. record with its own daemon.
    out = os.path.join(traces, "rec")
    r = subprocess.run([strata, "record", "-o", out, "--", loop, "1"], env=env, cwd=cwd, capture_output=True,
                       text=True, timeout=120)
    sys.stdout.write(r.stderr)
    b = subprocess.run(["babeltrace2", out], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and b.stdout.count("rloop:tick") == 10, "record writes its trace (10 events)")
    check(listing(tmp) == [], "record's private daemon left nothing in TMPDIR (%r)" % listing(tmp))
    check(listing(run) == [], "nor beside the socket it was told (%r)" % listing(run))

    # 2. A daemon of ours: sessions that record nothing, then its clean exit.
    sock = os.path.join(run, "d.sock")
    denv = dict(env, STRATA_CONSUMERD_SOCKET=sock)
    d = start_daemon(consumerd, sock, denv)
    strata_ = strata_cli(strata, denv, log=True)

    def s(*args):
        return strata_(*args, cwd=cwd)

    s("create", "locks", "--aggregate", "pthread:mutex_lock:wait_ns by lock")
    s("start", "locks")
    s("stop", "locks")
    s("destroy", "locks")
    fr = os.path.join(traces, "fr")
    s("create", "fr", "-o", fr, "--mode", "overwrite")
    s("enable-event", "fr", "nosuch:*")
    s("snapshot", "--on", "nosuch:event", "fr")
    s("start", "fr")
    s("stop", "fr")
    s("destroy", "fr")
    check(listing(cwd) == [], "an aggregation session leaves no empty directory in the working directory (%r)" %
          listing(cwd))
    check(sorted(os.listdir(traces)) == ["rec"],
          "a session that recorded nothing leaves neither its directory nor a -triggers one (%r)" %
          sorted(os.listdir(traces)))
    d.send_signal(signal.SIGTERM)
    check(d.wait(timeout=60) == 0, "the daemon exits 0")
    check(listing(run) == [], "the daemon's clean exit leaves nothing beside its socket (%r)" % listing(run))
    check(listing(tmp) == [], "nor in TMPDIR (%r)" % listing(tmp))

    # 3. A daemon killed with a session active keeps it beside its socket:
    # `strata status` (no daemon) says what and where; the next daemon takes
    # it up, and its clean exit after the session's end leaves nothing.
    d = start_daemon(consumerd, sock, denv)
    s("create", "kept", "-o", os.path.join(traces, "kept"))
    s("start", "kept")
    d.kill()
    d.wait()
    r = strata_(("status"), ok=False)
    check(r.returncode == 1 and ("%s.state holds 1 session(s) a daemon kept when it did not exit cleanly (kept)" %
                                 sock) in r.stdout, "status names the session a killed daemon kept (%r)" % r.stdout)
    d = start_daemon(consumerd, sock, denv)
    s("destroy", "kept")
    d.send_signal(signal.SIGTERM)
    check(d.wait(timeout=60) == 0 and listing(run) == [],
          "taken up and destroyed, then a clean exit: nothing beside the socket (%r)" % listing(run))
    xdg_runtime_part(strata, loop, consumerd, check, env, work, cwd, traces)
    stale_part(strata, loop, check, env, work, cwd, traces)
    check.finish()


def stale_part(strata, loop, check, env, work, cwd, traces):
    """5. What killed records leave in TMPDIR goes with the next record."""
    tmp = env["TMPDIR"]
    p = subprocess.Popen([strata, "record", "-o", os.path.join(traces, "killed"), "--", loop, "60000"], env=env,
                         cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: any(os.path.exists(os.path.join(tmp, n, "consumerd.sock")) for n in os.listdir(tmp)),
             "the killed record's daemon listening")
    (killed,) = os.listdir(tmp)
    p.kill()
    p.wait()
    wait_for(lambda: not procs_under(os.path.join(tmp, killed)), "the killed record's daemon gone", timeout=60)
    check(listing(tmp) == [killed], "a record killed by SIGKILL leaves its directory, empty (%r)" % listing(tmp))
    # Beside it, what other ends leave, and what is not ours to take.
    made = {"strata-record-aaaaaa": [], "strata-record-bbbbbb": ["consumerd.sock.state/"],
            "strata-record-cccccc": ["consumerd.sock.state/", "consumerd.sock.state/s.session"],
            "strata-record-dddddd": ["consumerd.sock"], "strata-record-eeeeee": [], "strata-record-fff": []}
    for d, files in made.items():
        os.mkdir(os.path.join(tmp, d))
        for f in files:
            (os.mkdir if f.endswith("/") else lambda x: open(x, "w").close())(os.path.join(tmp, d, f))
    os.mkdir(os.path.join(work, "elsewhere"))
    os.symlink(os.path.join(work, "elsewhere"), os.path.join(tmp, "strata-record-gggggg"))
    old = time.time() - 120
    for d in [killed, "strata-record-bbbbbb/consumerd.sock.state"] + sorted(made):
        if d != "strata-record-eeeeee":
            os.utime(os.path.join(tmp, d), (old, old))
    os.utime(os.path.join(work, "elsewhere"), (old, old))
    r = subprocess.run([strata, "record", "-o", os.path.join(traces, "after"), "--", loop, "1"], env=env, cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "the next record exits 0 (%s)" % r.stderr[-300:])
    kept = sorted(n for n in os.listdir(tmp))
    check(kept == ["strata-record-cccccc", "strata-record-dddddd", "strata-record-eeeeee", "strata-record-fff",
                   "strata-record-gggggg"],
          "it removed the killed record's directory and the stale empty one with an empty .state/, "
          "and left a kept session, a socket, a fresh one, another name and a link (%r)" % kept)
    check(os.path.isdir(os.path.join(work, "elsewhere")), "the link's target stays")


def xdg_runtime_part(strata, loop, consumerd, check, env, work, cwd, traces):
    """4. The per-user runtime directory: nothing left in it."""
    xdg = os.path.join(work, "xdg")
    os.makedirs(xdg, mode=0o700)
    os.mkdir(os.path.join(xdg, "theirs"))  # what was there stays
    before = listing(xdg)
    xenv = dict(env, XDG_RUNTIME_DIR=xdg)
    xenv.pop("STRATA_CONSUMERD_SOCKET")
    r = subprocess.run([strata, "record", "-o", os.path.join(traces, "xrec"), "--", loop, "1"], env=xenv, cwd=cwd,
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "record with XDG_RUNTIME_DIR set exits 0 (%s)" % r.stderr[-300:])
    check(listing(xdg) == before, "its private daemon left nothing in XDG_RUNTIME_DIR (%r)" % listing(xdg))
    sock = os.path.join(xdg, "strata", "consumerd.sock")
    d = start_daemon(consumerd, sock, xenv)
    check(os.path.exists(sock), "the daemon listens at the default socket (%s)" % sock)
    r = subprocess.run([strata, "record", "-o", os.path.join(traces, "xrec2"), "--", loop, "1"], env=xenv,
                       cwd=cwd, capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "a record through it exits 0 (%s)" % r.stderr[-300:])
    d.send_signal(signal.SIGTERM)
    check(d.wait(timeout=60) == 0, "the daemon exits 0")
    check(listing(xdg) == before, "its clean exit leaves XDG_RUNTIME_DIR as it was, without the strata/ it made (%r)"
          % listing(xdg))


if __name__ == "__main__":
    main()
