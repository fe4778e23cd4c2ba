#!/usr/bin/python3
"""The VM boot test's oracles, on the host, over what guest-boot.sh left in
OUT: PID 1 (boot_init.c) was started by the kernel with STRATA_EARLY from the
kernel command line and no daemon; the session started later adopted its
early buffer and its children's.

  - boot:ctor (before main) is init's first event, pid 1, the earliest
    timestamp of its stream; boot:main follows;
  - every child's boot:child(c, k) for k < N, exactly once, in order;
  - boot:later(k) for every k, after boot:main;
  - one clock class in the whole trace; timestamps ordered per stream;
  - recorded + discarded == emitted; babeltrace2 silent.

With --kernel (the boot whose initramfs loaded the module with
strata.boot_events=kernel:sched_process_fork,kernel:sched_process_exit before
PID 1): the module's boot buffer, adopted into the session (kernel-boot/),
holds for every child exactly one fork by pid 1 and one exit (and pid 1's
fork of /stage2, nothing else from pid 1), each child's
boot:child events between them on the one clock, and the fork of the daemon
itself, after every child's exit (kernel events from before the daemon
existed); nothing discarded.

With --flight-recorder (the default overwrite mode with buffers far too
small): each child kept a contiguous newest tail of its events, ending at
its last, and its stream's first packet has a sequence number > 0 (the
overwritten packets are counted); init's events (all after the session
adopted its buffer, which it then drained as it filled) are recorded or
counted as discarded: init's recorded + discarded == init's emitted.

With --expect-loss (the boot with deliberately small early buffers,
STRATA_EARLY_SUBBUF_SIZE/SUBBUFS/LANES on the command line, discard mode):
the loss is counted (discarded > 0, recorded + discarded == emitted still),
each child kept exactly its first m events (0..m-1, discard keeps the
oldest), and the later events recorded are increasing.

With --serial STRATA (the boot with strata.serial=ttyS1 on the kernel
command line: the session streamed over the guest's second serial port,
which qemu wrote to OUT/ttyS1.bin): `STRATA receive` rebuilds OUT/trace
first, exits 0 and reports no frame lost or damaged and every packet the
sender offered written; then every check above holds on that trace.
"""
import os
import glob
import re
import struct
import subprocess
import sys


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, trace_messages, vm_boot_counts  # noqa: E402


def main():
    out = sys.argv[1]
    expect_loss = "--expect-loss" in sys.argv[2:]
    kernel = "--kernel" in sys.argv[2:]
    fr = "--flight-recorder" in sys.argv[2:]
    disc_pid = {}            # vpid -> events discarded in its streams
    kev = []                 # (name, ts, payload) of the kernel-boot stream
    child_ts = {}            # child pid -> [ts of its boot:child events]
    check = Checks()
    em = vm_boot_counts(out)
    nchild, nev, nlater = int(em["children"]), int(em["child_events"]), int(em["later"])
    trace = os.path.join(out, "trace")
    if "--serial" in sys.argv[2:]:
        strata = sys.argv[sys.argv.index("--serial") + 1]
        r = subprocess.run([strata, "receive", os.path.join(out, "ttyS1.bin"), "-o", trace],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=120)
        print(r.stderr.strip())
        lanes = re.findall(r"; (\d+) packet\(s\) offered by the sender, (\d+) written, (\d+) missing", r.stderr)
        check(r.returncode == 0 and " 0 frame(s) lost" in r.stderr and " 0 with a bad CRC, 0 malformed" in r.stderr,
              "strata receive rebuilt the boot trace from the serial port, no frame lost (%d)" % r.returncode)
        check(bool(lanes) and all(m == "0" and o == w for o, w, m in lanes),
              "every packet the sender offered was written (%s)" % lanes)
    init, children, clocks, discarded = [], {}, set(), 0
    last = {}
    stray = 0
    ordered = True
    for m in trace_messages(trace):
        if m.kind == "discarded_events":
            discarded += m.count
            if m.env_get("domain") != "kernel":
                vp = m.env_int("vpid")
                disc_pid[vp] = disc_pid.get(vp, 0) + m.count
        if m.kind != "event":
            continue
        ts = m.ts
        clocks.add(m.clock_uuid)
        if m.env_get("domain") == "kernel":
            kev.append((m.name, ts, dict(m.fields.items())))
            continue
        sid = (m.env_int("vpid"), m.stream)
        if sid in last and ts < last[sid]:
            ordered = False
        last[sid] = ts
        p = m.fields
        if m.name == "boot:child":
            children.setdefault(p["child"], []).append(p["k"])
            child_ts.setdefault(sid[0], []).append(ts)
        elif sid[0] != 1:
            stray += 1
        else:
            init.append((m.name, ts, dict(p.items())))
    names = [n for n, _, _ in init]
    check(bool(init) and init[0][0] == "boot:ctor" and init[0][2]["pid"] == 1,
          "init's first event is boot:ctor from pid 1 (%s)" % (init[:1],))
    check(bool(init) and init[0][1] == min(t for _, t, _ in init),
          "boot:ctor has the earliest timestamp of init's events")
    check(names[1:2] == ["boot:main"], "boot:main follows the constructor")
    later = [v["k"] for n, _, v in init if n == "boot:later"]
    check(sorted(children) == list(range(nchild)), "events of all %d children (%s)" % (nchild, sorted(children)))
    if fr:
        check(later == sorted(set(later)) and all(0 <= k < nlater for k in later),
              "boot:later recorded are increasing (%d of %d)" % (len(later), nlater))
        check(len(init) + disc_pid.get(1, 0) == 2 + nlater,
              "init: recorded %d + discarded %d == emitted %d" % (len(init), disc_pid.get(1, 0), 2 + nlater))
        check(all(children.get(c) and children[c] == list(range(nev - len(children[c]), nev)) for c in range(nchild)),
              "each child kept a contiguous newest tail ending at %d (%s)" %
              (nev - 1, [len(children.get(c, [])) for c in range(nchild)]))
        # packet_seq_num is not exposed by bt2: the first packet header of
        # each stream file (abi/strata_abi.h: u64 at byte 64).
        cseq = []
        for f in glob.glob(os.path.join(trace, "ust", "pid", "*", "channel0_*")):
            vp = int(os.path.basename(os.path.dirname(f)).split("-")[-3])
            b = open(f, "rb").read(72)
            if vp in child_ts and len(b) == 72:
                cseq.append(struct.unpack_from("<Q", b, 64)[0])
        check(len(cseq) >= nchild and all(v > 0 for v in cseq),
              "what the children's rings overwrote is counted by their first packets' sequence numbers (%s)" % cseq)
    elif expect_loss:
        check(later == sorted(set(later)) and all(0 <= k < nlater for k in later),
              "boot:later recorded are increasing (%d of %d)" % (len(later), nlater))
        check(all(children.get(c) == list(range(len(children.get(c, [])))) for c in range(nchild)),
              "each child kept exactly its first events (%s of %d)" %
              ([len(children.get(c, [])) for c in range(nchild)], nev))
    else:
        check(later == list(range(nlater)), "boot:later 0..%d all present, in order (%d)" % (nlater - 1, len(later)))
        check(all(children.get(c) == list(range(nev)) for c in range(nchild)),
              "each child's boot:child k = 0..%d exactly once, in order" % (nev - 1))
    emitted = 2 + nlater + nchild * nev
    recorded = stray + len(init) + sum(len(v) for v in children.values())
    if not fr:
        check(recorded + discarded == emitted,
              "recorded %d + discarded %d == emitted %d" % (recorded, discarded, emitted))
    check(stray == 0, "only children record boot:child, only pid 1 the rest (%d stray)" % stray)
    if expect_loss:
        check(discarded > 0, "the loss is counted: %d discarded" % discarded)
    if kernel:
        forks = [(t, v) for n, t, v in kev if n in ("sched_process_fork", "kernel:sched_process_fork")]
        exits = {}
        for n, t, v in kev:
            if n in ("sched_process_exit", "kernel:sched_process_exit"):
                exits.setdefault(v["tid"], []).append(t)
        by1 = {v["child_tid"]: t for t, v in forks if v["parent_tid"] == 1}
        # pid 1 forks its children, then /stage2 (the rest of the boot).
        check(len(child_ts) == nchild and set(child_ts) <= set(by1) and len(by1) == nchild + 1,
              "kernel-boot: one fork by pid 1 per child that recorded, and /stage2's (%s vs %s)" %
              (sorted(by1), sorted(child_ts)))
        check(all(len(exits.get(c, [])) == 1 and by1[c] < min(child_ts[c]) and max(child_ts[c]) < exits[c][0]
                  for c in child_ts if c in by1),
              "each child's events lie between its fork and its exit, on one clock")
        daemon = int(em.get("daemon", 0))
        dfork = [t for t, v in forks if v["child_tid"] == daemon]
        check(len(dfork) == 1 and all(exits[c][0] < dfork[0] for c in child_ts if c in exits),
              "the daemon's own fork (pid %d) is there, after every child's exit" % daemon)
    check(len(clocks) == 1, "one clock in the whole trace (%d)" % len(clocks))
    check(ordered, "timestamps ordered in every stream")
    p = subprocess.run(["babeltrace2", trace], capture_output=True, text=True)
    if expect_loss or fr:
        # Its only words: the discarded-events warnings, summing to the count.
        lines = [l for l in p.stderr.splitlines() if l.strip()]
        warned = [re.match(r"WARNING: Tracer discarded (\d+) events ", l) for l in lines]
        check(p.returncode == 0 and all(warned) and sum(int(w.group(1)) for w in warned) == discarded,
              "babeltrace2 says only that %d events were discarded (%d lines)" % (discarded, len(lines)))
    else:
        check(p.returncode == 0 and p.stderr == "", "babeltrace2 reads it with nothing on stderr")
    check.finish()


if __name__ == "__main__":
    main()
