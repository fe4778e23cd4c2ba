#!/usr/bin/python3
"""Host-side oracles of the kernel integration tests (kernel.kinteg_*), run
on the traces guest-kinteg.sh recorded inside the VM.

usage: check_kinteg.py record|causal_page|causal_monotonic|causal_consumer|kquery_trace|
       sysnames|kretprobe|lttng_analyses|lttng_cputop|lttng_iolatencytop|cost|relay|
       serial|serial_over|share VMOUT

share             a process of uid 40031 held every module slot it could get
                  (exactly its share, 4); root's `strata record -e
                  kernel:sched_process_exec -e 'demo:*' -- strata-demo` then
                  exits 0 with all 101 demo events and the exec event.
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
sysnames          `strata record -e 'kernel:sched_*' -e 'kernel:syscall_*' ...
                  -- strata-kinteg-sysnames 1000`: babeltrace2 silent, nothing
                  lost; after its exec the workload's thread made exactly
                  1002 openat calls, recorded as syscall_entry_openat with
                  typed fields (dfd = -100, flags = 0): 1000 with filename
                  "/strata-kinteg/no-such-file", one cut at 255 bytes (a
                  300-byte path across a page boundary), one "(fault)"
                  (unmapped pointer); each followed by its
                  syscall_exit_openat (ret -2, -2, -14); a kprobe on
                  do_filp_open hit 1001 times, each inside an openat;
                  one user page fault in each page the workload writes;
                  interrupts,
                  softirqs, timers and wakeups recorded.
kretprobe         the same trace: a kprobe and a kretprobe on __x64_sys_lseek;
                  the workload's 202 lseek calls each show, inside its
                  syscall entry/exit pair, one kprobe hit then one
                  kretprobe hit whose ret is the syscall's return (3 * i
                  for i < 200, then -EINVAL, -EBADF: what the workload
                  checked it got), ip = the kprobe's ip (the function),
                  one parent_ip; a kretprobe on a missing symbol is
                  refused in dmesg and records nothing; no hit missed.
lttng_analyses    the same trace read by lttng-analyses (Debian's
                  python3-lttnganalyses, MI output): lttng-syscallstats
                  gives the workload's thread 1002 openat and, for every
                  syscall, as many calls as babeltrace2 shows entry/exit
                  pairs, with the same min and max durations;
                  lttng-irqstats counts per interrupt and softirq what
                  babeltrace2 shows; each lttng-schedtop row is a wakeup
                  and the switch to that thread found in the trace, its
                  latency their difference.
lttng_cputop      `strata record -e 'kernel:sched_*' -- strata-kinteg-sysnames
                  spin 500` (a busy loop until the thread used 500 ms of
                  CPU, between two getppid calls): lttng-cputop's usage of
                  the workload's thread times its time range equals the
                  thread's on-CPU intervals between its sched_switch
                  events; within the loop (from the first getppid's exit
                  to the second's entry) those intervals add up to the
                  loop's own CPU time (CLOCK_THREAD_CPUTIME_ID) within 2%.
lttng_iolatencytop `... -e 'kernel:block_*' -- strata-kinteg-sysnames dio
                  /dev/vda 64` (64 O_DIRECT reads of 4 KiB, the VM's virtio
                  disk): exactly 64 block_rq_issue on that disk, at sectors
                  0, 16, ..., 1008, 8 sectors, each inside one of the
                  workload's pread64 calls, each followed by
                  its block_rq_complete (same sector, error 0) before that
                  pread64 returns; lttng-iolatencytop's read table is the
                  longest pread64 calls of the trace (durations, sizes,
                  tid), lttng-iolatencystats counts the 64 requests on the
                  disk with the trace's min and max latency.
cost              200,000 getppid calls not recorded, then recorded with the
                  named getppid events, the raw sys_enter/sys_exit, every
                  named syscall event, a kprobe, a kretprobe on
                  __x64_sys_getppid: ns per call printed (TCG: a
                  comparison, not a hardware figure); recorded getppid
                  entries (probe hits) + discarded events cover the calls.
relay             (guest-kinteg.sh relay) a session with --relay to an
                  lttng-relayd in the guest records kernel:sched_process_exec,
                  kernel:syscall_*_openat and demo:*; workload strata-demo
                  (2 threads x 200) then strata-kinteg-sysnames 1000: the
                  relayd's output holds the kernel and the user sub-traces
                  of the session, babeltrace2 reads it whole with nothing on
                  stderr, nothing lost, 401 demo events, and the workload's
                  thread made exactly 1002 openat (entries and exits) after
                  its exec; the live reader attached before the workload
                  showed the 401 demo events and the 1000 openat of the
                  known path before stop, ended by itself after destroy
                  (exit 0) and logged no warning or error.
kquery_trace      (kinteg_kquery) a tp-async process answered by the module
                  across 10 rule changes: exactly the batches emitted while
                  enabled (seq 0-9, 20-29, ..., 80-89), none lost; a
                  `strata record` (second daemon) run meanwhile recorded its
                  command through another module slot, without that process.
serial            (guest-serial.sh) `strata record --serial /dev/ttyS1,3000000`
                  of kernel:sched_process_exec, kernel:syscall_*_openat and
                  demo:*; workload strata-demo (1 x 100) then
                  strata-kinteg-sysnames 100; qemu wrote the port to
                  VMOUT/ttyS1.bin.  `strata receive` on the host exits 0,
                  reports no frame lost or damaged and every packet offered
                  written; one kernel and one strata-demo sub-trace,
                  babeltrace2 silent, nothing discarded, 101 demo events,
                  the workload's thread made exactly 102 openat (entries and
                  exits, 100 of the known path) after its exec.
serial_over       the same into /dev/ttyS2 at 460800 baud (46080 B/s) with
                  strata-kinteg-sysnames 3000, above the line: the
                  sender refused packets, and the receiver's missing packets
                  (offered - written, per lane, from the end frames) equal
                  the refused count exactly, with nothing lost on the line;
                  babeltrace2 reads the trace.
"""
import json
import os
import re
import shutil
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, trace_messages  # noqa: E402

SYS_GETPPID = 110  # x86-64
EXPECTED_CLOCK_ID = {"page": 1, "monotonic": 0, "consumer": 2}  # enum strata_clock_id
ENV_CLOCK = {"page": "kclock-page", "monotonic": "monotonic",
             "consumer": "consumer-page"}  # env.clock of the sub-trace
check = Checks()


def read_file(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def events(path):
    """(name, ts, vtid, payload) in babeltrace2's merged order, plus loss."""
    out, lost = [], 0
    for msg in trace_messages(path):
        if msg.kind == "event":
            # Kernel events are named as lttng-modules names them (no
            # provider): tell them apart here by their sub-trace's domain.
            name = msg.name
            if msg.env_get("domain") == "kernel":
                name = "kernel:" + name
            out.append((name, msg.clock_value, msg.tid, msg.fields))
        elif msg.kind == "discarded_events":
            lost += msg.count
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
    if check.failures:
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
    if check.failures:
        return
    babeltrace2_silent_ok = subprocess.run(["babeltrace2", tr], stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL).returncode == 0
    check(babeltrace2_silent_ok, "babeltrace2 reads the trace")
    user, kern, lost, env_clock = {}, [], 0, {}
    for msg in trace_messages(tr):
        if msg.kind == "event":
            domain = msg.env_get("domain")
            env_clock.setdefault(domain, set()).add(msg.env_get("clock"))
            ts = msg.clock_value
            if msg.name == "kcausal:before":
                user[(msg.tid, msg.fields["seq"])] = ts
            elif msg.name == "sys_enter" and domain == "kernel" and msg.fields["id"] == SYS_GETPPID:
                kern.append((msg.tid, msg.fields["args"][0], ts))
        elif msg.kind == "discarded_events":
            lost += msg.count
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


SYSNAMES_N = 1000  # kinteg_sysnames' argument in guest-kinteg.sh
SYSNAMES_PATH = "/strata-kinteg/no-such-file"
SYSNAMES_LONG = "/strata-kinteg/" + "a" * 240  # its 300-byte path, cut at 255 bytes
ENOENT, EFAULT = 2, 14


def kernel_events(path):
    """(name, ns_from_origin, vtid, cpu_id, payload) of a kernel sub-trace, plus loss."""
    out, lost = [], 0
    for msg in trace_messages(path):
        if msg.kind == "event":
            out.append((msg.name, msg.ts, msg.context("vtid"), msg.context("cpu_id"), msg.fields))
        elif msg.kind == "discarded_events":
            lost += msg.count
    return out, lost


def workload_tid(evs):
    execs = [e for e in evs if e[0] == "sched_process_exec" and
             str(e[4]["filename"]).endswith("strata-kinteg-sysnames")]
    return (execs[0][2], execs[0][1]) if len(execs) == 1 else (None, None)


def syscall_pairs(evs, tid):
    """{name: [durations]} of tid's syscall entry/exit pairs, and unpaired events."""
    pairs, open_, unpaired = {}, None, 0
    for name, ts, t, _, p in evs:
        if t != tid:
            continue
        if name.startswith("syscall_entry_"):
            if open_ is not None:
                unpaired += 1
            open_ = (name[len("syscall_entry_"):], ts)
        elif name.startswith("syscall_exit_"):
            if open_ is None or open_[0] != name[len("syscall_exit_"):]:
                unpaired += 1
            else:
                pairs.setdefault(open_[0], []).append(ts - open_[1])
            open_ = None
    return pairs, unpaired


def check_share(d):
    """A uid held every module slot it could get; root's record still ran."""
    held = read_file(os.path.join(d, "share-held.txt")).strip()
    check(held == "held 4", "uid 40031 held its share of the module's slots, 4 (%r)" % held)
    if not record_ok(d, "share"):
        return
    tr = os.path.join(d, "share")
    babeltrace2_silent(tr)
    evs, lost = events(tr)
    demo = [e for e in evs if e[0].startswith("demo:")]
    kern = [e for e in evs if e[0] == "kernel:sched_process_exec"]
    check(len(demo) == 100 + 1 and lost == 0, "every demo event recorded (%d == 101, %d lost)" % (len(demo), lost))
    check(len(kern) >= 1, "kernel events recorded beside the held slots (%d exec)" % len(kern))


def record_ok(d, run):
    """Did guest-kinteg.sh's `strata record` of RUN exit 0?"""
    return check(read_file(os.path.join(d, run + ".rc")).strip() == "0",
                 "strata record (%s) exits 0 (stderr: %r)" % (run, read_file(os.path.join(d, run + ".err"))[-300:]))


def sysnames_trace(d):
    record_ok(d, "sysnames")
    return os.path.join(d, "sysnames", "kernel")


def lttng_analyses_missing():
    if shutil.which("lttng-syscallstats-mi"):
        return False
    print("SKIP: lttng-analyses not installed (apt-get install python3-lttnganalyses)")
    return True


def check_sysnames(d):
    kt = sysnames_trace(d)
    if not check(os.path.isfile(os.path.join(kt, "metadata")), "kernel sub-trace recorded"):
        return
    lines = babeltrace2_silent(kt)
    evs, lost = kernel_events(kt)
    check(lines == len(evs), "babeltrace2 prints every event bt2 reads (%d == %d)" % (lines, len(evs)))
    check(lost == 0, "no event discarded (%d)" % lost)
    tid, t_exec = workload_tid(evs)
    if not check(tid is not None, "one exec of strata-kinteg-sysnames"):
        return
    mine = [e for e in evs if e[2] == tid and e[1] > t_exec]
    entries = [e for e in mine if e[0] == "syscall_entry_openat"]
    exits = [e for e in mine if e[0] == "syscall_exit_openat"]
    check(len(entries) == SYSNAMES_N + 2 and len(exits) == SYSNAMES_N + 2,
          "tid %d: %d openat entries and %d exits after its exec (want %d)" %
          (tid, len(entries), len(exits), SYSNAMES_N + 2))
    names = [str(e[4]["filename"]) for e in entries]
    check(names.count(SYSNAMES_PATH) == SYSNAMES_N, "%d entries name %s (want %d)" %
          (names.count(SYSNAMES_PATH), SYSNAMES_PATH, SYSNAMES_N))
    check(names[-2:] == [SYSNAMES_LONG, "(fault)"],
          "the 300-byte path across a page boundary cut at 255 bytes, the unmapped one \"(fault)\" (%r)"
          % [n[:40] + "...(%d)" % len(n) for n in names[-2:]])
    check(all(int(e[4]["dfd"]) == -100 and int(e[4]["flags"]) == 0 for e in entries),
          "typed arguments: dfd = AT_FDCWD (-100, signed), flags = 0")
    rets = [int(e[4]["ret"]) for e in exits]
    check(rets == [-ENOENT] * (SYSNAMES_N + 1) + [-EFAULT],
          "returns: %d x -ENOENT then -EFAULT (got %s)" % (SYSNAMES_N + 1, sorted(set(rets))))
    # The exec event comes from inside execve: its exit is the first
    # syscall event after it. Other events of the thread (an interrupt,
    # the wake-up of a vfork parent) can come between the two.
    sys_evs = [e for e in mine if e[0].startswith("syscall_")]
    first = [e[0] for e in sys_evs[:1]]
    check(first == ["syscall_exit_execve"], "after the exec, first syscall event: execve's exit (%s)" % first)
    pairs, unpaired = syscall_pairs(sys_evs[1:], tid)
    check(unpaired == 0 and len(pairs.get("openat", [])) == SYSNAMES_N + 2,
          "then every entry followed by its exit (%d unpaired)" % unpaired)
    # The kprobe on do_filp_open: once per openat that got its path (not
    # the unmapped one), inside that openat.
    hits, inside, in_open = 0, 0, False
    for e in mine[1:]:
        if e[0] == "syscall_entry_openat":
            in_open = True
        elif e[0] == "syscall_exit_openat":
            in_open = False
        elif e[0] == "kprobe_do_filp_open":
            hits += 1
            inside += in_open and int(e[4]["ip"]) != 0
    check(hits == SYSNAMES_N + 1 and inside == hits,
          "kprobe_do_filp_open: %d hits, %d inside an openat with an ip (want %d)" %
          (hits, inside, SYSNAMES_N + 1))
    # User page faults: the workload maps 3 pages at m, unmaps the third
    # (munmap(m + 2 pages)), then writes the long path from m + page - 100
    # on: first touches of pages m and m + page, each one fault there.
    unmaps = [int(e[4]["addr"]) for e in mine if e[0] == "syscall_entry_munmap"]
    m = unmaps[-1] - 2 * 4096 if unmaps else None
    faults = [int(e[4]["address"]) for e in mine if e[0] == "x86_exceptions_page_fault_user"]
    in_pages = [sum(1 for a in faults if m is not None and m + k * 4096 <= a < m + (k + 1) * 4096)
                for k in range(3)]
    check(m is not None and in_pages == [1, 1, 0],
          "x86_exceptions_page_fault_user: one fault in each written page, none in the unmapped one "
          "(%s of %d faults)" % (in_pages, len(faults)))
    for name in ("sched_switch", "sched_waking", "sched_wakeup", "irq_handler_entry",
                 "irq_handler_exit", "softirq_entry", "softirq_exit", "timer_hrtimer_expire_entry"):
        n = sum(1 for e in evs if e[0] == name)
        check(n > 0, "%s recorded (%d)" % (name, n))


LSEEK_N = 200  # kinteg_sysnames' lseek calls (then -EINVAL, -EBADF)
EINVAL, EBADF = 22, 9


def check_kretprobe(d):
    kt = sysnames_trace(d)
    if not check(os.path.isfile(os.path.join(kt, "metadata")), "kernel sub-trace recorded"):
        return
    evs, lost = kernel_events(kt)
    check(lost == 0, "no event discarded (%d)" % lost)
    tid, t_exec = workload_tid(evs)
    if not check(tid is not None, "one exec of strata-kinteg-sysnames"):
        return
    mine = [e for e in evs if e[2] == tid and e[1] > t_exec]
    # Per lseek call: entry, then the kprobe, then the kretprobe, then exit.
    calls, cur, bad = [], None, []
    for name, ts, _, _, p in mine:
        if name == "syscall_entry_lseek":
            cur = {"entry": ts, "kp": [], "krp": []}
        elif name == "kprobe___x64_sys_lseek":
            (cur["kp"] if cur else bad).append(int(p["ip"]))
        elif name == "kretprobe___x64_sys_lseek":
            (cur["krp"] if cur else bad).append((int(p["ip"]), int(p["parent_ip"]), int(p["ret"]), cur and
                                                 len(cur["kp"])))
        elif name == "syscall_exit_lseek" and cur:
            cur["ret"] = int(p["ret"])
            calls.append(cur)
            cur = None
    want = [3 * i for i in range(LSEEK_N)] + [-EINVAL, -EBADF]
    check(len(calls) == LSEEK_N + 2 and [c["ret"] for c in calls] == want,
          "the workload's %d lseek calls recorded with the returns it checked (want %d)" %
          (len(calls), LSEEK_N + 2))
    check(not bad, "no kprobe/kretprobe hit of the workload outside an lseek (%d)" % len(bad))
    one = [c for c in calls if len(c["kp"]) == 1 and len(c["krp"]) == 1 and c["krp"][0][3] == 1]
    check(len(one) == len(calls), "each lseek: exactly one kprobe hit, then one kretprobe hit (%d of %d)" %
          (len(one), len(calls)))
    rets = [c["krp"][0][2] for c in one]
    check(rets == [c["ret"] for c in one] and rets == want[:len(rets)],
          "kretprobe ret == the syscall's return == what the workload saw (%d hits; first differing: %s)" %
          (len(rets), next(((c["krp"][0][2], c["ret"]) for c in one if c["krp"][0][2] != c["ret"]), None)))
    ips = {c["kp"][0] for c in one} | {c["krp"][0][0] for c in one}
    parents = {c["krp"][0][1] for c in one}
    check(len(ips) == 1 and 0 not in ips, "kretprobe ip == kprobe ip, one function address (%s)" %
          [hex(i) for i in ips])
    check(len(parents) == 1 and 0 not in parents and parents != ips,
          "one parent_ip, the syscall's caller (%s)" % [hex(i) for i in parents])
    names = {e[0] for e in evs}
    check("kretprobe_strata_no_such_function" not in names, "nothing recorded for a missing symbol")
    dmesg = read_file(os.path.join(os.path.dirname(d), "dmesg.txt"))
    check("strata: kretprobe on strata_no_such_function: -2" in dmesg,
          "dmesg: the kretprobe on a missing symbol refused with -ENOENT")
    check(not re.search(r"k(ret)?probe on \S+: \d+ hits missed", dmesg),
          "no kprobe or kretprobe hit missed (dmesg: %s)" % re.findall(r"k(?:ret)?probe on .*missed", dmesg))


def check_cputop(d):
    if lttng_analyses_missing():
        return 77
    record_ok(d, "cputop")
    m = re.search(r"loop_cpu_ns (\d+) thread_cpu_ns (\d+)", read_file(os.path.join(d, "cputop.out")))
    kt = os.path.join(d, "cputop", "kernel")
    if not check(m is not None and os.path.isfile(os.path.join(kt, "metadata")),
                 "the workload ran and its kernel sub-trace was recorded"):
        return
    loop_ns, self_ns = int(m.group(1)), int(m.group(2))
    evs, lost = kernel_events(kt)
    check(lost == 0, "no event discarded (%d)" % lost)
    tid, t_exec = workload_tid(evs)
    if not check(tid is not None, "one exec of strata-kinteg-sysnames"):
        return
    # The thread's on-CPU intervals: from each switch to it to the switch
    # away from it.  It must be first seen switched in (created while
    # recording), and last switched out (it exited).
    intervals, since, first = [], None, None
    for name, ts, _, _, p in evs:
        if name != "sched_switch":
            continue
        if int(p["prev_tid"]) == tid:
            first = first or "out"
            if since is not None:
                intervals.append((since, ts))
            since = None
        if int(p["next_tid"]) == tid:
            first = first or "in"
            since = ts
    if not check(first == "in" and since is None and intervals,
                 "the thread is switched in first and out last (%s, %s)" % (first, since)):
        return
    on = sum(b - a for a, b in intervals)
    # The loop: from its first getppid's exit to its second's entry.
    marks = [e for e in evs if e[2] == tid and e[1] > t_exec and e[0].endswith("_getppid")]
    if not check([e[0] for e in marks] == ["syscall_entry_getppid", "syscall_exit_getppid"] * 2,
                 "the loop's bounds: two getppid entry/exit pairs (%d events)" % len(marks)):
        return
    lo, hi = marks[1][1], marks[2][1]
    on_loop = sum(max(0, min(b, hi) - max(a, lo)) for a, b in intervals)
    print("info: cputop: thread %d on CPU %.3f ms in %d intervals by the trace's sched_switch (its own "
          "clock: %.3f ms); the loop %.3f ms (its own clock: %.3f ms)" %
          (tid, on / 1e6, len(intervals), self_ns / 1e6, on_loop / 1e6, loop_ns / 1e6))
    check(loop_ns >= 500e6, "the loop used at least 500 ms of CPU (%d ns)" % loop_ns)
    check(abs(on_loop - loop_ns) <= 0.02 * loop_ns,
          "the loop's on-CPU time between sched_switch events = its own CPU time within 2%% (%d vs %d ns)"
          % (on_loop, loop_ns))
    rows = []
    for t in mi("lttng-cputop-mi", kt):
        if t.get("class") == "per-process":
            span = mi_ts(t["time-range"]["end"]) - mi_ts(t["time-range"]["begin"])
            rows += [(r[0], r[3]["value"] * span) for r in t["data"] if r[0].get("tid") == tid]
    check(len(rows) == 1, "lttng-cputop has one row for tid %d (%d)" % (tid, len(rows)))
    if rows:
        check(abs(rows[0][1] - on) <= 1e-6 * on + 1000,
              "lttng-cputop: usage x time range = the trace's on-CPU time (%.0f vs %d ns)" % (rows[0][1], on))


DIO_N = 64  # kinteg_sysnames dio /dev/vda 64 (guest-kinteg.sh)


def check_iolatencytop(d):
    if lttng_analyses_missing():
        return 77
    record_ok(d, "dio")
    check("dio_reads %d" % DIO_N in read_file(os.path.join(d, "dio.out")), "the workload read %d blocks" % DIO_N)
    kt = os.path.join(d, "dio", "kernel")
    if check.failures or not check(os.path.isfile(os.path.join(kt, "metadata")), "kernel sub-trace recorded"):
        return
    babeltrace2_silent(kt)
    evs, lost = kernel_events(kt)
    check(lost == 0, "no event discarded (%d)" % lost)
    tid, t_exec = workload_tid(evs)
    if not check(tid is not None, "one exec of strata-kinteg-sysnames"):
        return
    # The workload's pread64 calls and the block requests inside them.
    preads, cur, issues, completes = [], None, [], []
    for name, ts, t, _, p in evs:
        if t == tid and name == "syscall_entry_pread64":
            cur = [ts, None, None, [], []]
        elif t == tid and name == "syscall_exit_pread64" and cur:
            cur[1], cur[2] = ts, int(p["ret"])
            preads.append(cur)
            cur = None
        elif name == "block_rq_issue":
            issues.append((ts, t, p))
            # Issued by the workload, or for it by a kworker (blk-mq
            # may dispatch from kblockd): inside its pread64 either way.
            if cur:
                cur[3].append((int(p["dev"]), int(p["sector"]), int(p["nr_sector"])))
        elif name == "block_rq_complete":
            completes.append((ts, p))
            if cur:
                cur[4].append((int(p["dev"]), int(p["sector"]), int(p["nr_sector"]), int(p["error"])))
    check(len(preads) == DIO_N and all(r[2] == 4096 for r in preads),
          "%d pread64 calls of the workload returned 4096 (want %d)" % (len(preads), DIO_N))
    devs = {i[0] for r in preads for i in r[3]}
    dev = devs.pop() if len(devs) == 1 else None
    check(dev is not None, "the requests are on one disk (%s)" % devs)
    on_dev = [i for i in issues if int(i[2]["dev"]) == dev]
    check(len(on_dev) == DIO_N, "exactly %d block_rq_issue on that disk in the trace (%d)" % (DIO_N, len(on_dev)))
    good = [k for k, r in enumerate(preads) if r[3] == [(dev, 16 * k, 8)] and r[4] == [(dev, 16 * k, 8, 0)]]
    check(len(good) == DIO_N, "each pread64: one request issued at sector 16 k, 8 sectors, completed "
          "(error 0) before it returns (%d of %d; first bad: %s)" %
          (len(good), DIO_N, next((r[3:] for k, r in enumerate(preads) if k not in good), None)))
    print("info: %d of the %d requests issued from the workload's thread (tid field)" %
          (sum(1 for i in on_dev if int(i[2]["tid"]) == tid), len(on_dev)))
    # Each request's latency: issue to complete, paired by sector.
    t_issue = {int(i[2]["sector"]): i[0] for i in on_dev}
    lat = sorted(c[0] - t_issue[int(c[1]["sector"])] for c in completes
                 if int(c[1]["dev"]) == dev and int(c[1]["sector"]) in t_issue)
    check(len(lat) == DIO_N, "every request completed once (%d)" % len(lat))
    # lttng-iolatencytop: the longest read calls of every process; those
    # of the workload must be its longest pread64 calls, in order.
    top = [r for t in mi("lttng-iolatencytop-mi", kt) if isinstance(t.get("class"), dict) and
           t["class"].get("inherit") == "top-syscall" and t["class"].get("title", "").endswith("[read]")
           for r in t.get("data", [])]
    durs = sorted((r[1] - r[0] for r in preads), reverse=True)
    got = [(r[2]["value"], r[3].get("name"), r[4].get("value")) for r in top if r[5].get("tid") == tid]
    check(got and [g[0] for g in got] == durs[:len(got)] and
          all(g[1] == "pread64" and g[2] == 4096 for g in got),
          "lttng-iolatencytop: %d of its %d rows are the workload's, its longest pread64 calls in the "
          "trace, in order, 4096 bytes each (first: %s; trace: %s)" % (len(got), len(top), got[:1], durs[:1]))
    stats = [r for t in mi("lttng-iolatencystats-mi", kt) if t.get("class") == "disk-latency-stats"
             for r in t.get("data", [])]
    check(len(stats) == 1 and stats[0][1]["value"] == DIO_N and lat and
          stats[0][2]["value"] == lat[0] and stats[0][4]["value"] == lat[-1],
          "lttng-iolatencystats: one disk, %d requests, min %s and max %s ns as the trace's (%s)" %
          (DIO_N, lat[:1], lat[-1:], stats))



def mi_ts(v):
    """An MI timestamp ({"class": "timestamp", "value": ns}) as ns."""
    return v["value"] if isinstance(v, dict) else v


def mi(tool, path):
    # --no-intersection: by default the tools read only the time range
    # every stream (here: every CPU's lane) covers, and lttng-irqstats
    # then fails on a softirq_exit whose entry fell outside it.
    r = subprocess.run([tool, "--no-intersection", path], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=600)
    check(r.returncode == 0, "%s exits 0 (stderr: %r)" % (tool, r.stderr[-300:]))
    try:
        return json.loads(r.stdout)["results"]
    except (ValueError, KeyError):
        check(False, "%s prints its MI JSON (%r)" % (tool, r.stdout[:200]))
        return []


def check_lttng_analyses(d):
    if lttng_analyses_missing():
        return 77
    kt = sysnames_trace(d)
    if not check(os.path.isfile(os.path.join(kt, "metadata")), "kernel sub-trace recorded"):
        return
    evs, _ = kernel_events(kt)
    tid, _ = workload_tid(evs)
    if not check(tid is not None, "one exec of strata-kinteg-sysnames"):
        return
    # lttng-syscallstats: per thread and syscall, count, min, avg, max.
    tables = [t for t in mi("lttng-syscallstats-mi", kt)
              if isinstance(t.get("class"), dict) and
              re.search(r"TID: %d\)" % tid, t["class"].get("title", ""))]
    if not check(len(tables) == 1, "lttng-syscallstats has one table for tid %d" % tid):
        return
    got = {row[0]["name"]: (row[1]["value"], row[2]["value"], row[4]["value"]) for row in tables[0]["data"]}
    pairs, _ = syscall_pairs(evs, tid)
    want = {n: (len(v), min(v), max(v)) for n, v in pairs.items()}
    check(got.get("openat", (0,))[0] == SYSNAMES_N + 2,
          "lttng-syscallstats: %s openat calls by the workload (want %d)" %
          (got.get("openat", (None,))[0], SYSNAMES_N + 2))
    check(got == want, "lttng-syscallstats: every syscall's count, min and max duration match the "
          "trace's entry/exit pairs (%d syscalls; differ: %s)" %
          (len(want), sorted((n, got.get(n), want.get(n)) for n in set(got) | set(want)
                             if got.get(n) != want.get(n))[:3]))
    # lttng-irqstats: counts per hard irq and per softirq vector.
    hard, soft = {}, {}
    for t in mi("lttng-irqstats-mi", kt):
        for row in t.get("data", []):
            (hard if row[0]["hard"] else soft)[row[0]["nr"]] = row[1]["value"]
    # Softirqs are level-triggered: the tool pairs raise, entry and exit
    # per CPU and vector (one pending raise at a time, an entry without
    # raise starts one, an exit without either is ignored); the same rule
    # applied to the trace here.
    bt_hard, bt_soft, pending = {}, {}, {}
    for e in evs:
        if e[0] == "irq_handler_entry":
            bt_hard[int(e[4]["irq"])] = bt_hard.get(int(e[4]["irq"]), 0) + 1
        elif e[0].startswith("softirq_"):
            vec = int(e[4]["vec"])
            q = pending.setdefault((e[3], vec), [])
            if e[0] == "softirq_raise" and (not q or q[0]):
                q.append(False)
            elif e[0] == "softirq_entry":
                if q:
                    q[0] = True
                else:
                    q.append(True)
            elif e[0] == "softirq_exit" and q:
                del q[0]
                bt_soft[vec] = bt_soft.get(vec, 0) + 1
    check(hard and hard == bt_hard, "lttng-irqstats: hard irq counts %s == the trace's %s" % (hard, bt_hard))
    check(soft and soft == bt_soft, "lttng-irqstats: softirq counts %s == the trace's %s" % (soft, bt_soft))
    # lttng-schedtop: each row a wakeup and the switch to that thread.
    rows = [r for t in mi("lttng-schedtop-mi", kt) for r in t.get("data", [])]
    wakes = {(e[1], int(e[4]["tid"])) for e in evs if e[0] in ("sched_waking", "sched_wakeup", "sched_wakeup_new")}
    switches = {(e[1], int(e[4]["next_tid"])) for e in evs if e[0] == "sched_switch"}
    bad = [r for r in rows if (r[0]["value"], r[5]["tid"]) not in wakes or
           (r[1]["value"], r[5]["tid"]) not in switches or r[2]["value"] != r[1]["value"] - r[0]["value"]]
    check(rows and not bad, "lttng-schedtop: %d rows, each a wakeup and the switch to its thread in the "
          "trace, latency their difference (%d bad: %s)" % (len(rows), len(bad), bad[:1]))


COST_N = 200000  # getppid calls of each cost run (guest-kinteg.sh)


def check_cost(d):
    """Figures, with exact bookkeeping: each run's getppid entries recorded
    plus events discarded cover the calls made."""
    def ns(run):
        m = re.search(r"ns_per_call ([0-9.]+)", read_file(os.path.join(d, "cost-%s.out" % run)))
        check(read_file(os.path.join(d, "cost-%s.rc" % run)).strip() == "0" and m is not None,
              "cost run %s completed" % run)
        return float(m.group(1)) if m else None
    base = ns("off")
    for run, name in (("named", "syscall_entry_getppid"), ("raw", "sys_enter"),
                      ("allnamed", "syscall_entry_getppid"), ("kprobe", "kprobe___x64_sys_getppid"),
                      ("kretprobe", "kretprobe___x64_sys_getppid")):
        per = ns(run)
        kt = os.path.join(d, "cost-" + run, "kernel")
        if not check(os.path.isfile(os.path.join(kt, "metadata")), "cost run %s: kernel sub-trace" % run):
            continue
        evs, lost = kernel_events(kt)
        tid, t_exec = workload_tid(evs)
        got = sum(1 for e in evs if e[2] == tid and e[1] > t_exec and e[0] == name and
                  (name != "sys_enter" or int(e[4]["id"]) == 110))
        check(got <= COST_N and got + lost >= COST_N,
              "cost run %s: %d getppid entries recorded + %d events discarded cover %d calls" %
              (run, got, lost, COST_N))
        if per is not None and base is not None:
            print("info: cost %-8s %7.1f ns/call (not recorded: %.1f, +%.1f ns), %d of %d "
                  "getppid entries recorded, %d events lost (%.1f%%)" %
                  (run, per, base, per - base, got, COST_N, lost, 100.0 * lost / max(1, got + lost)))


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


def check_workload_openat(kernel_trace, n, where):
    """strata-kinteg-sysnames N, exec'd once: its thread made exactly N + 2
    openat (entries and exits) after its exec, N of them of SYSNAMES_PATH."""
    kevs, _ = kernel_events(kernel_trace)
    tid, t_exec = workload_tid(kevs)
    if check(tid is not None, "one exec of strata-kinteg-sysnames" + where):
        mine = [e for e in kevs if e[2] == tid and e[1] > t_exec]
        entries = [e for e in mine if e[0] == "syscall_entry_openat"]
        exits = [e for e in mine if e[0] == "syscall_exit_openat"]
        names = [str(e[4]["filename"]) for e in entries]
        check(len(entries) == n + 2 and len(exits) == n + 2 and names.count(SYSNAMES_PATH) == n,
              "tid %d: %d openat entries (%d of %s) and %d exits after its exec (want %d)" %
              (tid, len(entries), names.count(SYSNAMES_PATH), SYSNAMES_PATH, len(exits), n + 2))


def check_relay(d):
    rc = read_file(os.path.join(d, "relay.rc")).strip()
    log = read_file(os.path.join(d, "relay.log")).strip()
    if rc == "77":
        print("SKIP: " + log)
        return 77
    check(rc == "0", "the relay recording ran (rc %s: %r)" % (rc, log[-300:]))
    out = os.path.join(d, "relay-out")
    traces = []
    for root, dirs, files in os.walk(out):
        if "metadata" in files:
            traces.append(os.path.relpath(root, out))
    kern = [t for t in traces if re.fullmatch(r"vmk/kr-\d{8}-\d{6}/kernel", t)]
    ust = [t for t in traces if re.fullmatch(r"vmk/kr-\d{8}-\d{6}/ust/pid/strata-demo-\d+-[0-9-]+", t)]
    gate = [t for t in traces if re.fullmatch(r"vmk/kr-\d{8}-\d{6}/live-gate", t)]
    check(len(kern) == 1 and len(ust) == 1 and len(gate) == 1 and len(traces) == 3,
          "the relayd wrote one kernel and one user sub-trace of the session, and its live gate (%s)" %
          sorted(traces))
    if check.failures:
        return None
    lines = babeltrace2_silent(out)
    n_evs, n_demo, lost = 0, 0, 0  # by name only: a user event's thread id is not read here
    for msg in trace_messages(out):
        if msg.kind == "event":
            n_evs += 1
            n_demo += msg.name.startswith("demo:")
        elif msg.kind == "discarded_events":
            lost += msg.count
    check(lines == n_evs, "babeltrace2 prints every event bt2 reads (%d == %d)" % (lines, n_evs))
    check(lost == 0, "no event discarded (%d)" % lost)
    check(n_demo == 2 * 200 + 1, "every demo event on the relay (%d == 401)" % n_demo)
    check_workload_openat(os.path.join(out, kern[0]), SYSNAMES_N, " on the relay")
    before = read_file(os.path.join(d, "relay-live-before-stop.txt")).strip()
    check(before == "demo 401 openat %d" % SYSNAMES_N,
          "live: the reader showed 401 demo events and %d openat of the workload before stop (%s)" %
          (SYSNAMES_N, before))
    live = read_file(os.path.join(d, "relay-live.out"))
    n_demo = sum(1 for line in live.splitlines() if " demo:" in line)
    n_open = sum(1 for line in live.splitlines()
                 if "syscall_entry_openat" in line and '"%s"' % SYSNAMES_PATH in line)
    check(n_demo == 401 and n_open == SYSNAMES_N,
          "live: the reader's whole output has exactly 401 demo events and %d openat (%d, %d)" %
          (SYSNAMES_N, n_demo, n_open))
    rc = read_file(os.path.join(d, "relay-live.rc")).strip()
    bad = [line for line in read_file(os.path.join(d, "relay-live.err")).splitlines()
           if re.search(r" [WEF] [A-Z]", line)]
    if not check(rc == "0" and not bad, "live: the reader ended by itself (rc %s), no warning or error (%r)" %
                 (rc, bad[:3])):
        # What its lttng-live source and the relay said last, for the next time.
        said = [ln for ln in read_file(os.path.join(d, "relay-live.err")).splitlines() if "LTTNG-LIVE" in ln][-15:]
        said += read_file(os.path.join(d, "relayd.err")).splitlines()[-10:]
        print("the live reader's last lttng-live lines and lttng-relayd's:\n  " + "\n  ".join(said))
    return None


def receive(d, vmout, tty, name):
    """`strata receive VMOUT/<tty>.bin -o d/<name>-rx` on the host: (exit
    code, its report, the output directory, per-lane rows (sub-trace,
    stream file, frames, lost, offered, written, missing))."""
    strata = read_file(os.path.join(d, "serial.strata")).strip()
    out = os.path.join(d, name + "-rx")
    shutil.rmtree(out, ignore_errors=True)
    r = subprocess.run([strata, "receive", os.path.join(vmout, tty + ".bin"), "-o", out],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
    rows = []
    for m in re.finditer(r"^  (\S+)/(\S+_\d+): (\d+) frame\(s\)(?:, (\d+) lost)?(?:; (\d+) packet\(s\) offered "
                         r"by the sender, (\d+) written, (\d+) missing)?", r.stderr, re.M):
        rows.append((m.group(1), m.group(2)) + tuple(int(g) if g else None for g in m.groups()[2:]))
    return r.returncode, r.stderr, out, rows


def serial_ran(d, name):
    step = read_file(os.path.join(d, "serial-step.rc")).strip()
    log = read_file(os.path.join(d, "serial.log")).strip()
    if step == "77":
        print("SKIP: " + log)
        return False
    check(step == "0", "the serial step ran (rc %s: %r)" % (step, log[-300:]))
    return record_ok(d, name)


def check_serial(d, vmout):
    """Within the line's bandwidth: the whole trace, exactly."""
    if not serial_ran(d, "serial"):
        return 77 if read_file(os.path.join(d, "serial-step.rc")).strip() == "77" else None
    rc, rep, out, rows = receive(d, vmout, "ttyS1", "serial")
    print(rep.strip())
    check(rc == 0, "strata receive exits 0 (%d)" % rc)
    check(re.search(r"0 frame\(s\) lost \(sequence gaps\)", rep) is not None and " 0 with a bad CRC, 0 malformed" in rep,
          "no frame lost or damaged on the line")
    check(rows and all(r[3] == 0 and r[6] == 0 for r in rows if r[6] is not None) and
          all(r[6] is not None for r in rows), "every lane: every packet the sender offered written (%s)" % rows)
    subs = sorted({r[0] for r in rows})
    check(len(subs) == 2 and subs[0] == "kernel" and subs[1].startswith("ust/pid/strata-demo-"),
          "one kernel and one strata-demo sub-trace (%s)" % subs)
    if check.failures:
        return None
    babeltrace2_silent(out)
    n_demo, lost = 0, 0
    for msg in trace_messages(out):
        if msg.kind == "event":
            n_demo += msg.name.startswith("demo:")
        else:
            lost += msg.count
    check(lost == 0, "nothing discarded (%d)" % lost)
    check(n_demo == 101, "every demo event (%d == 101)" % n_demo)
    check_workload_openat(os.path.join(out, "kernel"), 100, "")
    return None


def check_serial_over(d, vmout):
    """Far above the line's bandwidth: missing == refused, exactly."""
    if not serial_ran(d, "serial-over"):
        return 77 if read_file(os.path.join(d, "serial-step.rc")).strip() == "77" else None
    err = read_file(os.path.join(d, "serial-over.err"))
    m = re.search(r"(\d+) packet\(s\) sent .*?, (\d+) refused over capacity", err)
    check(m is not None, "strata record said what the line carried (%r)" % err[-300:])
    if check.failures:
        return None
    sent, refused = int(m.group(1)), int(m.group(2))
    rc, rep, out, rows = receive(d, vmout, "ttyS2", "serial-over")
    print(rep.strip())
    check(rc == 0, "strata receive exits 0 (%d)" % rc)
    check(refused > 0, "the sender refused packets over the line's capacity (%d sent, %d refused)" % (sent, refused))
    offered = sum(r[4] or 0 for r in rows)
    written = sum(r[5] or 0 for r in rows)
    missing = sum(r[6] or 0 for r in rows)
    line_lost = sum(r[3] or 0 for r in rows)
    check(all(r[4] is not None for r in rows) and offered == sent + refused and written == sent and
          missing == refused and line_lost == 0,
          "missing == counted: offered %d = sent %d + refused %d, written %d, missing %d, lost on the line %d"
          % (offered, sent, refused, written, missing, line_lost))
    r = subprocess.run(["babeltrace2", out], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=300)
    check(r.returncode == 0, "babeltrace2 reads the trace (%d %r)" % (r.returncode, r.stderr[:300]))
    return None


def check_readers(d):
    """Strata's own trace reader and babeltrace2 agree on every trace the
    kernel VM recorded (the kernel's WIDE records, syscalls with their
    strings, user sub-traces beside them): `strata view` through each, line
    by line (issue 49).  STRATA_TEST_CLI names the strata command."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
    from strata_testlib import readers_agree
    strata = os.environ.get("STRATA_TEST_CLI", "")
    traces = sorted(os.path.join(d, t) for t in os.listdir(d) if os.path.isdir(os.path.join(d, t)))
    kernel = 0
    for t in traces:
        subs = [root for root, _, files in os.walk(t) if "metadata" in files]
        if not subs:
            continue
        kernel += any(b'domain = "kernel"' in open(os.path.join(s, "metadata"), "rb").read() for s in subs)
        readers_agree(check, strata, t, os.path.basename(t))
    check(kernel > 0, "a trace with a kernel sub-trace among the %d compared" % len(traces))


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
    elif what == "share":
        check_share(d)
    elif what == "sysnames":
        check_sysnames(d)
    elif what == "cost":
        check_cost(d)
    elif what == "relay":
        if check_relay(d) == 77:
            return 77
    elif what in ("serial", "serial_over"):
        if (check_serial if what == "serial" else check_serial_over)(d, vmout) == 77:
            return 77
    elif what == "kretprobe":
        check_kretprobe(d)
    elif what == "readers":
        check_readers(d)
    elif what in ("lttng_analyses", "lttng_cputop", "lttng_iolatencytop"):
        fn = {"lttng_analyses": check_lttng_analyses, "lttng_cputop": check_cputop,
              "lttng_iolatencytop": check_iolatencytop}[what]
        if fn(d) == 77:
            return 77
    elif what.startswith("causal_") and what[7:] in EXPECTED_CLOCK_ID:
        check_causal(d, what[7:])
    else:
        print(__doc__)
        return 2
    print("PASS" if not check.failures else "FAIL: %d check(s)" % check.failures)
    return 1 if check.failures else 0


if __name__ == "__main__":
    sys.exit(main())
