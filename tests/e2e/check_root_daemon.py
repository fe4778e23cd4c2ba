#!/usr/bin/python3
"""Root's daemon at its default socket, /run/strata/consumerd.sock, as the
packages' systemd unit runs it: it serves root and other users, and its
clean exit leaves /run as it found it.

usage: check_root_daemon.py STRATA LOOP WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

Root only (exit 77 otherwise, or where no mount namespace can be made).  The
check re-runs itself under `unshare --mount` with a fresh tmpfs on /run, so
that a daemon of an installed Strata (the system's own /run/strata) is
neither seen nor touched: the test passes whether or not Strata is
installed.  No socket is named anywhere (STRATA_CONSUMERD_SOCKET and
XDG_RUNTIME_DIR unset), so every program finds the daemon where a user's
would:

  - the daemon makes /run/strata 0755 and its socket 0666 (docs/security.md,
    "The socket");
  - root's session records LOOP run by root and LOOP run as `nobody` (a
    process of any uid joins root's active sessions): babeltrace2 reads
    exactly 30 + 30 events from 2 processes, in a trace root owns;
  - `strata status` through the default socket names the session;
  - `strata record -- LOOP` run as root beside it records its 10 events and
    leaves nothing in TMPDIR;
  - SIGTERM: the daemon exits 0 and /run holds nothing it did not hold
    before (/run/strata is gone).
"""
import os
import shutil
import signal
import stat
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import e2e_setup, strata_cli  # noqa: E402

NS_MARK = "STRATA_TEST_ROOT_NS"


def skip(why):
    print("SKIP: " + why)
    sys.exit(77)


def enter_namespace():
    """Re-run this check in a private mount namespace with /run a fresh tmpfs."""
    if os.geteuid() != 0:
        skip("root's daemon needs root")
    if not shutil.which("unshare"):
        skip("no unshare (util-linux)")
    probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"], capture_output=True,
                           text=True)
    if probe.returncode != 0:
        skip("no mount namespace here: " + probe.stderr.strip())
    env = dict(os.environ)
    env[NS_MARK] = "1"
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, os.path.abspath(__file__)]
                       + sys.argv[1:], env=env)
    sys.exit(r.returncode)


def listing(d):
    out = []
    for root, dirs, files in os.walk(d):
        out += [os.path.relpath(os.path.join(root, n), d) for n in dirs + files]
    return sorted(out)


def start_default_daemon(consumerd, env):
    """strata-consumerd with no --socket: root's default."""
    r, w = os.pipe()
    d = subprocess.Popen([consumerd, "--ready-fd", str(w), "-q"], env=env, pass_fds=(w,))
    os.close(w)
    with os.fdopen(r) as rf:
        if rf.readline().strip() != "ready":
            d.kill()
            sys.exit("FAIL: the daemon did not get ready")
    return d


def ticks(out):
    b = subprocess.run(["babeltrace2", out], capture_output=True, text=True, timeout=120)
    subs = os.path.join(out, "ust", "pid")
    procs = len(os.listdir(subs)) if os.path.isdir(subs) else 0
    return b.returncode, b.stdout.count("rloop:tick"), procs


def as_nobody(cmd):
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"] + cmd


def session_part(strata, loop, work, env, check):
    cli = strata_cli(strata, env, log=True)
    out = os.path.join(work, "sys")
    cli("create", "s", "-o", out)
    cli("enable-event", "s", "rloop:*")
    cli("start", "s")
    r = subprocess.run([loop, "3"], env=env, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "LOOP run by root exits 0", r.stderr)
    n = subprocess.run(as_nobody([loop, "3"]), env=env, capture_output=True, text=True, timeout=60)
    check(n.returncode == 0, "LOOP run as nobody exits 0", n.stderr)
    st = cli("status", "s")
    check("/run/strata/consumerd.sock" in cli("status").stdout and "ACTIVE" in st.stdout.upper(),
          "strata status through the default socket shows the session active", st.stdout)
    cli("stop", "s")
    cli("destroy", "s")
    bt, got, procs = ticks(out)
    check(bt == 0 and got == 60 and procs == 2,
          "root's session holds root's and nobody's events: 60 from 2 processes (%d from %d, bt2 %d)" %
          (got, procs, bt))
    check(os.stat(out).st_uid == 0, "the trace is root's")


def main():
    if os.environ.get(NS_MARK) != "1":
        enter_namespace()
    strata, loop, work, consumerd, check = e2e_setup()
    os.chmod(work, 0o755)  # nobody's LOOP reads nothing here, but its cwd may be here
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "mode=0755", "strata-test-run", "/run"], capture_output=True,
                       text=True)
    if m.returncode != 0:
        skip("cannot mount a tmpfs on /run: " + m.stderr.strip())
    tmp = os.path.join(work, "tmp")
    os.makedirs(tmp)
    env = dict(os.environ, STRATA_CONSUMERD=consumerd, TMPDIR=tmp)
    for v in ("STRATA_CONSUMERD_SOCKET", "XDG_RUNTIME_DIR", "STRATA_EARLY", "LD_PRELOAD", "STRATA_AGGREGATE",
              NS_MARK):
        env.pop(v, None)
    before = listing("/run")
    d = start_default_daemon(consumerd, env)
    try:
        sock = "/run/strata/consumerd.sock"
        check(os.path.exists(sock), "the daemon listens at %s" % sock)
        check(stat.S_IMODE(os.stat("/run/strata").st_mode) == 0o755, "/run/strata is 0755")
        check(stat.S_IMODE(os.stat(sock).st_mode) == 0o666, "its socket is 0666")
        session_part(strata, loop, work, env, check)
        out = os.path.join(work, "rec")
        r = subprocess.run([strata, "record", "-o", out, "--", loop, "1"], env=env, capture_output=True, text=True,
                           timeout=120)
        sys.stdout.write(r.stderr)
        bt, got, _ = ticks(out)
        check(r.returncode == 0 and bt == 0 and got == 10, "strata record beside it records its 10 events (%d)" % got)
        check(listing(tmp) == [], "record left nothing in TMPDIR (%r)" % listing(tmp))
    finally:
        d.send_signal(signal.SIGTERM)
        rc = d.wait(timeout=60)
    check(rc == 0, "the daemon exits 0 at SIGTERM")
    check(listing("/run") == before, "its clean exit leaves /run as it was, /run/strata gone (%r)" % listing("/run"))
    check.finish()


if __name__ == "__main__":
    main()
