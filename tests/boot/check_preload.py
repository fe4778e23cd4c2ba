#!/usr/bin/python3
"""Oracles of the VM preload boot test (boot.preload_vm), on the host, over
what guest-boot.sh left in OUT: PID 1 was plain_init.c, an unmodified
program, started by the kernel with LD_PRELOAD=libstrata-pthread.so and
STRATA_EARLY=pthread:mutex_* on the kernel command line; the session started
later by the boot service adopted its early buffer.

  - on hot's address (from init's answer), from pid 1: exactly
    2 * early + later pthread:mutex_lock and as many mutex_unlock, every
    lock followed by its unlock in the same thread;
  - the first early lock precedes the session's start: init's stream holds
    events of both of its early threads (two vtids other than 1) before the
    later ones (vtid 1, main);
  - nothing discarded; one clock; timestamps ordered per stream; babeltrace2
    silent.
"""
import os
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, trace_messages, vm_boot_counts  # noqa: E402


def main():
    out = sys.argv[1]
    check = Checks()
    em = vm_boot_counts(out)
    early, later, mutex = int(em["early"]), int(em["later"]), int(em["mutex"])
    check(int(em["counter"]) == 2 * early + later, "init counted its own lock sections (%s)" % em["counter"])
    trace = os.path.join(out, "trace")
    ops = {}          # vtid -> ["lock"/"unlock", ...] on hot, in order
    order = []        # vtid of each lock on hot, in timestamp order
    clocks, discarded, last, ordered, other_pid = set(), 0, {}, True, 0
    for m in trace_messages(trace):
        if m.kind == "discarded_events":
            discarded += m.count
        if m.kind != "event":
            continue
        ts = m.ts
        clocks.add(m.clock_uuid)
        pid = m.env_int("vpid")
        sid = (pid, m.stream)
        if sid in last and ts < last[sid]:
            ordered = False
        last[sid] = ts
        if pid != 1:
            other_pid += 1
            continue
        if m.name not in ("pthread:mutex_lock", "pthread:mutex_unlock", "pthread:mutex_held"):
            continue
        if m.fields["lock"] != mutex:
            continue
        vtid = m.tid
        # mutex_held: a lock and its unlock in one compact record (docs/pthread.md;
        # only while pthread:site is enabled too, which mutex_* does not)
        for op in (["lock", "unlock"] if m.name == "pthread:mutex_held" else [m.name.split("_")[-1]]):
            ops.setdefault(vtid, []).append(op)
            if op == "lock":
                order.append(vtid)
    nlock = sum(v.count("lock") for v in ops.values())
    nunlock = sum(v.count("unlock") for v in ops.values())
    check(nlock == 2 * early + later, "pid 1 locked hot %d times (expected %d)" % (nlock, 2 * early + later))
    check(nunlock == 2 * early + later, "pid 1 unlocked hot %d times (expected %d)" % (nunlock, 2 * early + later))
    check(all(v == ["lock", "unlock"] * (len(v) // 2) for v in ops.values()),
          "each thread alternates lock, unlock on hot")
    threads = [t for t in ops if t != 1]
    check(len(threads) == 2 and all(ops[t].count("lock") == early for t in threads),
          "two early threads with %d locks each (%s)" % (early, {t: ops[t].count("lock") for t in ops}))
    check(ops.get(1, []).count("lock") == later, "main locked hot %d times after the session started" % later)
    check(order[:2 * early] and set(order[:2 * early]) == set(threads) and order[2 * early:] == [1] * later,
          "the early threads' locks come before main's later ones")
    check(discarded == 0, "nothing discarded (%d)" % discarded)
    check(other_pid == 0, "only pid 1 recorded (%d events of other processes)" % other_pid)
    check(len(clocks) == 1, "one clock in the whole trace (%d)" % len(clocks))
    check(ordered, "timestamps ordered in every stream")
    p = subprocess.run(["babeltrace2", trace], capture_output=True, text=True)
    check(p.returncode == 0 and p.stderr == "", "babeltrace2 reads it with nothing on stderr")
    check.finish()


if __name__ == "__main__":
    main()
