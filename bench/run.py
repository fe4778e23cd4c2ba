#!/usr/bin/python3
"""bench/run.py - Strata side by side with LTTng-UST (driven by bench/run.sh).

Runs the programs bench/CMakeLists.txt built (strata-bench, strata-bench-lttng,
strata-bench-plain: one source, the same loops and event shapes), checks that
every enabled run recorded what it emitted, and prints one table:

    workload | Strata | LTTng-UST | ratio | target | met?

Process roles: this script starts at most one lttng-sessiond (in the
foreground, so it knows its pid) and stops it by that pid before it exits;
Strata runs go through `strata record`, which starts and stops its own private
consumer daemon.  Nothing is left running.

Exit status: 0 when every run completed and every trace satisfies
recorded + discarded == emitted (losses are reported, not fatal: the table
says so); 1 otherwise.  Missing targets never fail the run: they are data.
"""
import argparse
import glob
import json
import os
import re
import resource
import select
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

WORKLOADS = ("ints", "str", "mixed")
# Enabled-cost buffers: 16 x 1 MiB per CPU (LTTng) / per lane (Strata), after
# a warm-up that laps the ring once (steady state: the pages are resident).
# 16, not 8 (until 2026-11-24): two `str` writers fill a lane at 1.7 GB/s,
# so 8 MiB lasted 5 ms, about one scheduler tick of this VM's kernel
# (HZ=250, no kernel preemption): a drain that lost its CPU for one tick
# overflowed it (CHANGELOG.md, "a ring of two ticks").
# The cold figure: 8 x 4 MiB, no warm-up, one lap of fresh pages.
EN_SUBBUF, EN_NSUB = "1M", 16
# More threads than CPUs: 4 and 8 (on 1 to 4 CPUs each owns a lane: the
# runtime's default owns at least 8), 16 (on 2 CPUs 8 of them in the
# shared lanes, whose locked CAS and add it shows), and on a machine of 16
# CPUs or more one thread per CPU as well (its row says n/a elsewhere):
# Strata at most 0.5 of LTTng-UST per event at any of them; the
# N-thread/1-thread target (<= 1.3) is the issue's, for 4 and 8.
MANY_CPUS = 16
SCALE_THREADS = tuple(sorted({4, 8, 16} | ({os.cpu_count()} if (os.cpu_count() or 0) >= MANY_CPUS else set())))
SCALE_TARGET_THREADS = (4, 8)
COLD_SUBBUF, COLD_NSUB = "4M", 8
CTF_MAGIC = 0xC1FC1FC1


class BenchError(Exception):
    pass


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def parse_kv(text):
    out = {}
    for line in text.splitlines():
        m = re.fullmatch(r"([a-z_0-9]+)=(\S+)", line.strip())
        if m:
            out[m.group(1)] = m.group(2)
    return out


def run(cmd, env=None, check=True, timeout=600):
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise BenchError("%s failed (%d): %s" % (" ".join(cmd), p.returncode, p.stderr.strip()[-2000:]))
    return p


# ---- processes ---------------------------------------------------------------

def proc_stat(pid):
    """(comm, ppid, utime + stime ticks) of pid, or None once it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            s = f.read()
    except OSError:
        return None
    comm = s[s.index("(") + 1:s.rindex(")")]
    rest = s[s.rindex(")") + 2:].split()
    return comm, int(rest[1]), int(rest[11]) + int(rest[12])


def proc_cpu_ticks(pid):
    st = proc_stat(pid)
    return st[2] if st else 0


def proc_status(pid, key):
    """An integer field of /proc/PID/status (Threads, VmRSS in KiB), 0 if gone."""
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def proc_vcsw(pid):
    """Voluntary context switches of every live thread of pid (wake-ups)."""
    n = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return 0
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        n += int(line.split()[1])
        except OSError:
            pass
    return n


def find_procs(pred):
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = proc_stat(int(d))
            if st and pred(int(d), st[0], st[1]):
                out.append(int(d))
    return out


def pid_in_tree(pid, root):
    """pid is root or one of its descendants."""
    for _ in range(64):
        if pid == root:
            return True
        st = proc_stat(pid)
        if not st or st[1] <= 1:
            return False
        pid = st[1]
    return False


# ---- trace accounting ------------------------------------------------------

def count_events(trace_dir):
    """Events babeltrace2 decodes in trace_dir (all sub-traces).  Thousands
    of sub-traces (one per process: row 8 at 10,000) are read 1,000 at a
    time: babeltrace2 opens every stream file at once and would run out of
    descriptors."""
    subs = sorted({os.path.dirname(os.path.join(r, f)) for r, _, fs in os.walk(trace_dir)
                   for f in fs if f == "metadata"})
    groups = [subs[i:i + 1000] for i in range(0, len(subs), 1000)] if len(subs) > 1000 else [[trace_dir]]
    total = 0
    for g in groups:
        p = run(["babeltrace2"] + g + ["-c", "sink.utils.counter", "--params=step=+0"])
        m = re.search(r"(\d+) Event messages", p.stdout)
        if not m:
            raise BenchError("babeltrace2 counter output not understood: " + p.stdout[:200])
        total += int(m.group(1))
    return total


def walk_packets(trace_dir):
    """(discarded, content bytes) of a trace: the sum over stream files of
    the last packet's cumulative events_discarded (offset 72) and of every
    packet's content_size (offset 48, bits; packet_size at 56): the layout
    both tracers write."""
    total = content = 0
    for path in glob.glob(os.path.join(trace_dir, "**"), recursive=True):
        base = os.path.basename(path)
        if (not os.path.isfile(path) or base == "metadata" or base.startswith(".")
                or os.sep + "index" + os.sep in path):
            continue
        last = 0
        with open(path, "rb") as f:
            data = f.read()
        off = 0
        while off + 88 <= len(data):
            magic, = struct.unpack_from("<I", data, off)
            if magic != CTF_MAGIC:
                raise BenchError("%s: bad packet magic at %d" % (path, off))
            csize, psize = struct.unpack_from("<QQ", data, off + 48)
            last, = struct.unpack_from("<Q", data, off + 72)
            if psize < 88 * 8 or psize % 8 or csize > psize:
                raise BenchError("%s: bad packet size at %d" % (path, off))
            content += csize // 8
            off += psize // 8
        total += last
    return total, content


# Runs argv[1:] (stdin inherited) and prints its wall time on stderr; its
# status is the program's.
PRELOAD_TIMER = ("import subprocess, sys, time\n"
                 "t = time.monotonic()\n"
                 "r = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
                 "print('preload_wall_s=%.6f' % (time.monotonic() - t), file=sys.stderr)\n"
                 "sys.exit(r)\n")


# The memcached workload of the preload step: memcached -t 2 (traced: it
# inherits the preload) on a Unix socket, and memcslap (untraced: LD_PRELOAD
# removed) driving it with 4 threads, `get` (each thread sets its keys,
# then gets them); the time is memcslap's run alone, printed as the timer's.
# Also printed: the server's own CPU over that run (every thread's on-CPU
# ns from /proc/PID/task/*/schedstat, read before and after): six threads
# on two CPUs make the wall move by a factor of two between runs, while
# the CPU the server spends on the same requests is what its tracing adds.
# And its user and system CPU over its whole life (os.wait4's rusage: its
# start and exit too): the system part moves by +-0.3 s between runs,
# traced or not (the kernel's socket work), the user part is the tracer's.
MEMCACHED_DRIVER = ("import os, socket, subprocess, sys, time\n"
                    "mc, slap, sock, n = sys.argv[1:5]\n"
                    "srv = subprocess.Popen([mc, '-t', '2', '-s', sock] + (['-u', 'root'] if os.getuid() == 0 else []))\n"
                    "deadline = time.monotonic() + 30\n"
                    "while True:\n"
                    "    c = socket.socket(socket.AF_UNIX)\n"
                    "    try:\n"
                    "        c.connect(sock)\n"
                    "        c.close()\n"
                    "        break\n"
                    "    except OSError:\n"
                    "        c.close()\n"
                    "        if srv.poll() is not None or time.monotonic() > deadline:\n"
                    "            sys.exit('memcached did not start')\n"
                    "        time.sleep(0.01)\n"
                    "env = {k: v for k, v in os.environ.items() if k != 'LD_PRELOAD'}\n"
                    "def cpu():\n"
                    "    d = '/proc/%d/task' % srv.pid\n"
                    "    return sum(int(open(os.path.join(d, t, 'schedstat')).read().split()[0]) for t in os.listdir(d))\n"
                    "c0 = cpu()\n"
                    "t = time.monotonic()\n"
                    "r = subprocess.call([slap, '--servers=' + sock, '--concurrency=4', '--execute-number=' + n,\n"
                    "                     '--test=get'], env=env, stdout=subprocess.DEVNULL)\n"
                    "print('preload_wall_s=%.6f' % (time.monotonic() - t), file=sys.stderr)\n"
                    "print('preload_cpu_s=%.6f' % ((cpu() - c0) / 1e9), file=sys.stderr)\n"
                    "srv.terminate()\n"
                    "ru = os.wait4(srv.pid, 0)[2]\n"
                    "print('preload_ucpu_s=%.6f' % ru.ru_utime, file=sys.stderr)\n"
                    "print('preload_scpu_s=%.6f' % ru.ru_stime, file=sys.stderr)\n"
                    "sys.exit(r)\n")


def count_unlocks(trace_dir, side):
    """Mutex unlocks a pthread trace recorded: LTTng's pthread_mutex_unlock;
    Strata's mutex_unlock plus its compact mutex_held and mutex_tryheld (a
    lock or successful trylock and its unlock in one record), plus the
    pairs its counting mode's mutex_counts records counted."""
    names = (["lttng_ust_pthread:pthread_mutex_unlock:"] if side == "lttng"
             else ["pthread:mutex_unlock:", "pthread:mutex_held:", "pthread:mutex_tryheld:"])
    p = subprocess.Popen(["babeltrace2", trace_dir], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True)
    n = 0
    for line in p.stdout:
        if any(x in line for x in names):
            n += 1
        elif " pthread:mutex_counts: " in line:
            m = re.search(r", count = (\d+)", line)
            n += int(m.group(1)) if m else 0
    p.wait()
    return n


# The preload step's other Strata sides (docs/pthread.md, "Counting mode"):
# side -> STRATA_PTHREAD_COUNT.  The "strata" side is the default (counting,
# one hold in 16 timed: no variable); 1: counting, every hold timed; 0: no
# counting, every pair a record of its own.
PRELOAD_COUNT_SIDES = {"strata_count1": "1", "strata_pairs": "0"}
PRELOAD_SIDE_HOW = {"strata_count1": "counting, every hold timed, STRATA_PTHREAD_COUNT=1",
                    "strata_pairs": "every pair a record, STRATA_PTHREAD_COUNT=0"}


def trace_rate(acc, kv):
    """GB/s of trace the program produced while it ran: its events (every
    thread) at the recorded bytes per event, over its wall time."""
    try:
        bpe = acc.get("bytes_per_event")
        wall_ms = float(kv["wall_ms"]) if kv else 0.0
    except (KeyError, ValueError):
        return None
    if not bpe or wall_ms <= 0:
        return None
    return acc["emitted"] * bpe / (wall_ms * 1e-3) / 1e9


def account(trace_dir, emitted):
    """Loss accounting of one run.  A trace babeltrace2 cannot read is a
    failure of the run, but the timing figures of that run are kept."""
    disc, content = walk_packets(trace_dir)
    try:
        rec = count_events(trace_dir)
    except BenchError as e:
        why = re.findall(r"^CAUSED BY .*\n\s+(.*)$", str(e), re.M)
        return {"emitted": emitted, "recorded": None, "discarded": disc, "consistent": False,
                "lossless": False, "error": "babeltrace2 cannot read the trace: " +
                (why[-1] if why else str(e)[-300:])}
    return {"emitted": emitted, "recorded": rec, "discarded": disc,
            "consistent": rec + disc == emitted, "lossless": rec == emitted and disc == 0,
            "bytes_per_event": content / rec if rec else None}


# ---- LTTng -----------------------------------------------------------------

class Lttng:
    def __init__(self, work):
        self.work = work
        self.proc = None
        self.n = 0

    def daemon_up(self):
        return run(["lttng", "--no-sessiond", "list"], check=False).returncode == 0

    def start_daemon(self):
        if self.daemon_up():
            log("lttng: using the session daemon already running")
            return
        logf = open(os.path.join(self.work, "lttng-sessiond.log"), "w")
        self.proc = subprocess.Popen(["lttng-sessiond", "--no-kernel"], stdout=logf, stderr=logf)
        deadline = time.monotonic() + 20
        while not self.daemon_up():  # poll the condition, with a deadline
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise BenchError("lttng-sessiond did not come up (see lttng-sessiond.log)")
            time.sleep(0.05)

    def stop_daemon(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def create(self, out, subbuf=None, nsub=None, start=True, events="bench:*", blocking=False):
        self.n += 1
        name = "strata-bench-%d-%d" % (os.getpid(), self.n)
        run(["lttng", "--no-sessiond", "create", name, "--output", out])
        if subbuf:
            # blocking: the application waits for room (as long as it takes)
            # once it also sets LTTNG_UST_ALLOW_BLOCKING (Bench.traced)
            run(["lttng", "--no-sessiond", "enable-channel", "-s", name, "-u",
                 "--subbuf-size=%s" % subbuf, "--num-subbuf=%d" % nsub]
                + (["--blocking-timeout=inf"] if blocking else []) + ["ch"])
            run(["lttng", "--no-sessiond", "enable-event", "-s", name, "-u", "-c", "ch", events])
        else:
            run(["lttng", "--no-sessiond", "enable-event", "-s", name, "-u", events])
        if start:
            run(["lttng", "--no-sessiond", "start", name])
        return name

    def destroy(self, name):
        run(["lttng", "--no-sessiond", "stop", name], check=False)
        run(["lttng", "--no-sessiond", "destroy", name])


# ---- the benchmark ---------------------------------------------------------

class Bench:
    def __init__(self, build, smoke, work):
        self.smoke = smoke
        self.large_rows = 6300000  # reading_large's sqlite3 inserts (--large-rows)
        self.work = work
        bdir = os.path.join(build, "bench")
        self.plain = os.path.join(bdir, "strata-bench-plain")
        self.plaincxx = os.path.join(bdir, "strata-bench-plain-cxx")
        self.sbench = os.path.join(bdir, "strata-bench")
        self.sasync = os.path.join(bdir, "strata-bench-async")
        self.lbench = os.path.join(bdir, "strata-bench-lttng")
        self.strata = os.path.join(build, "cli", "strata")
        if not os.access(self.plain, os.X_OK):
            raise BenchError("%s not built" % self.plain)
        # The program alone is enough for the no-session steps; the rest
        # needs `strata record`.
        self.have_sbench = os.access(self.sbench, os.X_OK)
        self.have_strata = self.have_sbench and os.access(self.strata, os.X_OK)
        self.have_lttng = os.access(self.lbench, os.X_OK) and shutil.which("lttng-sessiond")
        self.lttng = Lttng(work)
        self.results = {}
        self.notes = []
        self.failures = []
        self.n = 0
        self.clocks = set()  # env.clock of the Strata traces (what stamped events)
        # Strata: never pick up a consumer daemon that happens to run here.
        self.env_nodaemon = dict(os.environ)
        self.env_nodaemon.pop("XDG_RUNTIME_DIR", None)
        self.env_nodaemon["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "no-daemon.sock")
        if smoke:
            self.p = dict(n_enabled=20000, warmup=0, n_cold=20000, reps=1, n_disabled=200000,
                          rate_ms=200, steps=1, lat_reps=1, spawn=10, mem_threads=(1, 4),
                          mem_events=2000, callgrind=False, file_rate_mib=16, n_whole=50000,
                          whole_reps=1, n_short=20000, n_burst=2000)
        else:
            # warmup: every thread laps its 16 x 1 MiB ring once before it
            # is timed (16 MiB of 16-byte records is 1.05 M; 700 k did for
            # 8 x 1 MiB, 300 k when records were 32 bytes), so the enabled
            # rows are steady state
            # and fresh pages stay in the first-lap row.  With the work
            # split 8 ways, 300 k left 40 % of each thread's timed records
            # on fresh pages: 8 owned lanes alone measured 1.2 x.
            # reps: 5 since 2026-11-24 (3 before): on the 2-CPU VM a slow
            # phase can hold one side for two of three repetitions (an
            # `ints` median of 43 ns against 33-36 in the runs around it).
            self.p = dict(n_enabled=2000000, warmup=1200000, n_cold=1000000, reps=5,
                          n_disabled=100000000, rate_ms=1000, steps=6, lat_reps=3, spawn=200,
                          mem_threads=(1, 64), mem_events=20000,
                          callgrind=shutil.which("valgrind") is not None, file_rate_mib=256,
                          n_whole=4000000, whole_reps=3, n_short=200000, n_burst=200000)

    def tmpdir(self, tag):
        self.n += 1
        d = os.path.join(self.work, "%02d-%s" % (self.n, tag))
        os.makedirs(d)
        return d

    def check(self, what, acc, kv=None):
        line = "%s: emitted %d, recorded %s, discarded %d" % (
            what, acc["emitted"], acc["recorded"], acc["discarded"])
        # The trace's byte rate while the program ran (every thread, what
        # the drain had to write): set beside the file write rate measured
        # in this run, it tells a drain that could not keep up with the
        # file system from one that lost events of its own accord.
        rate = trace_rate(acc, kv)
        if rate:
            line += ", trace written at %.2f GB/s" % rate
        if acc.get("error"):
            self.failures.append("%s: %s" % (line, acc["error"]))
        elif not acc["consistent"]:
            self.failures.append(line + " (recorded + discarded != emitted)")
        elif not acc["lossless"]:
            self.notes.append(line + " (LOSS)" + (": " + acc["drain"] if acc.get("drain") else ""))
        log("  " + line)

    # The rate at which the file system of the trace directory takes a
    # fresh file in 1 MiB buffered writes, as a drain writes (write() only,
    # no sync: what a drain waits for).  On a VM whose host backs freed
    # guest memory lazily (free page reporting), new page-cache folios
    # cost a host fault each: 0.5-0.9 GB/s against 7 GB/s into pages
    # freed a moment before (docs/benchmarks.md, "The output's fresh
    # pages").  A trace written faster than this for longer than its
    # ring holds loses events on any tracer.
    def file_rate(self, tag):
        path = os.path.join(self.work, "file-rate-%s" % tag)
        mib = self.p["file_rate_mib"]
        buf = b"\xa5" * (1 << 20)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            t0 = time.monotonic()
            for _ in range(mib):
                os.write(fd, buf)
            dt = time.monotonic() - t0
        finally:
            os.close(fd)
            os.unlink(path)
        gbs = mib * (1 << 20) / dt / 1e9
        self.results.setdefault(("file_rate",), []).append(gbs)
        log("  file write rate (%s, fresh %d MiB file): %.2f GB/s" % (tag, mib, gbs))

    # One enabled or rate run under tracing; returns (program kv, accounting).
    def traced(self, side, args, subbuf, nsub, tag, blocking=False):
        out = self.tmpdir(tag)
        if side == "lttng":
            name = self.lttng.create(out, subbuf, nsub, blocking=blocking)
            env = dict(os.environ, LTTNG_UST_ALLOW_BLOCKING="1") if blocking else None
            try:
                kv = parse_kv(run([self.lbench] + args, env=env).stdout)
            finally:
                self.lttng.destroy(name)
        else:
            p = run([self.strata, "record", "-o", out, "-e", "bench:*", "--mode", "discard"]
                    + (["--blocking"] if blocking else [])
                    + ["--subbuf-size", str(subbuf_bytes(subbuf)), "--subbuf-count", str(nsub),
                       "--", self.sbench] + args, env=self.env_nodaemon)
            kv = parse_kv(p.stdout)
        if "emitted" not in kv:
            raise BenchError("%s %s: no result" % (side, args))
        acc = account(out, int(kv["emitted"]))
        if side == "strata":
            self.clocks |= trace_clocks(out)
            # the daemon's own word on a loss: what its writes cost
            said = re.findall(r"this drain wrote .*", p.stderr)
            if said:
                acc["drain"] = "; ".join(said)
        shutil.rmtree(out, ignore_errors=True)
        return kv, acc

    def sides(self):
        s = []
        if self.have_strata:
            s.append("strata")
        if self.have_lttng:
            s.append("lttng")
        return s

    def nosession_side(self, side):
        return {"strata": self.have_sbench, "lttng": self.have_lttng, "plain": True}[side]

    # 1. enabled cost, 1 and 2 threads.  Repetitions interleave the sides
    # so that a burst of load on the shared machine hits both alike.
    def enabled(self):
        cpu, wall, lost, beside = {}, {}, {}, {}
        self.file_rate("before the enabled runs")
        for _ in range(self.p["reps"]):
            for w in WORKLOADS:
                for t in (1, 2):
                    for side in self.sides():
                        kv, acc = self.enabled_run(side, w, t, "en")
                        self.check("enabled %s %s %dT" % (side, w, t), acc, kv)
                        lost.setdefault((w, t, side), []).append((acc["emitted"], acc["discarded"]))
                        cpu.setdefault((w, t, side), []).append(float(kv["cpu_ns_per_event"]))
                        if acc.get("bytes_per_event"):
                            self.results[("bytes", w, side)] = acc["bytes_per_event"]
                        wall.setdefault((w, t, side), []).append(float(kv["ns_per_event"]))
                        if "ordered_tsc_ns" in kv:
                            beside.setdefault((w, side), []).append(
                                (float(kv["cpu_ns_per_event"]), float(kv["ordered_tsc_ns"])))
            # scaling: more threads than CPUs (lanes shared once threads
            # outnumber them), ints only, the same total work as 2 threads
            for t in SCALE_THREADS:
                for side in self.sides():
                    kv, acc = self.scale_run(side, t, "en")
                    self.check("enabled %s ints %dT" % (side, t), acc, kv)
                    lost.setdefault(("ints", t, side), []).append((acc["emitted"], acc["discarded"]))
                    cpu.setdefault(("ints", t, side), []).append(float(kv["cpu_ns_per_event"]))
                    wall.setdefault(("ints", t, side), []).append(float(kv["ns_per_event"]))
            # cold: the first lap of fresh buffers (page faults included)
            for side in self.sides():
                kv, acc = self.traced(side, ["loop", "ints", "1", str(self.p["n_cold"])],
                                      COLD_SUBBUF, COLD_NSUB, "cold-%s" % side)
                self.check("enabled cold %s ints 1T" % side, acc, kv)
                cpu.setdefault(("cold", 1, side), []).append(float(kv["cpu_ns_per_event"]))
                wall.setdefault(("cold", 1, side), []).append(float(kv["ns_per_event"]))
            # short: a plain short run as a user makes it (issue 38): 200 k
            # `ints` events, fresh 8 x 1 MiB buffers, no warm-up; the
            # program's own wall time per event (its loop only: neither
            # side's session set-up is in it)
            for side in self.sides():
                kv, acc = self.traced(side, ["loop", "ints", "1", str(self.p["n_short"])],
                                      "1M", 8, "short-%s" % side)
                self.check("enabled short %s ints 1T" % side, acc, kv)
                cpu.setdefault(("short", 1, side), []).append(float(kv["cpu_ns_per_event"]))
                wall.setdefault(("short", 1, side), []).append(float(kv["ns_per_event"]))
        self.zero_loss(lost)
        self.file_rate("after the enabled runs")
        for k, v in cpu.items():
            self.results[("enabled",) + k] = statistics.median(v)
            self.results[("enabled_reps",) + k] = list(v)
            self.results[("enabled_wall",) + k] = statistics.median(wall[k])
            self.results[("enabled_wall_reps",) + k] = list(wall[k])
            log("enabled %s %s %dT: cpu %s wall %s ns/event" % (k[2], k[0], k[1], v, wall[k]))
        # issue 64's stretch rows, each run's event over the ordered read
        # timed in the same thread beside its loop: the median of the
        # runs' differences (and of the reads alone)
        for (w, side), pairs in beside.items():
            if side != "strata":
                continue  # the rows are Strata's alone
            self.results[("stretch_paired", w, side)] = statistics.median(c - o for c, o in pairs)
            self.results[("ordered_beside", w, side)] = statistics.median(o for _, o in pairs)
            log("enabled %s %s 1T: the ordered read beside each run %s ns" % (
                side, w, [round(o, 2) for _, o in pairs]))

    # One run of the enabled step's loop: W events on T threads after the
    # warm-up, 16 x 1 MiB (also its zero-loss runs, in blocking mode).
    # One thread of the enabled step (not its zero-loss runs, whose reads
    # no row uses): the program times the ordered TSC read beside its loop
    # too (ordered_tsc_ns), for the stretch rows.
    def enabled_run(self, side, w, t, tag, blocking=False):
        return self.traced(side, ["loop", w, str(t), str(self.p["n_enabled"]), str(self.p["warmup"])]
                           + (["ordered"] if t == 1 and tag == "en" else []),
                           EN_SUBBUF, EN_NSUB, "%s-%s-%s-%d" % (tag, side, w, t), blocking=blocking)

    # One scaling run: T threads, the same total work as 2 threads (each
    # thread n_enabled * 2 / T events after the same warm-up).
    def scale_run(self, side, t, tag, blocking=False):
        n = max(self.p["n_enabled"] * 2 // t, 1000)
        return self.traced(side, ["loop", "ints", str(t), str(n), str(self.p["warmup"])],
                           EN_SUBBUF, EN_NSUB, "%s-%s-ints-%d" % (tag, side, t), blocking=blocking)

    # The enabled rows run in discard mode: a writer faster than its drain
    # loses events there (Strata's str rows on a 2-CPU VM: its 1.7 GB/s of
    # trace outruns the daemon's file writes), and a discarded event may
    # cost the writer less than a recorded one.  So every workload and
    # thread count (the scaling runs' too) whose Strata runs lost events is
    # measured again with nothing lost: the same runs in blocking mode (the
    # writer waits for the drain), 3 of them, their median printed as a
    # "zero loss" row beside the row it checks, against the same LTTng-UST
    # figure (which lost nothing, or says so in its own note) and the same
    # target.
    def zero_loss(self, lost):
        for (w, t, side), runs in sorted(lost.items()):
            em, disc = sum(e for e, _ in runs), sum(d for _, d in runs)
            if side != "strata" or not disc:
                continue
            # LTTng-UST runs again beside each blocking run, as in the
            # enabled step (its own mode: blocking too where its runs lost):
            # the zero-loss runs come minutes after the row they check, and
            # this shared machine's speed moves by a quarter between phases
            # (Strata's str 1 thread 27.8 ns in the enabled step, 42.8 in
            # blocking mode 20 minutes later; the two modes paired by hand,
            # 6 runs each alternated, read 31-37 and 34-40).
            l_block = any(d for _, d in lost.get((w, t, "lttng"), []))
            v, lv, walls = [], [], {}
            for _ in range(3):
                for s in self.sides():
                    block = s == "strata" or l_block
                    if t in SCALE_THREADS:
                        kv, acc = self.scale_run(s, t, "zl", blocking=block)
                    else:
                        kv, acc = self.enabled_run(s, w, t, "zl", blocking=block)
                    self.check("enabled zero-loss %s %s %dT" % (s, w, t), acc, kv)
                    (v if s == "strata" else lv).append(float(kv["cpu_ns_per_event"]))
                    walls.setdefault(s, []).append(float(kv["ns_per_event"]))
            self.results[("enabled_zero_loss", w, t)] = (statistics.median(v), 100.0 * disc / em,
                                                         statistics.median(lv) if lv else None,
                                                         statistics.median(a / b for a, b in zip(v, lv))
                                                         if lv else None)
            # the walls too: row 1c's two threads over one, with nothing lost
            for s_, wv in walls.items():
                self.results[("enabled_zero_loss_wall", w, t, s_)] = statistics.median(wv)
            # their pairs in the "enabled, paired" line too
            self.results[("enabled_reps", w + " nothing lost", t, "strata")] = v
            self.results[("enabled_reps", w + " nothing lost", t, "lttng")] = lv
            log("enabled zero-loss strata %s %dT (blocking): cpu %s ns/event, LTTng-UST beside it %s; "
                "the discard-mode runs lost %.1f %%" % (w, t, v, lv, 100.0 * disc / em))

    # Short-lived threads: `burst N 5 2`, N threads that each emit 5 `ints`
    # events and exit, two alive at a time, untraced and under each side's
    # session (8 x 1 MiB); the process's CPU per thread, median of 5.  The
    # tracer's share is the median of each repetition's traced figure less
    # its untraced one: the untraced figure alone moves by 5 us between
    # runs (49 to 55 of 50), more than Strata's whole share (1-2 us), so a
    # difference of medians of 3 read 0.1 to 6.3 us in two runs of one day.
    # Each repetition's untraced figure is the mean of the untraced runs
    # before and after its traced ones (one more untraced run closes the
    # last): a drift across the repetition cancels, where pairing with the
    # run before alone left it in the later side's share (two runs of one
    # hour read Strata's as -0.3 and 2.8 us, LTTng-UST's as 4.2 and 6.6).
    def short_threads(self):
        args = ["burst", str(self.p["n_burst"]), "5", "2"]
        plain = []
        # 2 x reps - 1 repetitions, as the memcached rows: an untraced run
        # moves by 2-6 us a thread from one repetition to the next (thread
        # creation and exit in the kernel), the tracers' shares are 0.3-2 and
        # 2-4 us; with 5, the same code read a share of 0.08 in one run and
        # 0.58 in the next (stop 118's runs at 8c62cee and e766c12).
        reps = 2 * self.p["reps"] - 1
        for i in range(reps + 1):
            plain.append(float(parse_kv(run([self.plain] + args).stdout)["cpu_ns_per_thread"]))
            if i == reps:
                break
            for side in self.sides():
                kv, acc = self.traced(side, args, "1M", 8, "burst-%s" % side)
                self.check("short threads %s" % side, acc, kv)
                self.results.setdefault(("burst_reps", side), []).append(float(kv["cpu_ns_per_thread"]))
        self.results[("burst_reps", "plain")] = plain
        base = [(a + b) / 2 for a, b in zip(plain, plain[1:])]
        for side in ("plain", "strata", "lttng"):
            reps = self.results.get(("burst_reps", side))
            if reps:
                self.results[("burst", side)] = statistics.median(reps)
                add = paired_median(reps, base) if side != "plain" else None
                if add is not None:
                    self.results[("burst_add", side)] = add
                log("short threads %s: CPU ns per thread %s" % (side, reps))

    # Aggregation beside recording (issue 35): `loop ints 1 N WU` under an
    # aggregation session (`strata record --aggregate`: count, sum, min, max
    # and log2 histogram of b, by thread) and under a recording session of
    # the enabled step's buffers, interleaved, the median of each.  The
    # aggregated run is checked exactly: the session's regions count every
    # event the program emitted (`--json`: hits == emitted).
    AGG_SPEC = "bench:ints:b by $tid"

    def aggregate(self):
        if not self.have_strata:
            return
        n, wu = str(self.p["n_enabled"]), str(self.p["warmup"])
        agg, rec = [], []
        for _ in range(self.p["reps"]):
            # An output directory of the bench's own: record's default is
            # the working directory's strata-record-* (an aggregated-only
            # run leaves none since, but the bench writes only in its work).
            out = self.tmpdir("agg-only")
            p = run([self.strata, "record", "-o", out, "--aggregate", self.AGG_SPEC, "--json", "--", self.sbench,
                     "loop", "ints", "1", n, wu], env=self.env_nodaemon)
            shutil.rmtree(out, ignore_errors=True)
            kv = parse_kv(p.stdout)
            j = json.loads(p.stdout[p.stdout.index("{"):])
            hits = sum(r["hits"] for r in j["regions"])
            if "emitted" not in kv or hits != int(kv["emitted"]):
                raise BenchError("aggregated %s hits of %s emitted" % (hits, kv.get("emitted")))
            agg.append(float(kv["cpu_ns_per_event"]))
            kv, acc = self.traced("strata", ["loop", "ints", "1", n, wu], EN_SUBBUF, EN_NSUB, "agg-rec")
            self.check("aggregate step: recorded ints 1T", acc, kv)
            rec.append(float(kv["cpu_ns_per_event"]))
        self.results[("aggregated", "ints")] = statistics.median(agg)
        self.results[("aggregated_rec", "ints")] = statistics.median(rec)
        log("aggregated ints 1T: cpu %s; recorded %s ns/event" % (agg, rec))

    # Whole cost (issue 38): the CPU of everything tracing costs, per event:
    # the traced program, the tracer's daemons and command-line tools.
    # `loop ints T N` with no warm-up (fresh pages included, as a user's
    # run), 16 x 1 MiB as the enabled step.  Strata: the rusage of `strata
    # record` and its waited descendants (the program and the private
    # strata-consumerd, both reaped by record) from os.wait4.  LTTng: the
    # rusage of the program and the `lttng` commands (create .. destroy,
    # which waits for the flush), plus the delta of utime + stime of
    # lttng-sessiond and lttng-consumerd (/proc/PID/stat, every thread's)
    # over the same span.  Daemon share = whole - the program's loop CPU
    # (cpu_ns_per_event x N x T).  Wake-ups: voluntary context switches of
    # the daemons per 1000 events (Strata: of record's descendants, the
    # busy program's own being a handful; LTTng: the daemons' threads).
    def whole(self):
        n = self.p["n_whole"]
        res = {}
        lost = {}  # (side, t) -> [(emitted, discarded)] of the discard-mode runs
        for _ in range(self.p["whole_reps"]):
            for t in (1, 2):
                for side in self.sides():
                    tot, loop, wake, acc = self.whole_run(side, t, n)
                    r = res.setdefault((side, t), {"tot": [], "daemon": [], "wake": []})
                    r["tot"].append(tot / (n * t))
                    r["daemon"].append((tot - loop) / (n * t))
                    r["wake"].append(wake * 1000.0 / (n * t))
                    lost.setdefault((side, t), []).append((acc["emitted"], acc["discarded"]))
        for (side, t), r in res.items():
            for k, v in r.items():
                self.results[("whole_" + k, t, side)] = statistics.median(v)
            log("whole cost %s %dT: ns/event %s, daemons' %s, wake-ups/1000 events %s" % (
                side, t, r["tot"], r["daemon"], r["wake"]))
        self.whole_zero_loss(n, lost)
        # What does not grow with the events: the same run with 10 events
        # (tools, daemons' start and stop, the program's own start), so
        # that the note can say which part of "outside the loop" is fixed.
        fixed = {}
        for _ in range(self.p["whole_reps"]):
            for side in self.sides():
                fixed.setdefault(side, []).append(self.whole_run(side, 1, 10)[0])
        for side, v in fixed.items():
            self.results[("whole_fixed", side)] = statistics.median(v)
        self.results[("whole_n",)] = n
        log("whole cost's fixed part (10 events, CPU ns): %s" % fixed)

    # A whole-cost row whose Strata runs lost events priced a discarded
    # event, which the daemon never copies nor writes, as a recorded one
    # (the 2-thread row on the PVM guest: 2-9 % discarded in every run,
    # two writers outrunning a daemon that has no CPU of its own).  As the
    # enabled rows' zero-loss rows: the same runs again in blocking mode
    # (the writers wait for the drain), LTTng-UST beside each in its own
    # mode (blocking too where its runs lost), the median printed under the
    # row it checks, with the same target.
    def whole_zero_loss(self, n, lost):
        for (side, t), runs in sorted(lost.items()):
            em, disc = sum(e for e, _ in runs), sum(d for _, d in runs)
            if side != "strata" or not disc:
                continue
            l_block = any(d for _, d in lost.get(("lttng", t), []))
            v, lv = [], []
            for _ in range(self.p["whole_reps"]):
                for s in self.sides():
                    block = s == "strata" or l_block
                    tot = self.whole_run(s, t, n, blocking=block)[0]
                    (v if s == "strata" else lv).append(tot / (n * t))
            self.results[("whole_zero_loss", t)] = (statistics.median(v), 100.0 * disc / em,
                                                     statistics.median(lv) if lv else None)
            log("whole cost zero-loss strata %dT (blocking): ns/event %s, LTTng-UST beside it %s; "
                "the discard-mode runs lost %.1f %%" % (t, v, lv, 100.0 * disc / em))

    def whole_run(self, side, t, n, blocking=False):
        """(whole CPU ns, the program's loop CPU ns, daemons' voluntary switches, accounting)"""
        out = self.tmpdir("whole-%s-%d" % (side, t))
        args = ["loop", "ints", str(t), str(n), "0"]
        if side == "strata":
            cmd = [self.strata, "record", "-o", out, "-e", "bench:*", "--mode", "discard"] + \
                (["--blocking"] if blocking else []) + \
                ["--subbuf-size", str(subbuf_bytes(EN_SUBBUF)), "--subbuf-count", str(EN_NSUB),
                 "--", self.sbench] + args
            # wait4 by hand (Popen.wait would reap it without the rusage)
            with tempfile.TemporaryFile("w+") as errf:
                p = subprocess.Popen(cmd, env=self.env_nodaemon, stdout=subprocess.PIPE,
                                     stderr=errf, text=True)
                stdout = p.stdout.read()
                p.stdout.close()
                _, status, ru = os.wait4(p.pid, 0)
                p.returncode = os.waitstatus_to_exitcode(status)
                if p.returncode != 0:
                    errf.seek(0)
                    raise BenchError("whole: %s failed: %s" % (" ".join(cmd), errf.read()[-1000:]))
            kv = parse_kv(stdout)
            tot = (ru.ru_utime + ru.ru_stime) * 1e9
            wake = ru.ru_nvcsw
        else:
            daemons = lambda: find_procs(lambda pid, comm, ppid: comm in ("lttng-sessiond", "lttng-consumerd"))
            before_ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            d0 = {pid: (proc_cpu_ticks(pid), proc_vcsw(pid)) for pid in daemons()}
            name = self.lttng.create(out, EN_SUBBUF, EN_NSUB, blocking=blocking)
            env = dict(os.environ, LTTNG_UST_ALLOW_BLOCKING="1") if blocking else None
            try:
                stdout = run([self.lbench] + args, env=env).stdout
            finally:
                self.lttng.destroy(name)
            d1 = {pid: (proc_cpu_ticks(pid), proc_vcsw(pid)) for pid in daemons()}
            after_ru = resource.getrusage(resource.RUSAGE_CHILDREN)
            kv = parse_kv(stdout)
            tck = os.sysconf("SC_CLK_TCK")
            dticks = sum(v[0] - d0.get(pid, (0, 0))[0] for pid, v in d1.items())
            wake = sum(v[1] - d0.get(pid, (0, 0))[1] for pid, v in d1.items())
            tot = ((after_ru.ru_utime + after_ru.ru_stime) - (before_ru.ru_utime + before_ru.ru_stime)) * 1e9 + \
                dticks * 1e9 / tck
        if "emitted" not in kv:
            raise BenchError("whole %s %dT: no result" % (side, t))
        acc = account(out, int(kv["emitted"]))
        self.check("whole %s %dT%s" % (side, t, " (blocking)" if blocking else ""), acc, kv)
        shutil.rmtree(out, ignore_errors=True)
        return tot, float(kv["cpu_ns_per_event"]) * n * t, wake, acc

    # 2. disabled cost (no session; lttng: no session daemon at all); best
    # of the repetitions, sides interleaved.
    def disabled(self):
        progs = [(s, p) for s, p in (("strata", self.sbench), ("lttng", self.lbench),
                                     ("plain", self.plain)) if self.nosession_side(s)]
        vals = {}
        for _ in range(self.p["reps"] + 2):
            for w in WORKLOADS:
                for side, prog in progs:
                    kv = parse_kv(run([prog, "loop", w, "1", str(self.p["n_disabled"])],
                                      env=self.env_nodaemon).stdout)
                    vals.setdefault((w, side), []).append(float(kv["cpu_ns_per_event"]))
        for (w, side), v in vals.items():
            self.results[("disabled", w, side)] = min(v)
            log("disabled %s %s: %s ns/iteration" % (side, w, v))

    # 3. zero-loss throughput, 4 x 256 KiB per CPU (LTTng) / per lane (Strata)
    def throughput(self):
        # The machine's wake-up tail, no tracer, just before: a drain that
        # sleeps between packets wakes this late at times, and a ring whose
        # free room lasts less than that loses events whatever the drain
        # does (CHANGELOG.md, "the drain's first lap, and the
        # host's wake-up tail").
        kv = parse_kv(run([self.plain, "wake", "2000"], check=False).stdout)  # context only
        if "late_max_ms" in kv:
            self.results[("wake",)] = kv
        for side in self.sides():
            def trial(rate):
                kv, acc = self.traced(side, ["rate", "ints", str(int(rate)), str(self.p["rate_ms"])],
                                      "256K", 4, "tp-%s" % side)
                self.check("throughput %s rate %d" % (side, rate), acc)
                if acc.get("bytes_per_event"):
                    self.results.setdefault(("bytes", "ints", side), acc["bytes_per_event"])
                return float(kv["achieved_rate"]), acc["lossless"]
            achieved, ok = trial(0)
            self.results[("tput_full", side)] = achieved
            if ok:
                self.results[("tput", side)] = (achieved, ">=")
                log("throughput %s: unthrottled %.0f ev/s lossless" % (side, achieved))
                continue
            hi, lo, guess = achieved, None, achieved / 2
            for _ in range(self.p["steps"]):
                got, ok = trial(guess)
                if ok:
                    lo = got
                    guess = (guess + hi) / 2
                else:
                    hi = guess
                    guess = (lo + hi) / 2 if lo else guess / 2
            # Confirm: the best lossless rate must be lossless twice (the
            # machine's load moves); else step down by 20 % (halving was too
            # coarse to tell two consumers apart).
            for _ in range(3 if lo else 0):
                got, ok = trial(lo)
                if ok:
                    break
                hi, lo = lo, lo * 0.8
            else:
                lo = None if not ok else lo
            # No lossless rate found: the figure is below the lowest rate tried.
            self.results[("tput", side)] = (lo, "") if lo else (hi, "<")
            log("throughput %s: zero-loss %s ev/s" % (side, lo))
        self.throughput_blocking()

    # 3b. the same buffers in each side's blocking mode: the writer waits
    # for room instead of dropping, so the rate it reaches unthrottled,
    # with nothing lost, is what the pipeline sustains losslessly.
    def throughput_blocking(self):
        for _ in range(self.p["lat_reps"]):
            for side in self.sides():
                kv, acc = self.traced(side, ["rate", "ints", "0", str(self.p["rate_ms"])], "256K", 4,
                                      "tpb-%s" % side, blocking=True)
                self.check("blocking throughput %s" % side, acc, kv)
                rate = float(kv["achieved_rate"])
                self.results.setdefault(("tput_block_reps", side), []).append(rate)
                if not acc["lossless"]:
                    self.results[("tput_block_lost", side)] = True
                log("throughput %s, blocking: %.0f ev/s, lossless %s" % (side, rate, acc["lossless"]))
        for side in self.sides():
            reps = self.results.get(("tput_block_reps", side))
            if reps:
                self.results[("tput_block", side)] = statistics.median(reps)

    # 4. enablement latency on a running process
    def latency(self):
        if self.have_lttng:
            acks, firsts = [], []
            for _ in range(self.p["lat_reps"]):
                out = self.tmpdir("lat-lttng")
                name = self.lttng.create(out, "1M", 8, start=False)
                proc = subprocess.Popen([self.lbench, "tick", "20", "1500"],
                                        stdout=subprocess.PIPE, text=True)
                try:
                    if proc.stdout.readline().strip() != "ready=1":
                        raise BenchError("tick program did not start")
                    t0 = time.monotonic_ns()
                    run(["lttng", "--no-sessiond", "start", name])
                    t1 = time.monotonic_ns()
                    proc.stdout.read()
                    proc.wait(timeout=30)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()
                    self.lttng.destroy(name)
                first = first_tick(out)
                if first is None:
                    raise BenchError("lttng latency: no tick recorded")
                acks.append((t1 - t0) / 1e6)
                firsts.append((first - t0) / 1e6)
                shutil.rmtree(out, ignore_errors=True)
            self.results[("lat_ack", "lttng")] = statistics.median(acks)
            self.results[("lat_first", "lttng")] = statistics.median(firsts)
            log("latency lttng: ack %s ms, first event %s ms" % (acks, firsts))
        if self.have_strata:
            if not os.access(self.sasync, os.X_OK):
                self.notes.append("Strata enablement latency: n/a (strata-bench-async not built: "
                                  "needs tp-async, issue 3)")
            else:
                acks, firsts = [], []
                for _ in range(self.p["lat_reps"]):
                    ack, first = self.strata_latency()
                    acks.append(ack)
                    firsts.append(first)
                self.results[("lat_ack", "strata")] = statistics.median(acks)
                self.results[("lat_first", "strata")] = statistics.median(firsts)
                log("latency strata: ack %s ms, first event %s ms" % (acks, firsts))

    def strata_latency(self):
        """A private strata-consumerd, a session enabled but not started, the
        tick program (tp-async) running; then `strata start --wait`, which
        answers once every signalled process acknowledged (issue 3)."""
        out = self.tmpdir("lat-strata")
        env = dict(self.env_nodaemon)
        env["STRATA_CONSUMERD_SOCKET"] = os.path.join(out, "cd.sock")
        consumerd = os.path.join(os.path.dirname(os.path.dirname(self.strata)), "consumerd",
                                 "strata-consumerd")
        logf = open(os.path.join(self.work, "strata-consumerd.log"), "a")
        daemon = subprocess.Popen([consumerd], env=env, stdout=logf, stderr=logf)
        proc = None
        try:
            deadline = time.monotonic() + 10
            while run([self.strata, "status"], env=env, check=False).returncode != 0:
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise BenchError("strata-consumerd did not answer")
                time.sleep(0.02)  # polling a condition, with a deadline
            run([self.strata, "create", "lat", "-o", os.path.join(out, "trace")], env=env)
            run([self.strata, "enable-event", "lat", "bench:*"], env=env)
            proc = subprocess.Popen([self.sasync, "tick", "20", "1500"], env=env,
                                    stdout=subprocess.PIPE, text=True)
            if proc.stdout.readline().strip() != "ready=1":
                raise BenchError("tick program did not start")
            # `strata start` waited for the acknowledgements until protocol
            # 2; since then `--wait` asks for them.
            h = run([self.strata, "start", "--help"], env=env, check=False)
            wait = ["--wait"] if "--wait" in h.stdout + h.stderr else []
            t0 = time.monotonic_ns()
            st = run([self.strata, "start", "lat"] + wait, env=env)
            t1 = time.monotonic_ns()
            log("  strata start: " + (st.stdout + st.stderr).strip().replace("\n", " | "))
            proc.stdout.read()
            proc.wait(timeout=30)
            run([self.strata, "stop", "lat"], env=env)
            run([self.strata, "destroy", "lat"], env=env)
        finally:
            for p in (proc, daemon):
                if p is not None and p.poll() is None:
                    p.terminate()
                    try:
                        p.wait(timeout=20)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        p.wait()
        first = first_tick(os.path.join(out, "trace"))
        if first is None:
            raise BenchError("strata latency: no tick recorded")
        shutil.rmtree(out, ignore_errors=True)
        return (t1 - t0) / 1e6, (first - t0) / 1e6

    # 5. start-up cost: fork/exec of `noop`, instrumented vs plain, the
    # programs interleaved in one loop; overhead = difference of medians.
    def spawn(self, progs, env, wrap=()):
        kv = parse_kv(run(list(wrap) + [self.plain, "spawn", str(self.p["spawn"])] + progs,
                          env=env).stdout)
        return [float(kv["median_us_%d" % i]) for i in range(len(progs))]

    def spawn_daemon_cpu(self, progs, env, wrap, daemons):
        """spawn(), plus the CPU time (ms) the daemons used per start of
        the last program while the spawn loop ran: daemons() names their
        pids (re-asked until it does).  /proc/PID/stat (utime + stime, every
        thread's, the dead ones' too) is read every 10 ms: from when the
        loop's process appears to when it is gone, so the session's set-up
        and stop are not counted (+-10 ms of the loop's ~1 s)."""
        cmd = list(wrap) + [self.plain, "spawn", str(self.p["spawn"])] + progs
        p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        tck = os.sysconf("SC_CLK_TCK")
        pids, first, last, loop = [], None, None, None
        while p.poll() is None:
            if not pids:
                pids = daemons(p.pid)
            if loop is None:
                loop = find_procs(lambda pid, comm, ppid: comm.startswith("strata-bench-pl") and
                                  pid_in_tree(pid, p.pid))
                loop = loop[0] if loop else None
            if pids and loop is not None:
                alive = os.path.exists("/proc/%d" % loop)
                t = sum(proc_cpu_ticks(x) for x in pids)
                if first is None:
                    first = t
                if not alive:
                    break
                last = t
            time.sleep(0.01)
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise BenchError("%s failed (%d): %s" % (" ".join(cmd), p.returncode, err.strip()[-2000:]))
        kv = parse_kv(out)
        medians = [float(kv["median_us_%d" % i]) for i in range(len(progs))]
        cpu = None
        if first is not None and last is not None:
            cpu = (last - first) * 1000.0 / tck / self.p["spawn"]
        return medians, cpu

    # the building blocks of a fast path on this machine (CPU ns each)
    # and the clock read that stamps each side's events: Strata's as its
    # runtime reads it under `strata record` (a page, or clock_gettime);
    # LTTng-UST's is clock_gettime(CLOCK_MONOTONIC) (its default clock).
    def costs(self):
        c = parse_kv(run([self.plain, "costs"]).stdout)
        self.results[("costs",)] = c
        if "clock_gettime_ns" in c:
            self.results[("clock", "lttng")] = float(c["clock_gettime_ns"])
        if self.have_strata:
            out = self.tmpdir("clock")
            kv = parse_kv(run([self.strata, "record", "-o", out, "--", self.sbench, "clock",
                               str(2000000 if self.smoke else 20000000)],
                              env=self.env_nodaemon).stdout)
            shutil.rmtree(out, ignore_errors=True)
            if "strata_clock_ns" in kv:
                self.results[("clock", "strata")] = float(kv["strata_clock_ns"])
                self.results[("clock_id", "strata")] = int(kv.get("clock_id", -1))
            # the page read part by part (bench_main.c, run_clock_parts)
            parts = {k[len("part_"):-len("_ns")]: float(v) for k, v in kv.items()
                     if k.startswith("part_") and k.endswith("_ns")}
            if parts and "seqcount_over_fenced_ns" in kv:
                # the median of the rounds' paired differences (run_clock_parts)
                parts["over_fenced"] = float(kv["seqcount_over_fenced_ns"])
            if parts:
                self.results[("clock_parts",)] = parts
                # the ordered TSC read the events take (older builds: lfence)
                self.results[("clock_ordered",)] = kv.get("clock_ordered_tsc", "lfence_rdtsc")

    def startup_nodaemon(self):
        progs = [self.plain]
        if os.access(self.plaincxx, os.X_OK):
            progs.append(self.plaincxx)
        sides = [s for s in ("strata", "lttng") if self.nosession_side(s)]
        progs += [self.sbench if s == "strata" else self.lbench for s in sides]
        t = self.spawn(progs, self.env_nodaemon)
        self.results[("start_base",)] = t[0]
        if os.access(self.plaincxx, os.X_OK):
            # libstrata is C++: how much is only loading the C++ runtime
            self.results[("start_cxx",)] = t[1] - t[0]
        for s, v in zip(sides, t[-len(sides):] if sides else []):
            self.results[("start_nod", s)] = v - t[0]
        log("start-up, no daemon (median us): %s" % dict(zip(progs, t)))
        if self.have_strata:
            # The floor of any join with a daemon: the process opens its
            # own buffer, arms its tracepoints and records, with no round
            # trip at all (early tracing: STRATA_EARLY, no daemon).  What
            # a join costs beyond this is the control protocol's.
            env = dict(self.env_nodaemon)
            env["STRATA_EARLY"] = "bench:*"
            e = self.spawn([self.plain, self.sbench], env)
            self.results[("start_own",)] = e[1] - e[0]
            log("start-up, own buffer, no daemon (median us): %s" % e)

    def startup_daemon(self):
        # Beside each wall-clock figure, what the side's daemons spent per
        # process start (docs/benchmarks.md): on a 2-CPU machine that CPU
        # is taken beside the processes being started.
        if self.have_lttng:
            out = self.tmpdir("st-lttng")
            name = self.lttng.create(out, None, None)
            try:
                t, cpu = self.spawn_daemon_cpu(
                    [self.plain, self.lbench], None, (),
                    lambda _: find_procs(lambda pid, comm, ppid: comm in ("lttng-sessiond", "lttng-consumerd")))
                # A start that emits one event: where a tracer that makes
                # its buffer at the first event pays for it.
                t1 = self.spawn([self.plain, self.lbench], self.env_one(None))
            finally:
                self.lttng.destroy(name)
            self.results[("start_d", "lttng")] = t[1] - t[0]
            self.results[("start_d1", "lttng")] = t1[1] - t1[0]
            if cpu is not None:
                self.results[("start_dcpu", "lttng")] = cpu
            log("start-up, lttng session (median us): %s; daemons' CPU per start %s ms; one event %s" %
                (t, cpu, t1))
            shutil.rmtree(out, ignore_errors=True)
        if self.have_strata:
            out = self.tmpdir("st-strata")
            t, cpu = self.spawn_daemon_cpu(
                [self.plain, self.sbench], self.env_nodaemon,
                (self.strata, "record", "-o", out, "-e", "bench:*", "--"),
                lambda root: find_procs(lambda pid, comm, ppid: comm.startswith("strata-consume") and
                                        pid_in_tree(pid, root)))
            self.results[("start_d", "strata")] = t[1] - t[0]
            if cpu is not None:
                self.results[("start_dcpu", "strata")] = cpu
            shutil.rmtree(out, ignore_errors=True)
            t1 = self.spawn([self.plain, self.sbench], self.env_one(self.env_nodaemon),
                            (self.strata, "record", "-o", out, "-e", "bench:*", "--"))
            self.results[("start_d1", "strata")] = t1[1] - t1[0]
            log("start-up, strata record (median us): %s; daemon's CPU per start %s ms; one event %s" %
                (t, cpu, t1))
            shutil.rmtree(out, ignore_errors=True)
            # record's session holds CMD's tree only: each process joins by a
            # round trip and the daemon reads its parent chain once
            # (docs/control-protocol.md, "Process-tree sessions"); with
            # --all-processes it joins from the grant table.  The difference
            # is the tree's cost per process start.
            ta, cpua = self.spawn_daemon_cpu(
                [self.plain, self.sbench], self.env_nodaemon,
                (self.strata, "record", "--all-processes", "-o", out, "-e", "bench:*", "--"),
                lambda root: find_procs(lambda pid, comm, ppid: comm.startswith("strata-consume") and
                                        pid_in_tree(pid, root)))
            self.results[("start_d_all", "strata")] = ta[1] - ta[0]
            if cpua is not None:
                self.results[("start_dcpu_all", "strata")] = cpua
            log("start-up, strata record --all-processes (median us): %s; daemon's CPU per start %s ms" %
                (ta, cpua))
            shutil.rmtree(out, ignore_errors=True)

    @staticmethod
    def env_one(env):
        e = dict(os.environ if env is None else env)
        e["BENCH_SPAWN_ARG"] = "one"
        return e

    # 6. buffer memory while tracing, default settings
    def memory(self):
        for t in self.p["mem_threads"]:
            args = ["hold", str(t), str(self.p["mem_events"])]
            if self.have_lttng:
                out = self.tmpdir("mem-lttng")
                name = self.lttng.create(out, None, None)
                try:
                    self.results[("mem", t, "lttng")] = hold_and_measure([self.lbench] + args, None)
                finally:
                    self.lttng.destroy(name)
                shutil.rmtree(out, ignore_errors=True)
            if self.have_strata:
                out = self.tmpdir("mem-strata")
                cmd = [self.strata, "record", "-o", out, "-e", "bench:*", "--", self.sbench] + args
                self.results[("mem", t, "strata")] = hold_and_measure(cmd, self.env_nodaemon)
                shutil.rmtree(out, ignore_errors=True)

    # instructions per event (callgrind: stable on a noisy machine)
    def callgrind(self):
        n_en, n_dis = 100000, 1000000
        for side in self.sides():
            prog = self.sbench if side == "strata" else self.lbench
            for w in WORKLOADS:
                self.results[("ir_dis", w, side)] = self.ir(side, prog, w, n_dis, traced=False) / n_dis
                self.results[("ir_en", w, side)] = self.ir(side, prog, w, n_en, traced=True) / n_en
                log("callgrind %s %s: %.1f Ir/event enabled, %.2f disabled" % (
                    side, w, self.results[("ir_en", w, side)], self.results[("ir_dis", w, side)]))
        self.callgrind_burst()

    # Short-lived threads in instructions, where the CPU times of
    # short_threads are noise (a thread's start costs tens of us on a VM and
    # moves by more than a tracer adds): the whole program's instructions of
    # `burst N 5 2`, traced minus untraced, for two N; the tracer's share a
    # thread is the slope, so that what a process pays once (its join, its
    # buffer, the tracer's start) cancels out.
    def callgrind_burst(self):
        lo, hi = (100, 300) if self.smoke else (1000, 3000)
        for side in self.sides():
            prog = self.sbench if side == "strata" else self.lbench
            d = {}
            for n in (lo, hi):
                args = ["burst", str(n), "5", "2"]
                d[n] = (self.ir_args(side, prog, args, None, traced=True, events=5 * n)
                        - self.ir_args(side, prog, args, None, traced=False))
            self.results[("ir_burst", side)] = (d[hi] - d[lo]) / (hi - lo)
            self.results[("ir_burst_n",)] = (lo, hi)
            log("callgrind %s burst: traced minus untraced %s Ir; %.0f Ir a thread" % (
                side, d, self.results[("ir_burst", side)]))

    def ir(self, side, prog, w, n, traced):
        return self.ir_args(side, prog, ["loop", w, "1", str(n)], "bench_loop_" + w, traced, n, w)

    def ir_args(self, side, prog, args, toggle, traced, events=0, label=None):
        """callgrind's instruction total of PROG ARGS (inside `toggle`
        only, if given), under a session of `side` (traced: the trace must
        hold `events` events) or none."""
        cg = os.path.join(self.work, "callgrind.out")
        vg = (["valgrind", "--tool=callgrind", "--callgrind-out-file=" + cg]
              + (["--toggle-collect=" + toggle] if toggle else []) + [prog] + args)
        n, w = events, label or " ".join(args)
        if not traced:
            run(vg, env=self.env_nodaemon)
        elif side == "lttng":
            out = self.tmpdir("cg")
            name = self.lttng.create(out, "1M", 8)
            try:
                run(vg)
            finally:
                self.lttng.destroy(name)
            self.check("callgrind lttng %s" % w, account(out, n))
        else:
            out = self.tmpdir("cg")
            run([self.strata, "record", "-o", out, "-e", "bench:*", "--subbuf-size", str(1 << 20),
                 "--subbuf-count", "8", "--"] + vg, env=self.env_nodaemon)
            self.check("callgrind strata %s" % w, account(out, n))
        with open(cg) as f:
            m = re.search(r"^(?:totals|summary): (\d+)", f.read(), re.M)
        if not m:
            raise BenchError("no callgrind totals")
        return int(m.group(1))

    # 7. the pthread preload on lock-heavy programs (docs/pthread.md,
    # "Compact records"): libstrata-pthread.so under `strata record` against
    # liblttng-ust-pthread-wrapper.so in an LTTng session, same buffers
    # (8 x 1 MiB), and the program untraced.  Bytes per lock+unlock pair
    # are the traces' content bytes (packet headers included) over the
    # unlocks each trace recorded: deterministic, unlike the times.
    def preload_workloads(self):
        build = os.path.dirname(os.path.dirname(self.plain))
        pt = os.path.join(build, "tests", "pthread")
        n = 10000 if self.smoke else 200000
        # name: (command, stdin, whether the command prints its own time).
        # The lock loop's 2 M pairs and the contended workload's 4 x 50,000
        # holds take 12 ms and 0.35 s untraced: at 200,000 and 4 x 10,000
        # (0.001 and 0.07 s) the tracers' added times were 0.01 and 0.03 s,
        # under the few ms a run's start moves on these machines.
        w = {"lockloop": ([os.path.join(pt, "pt_lockloop"), str(n * 10), "1"], None, False),
             "contend": ([os.path.join(pt, "pt_workload"), "contend", "/dev/null", "4",
                          str(n // 4), "1"], None, False)}
        if shutil.which("sqlite3"):
            sql = os.path.join(self.work, "preload.sql")
            with open(sql, "w") as f:
                f.write(sqlite_script(n * 5))
            w["sqlite3"] = ([shutil.which("sqlite3"), os.path.join(self.work, "preload.db")], sql, False)
        else:
            self.notes.append("sqlite3 not installed (scripts/deps.sh): no sqlite3 preload rows")
        mc = shutil.which("memcached") or ("/usr/bin/memcached" if os.access("/usr/bin/memcached", os.X_OK) else None)
        if mc and shutil.which("memcslap"):
            w["memcached"] = ([sys.executable, "-c", MEMCACHED_DRIVER, mc, shutil.which("memcslap"),
                               os.path.join(self.work, "memcached.sock"), str(n // 10)], None, True)
        else:
            self.notes.append("memcached or memcslap not installed (scripts/deps.sh: memcached, "
                              "libmemcached-tools): no memcached preload rows")
        return w

    def preload(self):
        build = os.path.dirname(os.path.dirname(self.plain))
        if sanitized_build(build):  # bench.smoke in the ASan tree
            self.notes.append("a sanitizer build: no preload rows")
            return
        lib = os.path.join(build, "preload", "libstrata-pthread.so")
        lwrap = "/usr/lib/x86_64-linux-gnu/liblttng-ust-pthread-wrapper.so"
        have = self.have_strata and os.access(lib, os.R_OK)
        sides = ["plain"] + (["strata"] + list(PRELOAD_COUNT_SIDES) if have else []) + \
            (["lttng"] if self.have_lttng and os.access(lwrap, os.R_OK) else [])
        for name, (cmd, stdin, selftimed) in self.preload_workloads().items():
            walls = {}
            # First one untimed run per traced side for the bytes and the
            # loss (the program alone in the trace), then the timed runs:
            # PRELOAD_TIMER around the program inside the session, so that
            # neither strata record's daemon start and flush nor LTTng's
            # session set-up and teardown are timed (the timer's own few
            # lock operations are, on both sides).
            cpus = {}
            for side in sides[1:]:
                out = self.preload_run(side, name, cmd, stdin, lwrap, False, selftimed)[1]
                disc, content = walk_packets(out)
                pairs = count_unlocks(out, side)
                self.results[("pre_bytes", name, side)] = content / pairs if pairs else None
                self.results[("pre_lost", name, side)] = disc
                log("  preload %s %s: %d bytes, %d lock+unlock pairs, %d lost" % (side, name, content, pairs, disc))
                shutil.rmtree(out, ignore_errors=True)
            # A server measured by its CPU (selftimed: memcached) gets
            # 2 x reps - 1 repetitions: its system CPU moves by +-0.2 s a
            # run traced or not (the kernel's socket work), as large as
            # the tracer's whole share: with 5 repetitions the last seven
            # results files (across commits) read 0.19 to 0.30, LTTng-UST's
            # own added CPU 0.56 to 1.3 s.  So does sqlite3, whose wall
            # (its COMMIT's fsync on the shared disk) moves by 0.3 s a run
            # untraced, as much as Strata adds: two full runs of the same
            # code an hour apart on the kvm-clock kind read its added time
            # 0.57 and 0.07 s with 5 repetitions (its counting modes, which
            # do more, 0.10-0.11 in the first).
            noisy = selftimed or name == "sqlite3"
            reps = 2 * self.p["reps"] - 1 if noisy else self.p["reps"]
            for _ in range(reps):
                for side in sides:
                    wall, out, cpu = self.preload_run(side, name, cmd, stdin, lwrap, True, selftimed)
                    walls.setdefault(side, []).append(wall)
                    for k, x in cpu.items():
                        cpus.setdefault(k, {}).setdefault(side, []).append(x)
                    shutil.rmtree(out, ignore_errors=True)
            self.preload_medians(name, "pre_wall", walls)
            for k, v in cpus.items():
                self.preload_medians(name, k, v)
            cpus = cpus.get("pre_cpu", {})
            if cpus:
                log("  preload %s server CPU (median s): %s" % (name, {k: statistics.median(v) for k, v in cpus.items()}))
            log("  preload %s wall (median s): %s" % (name, {k: statistics.median(v) for k, v in walls.items()}))

    def preload_medians(self, name, key, runs):
        """runs: side -> figures of the repetitions (sides interleaved in
        each).  (key, name, side): their median; (key + "_add", ...): the
        median of each repetition's figure less the untraced one of the
        same repetition, steadier than a difference of medians when the
        machine drifts between repetitions."""
        for side, v in runs.items():
            self.results[(key, name, side)] = statistics.median(v)
            add = paired_median(v, runs.get("plain")) if side != "plain" else None
            if add is not None:
                self.results[(key + "_add", name, side)] = add

    def preload_run(self, side, name, cmd, stdin, lwrap, timed, selftimed=False):
        """One run of a preload workload: (wall s or None, trace dir, the
        server's CPU figures where the workload prints them: pre_cpu (s,
        while driven), pre_ucpu and pre_scpu (user and system s, its life))."""
        db = os.path.join(self.work, "preload.db")
        if os.path.exists(db):
            os.unlink(db)
        out = self.tmpdir("pre-%s-%s" % (side, name))
        env, wrap, lname = dict(self.env_nodaemon), [], None
        if side.startswith("strata"):
            wrap = [self.strata, "record", "-o", out, "--preload", "pthread", "--subbuf-size", str(1 << 20),
                    "--subbuf-count", "8", "--"]
            env.pop("STRATA_PTHREAD_COUNT", None)  # the "strata" side: the default
            if side in PRELOAD_COUNT_SIDES:
                env["STRATA_PTHREAD_COUNT"] = PRELOAD_COUNT_SIDES[side]
        elif side == "lttng":
            env = dict(os.environ, LD_PRELOAD=lwrap)
            lname = self.lttng.create(out, "1M", 8, events="lttng_ust_pthread:*")
        fin = open(stdin) if stdin else subprocess.DEVNULL
        try:
            timer = [sys.executable, "-c", PRELOAD_TIMER] if timed and not selftimed else []
            p = subprocess.run(wrap + timer + cmd, env=env,
                               stdin=fin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               timeout=600)
        finally:
            if stdin:
                fin.close()
            if lname:
                self.lttng.destroy(lname)
        m = re.search(r"^preload_wall_s=([0-9.]+)$", p.stderr, re.M)
        if p.returncode != 0 or (timed and not m):
            raise BenchError("preload %s %s failed: %s" % (side, name, p.stderr.strip()[-500:]))
        cpu = {}
        for k in ("cpu", "ucpu", "scpu"):
            c = re.search(r"^preload_%s_s=([0-9.]+)$" % k, p.stderr, re.M)
            if c:
                cpu["pre_" + k] = float(c.group(1))
        return (float(m.group(1)) if m else None), out, cpu

    # 8. many live processes (issue 38): N processes of `hold 1 100` (one
    # thread, 100 `ints` events, then alive until stdin's EOF) in one
    # session; once all are ready, the daemons' threads (/proc/PID/status
    # Threads), resident memory (VmRSS) and the CPU they used from the first
    # spawn to the last one ready (utime + stime).  Strata: a private
    # strata-consumerd; LTTng: lttng-sessiond + lttng-consumerd (per-user
    # buffers, its default).  One stdin pipe and one stdout pipe are shared
    # by all the processes (EOF on the first ends every hold).
    def processes(self):
        counts = (10,) if self.smoke else (10, 100, 1000)
        # STRATA_BENCH_PROCS=10,100,1000,10000: other counts (10,000 takes
        # minutes and a few GB: run by hand, docs/benchmarks.md).
        if os.environ.get("STRATA_BENCH_PROCS"):
            counts = tuple(int(x) for x in os.environ["STRATA_BENCH_PROCS"].split(","))
        consumerd = os.path.join(os.path.dirname(os.path.dirname(self.plain)), "consumerd", "strata-consumerd")
        for n in counts:
            for side in self.sides():
                # An LTTng-UST process runs two listener threads beside its
                # own: 3 tasks each, and a spawn beyond kernel.pid_max fails
                # (EAGAIN) for everyone on the machine.
                with open("/proc/sys/kernel/pid_max") as f:
                    pid_max = int(f.read())
                if side == "lttng" and 3 * n > pid_max * 3 // 4:
                    self.notes.append("%d processes lttng: not run, 3 tasks each exceed 3/4 of "
                                      "kernel.pid_max (%d)" % (n, pid_max))
                    continue
                out = self.tmpdir("procs-%s-%d" % (side, n))
                env, d, lname = dict(self.env_nodaemon), None, None
                if side == "strata":
                    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(self.work, "procs.sock")
                    r, w = os.pipe()
                    d = subprocess.Popen([consumerd, "--socket", env["STRATA_CONSUMERD_SOCKET"], "--ready-fd",
                                          str(w), "-q"], env=env, pass_fds=(w,))
                    os.close(w)
                    with os.fdopen(r) as rf:
                        if rf.readline().strip() != "ready":
                            raise BenchError("strata-consumerd did not get ready")
                    for a in (["create", "s", "-o", out], ["enable-event", "s", "bench:*"], ["start", "s"]):
                        run([self.strata] + a, env=env)
                    daemons = lambda: [d.pid]  # noqa: E731
                    prog = self.sbench
                    ctl = [[self.strata, "status"], [self.strata, "list"]]
                else:
                    lname = self.lttng.create(out, None, None)
                    daemons = lambda: find_procs(  # noqa: E731
                        lambda pid, comm, ppid: comm in ("lttng-sessiond", "lttng-consumerd"))
                    prog = self.lbench
                    ctl = [["lttng", "--no-sessiond", "list", lname], ["lttng", "--no-sessiond", "list", "-u"]]
                try:
                    res = self.hold_many(prog, n, env, daemons, ctl, IDLE_BUFFER_MAPPING[side])
                finally:
                    if side == "strata":
                        run([self.strata, "stop", "s"], env=env, check=False)
                        run([self.strata, "destroy", "s"], env=env, check=False)
                        d.terminate()
                        d.wait(timeout=60)
                    else:
                        self.lttng.destroy(lname)
                acc = account(out, n * 100)
                if side == "strata" or acc["consistent"]:
                    self.check("%d processes %s" % (n, side), acc)
                else:  # the figure of the row, not a failure of the run
                    self.notes.append("%d processes lttng: emitted %d, recorded %s, discarded %d: the "
                                      "rest lost, counted nowhere" % (n, n * 100, acc["recorded"],
                                                                      acc["discarded"]))
                res["lost"] = acc["discarded"] + max(0, n * 100 - acc["recorded"] - acc["discarded"]) \
                    if acc["recorded"] is not None else None
                self.results[("procs", n, side)] = res
                log("  %d processes, %s: %s" % (n, side, res))
                shutil.rmtree(out, ignore_errors=True)

    @staticmethod
    def hold_many(prog, n, env, daemons, ctl, buf_re):
        tck = os.sysconf("SC_CLK_TCK")
        pids = daemons()
        cpu0 = sum(proc_cpu_ticks(x) for x in pids)
        rin, win = os.pipe()
        rout, wout = os.pipe()
        procs = []
        try:
            for _ in range(n):
                procs.append(subprocess.Popen([prog, "hold", "1", "100"], env=env, stdin=rin, stdout=wout,
                                              stderr=subprocess.DEVNULL))
            os.close(wout)
            wout = -1
            ready, buf = 0, b""
            deadline = time.monotonic() + 300
            while ready < n:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([rout], [], [], left)[0]:
                    break
                chunk = os.read(rout, 65536)
                if not chunk:
                    break
                buf += chunk
                ready = buf.count(b"pid=")
            if ready < n:
                raise BenchError("%d of %d processes got ready" % (ready, n))
            pids = daemons()
            res = {"threads": sum(proc_status(x, "Threads") for x in pids),
                   "rss_mib": sum(proc_status(x, "VmRSS") for x in pids) / 1024.0,
                   "cpu_ms": (sum(proc_cpu_ticks(x) for x in pids) - cpu0) * 1000.0 / tck}
            # The buffers' memory per process, every process idle after its
            # 100 events: the Pss of the buffer mappings summed over the
            # processes and the daemons counts each resident page once,
            # whoever maps it (LTTng's per-user buffers are shared by all).
            pss = 0
            for pid in [p.pid for p in procs] + pids:
                pss += sum(v[1] for k, v in smaps_shared(pid).items() if buf_re.search(k))
            res["buf_kib_per_proc"] = pss / float(n)
            # Every process alive and idle: the daemons' CPU over 2 s (a
            # measurement interval), then the time of the session
            # commands (best of 3; Strata: status, list; LTTng: list of
            # the session, list -u).
            c0, t0 = sum(proc_cpu_ticks(x) for x in pids), time.monotonic()
            time.sleep(2.0)
            res["idle_cpu_pct"] = (sum(proc_cpu_ticks(x) for x in pids) - c0) * 100.0 / tck / (
                time.monotonic() - t0)
            for key, cmd in zip(("status_ms", "list_ms"), ctl):
                best = None
                for _ in range(3):
                    t1 = time.monotonic()
                    run(cmd, env=env)
                    best = min(best or 1e9, (time.monotonic() - t1) * 1000.0)
                res[key] = best
        finally:
            # Their last words (the hold's results) go nowhere: reading
            # stops here, and a process that writes then takes SIGPIPE.
            os.close(rout)
            rout = -1
            os.close(win)
            for p in procs:
                try:
                    p.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            os.close(rin)
            if wout >= 0:
                os.close(wout)
        return res

    def jvm(self):
        """Java API beside LTTng's Java interface, and the JVM agent's cost
        (bench/jvm/jvm_bench.py, docs/jvm.md).  Optional: only with --only jvm."""
        java = shutil.which("java")
        build = os.path.dirname(os.path.dirname(self.plain))
        jar = os.path.join(build, "jvm", "strata.jar")
        agent = os.path.join(build, "jvm", "libstrata-jvm.so")
        if not java or not os.path.exists(jar) or not os.path.exists(agent) or not self.have_strata:
            raise BenchError("jvm: java, strata.jar, libstrata-jvm.so or strata not found")
        here = os.path.dirname(os.path.abspath(__file__))
        n = 200000 if self.smoke else 2000000
        p = run(["/usr/bin/python3", os.path.join(here, "jvm", "jvm_bench.py"), self.strata,
                 os.path.realpath(java), jar, agent, self.tmpdir("jvm"), str(n)], timeout=1200)
        for line in p.stdout.splitlines():
            m = re.match(r"(.+?)\s+([0-9.]+|nan) ns/op$", line)
            if m:
                self.results[("jvm", m.group(1).strip())] = float(m.group(2))
                log("  " + line)

    def stop_live(self):
        """How long `strata stop` takes with 1,000 live writers (100 with
        --smoke): bench/stop_live.py, its parts from the daemon's log.  It
        drives the load average to hundreds for about a minute: optional,
        only with --only stop_live, on a machine nobody else is using."""
        if not self.have_strata:
            raise BenchError("stop_live: strata not built")
        build = os.path.dirname(os.path.dirname(self.plain))
        n = 100 if self.smoke else 1000
        here = os.path.dirname(os.path.abspath(__file__))
        p = run(["/usr/bin/python3", os.path.join(here, "stop_live.py"), build, str(n)], timeout=1800)
        m = re.search(r"stop with (\d+) live writers: (\d+) ms \(before the daemon's stop (\d+|n/a) ms, "
                      r"its stop (\d+|n/a) ms, after its answer (\d+|n/a) ms; load average ([0-9.]+)", p.stdout)
        if not m:
            raise BenchError("stop_live: no figure in %r" % p.stdout[-300:])
        part = lambda g: None if g == "n/a" else int(g)  # noqa: E731 (a stamp missing from the log)
        self.results[("stop_live",)] = {
            "writers": int(m.group(1)), "total_ms": int(m.group(2)), "before_ms": part(m.group(3)),
            "daemon_ms": part(m.group(4)), "after_ms": part(m.group(5)), "load": float(m.group(6))}
        log("  " + p.stdout.strip())

    def reading(self):
        """Reading a trace back (issue 49): `strata view > /dev/null` (Strata's
        own reader) against babeltrace2 printing the same trace, CPU time of
        each (user + system, from wait4), and each reader's peak RSS; the
        same for `strata check`.  One writer of `ints` events recorded by
        `strata record` (the issue's 10 M events, 153 MB)."""
        if not self.have_strata:
            return
        n = 200000 if self.smoke else 10000000
        out = self.tmpdir("reading")
        run([self.strata, "record", "-o", out, "--", self.sbench, "loop", "ints", "1", str(n)],
            env=self.env_nodaemon, timeout=1200)
        recorded = count_events(out)
        r = self.results
        r[("read_events",)] = recorded

        def measure(cmd, env=None):
            # /usr/bin/time's %M: the reader's own peak RSS (a child forked
            # from this Python would count Python's pages before its exec).
            best = None
            tf = os.path.join(self.work, "read-time")
            for _ in range(1 if self.smoke else 3):
                with open(os.devnull, "wb") as null:
                    p = subprocess.Popen(["/usr/bin/time", "-o", tf, "-f", "%U %S %M"] + cmd, stdout=null,
                                         stderr=subprocess.DEVNULL, env=dict(os.environ, **(env or {})))
                    p.wait()
                if p.returncode != 0:
                    raise BenchError("%s exited %d" % (" ".join(cmd), p.returncode))
                with open(tf) as f:
                    u, sy, m = f.read().split()[-3:]
                cpu = float(u) + float(sy)
                if best is None or cpu < best[0]:
                    best = (cpu, int(m))
            return best

        for key, cmd, env in (("view", [self.strata, "view", out], None),
                              ("view_bt2", [self.strata, "view", out], {"STRATA_READER": "babeltrace2"}),
                              ("babeltrace2", ["babeltrace2", out], None),
                              ("check", [self.strata, "check", out], None)):
            cpu, rss = measure(cmd, env)
            r[("read_rate", key)] = recorded / cpu if cpu else None
            r[("read_rss", key)] = rss / 1024.0
            log("  %s: %d events in %.2f s CPU (%.1f M events/s), peak RSS %.1f MiB" % (
                key, recorded, cpu, recorded / cpu / 1e6 if cpu else 0, rss / 1024.0))

        # issue 50: a window of 1/60 of the trace's time span touches only
        # the packets it meets: `strata query --stats`'s packet bytes read,
        # against a full scan's.
        def query_bytes(sqltext):
            q = run([self.strata, "query", "--csv", "--stats", out, sqltext])
            m = re.search(r"(\d+) packet bytes read", q.stderr)
            if not m:
                raise BenchError("strata query --stats said no bytes: " + q.stderr[-300:])
            return q.stdout.split()[-1], int(m.group(1))
        span, whole = query_bytes("SELECT min(ts), max(ts) FROM events")
        t0, t1 = (int(x) for x in span.split(","))
        mid = t0 + (t1 - t0) // 2
        _, part = query_bytes("SELECT count(*) FROM events WHERE ts >= %d AND ts < %d" % (mid, mid + (t1 - t0) // 60))
        r[("window_share",)] = 100.0 * part / whole if whole else None
        log("  a window of 1/60 of the span: %d of %d packet bytes read (%.2f %%)" % (part, whole,
                                                                                      r[("window_share",)] or 0))
        # A window of 1 ms at the trace's end: `query` with the bounds pushed
        # down and `view --since` (the reader's window too): CPU seconds, and
        # the packet bytes the query read.
        w_sql = "SELECT count(*) FROM events WHERE ts BETWEEN %d AND %d" % (t1 - 1000000, t1)
        r[("window_end_bytes",)] = int(query_bytes(w_sql)[1])
        for key, cmd in (("query", [self.strata, "query", "--csv", out, w_sql]),
                         ("view", [self.strata, "view", "--since", "+%.9f" % ((t1 - 1000000 - t0) / 1e9), out])):
            r[("window_end_cpu", key)] = measure(cmd)[0]
        log("  the last 1 ms: query %.3f s CPU (%d packet bytes read), view --since %.3f s CPU" % (
            r[("window_end_cpu", "query")], r[("window_end_bytes",)], r[("window_end_cpu", "view")]))

        # analyze mutex and both exports (output to /dev/null: the tool's
        # CPU, not the file system's), on the ints trace and on a pthread
        # trace (every pair a record: mutex_held records and the waits of
        # 4 threads contending for one lock).
        build = os.path.dirname(os.path.dirname(self.plain))
        ptw = os.path.join(build, "tests", "pthread", "pt_workload")
        traces = [("ints", out, recorded)]
        if os.access(ptw, os.X_OK) and os.access(os.path.join(build, "preload", "libstrata-pthread.so"),
                                                 os.R_OK):
            pout = self.tmpdir("reading-pthread")
            run([self.strata, "record", "--preload", "pthread", "-o", pout, "--", ptw, "contend",
                 "/dev/null", "4", str(n // 4), "0"],
                env=dict(self.env_nodaemon, STRATA_PTHREAD_COUNT="0"), timeout=1200)
            traces.append(("pthread", pout, count_events(pout)))
            # How contended this run's workload was (the scheduler decides):
            # a contended wait costs the readers more than a hold (its
            # blame, its flows), so the pthread rows move with this share.
            q = run([self.strata, "query", "--csv", pout,
                     "SELECT count(*) FROM events WHERE name = 'pthread:mutex_lock'"])
            waits = int(q.stdout.split()[-1])
            r[("tool_waits", "pthread")] = 100.0 * waits / traces[-1][2] if traces[-1][2] else None
            log("  pthread trace: %d events, %d contended waits" % (traces[-1][2], waits))
        else:
            self.notes.append("reading: pt_workload or the pthread preload not built: no pthread rows")
        for tname, tdir, events in traces:
            r[("tool_events", tname)] = events
            for key, cmd in (("analyze", [self.strata, "analyze", "mutex", tdir]),
                             ("perfetto", [self.strata, "export", "--format", "perfetto", "-o",
                                           os.devnull, tdir]),
                             ("json", [self.strata, "export", "--format", "json", "-o", os.devnull, tdir])):
                cpu, rss = measure(cmd)
                r[("tool_rate", key, tname)] = events / cpu if cpu else None
                log("  %s on %s: %d events in %.2f s CPU (%.1f M events/s), peak RSS %.1f MiB" % (
                    key, tname, events, cpu, events / cpu / 1e6 if cpu else 0, rss / 1024.0))

    # 11. the readers on a large trace (issues 49 and 50): Debian's sqlite3
    # under `strata record --preload pthread` with every lock operation a
    # record (STRATA_PTHREAD_COUNT=0), the preload step's workload with
    # 6.3 M inserts: about 45 M events, 0.9 GB.  Each reader once (a run of
    # `export --format json` alone takes minutes), its CPU time (user +
    # system) and peak RSS from /usr/bin/time.
    def reading_large(self):
        if not self.have_strata:
            return
        sqlite3 = shutil.which("sqlite3")
        if not sqlite3:
            self.notes.append("sqlite3 not installed (scripts/deps.sh): no large-trace reader rows")
            return
        if sanitized_build(os.path.dirname(os.path.dirname(self.plain))):
            self.notes.append("a sanitizer build: no large-trace reader rows")
            return
        rows = 50000 if self.smoke else self.large_rows
        out = self.tmpdir("reading-large")
        sql = os.path.join(self.work, "large.sql")
        with open(sql, "w") as f:
            f.write(sqlite_script(rows))
        with open(sql) as fin:
            p = subprocess.run([self.strata, "record", "-o", out, "--preload", "pthread", "--subbuf-size",
                                str(1 << 20), "--subbuf-count", "8", "--", sqlite3,
                                os.path.join(self.work, "large.db")],
                               env=dict(self.env_nodaemon, STRATA_PTHREAD_COUNT="0"), stdin=fin,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=1200)
        os.unlink(os.path.join(self.work, "large.db"))
        if p.returncode != 0:
            raise BenchError("reading_large: recording sqlite3 failed: " + p.stderr.strip()[-500:])
        r = self.results
        tf = os.path.join(self.work, "large-time")

        def timed(key, args):
            # (CPU s, peak RSS MiB, stdout): the reader alone under /usr/bin/time
            with open(os.path.join(self.work, "large-out"), "w+b") as o:
                q = subprocess.run(["/usr/bin/time", "-o", tf, "-f", "%U %S %M", self.strata] + args,
                                   stdout=o if key.startswith("query") else subprocess.DEVNULL,
                                   stderr=subprocess.PIPE, timeout=1800)
                o.seek(0)
                text = o.read().decode(errors="replace")
            if q.returncode != 0:
                raise BenchError("strata %s exited %d: %s" % (" ".join(args), q.returncode, q.stderr[-300:]))
            u, sy, m = open(tf).read().split()[-3:]
            r[("large_cpu", key)], r[("large_rss", key)] = float(u) + float(sy), int(m) / 1024.0
            return text

        csv = lambda sqltext: ["query", "--csv", out, sqltext]  # noqa: E731
        events = int(timed("query_count", csv("SELECT count(*) FROM events")).split()[-1])
        r[("large_events",)] = events
        held = int(timed("query_typed", csv('SELECT count(*), sum(hold_ns) FROM "pthread:mutex_held"'))
                   .split()[-1].split(",")[0])
        # The question of issue 50: which lock did thread X (the main
        # thread) wait on longest in [t1, t2] (the middle third of the run).
        pid, t0, t1 = (int(x) for x in run([self.strata, "query", "--csv", out,
                                             "SELECT pid, ts, ts_end FROM processes"]).stdout.split()[-1].split(","))
        lo, hi = t0 + (t1 - t0) // 3, t1 - (t1 - t0) // 3
        timed("query_question", csv(
            "SELECT printf('0x%%x', object) AS lock, dur AS waited_ns, ts_end AS acquired FROM slices "
            "WHERE kind = 'lock_wait' AND tid = %d AND ts_end BETWEEN %d AND %d ORDER BY dur DESC LIMIT 1"
            % (pid, lo, hi)))
        # Every slice (the lock holds and waits of every record): one pass.
        timed("query_slices", csv("SELECT count(*), sum(dur) FROM slices"))
        # Grouped by thread: a pass per thread when the lanes are threads' own.
        timed("query_group_tid", csv("SELECT tid, count(*) FROM events GROUP BY tid"))
        for key, args in (("view", ["view", out]), ("check", ["check", out]),
                          ("analyze", ["analyze", "mutex", out]), ("export", ["export", "-o", "-", out]),
                          ("export_json", ["export", "--format", "json", "-o", "-", out])):
            timed(key, args)
        for key in ("view", "check", "analyze", "export", "export_json", "query_count", "query_typed",
                    "query_question", "query_slices", "query_group_tid"):
            cpu = r[("large_cpu", key)]
            n = held if key == "query_typed" else events
            if key != "query_question":
                r[("large_rate", key)] = n / cpu if cpu else None
            log("  %s: %d rows in %.2f s CPU (%.1f M/s), peak RSS %.1f MiB" % (
                key, n, cpu, n / cpu / 1e6 if cpu else 0, r[("large_rss", key)]))
        shutil.rmtree(out, ignore_errors=True)

    # 12. the sched table (issue 50) on a synthetic kernel trace of
    # tests/query/make_sched_fixture.py (3 CPUs; 400 s of switches: about
    # 1.1 M sched_switch and 0.7 M sched_waking): every slice with its pid
    # and wake-up latency (a pass from the start), and the docs' question
    # of the 10 ms before a time T (a third into the trace).
    def query_sched(self):
        if not self.have_strata:
            return
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "query"))
        import make_sched_fixture
        out = self.tmpdir("sched")
        make_sched_fixture.make(out, 7, 4000000000 if self.smoke else 400000000000)
        r = self.results
        tf = os.path.join(self.work, "sched-time")

        def timed(key, sqltext):
            q = subprocess.run(["/usr/bin/time", "-o", tf, "-f", "%U %S %M", self.strata, "query", "--csv", out,
                                sqltext], capture_output=True, text=True, timeout=1800)
            if q.returncode != 0:
                raise BenchError("strata query exited %d: %s" % (q.returncode, q.stderr[-300:]))
            u, sy, m = open(tf).read().split()[-3:]
            r[("sched_cpu", key)], r[("sched_rss", key)] = float(u) + float(sy), int(m) / 1024.0
            return q.stdout.split()[-1].split(",")

        n = int(timed("all", "SELECT count(*), sum(dur), count(pid), count(wake_latency), max(wake_latency) "
                      "FROM sched")[0])
        r[("sched_slices",)] = n
        b, e = (int(x) for x in run([self.strata, "query", "--csv", out, "SELECT min(ts), max(ts) FROM sched"])
                .stdout.split()[-1].split(","))
        t = b + (e - b) // 3
        timed("question", "SELECT ts, dur, pid, tid, comm, end_state, wake_latency FROM sched WHERE cpu = 1 AND "
              "ts <= %d AND (ts_end IS NULL OR ts_end >= %d) ORDER BY ts" % (t, t - 10000000))
        for key in ("all", "question"):
            log("  sched %s: %d slices in the trace, %.2f s CPU, peak RSS %.1f MiB" % (
                key, n, r[("sched_cpu", key)], r[("sched_rss", key)]))
        shutil.rmtree(out, ignore_errors=True)

    def all(self):
        steps_nodaemon = [self.costs, self.disabled, self.startup_nodaemon]
        steps_daemon = [self.enabled, self.short_threads, self.aggregate, self.whole, self.throughput, self.latency,
                        self.startup_daemon, self.memory, self.preload, self.processes, self.reading,
                        self.reading_large, self.query_sched]
        if self.p["callgrind"]:
            steps_daemon.append(self.callgrind)
        for s in steps_nodaemon:
            self.step(s)
        if self.have_lttng:
            if self.lttng.daemon_up():
                self.notes.append("an lttng-sessiond was already running: LTTng 'no daemon' "
                                  "figures were measured with it")
            self.lttng.start_daemon()
        try:
            for s in steps_daemon:
                self.step(s)
        finally:
            self.lttng.stop_daemon()

    def step(self, fn):
        log("== %s (%s UTC)" % (fn.__name__, time.strftime("%H:%M:%S", time.gmtime())))
        try:
            fn()
        except (BenchError, subprocess.TimeoutExpired, OSError, KeyError, ValueError) as e:
            self.failures.append("%s: %s" % (fn.__name__, e))
            log("  FAILED: %s" % e)


def subbuf_bytes(s):
    return int(s[:-1]) << {"K": 10, "M": 20}[s[-1]] if s[-1] in "KM" else int(s)


def sqlite_script(rows):
    """The sqlite3 workload of the preload and reading_large steps: a file
    database, two worker threads, `rows` inserts in one transaction, then
    an index (sorted by the workers)."""
    return ("PRAGMA threads=2;\nCREATE TABLE t(a INTEGER, b TEXT);\nBEGIN;\n"
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<%d)\n"
            "INSERT INTO t SELECT (x*7919)%%%d, hex(randomblob(8)) FROM c;\nCOMMIT;\n"
            "CREATE INDEX ti ON t(b);\nSELECT count(*) FROM t;\n" % (rows, rows))


def sanitized_build(build):
    """Whether `build` is a sanitizer build, whose preload library does not
    load into unsanitized programs (python3, sqlite3)."""
    cache = os.path.join(build, "CMakeCache.txt")
    return os.path.exists(cache) and re.search(r"^STRATA_SANITIZE:STRING=\S", open(cache).read(), re.M)


def first_tick(trace_dir):
    """Smallest now_ns field of bench:tick in the trace (the emitter's clock)."""
    p = run(["babeltrace2", trace_dir])
    vals = [int(m.group(1)) for m in re.finditer(r"now_ns = (\d+)", p.stdout)]
    return min(vals) if vals else None


def hold_and_measure(cmd, env):
    """Start a `hold` run, sum Rss/Pss (KiB) of its shared mappings once every
    thread has emitted, then let it finish."""
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        kv = {}
        for line in proc.stdout:
            kv.update(parse_kv(line))
            if "pid" in kv:
                break
        if "pid" not in kv:
            raise BenchError("hold program did not get ready: %s" % cmd)
        maps = smaps_shared(int(kv["pid"]))
        proc.stdin.close()
        proc.stdout.read()
        if proc.wait(timeout=60) != 0:
            raise BenchError("hold run failed: %s" % cmd)
        return maps
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def smaps_shared(pid):
    """{mapping name: [Rss KiB, Pss KiB]} over the shared mappings of pid."""
    out = {}
    cur = None
    with open("/proc/%d/smaps" % pid) as f:
        for line in f:
            m = re.match(r"^[0-9a-f]+-[0-9a-f]+ (\S+) \S+ \S+ \S+\s*(.*)$", line)
            if m:
                cur = None
                if m.group(1)[3] == "s":
                    cur = out.setdefault(m.group(2).strip() or "[anon shared]", [0, 0])
                continue
            if cur is not None and line.startswith("Rss:"):
                cur[0] += int(line.split()[1])
            elif cur is not None and line.startswith("Pss:"):
                cur[1] += int(line.split()[1])
    return out


# Which shared mappings are trace buffers (the rest, e.g. LTTng's wait and
# error-accounting pages, is listed in the details only).
BUFFER_MAPPING = {"lttng": re.compile(r"shm-ust-consumer"), "strata": re.compile(r"strata")}
# The same for the many-processes step, without Strata's clock page.
IDLE_BUFFER_MAPPING = {"lttng": BUFFER_MAPPING["lttng"], "strata": re.compile(r"strata-slot")}


def trace_clocks(out):
    """The env.clock values of every metadata file under a Strata trace."""
    found = set()
    for d, _, files in os.walk(out):
        if "metadata" in files:
            with open(os.path.join(d, "metadata"), errors="replace") as f:
                found |= set(re.findall(r'\bclock = "([^"]*)";', f.read()))
    return found


def buffer_kib(side, maps):
    sel = [v for k, v in maps.items() if BUFFER_MAPPING[side].search(k)]
    return sum(v[0] for v in sel), sum(v[1] for v in sel)


# ---- the table ---------------------------------------------------------------

def daemon_arithmetic(r):
    """The two-thread and whole-cost rows' arithmetic, from this run's figures.

    With two writers and the daemons sharing two CPUs, each writer's wall
    per event is about its own cost w plus the daemons' CPU per event d
    (the two CPUs do 2w + 2d of work for each pair of events), so the
    2-thread/1-thread ratio is about 1 + d / w: a side whose writer is
    faster shows the same daemon work as a larger ratio.  Printed: d as
    each side's two walls imply it, the d Strata's writer would need to
    match LTTng-UST's ratio, and what this run's page cache charges for
    16 bytes alone (the fresh-file probe: one writer, its wall about its
    CPU), which every tracer writing through the page cache pays.  Then
    the whole-cost rows the same way: what 0.35 of LTTng-UST's whole cost
    leaves for everything outside Strata's loop (daemon, tools, start-up),
    beside what that took.  (docs/benchmarks.md, "What the daemon's share
    allows")"""
    w = {}
    for side in ("strata", "lttng"):
        w1, w2 = r.get(("enabled_wall", "ints", 1, side)), r.get(("enabled_wall", "ints", 2, side))
        if not (w1 and w2):
            return None
        w[side] = (w1, w2)
    rates = r.get(("file_rate",))
    (s1, s2), (l1, l2) = w["strata"], w["lttng"]
    need = (l2 / l1 - 1) * s1
    line = ("two threads: the daemons' CPU per event the walls imply (2-thread minus 1-thread wall): "
            "Strata %.1f ns, LTTng-UST %.1f ns; LTTng-UST's ratio %.2f would need Strata's at most "
            "%.1f ns" % (s2 - s1, l2 - l1, l2 / l1, need))
    if rates:
        pc = 16 / (sum(rates) / len(rates))  # GB/s -> ns per 16 bytes
        line += ("; the page cache alone takes %.1f ns for an ints event's 16 bytes in this run "
                 "(fresh-file probe), before the copy out of the ring and the record walk" % pc)
    for t in (1, 2):
        st, lt = r.get(("whole_tot", t, "strata")), r.get(("whole_tot", t, "lttng"))
        sd = r.get(("whole_daemon", t, "strata"))
        if st and lt and sd is not None:
            # 0.35 of LTTng-UST's whole, less Strata's own loop
            line += ("\nwhole cost, %d thread(s): Strata's loop %.1f + outside it %.1f ns per event; "
                     "0.35 of LTTng-UST's %.1f leaves %.1f ns outside Strata's loop" % (
                         t, st - sd, sd, lt, 0.35 * lt - (st - sd)))
    sf, lf, n = r.get(("whole_fixed", "strata")), r.get(("whole_fixed", "lttng")), r.get(("whole_n",))
    if sf and lf and n:
        line += ("\nwhole cost's fixed part, the same run with 10 events: Strata %.1f ms of CPU, "
                 "LTTng-UST %.1f ms (tools, daemons' start and stop, the program's start); over the "
                 "rows' %d events a thread, %.1f and %.1f ns per event of 'outside it'" % (
                     sf / 1e6, lf / 1e6, n, sf / n, lf / n))
    return line


def fmt(v, unit=""):
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    if abs(v) >= 100:
        return "%.0f%s" % (v, unit)
    if abs(v) >= 1:
        return "%.1f%s" % (v, unit)
    return "%.2f%s" % (v, unit)


def table(b):
    r = b.results
    rows = []

    def row(name, s, l, target=None, cmp=None, ratio=None, sfmt="", strata_only=False):
        if ratio is None and isinstance(s, (int, float)) and isinstance(l, (int, float)) and l:
            ratio = s / l
        if ratio is False:  # the caller's "no ratio"
            ratio = None
        met = ""
        if target is not None:
            x = s if strata_only else ratio
            met = "n/a" if x is None else ("yes" if cmp(x) else "NO")
        rows.append((name, fmt(s, sfmt), fmt(l, sfmt), fmt(ratio) if ratio is not None else "",
                     target or "", met))

    # issue 49: reading traces back, Strata's reader against babeltrace2
    mev = lambda k: r.get(("read_rate", k)) / 1e6 if r.get(("read_rate", k)) else None  # noqa: E731
    row("read: strata view > /dev/null vs babeltrace2, M events per CPU second (x)", mev("view"),
        mev("babeltrace2"), ">= 10", lambda x: x >= 10)
    row("read: strata view vs strata view through babeltrace2, M events per CPU second (x)", mev("view"),
        mev("view_bt2"))
    row("read: strata check, M events per CPU second", mev("check"), None)
    row("read: peak RSS of strata view vs babeltrace2 (MiB)", r.get(("read_rss", "view")),
        r.get(("read_rss", "babeltrace2")), "Strata < 64", lambda x: x < 64, strata_only=True)
    row("read: strata query over a window of 1/60 of the trace's time span, packet bytes read, % of a full "
        "scan's", r.get(("window_share",)), None, "<= 3 (1.7 + the edges)", lambda x: x <= 3, strata_only=True)
    row("read: strata query, count(*) over the trace's last 1 ms (ts BETWEEN), CPU seconds",
        r.get(("window_end_cpu", "query")), None)
    row("read: strata query over the trace's last 1 ms, packet bytes read", r.get(("window_end_bytes",)), None)
    row("read: strata view --since, the trace's last 1 ms, CPU seconds", r.get(("window_end_cpu", "view")), None)
    for key, what in (("analyze", "strata analyze mutex"), ("perfetto", "strata export --format perfetto"),
                      ("json", "strata export --format json")):
        for tname in ("ints", "pthread"):
            v = r.get(("tool_rate", key, tname))
            row("read: %s, %s trace, M events per CPU second" % (what, tname), v / 1e6 if v else None, None,
                ">= 20", lambda x: x >= 20, strata_only=True)
    row("read: the pthread trace's contended waits (mutex_lock), % of its events", r.get(("tool_waits", "pthread")),
        None, strata_only=True)
    # issues 49 and 50 at scale: the sqlite3 lock trace of reading_large
    big = "large read (sqlite3 lock trace, %s M events)" % (
        "%.1f" % (r[("large_events",)] / 1e6) if r.get(("large_events",)) else "n/a")
    rate = lambda k: r.get(("large_rate", k)) / 1e6 if r.get(("large_rate", k)) else None  # noqa: E731
    for k, what in (("view", "strata view > /dev/null"), ("check", "strata check"),
                    ("analyze", "strata analyze mutex"), ("export", "strata export (Perfetto)"),
                    ("export_json", "strata export --format json")):
        row("%s: %s, peak RSS (MiB)" % (big, what), r.get(("large_rss", k)), None, "< 64",
            lambda x: x < 64, strata_only=True)
        row("%s: %s, M events per CPU second" % (big, what), rate(k), None)
    for k, what in (("query_count", "strata query 'SELECT count(*) FROM events'"),
                    ("query_typed", "strata query, sum over a field of \"pthread:mutex_held\""),
                    ("query_question", "strata query, the lock thread X waited on longest in [t1, t2]"),
                    ("query_slices", "strata query 'SELECT count(*), sum(dur) FROM slices'"),
                    ("query_group_tid", "strata query 'SELECT tid, count(*) FROM events GROUP BY tid'")):
        row("%s: %s, peak RSS (MiB)" % (big, what), r.get(("large_rss", k)), None, "< 256",
            lambda x: x < 256, strata_only=True)
        if k == "query_slices":
            row("%s: %s, M events per CPU second" % (big, what), rate(k), None)
        elif k == "query_group_tid":
            row("%s: %s, M rows per CPU second" % (big, what), rate(k), None, ">= 20",
                lambda x: x >= 20, strata_only=True)
        elif k != "query_question":
            row("%s: %s, M rows per CPU second" % (big, what), rate(k), None, ">= 10",
                lambda x: x >= 10, strata_only=True)
    # issue 50: the sched table on the synthetic kernel trace of query_sched
    n = r.get(("sched_slices",))
    sch = "query sched (synthetic kernel trace, %s M slices)" % ("%.2f" % (n / 1e6) if n else "n/a")
    cpu = r.get(("sched_cpu", "all"))
    row("%s: every slice with pid and wake_latency, M slices per CPU second" % sch,
        n / cpu / 1e6 if n and cpu else None, None)
    row("%s: every slice, peak RSS (MiB)" % sch, r.get(("sched_rss", "all")), None, "< 256", lambda x: x < 256,
        strata_only=True)
    row("%s: a CPU's 10 ms before T (a third in), CPU seconds" % sch, r.get(("sched_cpu", "question")), None)
    # A row whose Strata runs lost events, again with nothing lost
    # (Bench.zero_loss)
    def zero_loss_row(w, t, target, cmp):
        zl = r.get(("enabled_zero_loss", w, t))
        if zl:
            # Older results files: LTTng-UST's figure from the enabled step
            beside = zl[2] if len(zl) > 2 and zl[2] else r.get(("enabled", w, t, "lttng"))
            row("  the same with nothing lost (Strata in blocking mode, LTTng-UST run beside it; its "
                "discard-mode runs lost %.1f %% of their events)" % zl[1], zl[0], beside, target, cmp)

    # <= 0.30 on every clock source (issue 64; issue 38 allowed 0.45 on
    # kvm-clock, whose vDSO read makes LTTng-UST's events dearer)
    lim = 0.30
    for w in WORKLOADS:
        row("enabled %s, 1 thread (CPU ns/event)" % w, r.get(("enabled", w, 1, "strata")),
            r.get(("enabled", w, 1, "lttng")), "<= %.2f (%s)" % (lim, current_clocksource()),
            lambda x, lim=lim: x <= lim)
        zero_loss_row(w, 1, "<= %.2f (%s)" % (lim, current_clocksource()), lambda x, lim=lim: x <= lim)
    row("enabled ints, 1 thread, first lap of fresh 8x4MiB buffers (CPU ns/event)",
        r.get(("enabled", "cold", 1, "strata")), r.get(("enabled", "cold", 1, "lttng")),
        "<= 0.8", lambda x: x <= 0.8)
    row("short run: 200 k ints on fresh 8x1MiB buffers, the program's wall ns/event",
        r.get(("enabled_wall", "short", 1, "strata")), r.get(("enabled_wall", "short", 1, "lttng")),
        "<= 0.35", lambda x: x <= 0.35)
    row("short run: the same, CPU ns/event",
        r.get(("enabled", "short", 1, "strata")), r.get(("enabled", "short", 1, "lttng")))
    bp, bs, bl = r.get(("burst", "plain")), r.get(("burst", "strata")), r.get(("burst", "lttng"))
    if bp and (bs or bl):
        row("short threads: %s threads x 5 ints, CPU us per thread (untraced %.1f)" % (
            "{:,}".format(b.p["n_burst"]), bp / 1e3), bs / 1e3 if bs else None, bl / 1e3 if bl else None)
        def share(side, x):  # paired (burst_add); older files: the medians' difference
            a = r.get(("burst_add", side))
            return (a if a is not None else x - bp) / 1e3 if x else None
        # A ratio only over a share LTTng-UST's runs showed (> 0): over a
        # negative one (noise) it would read as met whatever Strata's.
        ss, sl = share("strata", bs), share("lttng", bl)
        row("  the tracer's share: traced minus untraced (median of paired runs), CPU us per thread",
            ss, sl, "<= 0.35", lambda x: x <= 0.35,
            ratio=ss / sl if ss is not None and sl is not None and sl > 0 else False)
    if r.get(("ir_burst", "strata")) or r.get(("ir_burst", "lttng")):
        row("  the same in instructions: traced minus untraced a thread, 5 ints each (callgrind, slope "
            "over {:,} and {:,} threads)".format(*r[("ir_burst_n",)]), r.get(("ir_burst", "strata")),
            r.get(("ir_burst", "lttng")))
    # two threads beside the daemon: wall per event per thread, 2 threads
    # over 1, each side against its own 1-thread figure
    two = {}
    for side in ("strata", "lttng"):
        two[side] = thread_ratio(r, "enabled_wall", "ints", 2, side)
    row("ints, 2 threads on 2 CPUs over 1 thread, wall ns/event/thread (x; median of each repetition's ratio)",
        two["strata"], two["lttng"],
        "<= LTTng's", lambda x: x <= 1.0)
    # The same over runs that lost nothing, where either thread count's
    # Strata runs lost events (each side's figure from its zero-loss runs
    # where it has them, else from the enabled step's).
    zl_walls = {k: r.get(("enabled_zero_loss_wall", "ints", k, "strata")) for k in (1, 2)}
    if any(zl_walls.values()):
        two_zl = {}
        for side in ("strata", "lttng"):
            w1 = r.get(("enabled_zero_loss_wall", "ints", 1, side)) if zl_walls[1] else None
            w2 = r.get(("enabled_zero_loss_wall", "ints", 2, side)) if zl_walls[2] else None
            w1 = w1 or r.get(("enabled_wall", "ints", 1, side))
            w2 = w2 or r.get(("enabled_wall", "ints", 2, side))
            two_zl[side] = w2 / w1 if w1 and w2 else None
        row("  the same with nothing lost (Strata's lossy thread counts again in blocking mode)",
            two_zl["strata"], two_zl["lttng"], "<= LTTng's", lambda x: x <= 1.0)
    for t in (1, 2):
        row("whole cost, ints, %d thread(s): program + daemons + tools CPU ns/event" % t,
            r.get(("whole_tot", t, "strata")), r.get(("whole_tot", t, "lttng")), "<= 0.35", lambda x: x <= 0.35)
        row("  of which outside the program's loop: daemons, tools, start-up (CPU ns/event)", r.get(("whole_daemon", t, "strata")),
            r.get(("whole_daemon", t, "lttng")))
        row("  daemons' wake-ups per 1000 events", r.get(("whole_wake", t, "strata")),
            r.get(("whole_wake", t, "lttng")))
        wz = r.get(("whole_zero_loss", t))
        if wz:
            row("  the same with nothing lost (Strata in blocking mode, LTTng-UST run beside it; its "
                "discard-mode runs lost %.1f %% of their events)" % wz[1], wz[0], wz[2], "<= 0.35",
                lambda x: x <= 0.35)
    for w in WORKLOADS:
        row("enabled %s, 2 threads (CPU ns/event/thread)" % w, r.get(("enabled", w, 2, "strata")),
            r.get(("enabled", w, 2, "lttng")), "<= 0.5", lambda x: x <= 0.5)
        zero_loss_row(w, 2, "<= 0.5", lambda x: x <= 0.5)
    cs, cl = r.get(("clock", "strata")), r.get(("clock", "lttng"))
    row("clock read alone (CPU ns; Strata: %s, LTTng-UST: clock_gettime)" %
        CLOCK_NAMES.get(r.get(("clock_id", "strata")), "?"), cs, cl)
    parts = r.get(("clock_parts",))
    if parts and "seqcount" in parts and "fenced_tsc" in parts:
        paired = "over_fenced" in parts  # older results files: the difference of single loops
        row("clock page's inline read over the fenced TSC (%s: %.1f CPU ns%s)" % (
            ordered_tsc_name(r), parts["fenced_tsc"], "; median of paired rounds" if paired else ""),
            parts["over_fenced"] if paired else parts["seqcount"] - parts["fenced_tsc"], None, "<= 2 ns",
            lambda x: x <= 2, strata_only=True)
    for w in WORKLOADS:
        s, l = r.get(("enabled", w, 1, "strata")), r.get(("enabled", w, 1, "lttng"))
        row("enabled %s minus clock read, 1 thread (CPU ns/event)" % w,
            s - cs if s is not None and cs is not None else None,
            l - cl if l is not None and cl is not None else None)
    # issue 64's stretch: an enabled event at most the ordered TSC read
    # (the events' own instruction) + 8 ns.  Each run's loop against the
    # read timed in its thread beside it, the median of the differences
    # (older results files: the enabled median minus the clock parts'
    # fenced TSC, timed minutes apart: this host's phases moved either by
    # more than the row's margin)
    fenced = parts.get("fenced_tsc") if parts else None
    for w in WORKLOADS:
        paired = r.get(("stretch_paired", w, "strata"))
        if paired is not None:
            row("stretch: enabled %s, 1 thread, over the ordered TSC read timed beside each run (%s: %s CPU "
                "ns; median of the runs' differences), CPU ns/event" % (
                    w, ordered_tsc_name(r), fmt(r.get(("ordered_beside", w, "strata")))), paired, None,
                "<= 8 ns", lambda x: x <= 8, strata_only=True)
            continue
        s = r.get(("enabled", w, 1, "strata"))
        row("stretch: enabled %s, 1 thread, over the ordered TSC read (%s: %s CPU ns), CPU ns/event" % (
            w, ordered_tsc_name(r), fmt(fenced)), s - fenced if s is not None and fenced else None, None,
            "<= 8 ns", lambda x: x <= 8, strata_only=True)
    for t in SCALE_THREADS:
        row("enabled ints, %d threads on %d CPUs (CPU ns/event/thread)" % (t, os.cpu_count()),
            r.get(("enabled", "ints", t, "strata")), r.get(("enabled", "ints", t, "lttng")),
            "<= 0.5", lambda x: x <= 0.5)
        zero_loss_row("ints", t, "<= 0.5", lambda x: x <= 0.5)
    if (os.cpu_count() or 0) < MANY_CPUS:
        row("enabled ints, one thread per CPU on %d or more CPUs (CPU ns/event/thread)" % MANY_CPUS,
            None, None, "<= 0.5 (not run: %d CPUs here)" % os.cpu_count(), lambda x: x <= 0.5)
    for t in SCALE_THREADS:
        st, lt = thread_ratio(r, "enabled", "ints", t, "strata"), thread_ratio(r, "enabled", "ints", t, "lttng")
        if t in SCALE_TARGET_THREADS:
            row("%d-thread/1-thread cost, ints" % t, st, lt, "Strata <= 1.3", lambda x: x <= 1.3, strata_only=True)
        else:
            row("%d-thread/1-thread cost, ints (more writing threads than the default's owned lanes "
                "on 2 CPUs: the shared lanes' price)" % t, st, lt)
    for w in WORKLOADS:
        s, l = thread_ratio(r, "enabled", w, 2, "strata"), thread_ratio(r, "enabled", w, 2, "lttng")
        # Issue 64's two bounds (docs/benchmarks.md, "Targets"): at most
        # 1.15, and at most LTTng-UST's own ratio in the same run.  The
        # row checked the first alone and read "yes" for 1.06 against
        # LTTng-UST's 1.00.
        row("2-thread/1-thread cost, %s" % w, s, l, "Strata <= 1.15 and <= LTTng-UST's",
            lambda x, s=s, l=l: x <= 1.15 and (l is None or x <= l), strata_only=True)
    for w in WORKLOADS:
        if ("ir_en", w, "lttng") in r or ("ir_en", w, "strata") in r:
            row("instructions/event enabled, %s (callgrind)" % w, r.get(("ir_en", w, "strata")),
                r.get(("ir_en", w, "lttng")), "<= 0.5", lambda x: x <= 0.5)
    for w in WORKLOADS:
        row("disabled %s (CPU ns/iteration; plain loop %s)" % (w, fmt(r.get(("disabled", w, "plain")))),
            r.get(("disabled", w, "strata")), r.get(("disabled", w, "lttng")), "<= 1.0 (+2% noise)",
            lambda x: x <= 1.02)
    for w in WORKLOADS:
        if ("ir_dis", w, "lttng") in r or ("ir_dis", w, "strata") in r:
            row("instructions/iteration disabled, %s" % w, r.get(("ir_dis", w, "strata")),
                r.get(("ir_dis", w, "lttng")), "<= 1.0", lambda x: x <= 1.001)
    for w in WORKLOADS:
        if ("bytes", w, "strata") in r or ("bytes", w, "lttng") in r:
            row("trace bytes per event, %s (packet headers included)" % w,
                r.get(("bytes", w, "strata")), r.get(("bytes", w, "lttng")))
    ts, tl = r.get(("tput", "strata")), r.get(("tput", "lttng"))
    tsv = ts[0] if ts else None
    tlv = tl[0] if tl else None
    tr = tput_ratio(ts, tl)
    name = "zero-loss throughput, ints, 4x256KiB/lane (Mev/s)"
    if tr is not None and ts[1] == ">=" and tr < 2:
        # Strata lost nothing at its producer's full speed: the ratio is
        # a lower bound below the target, which decides nothing.
        name += "; Strata lossless unthrottled: ratio >= %s, undecided" % fmt(tr)
        tr = None
    row(name, (ts[1] + fmt(tsv / 1e6)) if ts else None, (tl[1] + fmt(tlv / 1e6)) if tl else None,
        ">= 2", lambda x: x >= 2, ratio=tr)
    bks, bkl = r.get(("tput_block", "strata")), r.get(("tput_block", "lttng"))
    if bks is not None or bkl is not None:
        lost = [s for s in ("strata", "lttng") if r.get(("tput_block_lost", s))]
        row("zero-loss throughput in each side's blocking mode, ints unthrottled, 4x256KiB/lane (Mev/s)%s" %
            ("; LOST in a run: " + ", ".join(lost) if lost else ""),
            bks / 1e6 if bks else None, bkl / 1e6 if bkl else None, ">= 2", lambda x: x >= 2)
    bs, bl = r.get(("bytes", "ints", "strata")), r.get(("bytes", "ints", "lttng"))
    if (tsv and bs) or (tlv and bl):
        row("  the same in MB/s of trace (x bytes/event)", tsv * bs / 1e6 if tsv and bs else None,
            tlv * bl / 1e6 if tlv and bl else None)
    row("enablement: command to ack (ms)", r.get(("lat_ack", "strata")), r.get(("lat_ack", "lttng")),
        "<= 1/3", lambda x: x <= 1 / 3)
    row("enablement: command to first event (ms)", r.get(("lat_first", "strata")),
        r.get(("lat_first", "lttng")), "<= 1/3", lambda x: x <= 1 / 3)
    base = r.get(("start_base",))
    row("start-up overhead, no daemon (ms; plain exec %s ms)" % fmt(base / 1e3 if base else None),
        ms(r.get(("start_nod", "strata"))), ms(r.get(("start_nod", "lttng"))), "Strata < 1 ms",
        lambda x: x < 1, strata_only=True)
    cxx = r.get(("start_cxx",))
    if cxx is not None:
        row("  of which loading libstdc++ alone (ms)", ms(cxx), None)
    row("start-up overhead, daemon + session active (ms)", ms(r.get(("start_d", "strata"))),
        ms(r.get(("start_d", "lttng"))), "Strata < 1 ms", lambda x: x < 1, strata_only=True)
    row("  the same, the process emitting one event (a buffer made at it; ms)", ms(r.get(("start_d1", "strata"))),
        ms(r.get(("start_d1", "lttng"))))
    dcs, dcl = r.get(("start_dcpu", "strata")), r.get(("start_dcpu", "lttng"))
    if dcs is not None or dcl is not None:
        row("  daemons' CPU per process start, during the spawn loop (ms)", dcs, dcl)
    if r.get(("start_d_all", "strata")) is not None:
        row("  the same with record --all-processes (no tree to look at): start-up / daemon's CPU per start (ms)",
            "%s / %s" % (fmt(ms(r.get(("start_d_all", "strata")))), fmt(r.get(("start_dcpu_all", "strata")))), None)
    own = r.get(("start_own",))
    if own is not None:
        row("  floor: own buffer, recording, no round trip (STRATA_EARLY, no daemon; ms)", ms(own), None)
    for t in b.p["mem_threads"]:
        s, l = r.get(("mem", t, "strata")), r.get(("mem", t, "lttng"))
        s = buffer_kib("strata", s) if s is not None else None
        l = buffer_kib("lttng", l) if l is not None else None
        row("buffer memory, %d thread(s), Rss (KiB)" % t, s[0] if s else None, l[0] if l else None)
        row("buffer memory, %d thread(s), Pss (KiB)" % t, s[1] if s else None, l[1] if l else None)

    def added(key, name, side):
        """What `side` adds to (key, name) over untraced: the median of the
        repetitions' paired differences (older files: the medians')."""
        a = r.get((key + "_add", name, side))
        if a is not None:
            return a
        x, base = r.get((key, name, side)), r.get((key, name, "plain"))
        return x - base if x is not None and base else None

    for name in ("lockloop", "contend", "sqlite3", "memcached"):
        if not any(k[0] == "pre_wall" and k[1] == name for k in r):
            continue
        base = r.get(("pre_wall", name, "plain"))
        ws, wl = r.get(("pre_wall", name, "strata")), r.get(("pre_wall", name, "lttng"))
        row("preload %s: trace bytes per lock+unlock pair" % name, r.get(("pre_bytes", name, "strata")),
            r.get(("pre_bytes", name, "lttng")), "<= 0.5", lambda x: x <= 0.5)
        cb = r.get(("pre_cpu", name, "plain"))
        # A server measured by its CPU (issue 64: memcached's wall time is
        # noise here) has its target on the CPU rows; its wall rows are
        # printed for what they are.
        wall_target = (None, None) if cb is not None else ("<= 0.2", lambda x: x <= 0.2)
        row("preload %s: added wall time of the program (s; untraced %s s)" % (name, fmt(base)),
            added("pre_wall", name, "strata"), added("pre_wall", name, "lttng"), *wall_target)
        if cb is not None:
            row("preload %s: added CPU of the traced server (s; untraced %s s)" % (name, fmt(cb)),
                added("pre_cpu", name, "strata"), added("pre_cpu", name, "lttng"), "<= 0.2", lambda x: x <= 0.2)
        for k, what in (("pre_ucpu", "user"), ("pre_scpu", "system")):
            if r.get((k, name, "plain")) is not None:
                row("  of which %s CPU, the server's whole life (s; untraced %s s)" % (what, fmt(r.get((k, name, "plain")))),
                    added(k, name, "strata"), added(k, name, "lttng"))
        row("preload %s: slowdown vs untraced (x)" % name, ws / base if ws and base else None,
            wl / base if wl and base else None, "sqlite3: Strata <= 1.3" if name == "sqlite3" else None,
            lambda x: x <= 1.3, strata_only=True)
        row("preload %s: events lost" % name, r.get(("pre_lost", name, "strata")),
            r.get(("pre_lost", name, "lttng")), "Strata 0", lambda x: x == 0, strata_only=True)
        for side in PRELOAD_COUNT_SIDES:
            how = PRELOAD_SIDE_HOW[side]
            wc = r.get(("pre_wall", name, side))
            row("preload %s (%s): trace bytes per lock+unlock pair" % (name, how), r.get(("pre_bytes", name, side)),
                r.get(("pre_bytes", name, "lttng")))
            row("preload %s (%s): added wall time (s)" % (name, how), added("pre_wall", name, side),
                added("pre_wall", name, "lttng"), *((None, None) if cb is not None else ("<= 0.25", lambda x: x <= 0.25)))
            if cb is not None:
                row("preload %s (%s): added CPU of the traced server (s)" % (name, how),
                    added("pre_cpu", name, side), added("pre_cpu", name, "lttng"), "<= 0.25", lambda x: x <= 0.25)
            row("preload %s (%s): slowdown vs untraced (x)" % (name, how), wc / base if wc and base else None,
                wl / base if wl and base else None, "sqlite3: Strata <= 1.3" if name == "sqlite3" else None,
                lambda x: x <= 1.3, strata_only=True)
            row("preload %s (%s): events lost" % (name, how), r.get(("pre_lost", name, side)), None, "Strata 0",
                lambda x: x == 0, strata_only=True)
    for n in sorted({k[1] for k in r if k[0] == "procs"}):
        s, l = r.get(("procs", n, "strata")) or {}, r.get(("procs", n, "lttng")) or {}
        row("%d live processes: daemons' threads" % n, s.get("threads"), l.get("threads"),
            "Strata <= %d (4 x CPUs)" % (4 * os.cpu_count()), lambda x: x <= 4 * os.cpu_count(),
            strata_only=True)
        row("%d live processes: daemons' RSS (MiB)" % n, s.get("rss_mib"), l.get("rss_mib"))
        row("%d live processes: buffer memory per idle process (KiB; Pss summed over all)" % n,
            s.get("buf_kib_per_proc"), l.get("buf_kib_per_proc"), "Strata <= 32 (a few pages)",
            lambda x: x <= 32, strata_only=True)
        row("%d live processes: daemons' CPU, spawn to all ready (ms)" % n, s.get("cpu_ms"), l.get("cpu_ms"))
        row("%d live processes: daemons' CPU while they idle (%% of a CPU)" % n, s.get("idle_cpu_pct"),
            l.get("idle_cpu_pct"))
        row("%d live processes: strata status / lttng list SESSION (ms)" % n, s.get("status_ms"),
            l.get("status_ms"), "Strata < 100", lambda x: x < 100, strata_only=True)
        row("%d live processes: strata list / lttng list -u (ms)" % n, s.get("list_ms"), l.get("list_ms"),
            "Strata < 100", lambda x: x < 100, strata_only=True)
        row("%d live processes: events lost of %d" % (n, n * 100), s.get("lost"), l.get("lost"),
            "Strata 0", lambda x: x == 0, strata_only=True)
    ag, rc = r.get(("aggregated", "ints")), r.get(("aggregated_rec", "ints"))
    row("ints, 1 thread, aggregated (strata create --aggregate '%s'; CPU ns/event)" % Bench.AGG_SPEC, ag, None,
        "<= recorded (%s)" % fmt(rc), lambda x: rc is not None and x <= rc, strata_only=True)
    row("  the same events recorded, same runs interleaved (CPU ns/event)", rc, None)
    sl = r.get(("stop_live",))
    if sl:
        row("strata stop with %d live writers (wall ms; load average %.0f before)" % (sl["writers"], sl["load"]),
            sl["total_ms"], None)
        row("  of which the daemon's stop (its processes told, every buffer flushed; ms)", sl["daemon_ms"], None)
    jv = lambda k: r.get(("jvm", k))
    if any(k[0] == "jvm" for k in r):
        row("Java API enabled, string + 2 ints (CPU ns/event)", jv("strata Java API, enabled"),
            jv("LTTng Java (LTTngUst), enabled"), "<= 0.5", lambda x: x <= 0.5)
        row("Java API disabled check (CPU ns; LTTng: call, no session)", jv("strata Java API, disabled"),
            jv("LTTng Java (LTTngUst), no session"), "Strata <= 1 ns", lambda x: x <= 1, strata_only=True)
        for k in ("no agent", "agent, no session", "agent, -e 'jvm:*'"):
            row("Java monitor round, %s (wall ns)" % k, jv("monitor round, " + k), None)
    return rows


def tput_ratio(ts, tl):
    """Strata/LTTng zero-loss rates when it means something: both exact, or
    Strata a lower bound (">=") against an exact LTTng figure."""
    if not ts or not tl or not ts[0] or not tl[0]:
        return None
    if tl[1] or ts[1] == "<":
        return None
    return ts[0] / tl[0]


CLOCK_NAMES = {0: "clock_gettime", 1: "module page", 2: "consumer page"}


def current_clocksource():
    """The kernel's clock source now ("tsc", "kvm-clock", ...; "?" unknown)."""
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            return f.read().strip()
    except OSError:
        return "?"


def machine_info():
    """The machine a run's figures hold for: CPU model and count, kernel,
    clock source, TSC flags (written into the results file)."""
    src = current_clocksource()
    flags = set()
    try:
        with open("/proc/cpuinfo") as f:
            for ln in f:
                if ln.startswith("flags"):
                    flags = set(ln.split()[2:])
                    break
    except OSError:
        pass
    tsc = " ".join(x for x in ("constant_tsc", "nonstop_tsc", "tsc_known_freq") if x in flags)
    with open("/proc/cmdline") as f:
        unstable = "tsc=unstable" in f.read()
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    except OSError:
        pass
    return {"cpu_model": model or "?", "cpus": os.cpu_count(), "kernel": os.uname().release,
            "clock_source": src, "tsc_unstable": unstable, "tsc_flags": tsc or "none"}


def clock_source_line():
    """The machine's clock source and TSC flags: figures hold for this kind."""
    m = machine_info()
    return "machine: %s, %d CPUs; clock source %s%s; TSC flags: %s" % (
        m["cpu_model"], m["cpus"], m["clock_source"], " (tsc=unstable)" if m["tsc_unstable"] else "",
        m["tsc_flags"])


def source_commit():
    """The short commit of the tree bench/ belongs to ("?" outside git)."""
    p = subprocess.run(["git", "-C", os.path.dirname(os.path.abspath(__file__)), "describe", "--always",
                        "--dirty"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return p.stdout.strip() if p.returncode == 0 and p.stdout.strip() else "?"


def no_figure(row):
    """A row a partial run (--only) left empty: no figure on either side."""
    r = dict(zip(ROW_KEYS, row))
    return r["strata"] in ("", "n/a") and r["lttng"] in ("", "n/a") and not r["ratio"]


def write_results(path, kind, date, rows, lines, b):
    """The run as data (bench/table.py renders its table): the machine, the
    clock source, the date and commit, every row's figures as printed, the
    lines under the table, the notes and failures."""
    doc = {
        "schema": 1,
        "command": "bash bench/run.sh " + " ".join(sys.argv[1:]),
        "kind": kind,
        "date": date,
        "commit": source_commit(),
        "machine": machine_info(),
        "strata_clocks": sorted(b.clocks),
        "rows": [dict(zip(ROW_KEYS, r)) for r in rows if not (kind.startswith("only") and no_figure(r))],
        "lines": lines,
        "notes": list(b.notes),
        "failures": list(b.failures),
    }
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def fs_type(path):
    """The type of the file system holding path (the longest mount point)."""
    best, kind = "", "?"
    try:
        with open("/proc/self/mounts") as f:
            for ln in f:
                parts = ln.split()
                if len(parts) > 2:
                    mnt = parts[1]
                    if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                        best, kind = mnt, parts[2]
    except OSError:
        pass
    return kind


def ms(us):
    return None if us is None else us / 1e3


def ordered_tsc_name(results):
    """The ordered TSC read the events took: RDTSCP where the CPU has it
    (abi/strata_kclock.h), else lfence; rdtsc (and in older results files)."""
    return "rdtscp" if results.get(("clock_ordered",)) == "rdtscp" else "lfence; rdtsc"


def paired_median(reps, base):
    """The median of each repetition's figure less the untraced (base) one
    of the same repetition, or None without a base of the same length: on
    a machine that drifts between repetitions, steadier than a difference of
    medians (the preload rows, the short threads' share)."""
    if not base or len(base) != len(reps):
        return None
    return statistics.median(a - b for a, b in zip(reps, base))


def thread_ratio(results, kind, w, t, side):
    """A side's t-thread figure over its 1-thread one (kind: "enabled", CPU,
    or "enabled_wall"): the median of each repetition's ratio, its two runs
    seconds apart (the host's phase moved LTTng-UST's ints 1 thread 88-138
    ns across one step's repetitions at 68b6fab); older results files, or
    without repetitions: the ratio of the medians."""
    reps = "enabled_reps" if kind == "enabled" else kind + "_reps"
    a, b = results.get((reps, w, t, side)), results.get((reps, w, 1, side))
    if a and b and len(a) == len(b) and all(b):
        return statistics.median(x / y for x, y in zip(a, b))
    m1, mt = results.get((kind, w, 1, side)), results.get((kind, w, t, side))
    return mt / m1 if m1 and mt else None


def paired_ratios(results):
    """For each enabled row with both sides: the median of the per-repetition
    ratios (the sides run interleaved, so repetition i of each ran side by
    side), and the ratios themselves."""
    out = []
    for k, v in sorted(results.items()):
        if k[0] != "enabled_reps" or k[3] != "strata":
            continue
        l = results.get(("enabled_reps", k[1], k[2], "lttng"))
        if not l or len(l) != len(v) or not all(l):
            continue
        r = [a / b for a, b in zip(v, l)]
        out.append("%s %dT %.2f [%s]" % (k[1], k[2], statistics.median(r),
                                         " ".join("%.2f" % x for x in r)))
    return out


# A row of the table, as printed and as kept in the results file.
ROW_KEYS = ("workload", "strata", "lttng", "ratio", "target", "met")


def print_table(rows, f):
    head = ("workload", "Strata", "LTTng-UST", "ratio", "target", "met?")
    print("| " + " | ".join(head) + " |", file=f)
    print("|" + "|".join("---" for _ in head) + "|", file=f)
    for r in rows:
        print("| " + " | ".join(r) + " |", file=f)


def fresh_page_line(c, r):
    """What a ring's first lap pays per page on this machine: the probe's
    fresh memfd pages, and each side's short run (fresh buffers) over its
    steady run, per 4 KiB of trace (bytes per event from the untimed run)."""
    line = ("a fresh page of shared memory (CPU us per 4 KiB page): first write %s; "
            "MADV_POPULATE_WRITE %s + first write after it %s" % (
                c["page_touch_us"], c.get("page_populate_us", "n/a"), c.get("page_after_populate_us", "n/a")))
    lap = []
    for side, name in (("strata", "Strata"), ("lttng", "LTTng-UST")):
        short, steady = r.get(("enabled_wall", "short", 1, side)), r.get(("enabled_wall", "ints", 1, side))
        nbytes = r.get(("bytes", "ints", side))
        if short and steady and nbytes:
            lap.append("%s %.1f" % (name, (short - steady) * 4096 / nbytes / 1e3))
    if lap:
        line += ("; the short run over the steady one, us per 4 KiB of trace written: " + ", ".join(lap)
                 + " (the first lap's pages, which both sides write)")
    return line


# What an instruction after the ordered TSC read costs (strata-bench costs,
# print_ordered_adds): 48 independent adds after the read, over the read
# alone, against the same adds alone.
ADDS_KEYS = ("ordered_48add_over_ns", "add48_alone_ns")


def adds_line(c):
    over, alone = float(c["ordered_48add_over_ns"]), float(c["add48_alone_ns"])
    hidden = 1 - over / alone if alone > 0 else 0
    return ("after the ordered TSC read (%s), 48 independent adds cost %.2f CPU ns where alone they "
            "take %.2f: the read hides %.0f %% of what follows it (median of paired rounds; 0 %%: an "
            "event's every instruction counts at the machine's rate, issue 64's stretch rows)" % (
                c.get("ordered_48add_read", "?"), over, alone, max(hidden, 0) * 100))


def report_lines(b, work):
    """The lines printed under the table (and kept in the results file)."""
    out = []
    if ("costs",) in b.results:
        c = b.results[("costs",)]
        out.append("building blocks (CPU ns each): " + ", ".join(
            "%s %s" % (k[:-3], v) for k, v in c.items() if k.endswith("_ns") and k not in ADDS_KEYS))
        if all(k in c for k in ADDS_KEYS):
            out.append(adds_line(c))
        if "page_touch_us" in c:
            out.append(fresh_page_line(c, b.results))
    parts = b.results.get(("clock_parts",))
    if parts and "fenced_tsc" in parts:
        f = parts["fenced_tsc"]
        out.append("the clock page's read part by part (CPU ns; docs/benchmarks.md): fenced TSC (%s) %.1f; "
                   "+ conversion %.1f (+%.1f; the general 128-bit form +%.1f); + seqcount, the whole "
                   "inline read %.1f (+%.1f); without the fence %.1f; seq loaded after the TSC %.1f%s" % (
                       ordered_tsc_name(b.results), f, parts.get("convert", 0), parts.get("convert", 0) - f,
                       parts.get("general_convert", 0) - f, parts.get("seqcount", 0),
                       parts.get("seqcount", 0) - f, parts.get("unfenced", 0),
                       parts.get("seq_after_tsc", 0),
                       "; each the median of 15 rounds, the parts in turn; the whole read's paired "
                       "difference %.2f" % parts["over_fenced"] if "over_fenced" in parts else ""))
    for k, v in sorted(b.results.items()):
        if k[0] == "enabled_wall":
            out.append("wall time: enabled %s %s, %d thread(s): %.1f ns/event/thread" % (k[3], k[1], k[2], v))
    paired = paired_ratios(b.results)
    if paired:
        out.append("enabled, paired: each repetition's Strata figure over the LTTng-UST run beside it "
              "(the machine's slow phases slow both; the table's ratio is of the two medians): " +
              "; ".join(paired))
    for k, maps in sorted(b.results.items()):
        if k[0] == "mem":
            out.append("memory %s %d thread(s), shared mappings (Rss/Pss KiB): %s" % (k[2], k[1], "; ".join(
                "%s %d/%d" % (n, v[0], v[1]) for n, v in sorted(maps.items()))))
    if ("file_rate",) in b.results:
        out.append("trace directory %s (%s): a fresh file takes buffered 1 MiB writes at %s GB/s "
              "(before / after the enabled runs); a trace written faster for longer than its "
              "ring holds loses events" % (
                  work, fs_type(work), " / ".join("%.2f" % v for v in b.results[("file_rate",)])))
    two = daemon_arithmetic(b.results)
    if two:
        out.append(two)
    wk = b.results.get(("wake",))
    if wk:
        room = ""
        full, bpe = b.results.get(("tput_full", "strata")), b.results.get(("bytes", "ints", "strata"))
        if full and bpe:
            room = ("; at Strata's unthrottled rate (%.1f M ev/s, %.0f bytes each) a 4 x 256 KiB lane "
                    "has %.1f ms of room beyond the packet being drained" % (
                        full / 1e6, bpe, 3 * 256 * 1024 / (full * bpe) * 1e3))
        out.append("wake-up tail (no tracer; a thread sleeping 0.5 ms beside a spinning one, 2 s): late by "
              "> 1 ms %s/s, > 2 ms %s/s, > 4 ms %s/s, longest %s ms%s" % (
                  wk.get("late_1ms_per_s"), wk.get("late_2ms_per_s"), wk.get("late_4ms_per_s"),
                  wk.get("late_max_ms"), room))
    if b.clocks:
        out.append("Strata events stamped with: %s (env.clock; STRATA_CLOCK=%s)" % (
            ", ".join(sorted(b.clocks)), os.environ.get("STRATA_CLOCK", "unset")))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny counts (< 60 s), for CI")
    ap.add_argument("--keep", action="store_true", help="keep the work directory")
    ap.add_argument("--only", help="comma-separated steps: costs,disabled,startup_nodaemon,enabled,short_threads,"
                    "aggregate,whole,throughput,throughput_blocking,latency,startup_daemon,memory,preload,processes,reading,reading_large,query_sched,callgrind; and jvm and stop_live, never run by default")
    ap.add_argument("--json", help="where to write the results as data (default BUILD/bench/results.json)")
    ap.add_argument("--large-rows", type=int, default=6300000,
                    help="reading_large's sqlite3 inserts (default 6300000: about 45 M events; 1000000: about 7 M)")
    ap.add_argument("build", help="the CMake build directory")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="strata-bench-")
    try:
        b = Bench(os.path.abspath(a.build), a.smoke, work)
        b.large_rows = a.large_rows
    except BenchError as e:
        log("bench: %s" % e)
        return 1
    if not b.have_strata:
        b.notes.append("Strata side not built or `strata` CLI missing: Strata columns n/a")
    if not b.have_lttng:
        b.notes.append("LTTng side not built or lttng-sessiond missing: LTTng columns n/a")
    t0 = time.monotonic()
    try:
        if a.only:
            names = a.only.split(",")
            # jvm: jvm_bench.py runs its own private lttng-sessiond.
            need_daemon = any(n not in ("costs", "disabled", "startup_nodaemon", "aggregate", "jvm", "stop_live")
                              for n in names)
            if need_daemon and b.have_lttng:
                b.lttng.start_daemon()
            try:
                for n in names:
                    b.step(getattr(b, n))
            finally:
                b.lttng.stop_daemon()
        else:
            b.all()
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    kind = "smoke" if a.smoke else ("only " + a.only if a.only else "full")
    date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows = table(b)
    lines = report_lines(b, work)
    print("Strata vs LTTng-UST (%s run, %.0f s, %s)" % (kind, time.monotonic() - t0, date))
    print(clock_source_line())
    print_table(rows, sys.stdout)
    for ln in lines:
        print(ln)
    for n in b.notes:
        print("note: " + n)
    for f in b.failures:
        print("FAILED: " + f)
    path = a.json or os.path.join(os.path.abspath(a.build), "bench", "results.json")
    write_results(path, kind, date, rows, lines, b)
    print("results: " + path)
    return 1 if b.failures else 0


if __name__ == "__main__":
    sys.exit(main())
