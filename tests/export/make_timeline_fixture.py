#!/usr/bin/python3
"""Write a small, fully known three-part trace for `strata export`: a kernel
sub-trace (domain "kernel", lttng-modules' event names), a pthread program
"app" (pid 500) and a JVM "java" (pid 700), in the packet layout of
tests/e2e/make_fixture_trace.py (whose packet writer is reused).

usage: make_timeline_fixture.py OUTDIR

make(out, hostname, uuid_base, extra, follows) writes the same trace as
machine HOSTNAME (env.hostname of every sub-trace), with trace uuids from
uuid_base (two machines' copies side by side must differ), and with `extra`
two more events: app:note msg="guest only" at 1950 on tid 501, and in the
kernel irq_handler_entry irq=6 name="virtio0" at 2550 on the idle task
(tid 0, cpu 1).  With `follows` (a link's name) its env says it follows
that clock link, uncorrelated (docs/clocks.md: sync_state, sync_peer), so
that it is a guest, its times unchanged.

Times are ns after 1 s (clock offset 0).  Threads: app 501 (main), 502
(worker); java 701 (main), 702 (Java "Worker-1").

  app (tid: event context):
    1000 app:work_begin n=1           501
    1100 pthread:mutex_lock 0xa000 uncontended     501   hold begins
    1500 pthread:mutex_unlock 0xa000               501   hold ends, flow out
    1600 pthread:mutex_lock 0xa000 wait_ns=400     502   wait 1200..1600 (flow in), hold begins
    1700 app:note msg="hello"         502
    1900 pthread:mutex_unlock 0xa000               502
    2000 app:work_end n=1             501   -> slice app:work 1000..2000
    (second packet: 3 events discarded)
    3000 app:note msg="after loss"    501
  java:
    1050 jvm:thread_start "main" java_tid=1 os_tid=701       (vtid 701)
    1060 jvm:thread_start "Worker-1" java_tid=12 os_tid=702  (vtid 702)
    1300 jvm:monitor_contended_enter class "[I" (an int[]) hash 0x7645a180 owner_java_tid=1  (702)
    1800 jvm:monitor_contended_entered wait_ns=500                    (702)
  kernel (cpu: event context cpu_id):
    1140 sys_enter id=202 (the raw tracepoint)     tid 502 cpu 1
    1150 syscall_entry_futex uaddr=0xa000 op=128   tid 502 cpu 1
    1200 sched_switch worker 502 (state 1) -> swapper/1 0   cpu 1
    1250 sched_switch app 501 (state 0) -> java 702        cpu 0
    1310 sched_switch java 702 (state 1) -> app 501        cpu 0
    1550 sched_waking worker 502 prio 120 target_cpu 1     tid 501 cpu 0
    1560 sched_switch swapper/1 0 (state 0) -> worker 502  cpu 1
    1580 syscall_exit_futex ret=0                          tid 502 cpu 1
    1590 sys_exit id=202 ret=0                             tid 502 cpu 1
    2500 irq_handler_entry irq=5 name="eth0"               tid 501 cpu 0
    2600 sys_enter id=1, 2700 sys_exit id=1 ret=8          tid 501 cpu 0
  (the export makes "syscall 202" a slice around futex, as no named syscall
  event came before; the later raw pair is left out: named ones exist)
"""
import os
import re
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))
import make_fixture_trace  # noqa: E402
from make_fixture_trace import packet  # noqa: E402

S = 1000000000

# The fixture's metadata up to its first event, with our own env block.
HEAD = re.sub(r"env \{.*?\};", "env {\n%(env)s\n};",
              make_fixture_trace.METADATA.split("\nevent {")[0], count=1, flags=re.S)

U64 = "integer { size = 64; align = 64; signed = false; base = %d; }"
X32 = "integer { size = 32; align = 32; signed = false; base = 16; }"
S64 = "integer { size = 64; align = 64; signed = true; base = 10; }"
S32 = "integer { size = 32; align = 32; signed = true; base = 10; }"
U32 = "integer { size = 32; align = 32; signed = false; base = 10; }"
U8 = "integer { size = 8; align = 8; signed = false; base = 10; }"
STR = "string { encoding = UTF8; }"

# name -> list of (type, field, struct format, alignment) ; "s" = string
APP = [
    ("app:work_begin", [(U32, "n", "I", 4)]),
    ("app:work_end", [(U32, "n", "I", 4)]),
    ("app:note", [(STR, "msg", "s", 1)]),
    ("pthread:mutex_lock", [(U64 % 16, "lock", "Q", 8), (S32, "ret", "i", 4), (U8, "contended", "B", 1),
                            (U64 % 10, "wait_ns", "Q", 8), (U64 % 16, "caller", "Q", 8)]),
    ("pthread:mutex_unlock", [(U64 % 16, "lock", "Q", 8), (S32, "ret", "i", 4), (U64 % 16, "caller", "Q", 8)]),
]
JAVA = [
    # As jvm/agent.cpp declares them (hash: u32 hex, os_tid: u32).
    ("jvm:thread_start", [(STR, "name", "s", 1), (S64, "java_tid", "q", 8), (U32, "os_tid", "I", 4),
                          (U8, "daemon", "B", 1)]),
    ("jvm:monitor_contended_enter", [(STR, "class", "s", 1), (X32, "hash", "I", 4), (U32, "os_tid", "I", 4),
                                     (S64, "owner_java_tid", "q", 8), (STR, "stack", "s", 1)]),
    ("jvm:monitor_contended_entered", [(STR, "class", "s", 1), (X32, "hash", "I", 4), (U32, "os_tid", "I", 4),
                                       (U64 % 10, "wait_ns", "Q", 8)]),
]
KERNEL = [
    ("sched_switch", [(STR, "prev_comm", "s", 1), (S32, "prev_tid", "i", 4), (S32, "prev_prio", "i", 4),
                      (S64, "prev_state", "q", 8), (STR, "next_comm", "s", 1), (S32, "next_tid", "i", 4),
                      (S32, "next_prio", "i", 4)]),
    ("sched_waking", [(STR, "comm", "s", 1), (S32, "tid", "i", 4), (S32, "prio", "i", 4),
                      (S32, "target_cpu", "i", 4)]),
    ("syscall_entry_futex", [(U64 % 16, "uaddr", "Q", 8), (S32, "op", "i", 4)]),
    ("syscall_exit_futex", [(S64, "ret", "q", 8)]),
    ("irq_handler_entry", [(S32, "irq", "i", 4), (STR, "name", "s", 1)]),
    ("sys_enter", [(S64, "id", "q", 8)]),
    ("sys_exit", [(S64, "id", "q", 8), (S64, "ret", "q", 8)]),
]


def metadata(uuid, env, events):
    out = HEAD % {"uuid": uuid, "env": env}
    for i, (name, fields) in enumerate(events):
        out += "\nevent {\n\tname = \"%s\";\n\tid = %d;\n\tstream_id = 0;\n\tfields := struct {\n" % (name, i)
        for (t, f, _, _) in fields:
            out += "\t\t%s _%s;\n" % (t, f)
        out += "\t};\n};\n"
    return out


def writer(events):
    ids = {name: (i, fields) for i, (name, fields) in enumerate(events)}

    def ev(r, name, ts, tid, cpu, *values):
        i, fields = ids[name]
        r.pad(8)
        r.b += struct.pack("<HQiH", i, S + ts, tid, cpu)
        for (_, _, fmt, align), v in zip(fields, values):
            if fmt == "s":
                r.b += v.encode() + b"\0"
            else:
                r.put(fmt, v, align)
    return ev


def write(out, sub, uuid_bytes, env, events, packets):
    d = os.path.join(out, sub)
    os.makedirs(d, exist_ok=True)
    uuid = "%s-%s-%s-%s-%s" % tuple(uuid_bytes[a:b].hex() for a, b in ((0, 4), (4, 6), (6, 8), (8, 10), (10, 16)))
    with open(os.path.join(d, "metadata"), "w") as f:
        f.write(metadata(uuid, env, events))
    with open(os.path.join(d, "channel0_0"), "wb") as f:
        for seq, (fn, b, e, discarded) in enumerate(packets):
            f.write(packet(fn, S + b, S + e, seq, discarded, uuid=uuid_bytes))


def make(out, hostname=None, uuid_base=32, extra=False, follows=None):
    """Write the trace into directory `out`."""
    host = '\n\thostname = "%s";' % hostname if hostname else ""
    if follows:
        host += '\n\tsync_state = "uncorrelated";\n\tsync_peer = "%s";' % follows
    app = writer(APP)

    def app1(r):
        app(r, "app:work_begin", 1000, 501, 0, 1)
        app(r, "pthread:mutex_lock", 1100, 501, 0, 0xa000, 0, 0, 0, 0x401000)
        app(r, "pthread:mutex_unlock", 1500, 501, 0, 0xa000, 0, 0x401010)
        app(r, "pthread:mutex_lock", 1600, 502, 1, 0xa000, 0, 1, 400, 0x402000)
        app(r, "app:note", 1700, 502, 1, "hello")
        app(r, "pthread:mutex_unlock", 1900, 502, 1, 0xa000, 0, 0x402010)
        if extra:
            app(r, "app:note", 1950, 501, 0, "guest only")
        app(r, "app:work_end", 2000, 501, 0, 1)

    def app2(r):
        app(r, "app:note", 3000, 501, 0, "after loss")

    write(out, "app", bytes(range(uuid_base, uuid_base + 16)),
          '\tdomain = "ust";\n\ttracer_name = "strata";\n\tprocname = "app";\n\tvpid = 500;' + host,
          APP, [(app1, 1000, 2000, 0), (app2, 3000, 3000, 3)])

    java = writer(JAVA)

    def java1(r):
        java(r, "jvm:thread_start", 1050, 701, 0, "main", 1, 701, 0)
        java(r, "jvm:thread_start", 1060, 702, 0, "Worker-1", 12, 702, 0)
        java(r, "jvm:monitor_contended_enter", 1300, 702, 0, "[I", 0x7645a180, 702, 1, "Main.run:10")
        java(r, "jvm:monitor_contended_entered", 1800, 702, 0, "[I", 0x7645a180, 702, 500)

    write(out, "java", bytes(range(uuid_base + 16, uuid_base + 32)),
          '\tdomain = "ust";\n\ttracer_name = "strata";\n\tprocname = "java";\n\tvpid = 700;' + host,
          JAVA, [(java1, 1050, 1800, 0)])

    k = writer(KERNEL)

    def k1(r):
        k(r, "sys_enter", 1140, 502, 1, 202)
        k(r, "syscall_entry_futex", 1150, 502, 1, 0xa000, 128)
        k(r, "sched_switch", 1200, 502, 1, "worker", 502, 120, 1, "swapper/1", 0, 120)
        k(r, "sched_switch", 1250, 501, 0, "app", 501, 120, 0, "java", 702, 120)
        k(r, "sched_switch", 1310, 702, 0, "java", 702, 120, 1, "app", 501, 120)
        k(r, "sched_waking", 1550, 501, 0, "worker", 502, 120, 1)
        k(r, "sched_switch", 1560, 0, 1, "swapper/1", 0, 120, 0, "worker", 502, 120)
        k(r, "syscall_exit_futex", 1580, 502, 1, 0)
        k(r, "sys_exit", 1590, 502, 1, 202, 0)
        k(r, "irq_handler_entry", 2500, 501, 0, 5, "eth0")
        if extra:
            k(r, "irq_handler_entry", 2550, 0, 1, 6, "virtio0")
        k(r, "sys_enter", 2600, 501, 0, 1)
        k(r, "sys_exit", 2700, 501, 0, 1, 8)

    write(out, "kernel", bytes(range(uuid_base + 32, uuid_base + 48)),
          '\tdomain = "kernel";\n\ttracer_name = "lttng-modules";\n\tsysname = "Linux";' + host,
          KERNEL, [(k1, 1140, 2700, 0)])


if __name__ == "__main__":
    make(sys.argv[1])
