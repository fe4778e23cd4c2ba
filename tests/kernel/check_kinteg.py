#!/usr/bin/python3
"""Host-side oracles of the kernel integration tests (kernel.kinteg_*), run
on the traces guest-kinteg.sh recorded inside the VM.

usage: check_kinteg.py record|causal_page|causal_monotonic|causal_consumer|kquery_trace VMOUT

record            `strata record -e 'kernel:*' -e 'demo:*' -- strata-demo`:
                  one session directory with a ust and a kernel sub-trace,
                  `babeltrace2 DIR` exits 0 with an empty stderr, every demo
                  event is recorded, user and kernel events interleave, and
                  the demo's events are causally placed among its threads'
                  kernel events: after their exec/fork, before their exit,
                  never while the thread is inside a system call or
                  switched out (states followed in babeltrace2's merged order).
causal_CLOCK      100,000 times kcausal:before then getppid(seq) on one
                  thread, user events stamped with CLOCK (page: the module's
                  clock page, monotonic: clock_gettime, consumer: the
                  consumer daemon's clock page): each user event is
                  stamped no later than the sys_enter of its own getppid
                  (matched exactly through args[0] == seq); prints the worst
                  and median margin.  Kernel events may be lost (counted).
kquery_trace      (kinteg_kquery) a tp-async process answered by the module
                  across 10 rule changes: exactly the batches emitted while
                  enabled (seq 0-9, 20-29, ..., 80-89), none lost; a
                  `strata record` (second daemon) run meanwhile recorded its
                  command through another module slot, without that process.
"""
import os
import subprocess
import sys

import bt2

SYS_GETPPID = 110  # x86-64
EXPECTED_CLOCK_ID = {"page": 1, "monotonic": 0, "consumer": 2}  # enum strata_clock_id
ENV_CLOCK = {"page": "kclock-page", "monotonic": "monotonic",
             "consumer": "consumer-page"}  # env.clock of the sub-trace
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)
    return cond


def read_file(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def events(path):
    """(name, ts, vtid, payload) in babeltrace2's merged order, plus loss."""
    out, lost = [], 0
    for msg in bt2.TraceCollectionMessageIterator(path):
        if type(msg) is bt2._EventMessageConst:
            ev = msg.event
            # Kernel events are named as lttng-modules names them (no
            # provider): tell them apart here by their sub-trace's domain.
            name = ev.name
            if str(ev.stream.trace.environment["domain"]) == "kernel":
                name = "kernel:" + name
            out.append((name, msg.default_clock_snapshot.value,
                        int(ev.common_context_field["vtid"]), ev.payload_field))
        elif type(msg) is bt2._DiscardedEventsMessageConst:
            lost += msg.count or 0
    return out, lost


def babeltrace2_silent(path):
    r = subprocess.run(["babeltrace2", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=300)
    check(r.returncode == 0, "babeltrace2 exits 0 (got %d)" % r.returncode)
    check(r.stderr.strip() == "", "babeltrace2 prints no warning (stderr: %r)" % r.stderr[:300])
    return r.stdout.count("\n")


def check_record(d):
    tr = os.path.join(d, "record")
    check(read_file(os.path.join(d, "record.rc")).strip() == "0",
          "strata record exits 0 (stderr: %r)" % read_file(os.path.join(d, "record.err"))[-300:])
    check(os.path.isfile(os.path.join(tr, "kernel", "metadata")), "kernel sub-trace in the session directory")
    check(os.path.isdir(os.path.join(tr, "ust")), "user sub-trace in the session directory")
    if failures:
        return
    lines = babeltrace2_silent(tr)
    evs, lost = events(tr)
    check(lines == len(evs), "babeltrace2 prints every event bt2 reads (%d == %d)" % (lines, len(evs)))
    check(lost == 0, "no event discarded (%d)" % lost)
    demo = [e for e in evs if e[0].startswith("demo:")]
    kern = [e for e in evs if e[0].startswith("kernel:")]
    check(len(demo) == 2 * 200 + 1, "every demo event recorded (%d == 401)" % len(demo))
    check(len(kern) > 0, "kernel events recorded (%d)" % len(kern))
    if not demo or not kern:
        return
    switches = sum(1 for a, b in zip(evs, evs[1:]) if a[0].startswith("demo:") != b[0].startswith("demo:"))
    check(switches >= 4, "user and kernel events interleave (%d domain switches)" % switches)
    threads = {}
    for name, ts, tid, _ in demo:
        first, last = threads.get(tid, (ts, ts))
        threads[tid] = (min(first, ts), max(last, ts))
    start = [e for e in demo if e[0] == "demo:start"]
    pid = start[0][2] if start else -1
    check(len(threads) == 3 and pid in threads, "demo events from its main thread and 2 workers (%s)" %
          sorted(threads))

    def k(name, **fields):
        return [e for e in kern if e[0] == "kernel:" + name and
                all(int(e[3][f]) == v for f, v in fields.items())]

    execs = [e for e in k("sched_process_exec", tid=pid) if str(e[3]["filename"]).endswith("strata-demo")]
    check(len(execs) == 1 and execs[0][1] <= threads[pid][0],
          "the demo's exec precedes its first event (%s)" % [e[1] for e in execs])
    for tid, (first, last) in threads.items():
        if tid != pid:
            forks = k("sched_process_fork", child_tid=tid)
            check(len(forks) == 1 and forks[0][1] <= first,
                  "thread %d: created (fork event) before its first event" % tid)
        exits = k("sched_process_exit", tid=tid)
        check(len(exits) == 1 and exits[0][1] >= last, "thread %d: exits after its last event" % tid)
    # Follow each demo thread through the merged order.
    in_sys, off_cpu, bad, checked = {}, {}, [], 0
    for name, ts, tid, p in evs:
        if name == "kernel:sys_enter" and tid in threads:
            in_sys[tid] = ts
        elif name == "kernel:sys_exit" and tid in threads:
            in_sys.pop(tid, None)
        elif name == "kernel:sched_switch":
            prev, nxt = int(p["prev_tid"]), int(p["next_tid"])
            if prev in threads:
                off_cpu[prev] = ts
            off_cpu.pop(nxt, None)
        elif name.startswith("demo:"):
            checked += 1
            for state, what in ((in_sys, "inside a system call"), (off_cpu, "switched out")):
                if tid in state and state[tid] < ts:
                    bad.append("%s of %d at %d: %s since %d" % (name, tid, ts, what, state[tid]))
    check(not bad, "%d demo events, none while its thread is in a system call or switched out (%d bad: %s)" %
          (checked, len(bad), bad[:3]))


def check_causal(d, clock):
    tr = os.path.join(d, "causal_" + clock)
    if clock == "consumer":
        words = read_file(os.path.join(d, "tsc.txt")).split()
        if not ("constant_tsc" in words and "nonstop_tsc" in words and words[-1:] == ["tsc"]):
            print("SKIP: the guest's TSC cannot back a consumer clock page (%s)" %
                  " ".join(w for w in words if "tsc" in w))
            sys.exit(77)
    out = read_file(os.path.join(d, "causal_%s.out" % clock))
    check(read_file(os.path.join(d, "causal_%s.rc" % clock)).strip() == "0",
          "strata record exits 0 (stderr: %r)" % read_file(os.path.join(d, "causal_%s.err" % clock))[-300:])
    check("clock_id=%d " % EXPECTED_CLOCK_ID[clock] in out, "user events stamped by the %s clock (%r)" %
          (clock, out.strip()))
    check("emitted=100000" in out, "100000 iterations ran")
    if failures:
        return
    babeltrace2_silent_ok = subprocess.run(["babeltrace2", tr], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL).returncode == 0
    check(babeltrace2_silent_ok, "babeltrace2 reads the trace")
    user, kern, lost, env_clock = {}, [], 0, {}
    for msg in bt2.TraceCollectionMessageIterator(tr):
        if type(msg) is bt2._EventMessageConst:
            ev = msg.event
            env = ev.stream.trace.environment
            env_clock.setdefault(str(env["domain"]), set()).add(str(env["clock"]) if "clock" in env else None)
            ts = msg.default_clock_snapshot.value
            tid = int(ev.common_context_field["vtid"])
            if ev.name == "kcausal:before":
                user[(tid, int(ev.payload_field["seq"]))] = ts
            elif ev.name == "sys_enter" and str(env["domain"]) == "kernel" and int(ev.payload_field["id"]) == SYS_GETPPID:
                kern.append((tid, int(ev.payload_field["args"][0]), ts))
        elif type(msg) is bt2._DiscardedEventsMessageConst:
            lost += msg.count or 0
    check(env_clock == {"ust": {ENV_CLOCK[clock]}, "kernel": {"monotonic"}},
          "trace env names the clock of each sub-trace (%s)" % env_clock)
    margins = sorted(ts - user[(tid, seq)] for tid, seq, ts in kern if (tid, seq) in user)
    print("info: %d user events, %d getppid sys_enter, %d matched, %d discarded" %
          (len(user), len(kern), len(margins), lost))
    # The kernel lanes overflow under this syscall storm (the consumer polls
    # them every 50 ms): losing kernel events is allowed, and counted.
    check(len(user) == 100000, "every user event recorded (%d)" % len(user))
    check(len(margins) == len(kern), "every recorded getppid sys_enter matches its user event (%d of %d)" %
          (len(margins), len(kern)))
    check(len(kern) + lost >= 100000, "recorded + discarded kernel events cover the 100000 calls (%d + %d)" %
          (len(kern), lost))
    check(len(margins) >= 10000, "at least 10000 pairs to judge (%d)" % len(margins))
    if not margins:
        return
    late = sum(1 for m in margins if m < 0)
    print("info: %s clock: worst margin %d ns, median %d ns, max %d ns" %
          (clock, margins[0], margins[len(margins) // 2], margins[-1]))
    check(late == 0, "no user event stamped after its getppid's sys_enter (%d late, worst margin %d ns)" %
          (late, margins[0]))


def check_kquery(d):
    path = os.path.join(d, "kq")
    if not check(os.path.isdir(path), "kinteg_kquery recorded %s" % path):
        return
    evs, lost = events(path)
    seqs = sorted(int(p["seq"]) for (n, _, _, p) in evs if n == "ctltest:tick")
    want = [b * 10 + k for b in range(0, 10, 2) for k in range(10)]
    check(seqs == want, "ticks recorded: exactly the 5 enabled batches (%d events, want %d)"
          % (len(seqs), len(want)))
    check(len(evs) == len(seqs) and lost == 0, "nothing else, nothing lost (%d lost)" % lost)
    babeltrace2_silent(path)
    # strata record beside it (a second daemon, module slot 0 taken).
    rec = os.path.join(d, "kq-rec")
    evs, lost = events(rec) if os.path.isdir(rec) else ([], 0)
    demo = [e for e in evs if e[0].startswith("demo:")]
    check(len(demo) == 1 * 10 + 1 and lost == 0,
          "second daemon's session (another module slot) recorded its command: %d demo events, want 11"
          % len(demo))
    pids = os.listdir(os.path.join(rec, "ust", "pid")) if os.path.isdir(os.path.join(rec, "ust", "pid")) else []
    check(not [p for p in pids if p.startswith("control_async")],
          "the running process did not join the other daemon's session (%s)" % pids)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    what, vmout = sys.argv[1], sys.argv[2]
    if os.path.exists(os.path.join(vmout, "SKIPPED")):
        print("SKIP: " + read_file(os.path.join(vmout, "SKIPPED")).strip())
        return 77
    d = os.path.join(vmout, "kinteg")
    if not os.path.isdir(d):
        print("FAIL: no %s (kernel.vm did not record the integration traces)" % d)
        return 1
    if what == "record":
        check_record(d)
    elif what == "kquery_trace":
        check_kquery(d)
    elif what.startswith("causal_") and what[7:] in EXPECTED_CLOCK_ID:
        check_causal(d, what[7:])
    else:
        print(__doc__)
        return 2
    print("PASS" if not failures else "FAIL: %d check(s)" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
