#!/usr/bin/env python3
"""check_crash.py OUT N [boot] - the host's oracle of kernel.crash and, with
`boot`, of kernel.crash_boot (test-crash.sh).

The guest recorded a workload (kcrash_workload.c) emitting kcrash:seq 0..N-1,
each followed by getppid(), in a discard session (daemon on disk in
OUT/vm/crash/disc) and a flight-recorder session, then panicked itself.
`strata recover` wrote OUT/recovered/slot<S>/ from the memory dump
(its report in OUT/recover.out).  Checked:
  - recover found both sessions' user buffer and kernel buffer;
  - babeltrace2 reads each recovered session with no warning (one clock);
  - discard session: what the daemon wrote before the panic plus what was
    recovered is exactly 0..N-1, nothing discarded, and the last recovered
    user event is N-1 (the last one emitted before the panic);
  - its kernel events: the workload's getppid entries (daemon + recovered,
    deduplicated by raw clock value) number N minus the kernel events counted
    lost, the last getppid entry follows user event N-1, and the
    workload's last syscall event is the syscall_entry_write that panicked
    (scheduler events from the panic path itself may follow it);
  - flight recorder: the recovered user events are a contiguous run ending
    at N-1.

boot: PID 1 (boot-crash-init.sh) ran N processes (/bin/busybox-crashtest
true) in early boot, after a few others, the module recording the kernel's
process events from its load (strata.boot_events), then panicked.
Checked: the boot buffer (comm kernel-boot) is recovered; babeltrace2 reads
it with no warning; it holds the exec of PID 1's program and exactly N
execs of /bin/busybox-crashtest, minus what it counts as lost, and the
last exec and fork are the last counted process's (nothing after it but
the panic).
"""
import os
import re
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, bt_text, trace_messages  # noqa: E402

check = Checks()


def events(path):
    """(name, ns, tid, payload, domain, raw clock value) in merged order, and
    discarded count.  The raw value (the clock's cycles) is what the daemon's
    trace and the recovered one share for the same kernel record: their ns
    differ by the two traces' separately measured clock offsets."""
    out, lost = [], 0
    for msg in trace_messages(path):
        if msg.kind == "event":
            out.append((msg.name, msg.ts, msg.tid, msg.fields, msg.env_get("domain"), msg.clock_value))
        elif msg.kind == "discarded_events":
            lost += msg.count
    return out, lost


def bt2_silent(path, what):
    rc, _, _, stderr = bt_text(path, timeout=300)
    check(rc == 0 and stderr.strip() == "",
          "%s: babeltrace2 exits 0 with no warning (rc %d, stderr %r)" % (what, rc, stderr[:300]))


def main():
    out, n = sys.argv[1], int(sys.argv[2])
    rep = open(os.path.join(out, "recover.out")).read()
    print(rep, end="")
    users = {int(s): mode for s, mode in
             re.findall(r"^slot (\d+) pid \d+ \(strata-kcrash-w[^,]*, (\w+)\)", rep, re.M)}
    kernels = {int(s) for s in re.findall(r"^slot (\d+) kernel ", rep, re.M)}
    disc = [s for s, m in users.items() if m == "discard"]
    fr = [s for s, m in users.items() if m == "overwrite"]
    if not (check(len(disc) == 1 and len(fr) == 1, "one discard and one overwrite user buffer recovered (%r)" % users)
            and check(kernels >= {disc[0], fr[0]}, "both sessions' kernel buffers recovered (%r)" % kernels)):
        return
    rec = os.path.join(out, "recovered")
    for s in (disc[0], fr[0]):
        bt2_silent(os.path.join(rec, "slot%d" % s), "recovered slot %d" % s)

    # Discard session: daemon's part (repaired: its last write may be torn) + recovered part.
    daemon = os.path.join(out, "vm", "crash", "disc")
    consumerd = os.environ["STRATA_CONSUMERD"]
    subprocess.run([consumerd, "--repair", daemon], stdout=subprocess.DEVNULL, timeout=120)
    rev, rlost = events(os.path.join(rec, "slot%d" % disc[0]))
    dev, dlost = events(daemon) if os.path.isdir(daemon) else ([], 0)
    ru = [int(e[3]["seq"]) for e in rev if e[4] != "kernel" and e[0].endswith("seq")]
    du = [int(e[3]["seq"]) for e in dev if e[4] != "kernel" and e[0].endswith("seq")]
    print("discard session: %d user events from the daemon, %d recovered" % (len(du), len(ru)))
    check(len(ru) > 0 and ru[-1] == n - 1, "the last recovered user event is the last emitted (%r, want %d)"
          % (ru[-1:], n - 1))
    check(sorted(set(ru) | set(du)) == list(range(n)), "daemon + recovered user events are exactly 0..%d" % (n - 1))
    check(len(ru) == len(set(ru)), "no user event twice in the recovered trace")
    tids = {e[2] for e in rev if e[4] != "kernel"}
    if not check(len(tids) == 1, "one workload thread (%r)" % tids):
        return
    tid = tids.pop()
    last_user_ts = [e[1] for e in rev if e[4] != "kernel"][-1]
    kern = [e for e in rev + dev if e[4] == "kernel" and e[2] == tid]
    entries = {e[5] for e in kern if e[0] == "syscall_entry_getppid"}
    klost = rlost + dlost
    check(n - klost <= len(entries) <= n, "workload getppid entries: %d, with %d kernel events lost, of %d"
          % (len(entries), klost, n))
    rk = [e for e in rev if e[4] == "kernel" and e[2] == tid]
    # Its last syscall: the panic path itself may still record scheduler
    # events on the thread (a wakeup from printk), never another syscall.
    rsys = [e for e in rk if e[0].startswith("syscall_")]
    check(len(rsys) > 0 and rsys[-1][0] == "syscall_entry_write",
          "the workload's last recovered syscall event is the write that panicked (%r; last kernel event %r)"
          % (rsys[-1][0] if rsys else None, rk[-1][0] if rk else None))
    lastget = [e[1] for e in rk if e[0] == "syscall_entry_getppid"]
    check(lastget and lastget[-1] > last_user_ts, "the last getppid entry follows user event %d" % (n - 1))

    fev, _ = events(os.path.join(rec, "slot%d" % fr[0]))
    fu = [int(e[3]["seq"]) for e in fev if e[4] != "kernel" and e[0].endswith("seq")]
    print("flight recorder: %d user events recovered (%s..%s)" % (len(fu), fu[:1], fu[-1:]))
    check(len(fu) > 0 and fu == list(range(fu[0], n)), "flight recorder: a contiguous run ending at %d" % (n - 1))
    check(0 < fu[0] if fu else False, "flight recorder: its ring was overwritten (it starts at %r)" % fu[:1])
    fk = [e for e in fev if e[4] == "kernel" and e[2] == tid and e[0].startswith("syscall_")]
    check(len(fk) > 0 and fk[-1][0] == "syscall_entry_write"
          and fk[-1][1] >= max(e[1] for e in fev if e[4] != "kernel"),
          "flight recorder: its last kernel event is the write that panicked, after user event %d" % (n - 1))


def main_boot():
    out, n = sys.argv[1], int(sys.argv[2])
    rep = open(os.path.join(out, "recover.out")).read()
    print(rep, end="")
    slots = re.findall(r"^slot (\d+) kernel \(kernel-boot, discard\)", rep, re.M)
    if not check(len(slots) == 1, "the boot buffer is recovered (%r)" % slots):
        return
    path = os.path.join(out, "recovered", "slot" + slots[0])
    bt2_silent(path, "recovered boot buffer")
    evs, lost = events(path)
    execs = [str(e[3]["filename"]) for e in evs if e[0] == "sched_process_exec"]
    forks = [int(e[3]["parent_pid"]) for e in evs if e[0] == "sched_process_fork"]
    print("%d events, %d lost; execs: %r" % (len(evs), lost, sorted(set(execs))))
    check(any(e.endswith("init.prog") for e in execs), "PID 1's exec of its program is recorded")
    counted = execs.count("/bin/busybox-crashtest")
    check(n - lost <= counted <= n, "%d execs of /bin/busybox-crashtest, %d lost, of %d" % (counted, lost, n))
    check(lost > 0 or (execs[-1:] == ["/bin/busybox-crashtest"] and forks[-1:] == [1]),
          "the last exec is a counted process, the last fork PID 1's")


main_boot() if sys.argv[3:] == ["boot"] else main()
check.finish()
