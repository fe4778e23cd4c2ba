#!/usr/bin/python3
"""A daemon that comes back loses nothing its processes still hold
(docs/crash.md, "The daemon dies").

PROCS processes x THREADS threads of restart_app emit numbered events
rstest:seq {proc, thread, i} into one session while strata-consumerd is
killed with SIGKILL KILLS times and started again each time on the same
socket.  Each kill comes at a different point of a phase of the run: the
test reads how many events each thread emitted (the app's shared counter
file) and kills once they passed a chosen fraction of the phase; the app's
threads wait at each phase's end until the test let the next phase go,
which it does once the new daemon answers with every buffer re-attached
(`strata status`: PROCS buffers).  So kills fall while the writers run, and
no sleep is used to synchronise.  While no daemon runs, the writers fill
their small rings (4 x 4 KiB per lane) and then discard (counted in the
packets) or, with --blocking, wait and then discard.

Oracle, per thread, in the order of its stream (one owned lane per
thread): every event i follows the previous one plus the events babeltrace2
says were discarded in between (no duplicate, no uncounted gap), the last
one plus the discarded after it is EVENTS - 1; recorded + discarded ==
emitted exactly over the run; no packet is missing (no discarded-packets
message); babeltrace2 reads the trace with no error.

Modes: `session` (strata create/start, 10 kills), `blocking` (the same
with --blocking), `record` (`strata record` runs the app: its session is
owned by record's connection; the daemon is killed and restarted while
record waits for the app, record finds its daemon again to stop the
session, and exits with the app's status 0), `record_private` (the same
with the private daemon record starts where none answers: record sees it
die, starts another on its socket, which takes the session up, and says
so), `record_private_orphan` (the same, the app started in the
background by a shell that exits at once: record follows it as what its
command left running, and starts each next daemon as while CMD ran),
`record_private_gone` (its daemon killed a fourth time: record
says the trace is cut short and exits 1), `record_killed` (record is
killed with SIGKILL while no daemon runs: the next daemon finds the
session's owner gone and ends the session at once, as the closed
connection would have: the trace is complete up to there and readable,
no session and no state is left, the app goes on untraced), `proc_killed`
(at the first kill, one app process is killed too while no daemon runs:
its buffer goes with it, the new daemon takes up the other two, whose
events keep the exact oracle; the dead one's keep theirs up to where it
died, without a duplicate, and each of its lanes ends with one
discarded-packets mark, which `strata status` explains), `proc_exits` (the
same, the process running to its end and exiting normally while no daemon
runs).

--kernel (kernel.restart, in the kernel VM with the module loaded: the app
processes then join through the module, docs/crash.md): the session also
records kernel events (the getppid syscall); the test makes KMARK getppid
calls before the first kill and after each restart.  Then also: exactly
(kills + 1) x KMARK of the test's getppid entries are in the trace (plus
the kernel events counted lost), the kernel sub-trace is one (the new
daemon continued the module's buffer, which the module kept for it), and
a process started after the last restart joins through the module and
keeps the same exact oracle.
"""
import argparse
import atexit
import mmap
import os
import re
import signal
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, bt_text, start_daemon, strata_cli, trace_messages, wait_for, work_dir  # noqa: E402

KMARK = 3  # getppid calls per phase (--kernel)


class State:
    """One app process's shared file: word 0 the phase allowed, word 1 + t
    the events thread t emitted."""

    def __init__(self, path, threads):
        with open(path, "wb") as f:
            f.write(b"\0" * 4096)
        self.f = open(path, "r+b")
        self.m = mmap.mmap(self.f.fileno(), 4096)
        self.threads = threads

    def allow(self, phase):
        self.m[0:8] = struct.pack("<Q", phase)

    def emitted(self, t):
        return struct.unpack_from("<Q", self.m, 8 * (1 + t))[0]


def n_buffers(strata, env, session):
    p = subprocess.run([strata, "status", session], env=env, capture_output=True, text=True)
    n_buffers.last = p.stdout + p.stderr  # said when a wait fails
    m = re.search(r"recorded: (\d+) buffer", p.stdout)
    return int(m.group(1)) if p.returncode == 0 and m else -1


def kids_argv(rec_pid):
    """(pid, argv) of each child of `strata record` (rec_pid) now."""
    try:
        with open("/proc/%d/task/%d/children" % (rec_pid, rec_pid)) as f:
            kids = [int(x) for x in f.read().split()]
    except OSError:
        return []
    out = []
    for k in kids:
        try:
            with open("/proc/%d/cmdline" % k, "rb") as f:
                out.append((k, f.read().split(b"\0")))
        except OSError:
            continue
    return out


def private_daemon(rec_pid):
    """(pid, socket) of the strata-consumerd `strata record` (rec_pid)
    started as its child, or None."""
    for k, argv in kids_argv(rec_pid):
        if argv[0].endswith(b"strata-consumerd") and b"--socket" in argv:
            return k, argv[argv.index(b"--socket") + 1].decode()
    return None


def adopted(rec_pid, app):
    """The app runs as record's own child: the shell that started it has
    exited, and record (its subreaper) follows it."""
    return any(argv[0] == app.encode() for _, argv in kids_argv(rec_pid))


def stream_files(out):
    n = 0
    for root, _, files in os.walk(out):
        n += sum(1 for f in files if f.startswith("channel0_") and not f.endswith(".idx") and os.path.getsize(os.path.join(root, f)) > 0)
    return n


def scan(out, events, check, dead=(), a_threads=0):
    """The oracle (module docstring) over the trace in `out`; the threads
    of the processes in `dead` need not reach the end."""
    last = {}      # (proc, thread) -> last i seen
    owner = {}     # stream -> (proc, thread)
    pending = {}   # stream -> discarded since its last event
    recorded = discarded = dup_or_gap = lost_packets = 0
    kernel = {"marks": 0, "lost": 0}  # the test's getppid entries, kernel events lost
    first_bad = None
    scan.marked = 0
    for m in trace_messages(out):
        if m.kind != "discarded_packets" and m.env_get("domain") == "kernel":
            if m.kind == "discarded_events":
                kernel["lost"] += m.count
            elif m.name == "syscall_entry_getppid" and m.tid == os.getpid():
                kernel["marks"] += 1
            continue
        if m.kind == "discarded_events":
            pending[m.stream] = pending.get(m.stream, 0) + m.count
            discarded += m.count
        elif m.kind == "discarded_packets":
            lost_packets += 1
            if owner.get(m.stream, (None,))[0] in dead:
                scan.marked += 1  # a lost tail, marked by the next daemon
        else:
            f = m.fields
            key = (f["proc"], f["thread"])
            i = f["i"]
            s = m.stream
            if owner.setdefault(s, key) != key:
                dup_or_gap += 1
                first_bad = first_bad or "stream shared by %s and %s" % (owner[s], key)
            want = last.get(key, -1) + 1 + pending.pop(s, 0)
            if i != want:
                dup_or_gap += 1
                first_bad = first_bad or "thread %s: event %d where %d was expected" % (key, i, want)
            last[key] = i
            recorded += 1
    for s, n in pending.items():  # discarded after a stream's last event
        key = owner.get(s)
        if key is not None:
            last[key] = last[key] + n
    ends_ok = all(v == events - 1 for k, v in last.items() if k[0] not in dead)
    check(dup_or_gap == 0, "every event follows the previous one of its thread plus the counted discards "
          "(%d violation(s)%s)" % (dup_or_gap, ": " + first_bad if first_bad else ""))
    check(ends_ok, "every thread's last event plus the discards after it is the last emitted (%s)" %
          sorted(last.items())[:8])
    want = a_threads * len(dead)  # one mark per lane (owned by one thread) of a dead process
    check(lost_packets == want and scan.marked == want,
          "%d discarded-packets message(s), each at the end of a lane of a process that ended while no "
          "daemon ran (%d, %d of them such)" % (want, lost_packets, scan.marked))
    live = sum(1 for k in last if k[0] not in dead)
    scan.kernel = kernel
    return recorded, discarded, len(last), live


def bt_errors(out):
    rc, _, errors, _ = bt_text(out)
    return rc, errors


def record_killed(a, check, d, rec, state, env, sock, out, session, events, phases):
    """The `record_killed` mode, from the first packets on disk."""
    d.send_signal(signal.SIGKILL)
    d.wait()
    rec.send_signal(signal.SIGKILL)
    rec.wait()
    d = start_daemon(a.consumerd, sock, env)
    p = subprocess.run([a.strata, "status", session], env=env, capture_output=True, text=True)
    check(p.returncode != 0, "the new daemon ended the session of the dead record (status: %s)" %
          (p.stdout + p.stderr).strip().splitlines()[:1])
    check(not os.listdir(sock + ".state"), "no session state left")
    state.allow(phases)  # the app goes on, untraced, and exits
    d.send_signal(signal.SIGTERM)
    d.wait(timeout=60)
    rc, errors = bt_errors(out)
    check(rc == 0 and not errors, "babeltrace2 reads the trace with no error (status %d, %s)" % (rc, errors[:2]))
    seen, dup = {}, 0
    for m in trace_messages(out):
        if m.kind == "event":
            f = m.fields
            key = (f["thread"], f["i"])
            dup += key in seen
            seen[key] = 1
    per_thread = [sum(1 for k in seen if k[0] == t) for t in range(a.threads)]
    check(dup == 0 and all(n > 0 for n in per_thread), "events of every thread, no duplicate (%s, %d dup)" %
          (per_thread, dup))
    check.finish()


def end_record(rec):
    """`strata record` and its children (the app, its daemon) killed if still
    running when the check ends early."""
    if rec.poll() is not None:
        return
    for k, _ in kids_argv(rec.pid):
        try:
            os.kill(k, signal.SIGKILL)
        except OSError:
            pass
    rec.kill()
    rec.wait()


def replaced(rec_pid, old):
    """record (rec_pid) runs a private daemon other than `old`."""
    p = private_daemon(rec_pid)
    return p is not None and p[0] != old


def gone(pid):
    """The process has ended (a zombie, or reaped)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def record_private_gone(a, check, rec, state, env, out, session, phases):
    """The `record_private_gone` mode: record's private daemon killed once
    more than record starts another (3): record then repairs the trace and
    says that it is cut short, since the events written after the last
    daemon's last packet are neither in it nor counted (the app's rings of
    4 x 4 KiB cannot hold the phases left, so recorded + discarded <
    emitted in the trace: the oracle of the words)."""
    for k in range(4):
        old = private_daemon(rec.pid)[0]
        os.kill(old, signal.SIGKILL)
        if k < 3:
            wait_for(lambda: replaced(rec.pid, old),
                     "record's next daemon after kill %d" % (k + 1), 60)
            wait_for(lambda: n_buffers(a.strata, env, session) == 1, "the buffer taken up again", 60)
    wait_for(lambda: gone(old), "the last daemon dead", 60)
    state.allow(phases)
    _, e = rec.communicate(timeout=120)
    check(rec.returncode == 1, "strata record exits 1 (got %d)" % rec.returncode)
    check(e.count("starting another to take the session up") == 3, "three daemons started again, said")
    check("cut short: its daemon ended before the stop" in e and "in what the trace holds: " in e,
          "strata record says the trace is cut short (%s)" % [l for l in e.splitlines() if "trace" in l][-2:])
    check(not os.path.exists(os.path.dirname(env["STRATA_CONSUMERD_SOCKET"])), "the private daemon's directory is gone")
    rc, errors = bt_errors(out)
    check(rc == 0 and not errors, "babeltrace2 reads the repaired trace with no error (status %d, %s)" % (rc, errors[:2]))
    recorded, discarded, _, _ = scan(out, a.events or 2000 * phases, check, (0,), a.threads)
    emitted = a.threads * (a.events or 2000 * phases)
    check(recorded + discarded < emitted, "recorded %d + discarded %d < emitted %d: what the trace cannot count" %
          (recorded, discarded, emitted))
    check.finish()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--strata", required=True)
    ap.add_argument("--consumerd", required=True)
    ap.add_argument("--app", required=True)
    ap.add_argument("--mode", choices=("session", "blocking", "record", "record_private", "record_private_orphan",
                                       "record_private_gone",
                                       "record_killed", "proc_killed", "proc_exits"),
                    default="session")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--events", type=int, default=0, help="per thread (default: 2000 per phase)")
    ap.add_argument("--block-ms", type=int, default=200, help="blocking mode's timeout")
    ap.add_argument("--kernel", action="store_true", help="kernel events and a late process (kernel VM)")
    ap.add_argument("--work", help="directory for the trace and the socket (default: a new temporary one)")
    a = ap.parse_args()
    phases = a.kills + 1
    events = a.events or 2000 * phases
    per = events // phases
    recording = a.mode.startswith("record")
    procs = 1 if recording else a.procs
    work = a.work or work_dir("strata-restart-")
    sock = os.path.join(work, "sock")
    env = dict(os.environ, STRATA_CONSUMERD_SOCKET=sock)
    out = os.path.join(work, "trace")
    check = Checks()

    strata = strata_cli(a.strata, env)

    private = a.mode.startswith("record_private")
    d = None if private else start_daemon(a.consumerd, sock, env)
    geometry = ["--subbuf-size", "4096", "--subbuf-count", "4", "--lanes", str(2 * a.threads)]
    states = [State(os.path.join(work, "state%d" % p), a.threads) for p in range(procs)]
    apps = []
    session = "s"
    kbuf = 1 if a.kernel else 0  # the session's kernel buffer, one of its buffers in `strata status`
    atexit.register(lambda: [p.kill() for p in apps if p.poll() is None])  # a failed check ends them
    if recording:
        # `_orphan`: CMD a shell that starts the app in the background and
        # exits (an orphan of record's, the subreaper).
        shell = ["/bin/sh", "-c", '"$@" </dev/null >/dev/null &', "sh"] if a.mode == "record_private_orphan" else []
        rec = subprocess.Popen([a.strata, "record", "-o", out] + geometry + ["-e", "rstest:*", "--"] + shell +
                               [a.app, "0", str(a.threads), str(events), str(phases), states[0].f.name],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        session = "record-%d" % rec.pid
        atexit.register(lambda: end_record(rec))  # a failed check must not leave it and the app waiting
        if private:
            # No daemon on `sock`: record started its own, whose socket
            # the status calls below ask.
            wait_for(lambda: private_daemon(rec.pid), "record's private daemon", 60)
            env = dict(env, STRATA_CONSUMERD_SOCKET=private_daemon(rec.pid)[1])
    else:
        extra = ["--blocking=%d" % a.block_ms] if a.mode == "blocking" else []
        strata("create", session, "-o", out, *geometry, *extra)
        strata("enable-event", session, "rstest:*")
        if a.kernel:
            strata("enable-event", session, "kernel:syscall_entry_getppid")
        strata("start", session)
        for p in range(procs):
            apps.append(subprocess.Popen([a.app, str(p), str(a.threads), str(events), str(phases),
                                          states[p].f.name], env=env, stdout=subprocess.DEVNULL))

    def emitted():
        return sum(s.emitted(t) for s in states for t in range(a.threads))

    # Every buffer joined and every lane's first packet on disk (babeltrace2
    # counts the discards of a stream from its first packet on).
    try:
        wait_for(lambda: n_buffers(a.strata, env, session) == procs + kbuf, "%d buffers in the session" % (procs + kbuf),
             60)
    except SystemExit:
        print("strata status said:\n" + n_buffers.last)
        raise
    wait_for(lambda: stream_files(out) >= procs * a.threads, "a packet of every thread on disk", 60)
    if a.mode == "record_private_orphan":
        # Every kill below falls after CMD (the shell) exited.
        wait_for(lambda: adopted(rec.pid, a.app), "the app adopted by record, its shell gone", 60)
    if a.mode == "record_private_gone":
        return record_private_gone(a, check, rec, states[0], env, out, session, phases)
    if a.mode == "record_killed":
        return record_killed(a, check, d, rec, states[0], env, sock, out, session, events, phases)
    total = procs * a.threads
    dead = set()

    def kernel_marks():
        for _ in range(KMARK if a.kernel else 0):
            os.getppid()  # a getppid syscall each (CPython does not cache it)
    kernel_marks()
    for k in range(a.kills):
        # A different instant of each phase: 5% .. 95% of it emitted.
        frac = 0.05 + 0.9 * ((k * 7) % 10) / 10
        target = int((total - a.threads * len(dead)) * (k * per + frac * per)) + sum(
            states[p].emitted(t) for p in dead for t in range(a.threads))
        wait_for(lambda: emitted() >= target, "%d events emitted before kill %d" % (target, k + 1), 120)
        if private:
            # record sees its daemon die and starts another on its socket.
            old = private_daemon(rec.pid)[0]
            os.kill(old, signal.SIGKILL)
            wait_for(lambda: replaced(rec.pid, old),
                     "record's next daemon after kill %d" % (k + 1), 60)
            # Listening, and the buffer taken up (as start_daemon's ready
            # and the take-up before it, below): the next kill must not
            # fall inside its start.
            wait_for(lambda: n_buffers(a.strata, env, session) == procs + kbuf,
                     "the buffer taken up again after kill %d" % (k + 1), 60)
        else:
            d.send_signal(signal.SIGKILL)
            d.wait()
        if a.mode == "proc_killed" and k == 0:
            apps[0].send_signal(signal.SIGKILL)
            apps[0].wait()
            dead.add(0)
        if a.mode == "proc_exits" and k == 0:
            states[0].allow(phases)  # it runs to its end and exits, no daemon draining it
            apps[0].wait(timeout=120)
            dead.add(0)
        if not private:
            d = start_daemon(a.consumerd, sock, env)
        if k == 0 and dead:
            p = subprocess.run([a.strata, "status", session], env=env, capture_output=True, text=True)
            check(re.search(r"lost at a daemon restart: pid %d \(.*\) exited while no daemon ran.*%d lane\(s\) end "
                            r"with a discarded-packets mark" % (apps[0].pid, a.threads), p.stdout) is not None,
                  "strata status names the process whose buffer was lost: %s" %
                  [l for l in p.stdout.splitlines() if "lost" in l][:2])
        n = n_buffers(a.strata, env, session)
        if n != procs - len(dead) + kbuf:
            check(False, "kill %d: the new daemon re-attached %d of %d buffers" % (k + 1, n, procs + kbuf))
            # What the new daemon holds, and the app processes' pids, for
            # the one who reads a failure of a VM run whose trace is gone.
            print("strata status said:\n" + n_buffers.last)
            print("app pids: %s; sub-traces: %s" % ([p.pid for p in apps], sorted(
                os.path.relpath(r, out) for r, _, fs in os.walk(out) if "metadata" in fs)))
        kernel_marks()
        for s in states:
            s.allow(k + 1)
    if a.kernel:
        # A process that starts after the restarts joins through the module
        # (the new daemon set its slot again): the same oracle, one phase.
        late = State(os.path.join(work, "state_late"), a.threads)
        late.allow(1)
        lp = subprocess.Popen([a.app, str(procs), str(a.threads), str(events), "1", late.f.name], env=env,
                              stdout=subprocess.DEVNULL)
        lp.wait(timeout=300)
        check(lp.returncode == 0, "the late process exited 0")
    check(True, "%d SIGKILLs of the daemon, each followed by a new one that took the session up" % a.kills)
    if recording:
        priv_sock = env["STRATA_CONSUMERD_SOCKET"]
        o, e = rec.communicate(timeout=120)
        check(rec.returncode == 0, "strata record exits with the app's status 0 (got %d; %s)" %
              (rec.returncode, e.strip().splitlines()[-3:]))
        # record's own verdict: the taken-up daemon may print "packet header
        # cut short" of a write its killed predecessor tore (it repairs it,
        # and the ring still holds that packet), which is no cut trace.
        check("trace written to" in e and ", cut short: its daemon ended" not in e,
              "strata record completed the trace")
        if private:
            n = e.count("starting another to take the session up")
            check(n == a.kills and "took the session up\n" in e,
                  "strata record said each of its daemon's %d deaths and the take-up (%d)" % (a.kills, n))
            if a.mode == "record_private_orphan":
                check("/bin/sh exited, and 1 process(es) it started still run" in e and
                      e.count("while what /bin/sh started ran: starting another") == a.kills,
                      "strata record followed the app its shell left running, and each daemon's death then (%s)" %
                      [ln for ln in e.splitlines() if "still run" in ln or "starting another" in ln][:4])
            check(not os.path.exists(os.path.dirname(priv_sock)),
                  "the private daemon's directory is gone (%s)" % os.path.dirname(priv_sock))
    else:
        for p in apps:
            p.wait(timeout=120)
        check(all(p.returncode == 0 for i, p in enumerate(apps) if i not in dead), "every app exited 0")
        strata("stop", session)
        strata("destroy", session)
    if d:
        d.send_signal(signal.SIGTERM)
        d.wait(timeout=60)
    check(not os.listdir(sock + ".state") if os.path.isdir(sock + ".state") else True,
          "a clean exit leaves no session state behind")
    rc, errors = bt_errors(out)
    check(rc == 0 and not errors, "babeltrace2 reads the trace with no error (status %d, %s)" % (rc, errors[:2]))
    recorded, discarded, threads, live = scan(out, events, check, dead, a.threads)
    nprocs = procs + (1 if a.kernel else 0)
    emitted_total = nprocs * a.threads * events
    check(threads == nprocs * a.threads, "events of all %d threads (%d)" % (nprocs * a.threads, threads))
    if a.kernel:
        k, want = scan.kernel, KMARK * (a.kills + 1)
        check(k["marks"] <= want and k["marks"] + k["lost"] >= want,
              "the test's getppid entries: %d of %d, with %d kernel events counted lost (before the first "
              "kill and after each restart)" % (k["marks"], want, k["lost"]))
        kdirs = sorted(x for x in os.listdir(out) if x.startswith("kernel"))
        check(kdirs == ["kernel"], "one kernel sub-trace, continued across the restarts (%s)" % kdirs)
    if dead:
        check(live == (procs - len(dead)) * a.threads, "the live processes' threads all reach the end")
    else:
        check(recorded + discarded == emitted_total, "recorded %d + discarded %d == emitted %d" %
              (recorded, discarded, emitted_total))
    print("recorded %d, discarded %d (%.1f%%)" % (recorded, discarded, 100.0 * discarded / emitted_total))
    check.finish()


if __name__ == "__main__":
    main()
