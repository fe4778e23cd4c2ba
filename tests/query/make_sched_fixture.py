#!/usr/bin/python3
"""Write a synthetic kernel trace of scheduling for the query tests: the
kernel sub-trace layout of tests/export/make_timeline_fixture.py (domain
"kernel", lttng-modules' event names and fields, the CPU in each event's
context), made by a seeded random walk, so that the tests compute what to
expect from the trace itself (with babeltrace2), not from this file.

usage: make_sched_fixture.py OUTDIR [SEED [SPAN_NS]]

What it holds: 3 CPUs switching among 10 threads (and the idle task 0,
"swapper/N") every 0.05 to 0.6 ms for about 0.6 s, over several packets;
sched_waking before most switches in; prev_state 0 (preempted), 1 (S) or 2
(D); a switch that is lost now and then (the next switch on that CPU then
has another prev_tid); threads renamed mid-trace (prctl's PR_SET_NAME: later
events carry the new comm); sched_process_fork naming a child thread before
it first runs.  Timestamps are distinct and increasing.

Processes: forks at the start put threads 101-105 in process 101 and
106-107 in process 106 (forked by "init", 1); 108 has no fork, but a user
sub-trace of the same machine (pid 108, two events) has it as its main
thread; 109 is in no process the trace names; 110 is forked mid-trace as
a process of its own.
"""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "export"))
import make_timeline_fixture as tl  # noqa: E402

KERNEL = [e for e in tl.KERNEL if e[0] in ("sched_switch", "sched_waking")] + [
    ("sched_process_fork", [(tl.STR, "parent_comm", "s", 1), (tl.S32, "parent_tid", "i", 4),
                            (tl.STR, "child_comm", "s", 1), (tl.S32, "child_tid", "i", 4),
                            (tl.S32, "parent_pid", "i", 4), (tl.S32, "child_pid", "i", 4)]),
]
USER = [("app:note", [(tl.S32, "n", "i", 4)])]
CPUS = 3


def make(out, seed=50, span_ns=600000000):
    rng = random.Random(seed)
    names = {t: "worker-%d" % t for t in range(101, 110)}
    prio = {t: rng.choice((100, 120, 120, 139)) for t in range(101, 111)}
    running = {c: 0 for c in range(CPUS)}
    born = set(range(101, 110))  # 110 is forked mid-trace
    evs = []  # (name, ts, context tid, cpu, values)
    pid = {}
    for t, parent in ((101, 1), (102, 101), (103, 101), (104, 101), (105, 101), (106, 1), (107, 106)):
        pid[t] = t if parent == 1 else pid[parent]
        pname = "init" if parent == 1 else names[parent]
        evs.append(("sched_process_fork", 100 + t, parent, 0,
                    (pname, parent, names[t], t, pid.get(parent, parent), pid[t])))
    ts = 1000

    def comm(t, cpu):
        return "swapper/%d" % cpu if t == 0 else names[t]

    while ts < span_ns:
        ts += rng.randrange(50000, 600000)
        cpu = rng.randrange(CPUS)
        cur = running[cpu]
        r = rng.random()
        if r < 0.03 and 110 not in born and cur:
            born.add(110)
            names[110] = "child"
            evs.append(("sched_process_fork", ts, cur, cpu, (names[cur], cur, "child", 110, pid.get(cur, cur), 110)))
            continue
        if 0.03 <= r < 0.034 and cur:
            names[cur] = "%s.r%d" % (names[cur].split(".")[0], ts // 1000)  # renamed: later events say so
            continue
        idle = [t for t in born if t not in running.values()]
        nxt = rng.choice(idle) if idle and rng.random() < 0.85 else 0
        if nxt == cur:
            continue
        if nxt and rng.random() < 0.7:
            evs.append(("sched_waking", ts, cur, cpu, (names[nxt], nxt, prio[nxt], cpu)))
            ts += rng.randrange(1000, 40000)
        if rng.random() < 0.04:  # the switch is lost: the CPU runs nxt, nothing says so
            running[cpu] = nxt
            continue
        state = 0 if cur == 0 else rng.choice((0, 1, 1, 2))
        evs.append(("sched_switch", ts, cur, cpu,
                    (comm(cur, cpu), cur, prio.get(cur, 120), state, comm(nxt, cpu), nxt, prio.get(nxt, 120))))
        running[cpu] = nxt
    k = tl.writer(KERNEL)
    packets = []
    for i in range(0, len(evs), 150):
        chunk = evs[i:i + 150]

        def fill(r, chunk=chunk):
            for name, t, tid, cpu, values in chunk:
                k(r, name, t, tid, cpu, *values)
        packets.append((fill, chunk[0][1], chunk[-1][1], 0))
    tl.write(out, "kernel", bytes(range(80, 96)),
             '\tdomain = "kernel";\n\ttracer_name = "lttng-modules";\n\tsysname = "Linux";\n'
             '\thostname = "box";', KERNEL, packets)
    u = tl.writer(USER)
    last = evs[-1][1]

    def fill_user(r):
        u(r, "app:note", 2000, 108, 0, 1)
        u(r, "app:note", last // 2, 108, 0, 2)
    tl.write(out, "ust-108", bytes(range(96, 112)),
             '\tdomain = "ust";\n\ttracer_name = "strata";\n\tprocname = "worker-108";\n\tvpid = 108;\n'
             '\thostname = "box";', USER, [(fill_user, 2000, last // 2, 0)])
    return len(evs)


def make_switches(out, hostname, tids):
    """A kernel sub-trace (out/kernel) of machine `hostname` whose CPU 0
    switches to each of `tids` in turn (1 ms each, from the idle task), no
    fork: their pid can come only from the user sub-traces beside it."""
    k = tl.writer(KERNEL)
    seq = [0] + list(tids) + [0]

    def fill(r):
        for i, (prev, nxt) in enumerate(zip(seq, seq[1:])):
            k(r, "sched_switch", 1000000 * (i + 1), prev, 0,
              "swapper/0" if prev == 0 else "t%d" % prev, prev, 120, 1 if prev else 0,
              "swapper/0" if nxt == 0 else "t%d" % nxt, nxt, 120)
    tl.write(out, "kernel", bytes(range(112, 128)),
             '\tdomain = "kernel";\n\ttracer_name = "lttng-modules";\n\tsysname = "Linux";\n'
             '\thostname = "%s";' % hostname, KERNEL, [(fill, 1000000, 1000000 * (len(seq) - 1), 0)])


if __name__ == "__main__":
    make(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 50,
         int(sys.argv[3]) if len(sys.argv) > 3 else 600000000)
