#!/usr/bin/python3
"""`strata list`: the tracepoints of the registered processes and who is on
each, sessions and probes (issue 35).

usage: check_list.py STRATA LIST_TARGET WORKDIR   ($STRATA_TEST_CONSUMERD: the daemon)

Session s records lt:b and, through a filter, lt:c; session t (not
started) records everything; list_target has its own probe count_a on lt:a
and aggregates lt:b (STRATA_AGGREGATE).  Oracle, line by line:
  lt:a  probe count_a
  lt:b  session s, aggregate
  lt:c  session s (filtered)
  lt:d  -           (debug level: s's rules stop at info)
and after the program unregistered its probe, lt:a shows "-".

Probe marks (protocol version 7, docs/probes.md "Who is on a tracepoint"):
a second list_target (LIST_LATE_PROBE) starts with no probe: it is listed
with "-" on lt:a, and `strata list` under strace opens the first one's
/proc/PID/fd but never the second one's; once it registered its probe (long
after its start-up REGISTER) it is listed with "probe count_a".  A third
registers its probe while the daemon's sockets are away (renamed): its note
cannot leave, the probe is not listed; its next talk with the daemon (the
hand-off of its first recorded event's buffer) sends the owed note, and the
probe is listed.  Against a
fake daemon that answers in version 6 (no marks) the command reads both
processes' reports, as before version 7; against one that marks a process
"no report" it reads nothing of it.  A non-dumpable process whose descriptors
the CLI cannot read (run without capabilities under root): "probes: not
readable" where it has to look (marked, unknown, a version 6 daemon), "-"
where the process said it has no report.  The process side against fake grant
tables: a version 6 daemon's table gets the join of before (HELLO 4..4, a
version 4 REGISTER, no probe flag) and no note, which that daemon would
refuse; a version 7 one gets a version 7 join and, once the program
registered its probe, a note (HELLO 7..7, REGISTER(kRegisterNote |
kRegisterProbes)) on the quiet socket.
"""
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import e2e_setup, private_daemon, strata_cli  # noqa: E402


MAGIC = 0x4c435453


def fake_daemon(path, version, entries):
    """A daemon on `path` that answers HELLO in `version`, LIST with
    `entries` [(pid, comm, event, loglevel, mark)] (the mark only from
    version 7 on) and STATUS with no session, one connection after another."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(8)

    def reply(c, typ, seq, payload):
        c.sendall(struct.pack("<IHHII", MAGIC, version, typ, len(payload), seq) + payload)

    def s(x):
        return struct.pack("<I", len(x)) + x.encode()

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                f = c.makefile("rb")
                while True:
                    h = f.read(16)
                    if len(h) < 16:
                        break
                    _, _, typ, length, seq = struct.unpack("<IHHII", h)
                    f.read(length)
                    if typ == 1:  # HELLO
                        reply(c, 2, seq, struct.pack("<HI", version, os.getpid()))
                    elif typ == 12:  # LIST
                        body = struct.pack("<I", len(entries))
                        for pid, comm, event, ll, mark in entries:
                            body += struct.pack("<I", pid) + s(comm) + s(event) + struct.pack("<I", ll)
                            if version >= 7:
                                body += struct.pack("<I", mark)
                        reply(c, 13, seq, body)
                    elif typ == 14:  # STATUS
                        reply(c, 15, seq, struct.pack("<I", 0))
                    else:
                        break
    threading.Thread(target=serve, daemon=True).start()
    return srv


def table_joins(target, env, work, version):
    """Run `target` against a fake daemon that publishes a grant table of
    `version` with no grant (the join needs no round trip): the messages
    it sent, one list [(header version, type, payload)] per connection."""
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "..", "abi", "strata_abi.h")) as f:
        abi = int(re.search(r"#define STRATA_ABI_MAJOR\s*\\?\s*(\d+)u", f.read()).group(1))
    sock = os.path.join(work, "t%d.sock" % version)
    srvs = []
    for path in (sock, sock + ".quiet"):
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        srv.bind(path)
        srv.listen(16)
        srv.setblocking(False)
        srvs.append(srv)
    reply = struct.pack("<I", 0)  # REGISTER_REPLY: no grant
    msg = struct.pack("<IHHII", MAGIC, 1, 4, len(reply), 0) + reply
    table = struct.pack("<IHHIIQiI", 0x54475453, version, 0, abi, os.getpid(), 1, -1, 0) + msg
    with open(sock + ".grants.%d" % os.geteuid(), "wb") as f:
        f.write(table)
    p = subprocess.Popen([target], env=dict(env, STRATA_CONSUMERD_SOCKET=sock), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    ready = p.stdout.readline().split()  # its join and its note were sent before this
    conns = []
    for srv in srvs:
        while True:
            try:
                c, _ = srv.accept()
            except BlockingIOError:
                break
            c.setblocking(True)
            c.settimeout(10)
            data = b""
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
            c.close()
            msgs = []
            while len(data) >= 16:
                _, ver, typ, length, _ = struct.unpack("<IHHII", data[:16])
                msgs.append((ver, typ, data[16:16 + length]))
                data = data[16 + length:]
            conns.append(msgs)
        srv.close()
    p.stdin.close()
    p.wait(timeout=30)
    return ready, conns


def main():
    strata, target, work, consumerd, check = e2e_setup()
    env, daemon = private_daemon(work, consumerd)

    cli = strata_cli(strata, env, ok=False, timeout=60)

    def run(*args, env=env):
        r = cli(*args, env=env)
        print("+ strata %r -> %d\n%s%s" % (args, r.returncode, r.stdout, r.stderr))
        check(r.returncode == 0, "strata %r exits 0" % (args,))
        return r.stdout

    # `strata list` under strace: (its output, the /proc/PID/fd it opened),
    # or None where strace cannot run here.
    strace = shutil.which("strace")
    if strace and subprocess.run([strace, "-qq", "-o", os.devnull, "true"]).returncode != 0:
        strace = None
    if not strace:
        print("note: no working strace: the /proc/PID/fd opens are not checked")

    def traced_list(env=env):
        if not strace:
            return run("list", env=env), None
        log = os.path.join(work, "strace.log")
        r = subprocess.run([strace, "-f", "-qq", "-e", "trace=openat,open", "-o", log, strata, "list"], env=env,
                           capture_output=True, text=True, timeout=60)
        print("+ strace strata list -> %d\n%s%s" % (r.returncode, r.stdout, r.stderr))
        check(r.returncode == 0, "strata list under strace exits 0")
        return r.stdout, set(int(x) for x in re.findall(r'"/proc/(\d+)/fd"', open(log).read()))

    run("create", "s", "-o", os.path.join(work, "s"))
    run("enable-event", "s", "lt:b", "--loglevel", "info")
    run("enable-event", "s", "lt:c", "--filter", "v > 1")
    run("start", "s")
    run("create", "t", "-o", os.path.join(work, "t"))
    run("enable-event", "t", "*")
    p = subprocess.Popen([target], env=dict(env, STRATA_AGGREGATE="lt:b"), stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    ready = p.stdout.readline().split()
    check(len(ready) == 2 and ready[0] == "ready", "the program is ready: %r" % ready)
    pid = int(ready[1])
    late = subprocess.Popen([target], env=dict(env, LIST_LATE_PROBE="1"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    ready = late.stdout.readline().split()
    check(len(ready) == 2 and ready[0] == "ready", "the late prober is ready: %r" % ready)
    late_pid = int(ready[1])

    def on(out, who=pid):
        got = {}
        for ln in out.splitlines()[1:]:
            m = re.match(r"(\d+) +(\S+) +(lt:\w) +(\w+) +(.*)$", ln)
            if m and int(m.group(1)) == who:
                got[m.group(3)] = (m.group(4), m.group(5))
        return got
    out = run("list")
    check(out.splitlines()[0].split() == ["PID", "PROCESS", "TRACEPOINT", "LOGLEVEL", "ON"], "the header")
    want = {"lt:a": ("info", "probe count_a"), "lt:b": ("info", "session s, aggregate"),
            "lt:c": ("info", "session s (filtered)"), "lt:d": ("debug", "-")}
    check(on(out) == want, "who is on each tracepoint: %r" % on(out))
    want_late = {"lt:a": ("info", "-"), "lt:b": ("info", "session s"), "lt:c": ("info", "session s (filtered)"),
                 "lt:d": ("debug", "-")}
    check(on(out, late_pid) == want_late, "no probe on the late prober yet: %r" % on(out, late_pid))
    tout, opened = traced_list()
    check(tout == out, "the same list under strace")
    if opened is not None:
        check(pid in opened and late_pid not in opened,
              "the report of the process with probes is read, the other's is not looked for: %r" % opened)
    late.stdin.write("x\n")
    late.stdin.flush()
    check(late.stdout.readline().strip() == "registered", "the late prober registered its probe")
    tout, opened = traced_list()
    want_late["lt:a"] = ("info", "probe count_a")
    check(on(tout, late_pid) == want_late, "the late probe is listed: %r" % on(tout, late_pid))
    if opened is not None:
        check(late_pid in opened, "its report is read now: %r" % opened)

    # A note that cannot leave (the daemon's sockets away for a moment when
    # the probe is registered) is owed, and goes with the process's next
    # talk with the daemon: here, a tp-sync process that never queries
    # again, the buffer hand-off of its first lt:b event (session s).
    away = subprocess.Popen([target], env=dict(env, LIST_LATE_PROBE="1"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    ready = away.stdout.readline().split()
    check(len(ready) == 2 and ready[0] == "ready", "the prober of the owed note is ready: %r" % ready)
    away_pid = int(ready[1])
    sock = env["STRATA_CONSUMERD_SOCKET"]
    for path in (sock, sock + ".quiet"):
        os.rename(path, path + ".away")
    away.stdin.write("x\n")
    away.stdin.flush()
    registered = away.stdout.readline().strip()
    for path in (sock, sock + ".quiet"):
        os.rename(path + ".away", path)
    check(registered == "registered", "it registered its probe while the daemon was away: %r" % registered)
    got = on(run("list"), away_pid)
    check(got.get("lt:a") == ("info", "-"), "its note did not leave: its probe not listed yet: %r" % got)
    away.stdin.write("x\n")
    away.stdin.flush()
    check(away.stdout.readline().strip() == "fired", "it fired lt:b (its buffer handed to the daemon)")
    got = on(run("list"), away_pid)
    check(got.get("lt:a") == ("info", "probe count_a"), "the owed note went with the hand-off: %r" % got)
    away.stdin.close()
    check(away.wait(timeout=30) == 0, "the prober of the owed note exits 0")

    # Older and newer daemons, faked: version 6 marks nothing (every report
    # is read), version 7's "no report" is believed.
    for version, mark in ((6, 2), (7, 0)):
        fsock = os.path.join(work, "fake%d.sock" % version)
        srv = fake_daemon(fsock, version, [(pid, "list-target", "lt:a", 6, mark),
                                           (late_pid, "list-target", "lt:a", 6, mark)])
        fenv = dict(env, STRATA_CONSUMERD_SOCKET=fsock)
        fout, opened = traced_list(fenv)
        want_on = "probe count_a" if version == 6 else "-"
        check(on(fout).get("lt:a") == ("info", want_on) and on(fout, late_pid).get("lt:a") == ("info", want_on),
              "a version %d daemon: lt:a of both processes shows %r" % (version, want_on))
        if opened is not None:
            check((opened >= {pid, late_pid}) if version == 6 else not (opened & {pid, late_pid}),
                  "a version %d daemon: the reports read: %r" % (version, opened))
        srv.close()
    late.stdin.close()
    check(late.wait(timeout=30) == 0, "the late prober exits 0")

    # A process whose descriptors the caller cannot read (non-dumpable; the
    # CLI without capabilities when the test runs as root): where the CLI
    # has to look (marked, or unknown) it says "probes: not readable",
    # never "-"; where the process told the daemon it has no report, "-".
    hidden = subprocess.Popen([target], env=dict(env, LIST_NONDUMPABLE="1"), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    ready = hidden.stdout.readline().split()
    check(len(ready) == 2 and ready[0] == "ready", "the non-dumpable program is ready: %r" % ready)
    hidden_pid = int(ready[1])
    unpriv = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--"] if os.geteuid() == 0 else []
    for version, mark, want_on in ((7, 1, "probes: not readable"), (7, 2, "probes: not readable"),
                                   (6, 2, "probes: not readable"), (7, 0, "-")):
        fsock = os.path.join(work, "fake-hidden-%d-%d.sock" % (version, mark))
        srv = fake_daemon(fsock, version, [(hidden_pid, "list-target", "lt:a", 6, mark)])
        r = subprocess.run(unpriv + [strata, "list"], env=dict(env, STRATA_CONSUMERD_SOCKET=fsock),
                           capture_output=True, text=True, timeout=60)
        print("+ %sstrata list (version %d, mark %d) -> %d\n%s%s" % (
            "setpriv " if unpriv else "", version, mark, r.returncode, r.stdout, r.stderr))
        check(r.returncode == 0 and on(r.stdout, hidden_pid).get("lt:a") == ("info", want_on),
              "version %d, mark %d, descriptors not readable: lt:a shows %r (%r)" % (
                  version, mark, want_on, on(r.stdout, hidden_pid).get("lt:a")))
        srv.close()
    hidden.stdin.close()
    check(hidden.wait(timeout=30) == 0, "the non-dumpable program exits 0")

    # The process side: what it tells a version 6 and a version 7 daemon.
    for version in (6, 7):
        ready, conns = table_joins(target, env, work, version)
        check(len(ready) == 2 and ready[0] == "ready", "against a version %d table the program runs" % version)
        print("version %d table: %r" % (version, [[(v, t, len(b)) for v, t, b in c] for c in conns]))
        hellos = [struct.unpack("<HH", c[0][2][:4]) for c in conns if c and c[0][1] == 1]
        regs = [(c[1][0], struct.unpack("<I", c[1][2][16:20])[0]) for c in conns
                if len(c) >= 2 and c[1][1] == 3]
        if version == 6:
            check(hellos == [(4, 4)] and regs == [(4, 4)],
                  "a version 6 table: one join, HELLO 4..4 and REGISTER(table) in a version 4 header: "
                  "%r %r" % (hellos, regs))
        else:
            check(hellos == [(7, 7), (7, 7)] and regs == [(7, 4), (7, 16 | 32)],
                  "a version 7 table: the join and then the note, in version 7: %r %r" % (hellos, regs))
    p.stdin.write("x\n")
    p.stdin.flush()
    check(p.stdout.readline().strip() == "unregistered", "the program unregistered its probe")
    got = on(run("list"))
    check(got.get("lt:a") == ("info", "-") and got.get("lt:b") == want["lt:b"],
          "after unregister, nothing on lt:a: %r" % got)
    p.stdin.close()
    check(p.wait(timeout=30) == 0, "the probe was called once, for the one lt:a hit")
    run("destroy", "s")
    run("destroy", "t")
    daemon.terminate()
    daemon.wait(timeout=30)
    check.finish()


if __name__ == "__main__":
    main()
