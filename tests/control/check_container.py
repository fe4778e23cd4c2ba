#!/usr/bin/python3
"""A process in a container is traced by the host's daemon (issue 32,
docs/security.md, "Containers").

usage: check_container.py CLI DAEMON TRACED_APP

Root only, with unshare (util-linux); exit 77 otherwise.  The host's daemon
listens in HOST/; a session "cs" records everything.  Inside
`unshare --pid --mount --fork --mount-proc` the container binds HOST/ at
INSIDE/ and hides HOST/ under a tmpfs, so the socket is reachable only by
the bind mount, named by STRATA_CONSUMERD_SOCKET.  There:
  - `strata status`, `strata stop cs`, `strata create` fail with the
    daemon's refusal (a controller in another pid namespace), and the
    session is still active afterwards;
  - the traced program (pid 1 in the container) emits 3000 events.
On the host: its sub-trace is named by its host pid, its env carries
vpid = 1 (the pid it saw) and pid = the host pid, babeltrace2 reads the
whole session with no error and exactly 3000 events.
"""
import os
import shutil
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import bt_text, end_daemon, run_checks, start_daemon, trace_messages, wait_for  # noqa: E402

N = 3000


def body(work, check, exes):
    strata, consumerd, app = exes
    host, inside, out = (os.path.join(work, n) for n in ("host", "inside", "out"))
    os.makedirs(inside)
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(host, "consumerd.sock")
    d = start_daemon(consumerd, env["STRATA_CONSUMERD_SOCKET"], env)

    def cli(*args):
        return subprocess.run([strata] + list(args), env=env, capture_output=True, text=True, timeout=60)

    for args in (["create", "cs", "-o", out], ["enable-event", "cs", "ctltest:*"], ["start", "cs"]):
        r = cli(*args)
        check(r.returncode == 0, "host: strata %s (%s)" % (" ".join(args), r.stderr.strip()))

    script = """
set -u
mount --bind "$HOST" "$INSIDE" && mount -t tmpfs tmpfs "$HOST" || exit 90
export STRATA_CONSUMERD_SOCKET="$INSIDE/consumerd.sock"
test -S "$HOST/consumerd.sock" && echo "host socket still visible"
for c in "status" "stop cs" "create evil -o /tmp/strata-evil"; do
    "$STRATA" $c >/dev/null 2>"$INSIDE/err"; echo "ctl $c: $? $(cat "$INSIDE/err")"
done
echo "vpid=$$"
exec "$APP" 1 %d wait
""" % N
    cenv = dict(env, HOST=host, INSIDE=inside, STRATA=strata, APP=app)
    u = subprocess.Popen(["unshare", "--pid", "--mount", "--fork", "--mount-proc", "sh", "-c", script],
                         env=cenv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    lines = []
    while True:
        ln = u.stdout.readline()
        if not ln or ln.startswith("vpid="):
            break
        lines.append(ln.strip())
    vpid = int(ln.strip().split("=")[1]) if ln.startswith("vpid=") else -1
    print("\n".join("  container: " + x for x in lines))
    check(not any("host socket" in x for x in lines), "the host's path is hidden in the container")
    ctl = [x for x in lines if x.startswith("ctl ")]
    check(len(ctl) == 3 and all(": 1 " in x and "may not control this daemon" in x and "pid namespace" in x
                                for x in ctl),
          "every control command from the container is refused by the daemon (%d)" % len(ctl))
    children = "/proc/%d/task/%d/children" % (u.pid, u.pid)
    kids = open(children).read().split()
    check(len(kids) == 1, "unshare has one child: %s" % kids)
    host_pid = int(kids[0])
    wait_for(lambda: os.readlink("/proc/%d/exe" % host_pid) == os.path.realpath(app), "the app's exec")
    u.stdin.close()
    check(u.wait(timeout=60) == 0, "the traced program in the container exits 0")
    check(vpid == 1, "it saw itself as pid 1 (%d); its host pid is %d" % (vpid, host_pid))

    r = cli("status", "cs")
    check(r.returncode == 0 and "active" in r.stdout, "the session is still active after the container's tries")
    r = cli("stop", "cs")
    check(r.returncode == 0, "host: strata stop cs (%s)" % r.stderr.strip())

    subs = [os.path.join(rt, x) for rt, ds, _ in os.walk(out) for x in ds if "-%d-" % host_pid in x]
    check(len(subs) == 1, "one sub-trace named by the host pid %d: %s" % (host_pid, subs))
    rc, _, errors, stderr = bt_text(out)
    if rc != 0 or stderr.strip():
        # The whole of it, and what the directory held then: a TSan
        # pre-flight failed here once with the cause cut off.
        print("  babeltrace2's stderr:\n" + "\n".join("    " + x for x in stderr.splitlines()[:80]))
        for rt, _, fs in os.walk(out):
            for f in fs:
                print("  %s: %d bytes" % (os.path.join(rt, f), os.path.getsize(os.path.join(rt, f))))
    check(rc == 0 and not stderr.strip(),
          "babeltrace2 reads the session (%d, %s)" % (rc, (errors[0] if errors else stderr.strip())[-300:]))
    n, envs = 0, set()
    for m in trace_messages(out):
        if m.kind == "event" and m.name == "ctltest:tick":
            envs.add((m.env_int("vpid"), m.env_int("pid", None)))
            n += 1
    check(n == N, "%d events recorded (got %d)" % (N, n))
    check(envs == {(1, host_pid)}, "env vpid = 1 and pid = the host pid (%s)" % sorted(envs))
    end_daemon(d, check)


def main():
    exes = sys.argv[1:4]  # strata, strata-consumerd, the traced app
    if os.geteuid() != 0 or not shutil.which("unshare"):
        print("SKIP: needs root and unshare")
        sys.exit(77)
    probe = subprocess.run(["unshare", "--pid", "--mount", "--fork", "--mount-proc", "true"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("SKIP: unshare --pid --mount does not work here: " + probe.stderr.strip())
        sys.exit(77)
    run_checks("strata-container-", lambda work, check: body(work, check, exes))


if __name__ == "__main__":
    main()
