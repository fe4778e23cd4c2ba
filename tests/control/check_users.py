#!/usr/bin/python3
"""One root daemon, several users (issue 32, docs/security.md).

usage: check_users.py CLI DAEMON TRACED_APP

Runs as root (exit 77 otherwise) and runs the users' commands as real
uids with setpriv: A = 65534, B = 65533, and C, D for the slot share.
The binaries and the build tree's libraries they load are copied into a
directory every uid can read (the build tree may not be).

  1. Root's session "rs" (every user's processes) records a process of A:
     exactly its 3000 events.
  2. A sees nothing of root's: status does not name "rs"; stop, destroy,
     enable-event and status on "rs" answer exactly as for a name that
     does not exist.  A may make its own "rs" (names are per user).
  3. A's session "us" records A's process (and root's "rs" too); B's
     process is in root's session but not in A's.  A's trace files are
     A's; A reads them with babeltrace2, B cannot open them.  A may not
     enable kernel events (they show every process), nor write a snapshot
     where it could not write itself, nor have root's daemon make or open
     a file that is not A's for --serial.
  4. B sees nothing of A's sessions (same answer as a missing name).
     B swaps its own session's directory for a link to a directory of
     root's after CREATE, before its process starts: nothing is made
     there (root's daemon writes with B's rights) and B's stop says so.
  5. Slots: A, B and C each get exactly 4 sessions, D none (the rest is
     root's); root still creates a session and records 3000 events.
  6. D, with no daemon it can reach, records alone with `strata record`.
  7. Root's `strata record` of a command that drops to uid A (setpriv):
     its private daemon (root's) records A's process.
  8. D beside root's daemon: no share left and an output directory D may
     write to but does not own (root's daemon refuses both): `strata
     record` records alone with a daemon of its own.
"""
import os
import shutil
import stat
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import run_checks, end_daemon, start_daemon  # noqa: E402

A, B, C, D = 65534, 65533, 65532, 65531
N = 3000


def stage(work, exes):
    """Copy `exes` and the libraries they load from outside /lib, /usr into
    work/bin (0755): what every uid can run.  Their paths there."""
    bindir = os.path.join(work, "bin")
    os.makedirs(bindir)
    out = []
    for exe in exes:
        dst = os.path.join(bindir, os.path.basename(exe))
        shutil.copy2(exe, dst)
        out.append(dst)
        ldd = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
        for line in ldd.splitlines():
            parts = line.split("=>")
            if len(parts) == 2 and parts[1].strip().startswith("/"):
                lib = parts[1].split()[0]
                if not lib.startswith(("/lib", "/usr")) and not os.path.exists(
                        os.path.join(bindir, os.path.basename(lib))):
                    shutil.copy2(lib, os.path.join(bindir, os.path.basename(lib)))
    for root, dirs, files in os.walk(work):
        for n in dirs + files:
            os.chmod(os.path.join(root, n), 0o755)
    return out


def as_user(uid, argv, env, **kw):
    return subprocess.run(["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups", "--"] + argv,
                          env=env, capture_output=True, text=True, timeout=120, **kw)


def bt_count(path, uid=None, pid=None):
    """(status, events) of babeltrace2 on path, as `uid`; events of `pid`'s
    sub-trace only when given (its directory name ends in -PID-DATE)."""
    if pid is not None:
        subs = [os.path.join(r, d) for r, ds, _ in os.walk(path) for d in ds if ("-%d-" % pid) in d]
        if len(subs) != 1:
            return -1, 0
        path = subs[0]
    argv = ["babeltrace2", path]
    r = as_user(uid, argv, None) if uid is not None else subprocess.run(argv, capture_output=True, text=True,
                                                                          timeout=120)
    return r.returncode, sum(1 for ln in r.stdout.splitlines() if "ctltest:tick" in ln)


def body(work, check, exes):
    os.chmod(work, 0o755)
    strata, consumerd, app = stage(work, exes)
    env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": os.path.dirname(strata),
           "STRATA_CONSUMERD_SOCKET": os.path.join(work, "run", "consumerd.sock"),
           "STRATA_CONSUMERD": consumerd}
    d = start_daemon(consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    sock = os.stat(env["STRATA_CONSUMERD_SOCKET"])
    check(stat.S_IMODE(sock.st_mode) == 0o666 and
          stat.S_IMODE(os.stat(os.path.join(work, "run")).st_mode) == 0o755,
          "root's daemon: socket 0666 in a 0755 directory")
    homes = {}
    for uid in (A, B, C, D):
        homes[uid] = os.path.join(work, "home-%d" % uid)
        os.makedirs(homes[uid], mode=0o700)
        os.chown(homes[uid], uid, uid)
    root_out = os.path.join(work, "root", "rs")
    os.makedirs(os.path.dirname(root_out), mode=0o700)

    def cli(uid, *args):
        argv = [strata] + list(args)
        if uid == 0:
            return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        return as_user(uid, argv, env)

    def run_app_pid(uid):
        pre = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups", "--"] if uid else []
        p = subprocess.Popen(pre + [app, "1", str(N), "exit"], env=env)
        return p.wait(timeout=120), p.pid

    for args in (["create", "rs", "-o", root_out], ["enable-event", "rs", "ctltest:*"], ["start", "rs"]):
        r = cli(0, *args)
        check(r.returncode == 0, "root: strata %s (%s)" % (" ".join(args), r.stderr.strip()))

    # 1. A's process joins root's session.
    rc, pid_a1 = run_app_pid(A)
    check(rc == 0, "A's traced process exits 0")

    # 2. A sees nothing of root's.
    r = cli(A, "status")
    check(r.returncode == 0 and "rs" not in r.stdout.split(), "A's status runs and does not name 'rs'")
    for args in (["stop", "%s"], ["destroy", "%s"], ["enable-event", "%s", "x:*"], ["status", "%s"],
                 ["start", "%s"]):
        got = cli(A, *[x % "rs" if "%s" in x else x for x in args])
        missing = cli(A, *[x % "nosuch" if "%s" in x else x for x in args])
        same = got.returncode == missing.returncode != 0 and \
            got.stderr.replace("rs", "NAME") == missing.stderr.replace("nosuch", "NAME")
        check(same, "A: strata %s rs answers as for a missing name (%r / %r)" %
              (args[0], got.stderr.strip(), missing.stderr.strip()))

    # 3. A's own sessions: "us", and an "rs" of its own.
    a_out = os.path.join(homes[A], "us")
    for args in (["create", "us", "-o", a_out], ["enable-event", "us", "ctltest:*"], ["start", "us"],
                 ["create", "rs", "-o", os.path.join(homes[A], "rs")]):
        r = cli(A, *args)
        check(r.returncode == 0, "A: strata %s (%s)" % (" ".join(args), r.stderr.strip()))
    r = cli(A, "enable-event", "us", "kernel:sched_switch")
    check(r.returncode != 0 and "only root's sessions" in r.stderr,
          "A may not enable kernel events on root's daemon (%s)" % r.stderr.strip())
    rc, pid_a2 = run_app_pid(A)
    check(rc == 0, "A's second process exits 0")
    rc, pid_b = run_app_pid(B)
    check(rc == 0, "B's traced process exits 0")

    # 3b. A's snapshot goes only where A could write itself.
    fr = os.path.join(homes[A], "fr")
    for args in (["create", "fr", "-o", fr, "--mode", "overwrite"], ["enable-event", "fr", "ctltest:*"],
                 ["start", "fr"]):
        r = cli(A, *args)
        check(r.returncode == 0, "A: strata %s (%s)" % (" ".join(args), r.stderr.strip()))
    # A snapshot holds what was recorded (a snapshot of nothing makes no
    # directory): a process of A's records N events into fr (and into us,
    # which counts it below) and waits.
    fr_app = subprocess.Popen(["setpriv", "--reuid=%d" % A, "--regid=%d" % A, "--clear-groups", "--", app, "1",
                               str(N), "serve"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    fr_app.stdin.write("\n")
    fr_app.stdin.flush()
    check(fr_app.stdout.readline().strip() == "ok", "A's process in fr emitted its %d events" % N)
    evil = os.path.join(work, "root", "evil")
    r = cli(A, "snapshot", "fr", "-o", evil)
    check(r.returncode != 0 and "inside a directory you own" in r.stderr and not os.path.exists(evil),
          "A's snapshot into root's directory is refused, nothing made (%s)" % r.stderr.strip())
    snap = os.path.join(homes[A], "snap")
    r = cli(A, "snapshot", "fr", "-o", snap)
    check(r.returncode == 0 and os.stat(snap).st_uid == A, "A's snapshot into its own directory is A's (%s)" %
          r.stderr.strip())
    fr_app.stdin.close()
    check(fr_app.wait(timeout=120) == 0, "A's process in fr exits 0")
    cli(A, "destroy", "fr")

    # 3c. A's serial line on root's daemon: only a file of A's, never made.
    nologin = os.path.join(work, "root", "nologin")
    r = cli(A, "create", "ser", "--serial", nologin)
    check(r.returncode != 0 and "belong to you" in r.stderr and not os.path.exists(nologin),
          "A's --serial to a path of root's is refused and nothing is made (%s)" % r.stderr.strip())

    # 4. B sees nothing of A's.
    got, missing = cli(B, "stop", "us"), cli(B, "stop", "nosuch")
    check(got.returncode != 0 and got.stderr.replace("us", "NAME") == missing.stderr.replace("nosuch", "NAME"),
          "B: strata stop us answers as for a missing name")
    r = cli(B, "status")
    check(r.returncode == 0 and "us" not in r.stdout.split(), "B's status does not name A's 'us'")

    # 4b. B swaps its session's output directory for a link into root's
    #     tree between CREATE (which checked it) and the first sub-trace:
    #     root's daemon writes with B's rights, so nothing is made there
    #     and B is told.  Synchronised on state: the session exists and is
    #     started, the link is in place, then B's process starts.
    target = os.path.join(work, "etc")  # root's, 0755: B may look, not write
    os.makedirs(target, mode=0o755)
    b_out = os.path.join(homes[B], "ev")
    for args in (["create", "ev", "-o", b_out], ["enable-event", "ev", "ctltest:*"], ["start", "ev"]):
        r = cli(B, *args)
        check(r.returncode == 0, "B: strata %s (%s)" % (" ".join(args), r.stderr.strip()))
    r = as_user(B, ["sh", "-c", 'mv "$1" "$1.old" && ln -s "$2" "$1"', "sh", b_out, target], None)
    check(r.returncode == 0 and os.path.islink(b_out), "B swaps %s for a link to %s (%s)" %
          (b_out, target, r.stderr.strip()))
    rc, _ = run_app_pid(B)
    check(rc == 0, "B's process exits 0 with its session's directory swapped")
    r = cli(B, "stop", "ev")
    told = r.stdout + r.stderr
    check("Permission denied" in told and "ust/pid" in told,
          "B is told its sub-trace could not be made (%s)" % told.strip())
    made = [os.path.join(r_, n) for r_, ds, fs in os.walk(target) for n in ds + fs]
    check(not made, "nothing is made in root's directory through B's link (%s)" % made)
    cli(B, "destroy", "ev")

    r = cli(A, "stop", "us")
    check(r.returncode == 0, "A stops us (%s)" % r.stderr.strip())
    r = cli(0, "stop", "rs")
    check(r.returncode == 0, "root stops its rs (%s)" % r.stderr.strip())
    for pid, what in ((pid_a1, "A's first"), (pid_a2, "A's second"), (pid_b, "B's")):
        rc, n = bt_count(root_out, pid=pid)
        check(rc == 0 and n == N, "root's trace holds %s process's %d events (got %d, status %d)" %
              (what, N, n, rc))
    rc, n = bt_count(a_out, uid=A, pid=pid_a2)
    check(rc == 0 and n == N, "A reads its own trace: %d events of its process (got %d)" % (N, n))
    rc, n = bt_count(a_out, uid=A)
    check(rc == 0 and n == 2 * N, "A's trace holds only A's two processes (its second and fr's: %d events, got %d)"
          % (2 * N, n))
    files = [os.path.join(r_, f) for r_, _, fs in os.walk(a_out) for f in fs]
    check(files and all(os.stat(f).st_uid == A for f in files), "A's trace files (%d) are A's" % len(files))
    r = as_user(B, ["cat"] + files[:1], None)
    check(r.returncode != 0, "B cannot read A's trace")
    rfiles = [os.path.join(r_, f) for r_, _, fs in os.walk(root_out) for f in fs]
    r = as_user(A, ["cat"] + rfiles[:1], None)
    check(rfiles and r.returncode != 0, "A cannot read root's trace")

    # 5. The slot share: A holds 2 already.
    def take_all(uid, held):
        got = held
        for i in range(16):
            r = cli(uid, "create", "s%d" % i, "-o", os.path.join(homes[uid], "s%d" % i))
            if r.returncode != 0:
                return got, r.stderr.strip()
            got += 1
        return got, ""
    for uid, held, want in ((A, 2, 4), (B, 0, 4), (C, 0, 4), (D, 0, 0)):
        got, why = take_all(uid, held)
        check(got == want, "uid %d holds %d sessions, want %d (refused: %s)" % (uid, got, want, why))
    for args in (["create", "r2", "-o", os.path.join(work, "root", "r2")], ["enable-event", "r2", "ctltest:*"],
                 ["start", "r2"]):
        r = cli(0, *args)
        check(r.returncode == 0, "root, with users holding 12 slots: strata %s (%s)" % (" ".join(args),
                                                                                          r.stderr.strip()))
    rc, pid_r = run_app_pid(0)
    r = cli(0, "stop", "r2")
    rc, n = bt_count(os.path.join(work, "root", "r2"), pid=pid_r)
    check(rc == 0 and n == N, "root records %d events beside them (got %d)" % (N, n))

    # 6. D alone: no daemon on its socket, it records with its own.
    denv = dict(env)
    denv["STRATA_CONSUMERD_SOCKET"] = os.path.join(homes[D], "none.sock")
    d_out = os.path.join(homes[D], "alone")
    r = as_user(D, [strata, "record", "-o", d_out, "--", app, "1", str(N), "exit"], denv)
    check(r.returncode == 0, "D records alone (%s)" % r.stderr.strip()[-300:])
    rc, n = bt_count(d_out, uid=D)
    check(rc == 0 and n == N, "D's own trace: %d events (got %d)" % (N, n))

    # 7. root's own `strata record` of a command that drops to uid A: the
    #    private daemon is root's and serves A's process too.
    rr_out = os.path.join(work, "root", "rec")
    r = subprocess.run([strata, "record", "-o", rr_out, "--", "setpriv", "--reuid=%d" % A, "--regid=%d" % A,
                        "--clear-groups", "--", app, "1", str(N), "exit"],
                       env=dict(env, STRATA_CONSUMERD_SOCKET=os.path.join(work, "none.sock")),
                       capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, "root records a command run as A (%s)" % r.stderr.strip()[-300:])
    rc, n = bt_count(rr_out)
    check(rc == 0 and n == N, "root's record holds A's %d events (got %d)" % (N, n))

    # 8. D beside root's daemon, with no share left and a directory it
    #    may write but does not own: root's daemon refuses, record goes
    #    on alone.
    shared = os.path.join(work, "shared")
    os.makedirs(shared)
    os.chmod(shared, 0o1777)
    d_out = os.path.join(shared, "d")
    r = as_user(D, [strata, "record", "-o", d_out, "--", app, "1", str(N), "exit"], env)
    check(r.returncode == 0, "D records alone beside root's daemon (%s)" % r.stderr.strip()[-300:])
    rc, n = bt_count(d_out, uid=D)
    check(rc == 0 and n == N, "D's trace in a directory it does not own: %d events (got %d)" % (N, n))

    end_daemon(d, check)


def main():
    exes = sys.argv[1:4]  # strata, strata-consumerd, the traced app
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        print("SKIP: needs root and setpriv (to run commands as other uids)")
        sys.exit(77)
    run_checks("strata-users-", lambda work, check: body(work, check, exes))


if __name__ == "__main__":
    main()
