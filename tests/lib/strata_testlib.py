"""Helpers shared by the Python end-to-end checks (tests/*/check_*.py)."""
import atexit
import gc
import os
import re
import socket
import struct
import subprocess
import sys
import time


def counter(path, word=0):
    """The little-endian u64 at `word` of a program's shared counter file."""
    with open(path, "rb") as f:
        f.seek(8 * word)
        b = f.read(8)
    return struct.unpack("<Q", b)[0] if len(b) == 8 else 0


def event_tid(ev):
    """The thread id of a babeltrace2 event: the event's own `vtid` context
    (kernel events, user events of a lane shared by several threads) or else
    the packet context's `vtid` (a lane owned by one thread); -1 if neither."""
    for scope in (ev.common_context_field, ev.packet.context_field if ev.packet else None):
        if scope is not None and "vtid" in scope:
            return int(scope["vtid"])
    return -1


def fail(msg):
    """End a check that stops at its first failure."""
    raise SystemExit("FAIL: " + msg)


def run_ok(cmd, timeout=120):
    """Run cmd (text output captured); fail() unless it exits 0."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        fail("%s: exit %d\n%s%s" % (cmd, r.returncode, r.stdout, r.stderr))
    return r


def wait_for(cond, what, timeout=30.0):
    """Poll an external condition with a deadline (never a bare sleep)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            sys.exit("FAIL: timed out waiting for " + what)
        time.sleep(0.01)


def procs_under(path):
    """Pids of the processes whose command line names `path`."""
    found = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % p, "rb") as f:
                if path.encode() in f.read():
                    found.append(int(p))
        except OSError:
            pass
    return found


def poll(cond, timeout, step=0.01):
    """Poll an external condition with a deadline: whether it came true
    (the caller says what failed, with what it saw)."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(step)
    return True


def check_readable(check, out):
    """babeltrace2 reads the trace at `out` with no error but the discarded
    events' notes (a Checks item)."""
    p = subprocess.run(["babeltrace2", out], capture_output=True, text=True)
    errors = [l for l in p.stderr.splitlines() if "discarded" not in l and l.strip()]
    check(p.returncode == 0 and not errors, "babeltrace2 reads the trace (%s)" % errors[:1])


def free_ports(n):
    """n loopback TCP ports free a moment ago (bound together, then closed)."""
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def listening(port):
    """Something accepts connections on loopback `port`."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def kill_at_exit(p):
    """p, killed when the check ends if it still runs (a failure, an
    exception): a program waiting for a peer that is gone would hold
    ctest's output pipe, or linger after the test."""
    atexit.register(lambda: p.poll() is None and p.kill())
    return p


def start_daemon(consumerd, socket, env, extra=(), stderr=None):
    """strata-consumerd on `socket`, returned once it says it listens
    (stderr: where its log goes, the test's own by default)."""
    r, w = os.pipe()
    d = subprocess.Popen([consumerd, "--socket", socket, "--ready-fd", str(w), "-q"] + list(extra), env=env,
                         pass_fds=(w,), stderr=stderr)
    os.close(w)
    # A check that ends early (a failure, an exception) must not leave it
    # running: it holds ctest's output pipe and the test would hang.
    atexit.register(lambda: d.poll() is None and d.kill())
    with os.fdopen(r) as rf:
        if rf.readline().strip() != "ready":
            sys.exit("FAIL: the daemon did not get ready")
    return d


def end_session(strata, d, timeout=60, session="s"):
    """`strata stop` and `strata destroy` of a check's session, then SIGTERM
    to its daemon (start_daemon): the daemon's exit status."""
    strata("stop", session)
    strata("destroy", session)
    d.terminate()
    return d.wait(timeout=timeout)


def tick_tally(path, event="ctltest:tick"):
    """The `event` records (payload `thread`, `seq`) of the trace at path by
    process (its sub-trace's `vpid`, -1 without one): ({pid: [(thread,
    seq), ...] in trace order, duplicates kept}, {pid: discarded events})."""
    import bt2
    ticks, discarded = {}, {}

    def pid_of(trace):
        env = trace.environment
        return int(env["vpid"]) if "vpid" in env else -1

    for m in bt2.TraceCollectionMessageIterator(path):
        if type(m) is bt2._EventMessageConst and m.event.name == event:
            f = m.event.payload_field
            ticks.setdefault(pid_of(m.event.stream.trace), []).append((int(f["thread"]), int(f["seq"])))
        elif type(m) is bt2._DiscardedEventsMessageConst and m.count:
            pid = pid_of(m.stream.trace)
            discarded[pid] = discarded.get(pid, 0) + m.count
    return ticks, discarded


def payload_ints(path, *fields, names=None):
    """The event records of the trace at path (babeltrace2), those named in
    `names` or all, in time order, as (event name, {field: int value} for
    each of `fields` in its payload), the packets the trace says were lost
    (the discarded-packets messages' counts, 1 where not given) and the
    events it says were discarded: (records, lost packets, discarded)."""
    import bt2
    recs, lost_packets, discarded = [], 0, 0
    it = bt2.TraceCollectionMessageIterator(path)
    for m in it:
        if type(m) is bt2._EventMessageConst:
            if names is None or m.event.name in names:
                f = m.event.payload_field
                recs.append((m.event.name, {k: int(f[k]) for k in fields if k in f}))
        elif type(m) is bt2._DiscardedPacketsMessageConst:
            lost_packets += m.count if m.count is not None else 1
        elif type(m) is bt2._DiscardedEventsMessageConst and m.count:
            discarded += m.count
    # The iterator's graph keeps the trace's files open and mapped until it
    # is collected, and reference cycles keep it past this frame: a check
    # that removes the trace and needs the space back (a small disk) would
    # not get it.
    del it
    gc.collect()
    return recs, lost_packets, discarded


def strata_cli(exe, env, ok=True, timeout=120, log=False):
    """The check's `strata` command: strata(*args, ok=ok, timeout=...,
    env=None, **kw) runs `exe args` in `env` (or the call's own; kw to
    subprocess.run: input, cwd...) and returns the CompletedProcess with
    stdout and stderr as text; with ok, a non-zero exit ends the check
    (FAIL: the command and its stderr); with log, each call prints a line
    "+ strata ARGS -> STATUS STDOUT STDERR" (their tails)."""
    base_env = env

    def strata(*args, ok=ok, timeout=timeout, env=None, **kw):
        r = subprocess.run([exe] + list(args), env=env or base_env, capture_output=True, text=True,
                           timeout=timeout, **kw)
        if log:
            print("+ strata %s -> %d %s %s" % (" ".join(args), r.returncode, r.stdout.strip()[-400:],
                                               r.stderr.strip()[-400:]))
        if ok and r.returncode != 0:
            sys.exit("FAIL: strata %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr.strip()))
        return r
    return strata


def strata_checked(check, strata, env, what, *args):
    """`strata ARGS` in env as one check: "WHAT: strata A B" passes on exit
    0, else fails with the tail of stderr; returns the CompletedProcess."""
    r = subprocess.run([strata] + list(args), env=env, capture_output=True, text=True, timeout=60)
    check(r.returncode == 0, "%s: strata %s" % (what, " ".join(args[:2])) +
          ("" if r.returncode == 0 else ": " + r.stderr.strip()[-300:]))
    return r


def control_setup(prefix, *programs, more=None):
    """The start of a check of its own daemon, run as `check_X.py --strata S
    --consumerd D [--PROGRAM P]...` (`more(ap)` adds its other arguments):
    (args, work, env, strata).  work: a work_dir(prefix); env: this
    environment reaching a daemon on WORK/sock, with no early tracing
    inherited; strata: the strata_cli runner in env.  The caller starts the
    daemon (start_daemon(args.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)),
    after any change of its own to env."""
    import argparse
    ap = argparse.ArgumentParser()
    for name in ("strata", "consumerd") + programs:
        ap.add_argument("--" + name, required=True)
    if more:
        more(ap)
    a = ap.parse_args()
    work = work_dir(prefix)
    env = dict(os.environ, STRATA_CONSUMERD_SOCKET=os.path.join(work, "sock"))
    env.pop("STRATA_EARLY", None)
    return a, work, env, strata_cli(a.strata, env)


def bt_text(path, babeltrace2="babeltrace2", timeout=120):
    """babeltrace2's text of the trace at path: (status, its stdout lines,
    the stderr lines that are errors (" E " or "ERROR"), its whole stderr)."""
    p = subprocess.run([babeltrace2, path], capture_output=True, text=True, timeout=timeout)
    errors = [ln for ln in p.stderr.splitlines() if " E " in ln or "ERROR" in ln]
    return p.returncode, p.stdout.splitlines(), errors, p.stderr


def work_dir(prefix):
    """A new temporary directory for the check, removed when it exits
    (kept with STRATA_TEST_KEEP=1 in the environment, for a look)."""
    import shutil
    import tempfile
    work = tempfile.mkdtemp(prefix=prefix)
    if os.environ.get("STRATA_TEST_KEEP") != "1":
        atexit.register(shutil.rmtree, work, True)
    return work


def bt_clean(path):
    """(ok, status, other stderr) of babeltrace2 on path: ok when it exits 0
    and says nothing but its discarded-events warnings."""
    bt = subprocess.run(["babeltrace2", path], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                        timeout=120)
    other = [ln for ln in bt.stderr.splitlines() if ln.strip() and not
             ln.startswith(("WARNING: Tracer discarded", "WARNING: Tracer may have discarded"))]
    return bt.returncode == 0 and not other, bt.returncode, "\n".join(other)[-1500:]


def end_daemon(d, check):
    """SIGTERM to a daemon of start_daemon: it must flush and exit 0."""
    d.terminate()
    check(d.wait(timeout=60) == 0, "the daemon exits 0")


def stop_all(procs, daemon=None):
    """A test's teardown: every process of `procs` (None skipped) still
    running killed and reaped, then the daemon (if any) sent SIGTERM and
    reaped."""
    for p in procs:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait()
    if daemon is not None:
        daemon.terminate()
        daemon.wait(timeout=30)


def run_checks(prefix, body):
    """body(work, check) with a fresh temporary directory `work` (removed
    after) and a Checks; exits as Checks.finish does."""
    import shutil
    import tempfile
    check = Checks()
    work = tempfile.mkdtemp(prefix=prefix)
    try:
        body(work, check)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    check.finish()


def private_daemon(work, consumerd):
    """A daemon on WORK/d.sock, and an environment that reaches it and
    inherits no early tracing, preload or aggregation: (env, daemon)."""
    sock = os.path.join(work, "d.sock")
    env = dict(os.environ, STRATA_CONSUMERD=consumerd, STRATA_CONSUMERD_SOCKET=sock)
    for v in ("STRATA_EARLY", "LD_PRELOAD", "STRATA_AGGREGATE"):
        env.pop(v, None)
    return env, start_daemon(consumerd, sock, env)


def stream_files(out):
    """The stream files of every sub-trace under `out` (a directory with a
    metadata file: its other files but hidden ones), sorted by sub-trace."""
    for root, _, files in os.walk(out):
        if "metadata" in files:
            for f in sorted(files):
                if f != "metadata" and not f.startswith("."):
                    yield os.path.join(root, f)


def e2e_setup():
    """The arguments of a check run as `check_X.py STRATA PROG WORKDIR` with
    the daemon in $STRATA_TEST_CONSUMERD: (strata, prog, workdir emptied,
    consumerd, Checks())."""
    import shutil
    strata, prog, work = sys.argv[1:4]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    return strata, prog, work, os.environ["STRATA_TEST_CONSUMERD"], Checks()


class Checks:
    """Named checks: `check(ok, what, detail="")` prints ok/FAIL lines (with
    quiet, the FAIL lines only; `detail`'s tail under a FAIL) and returns
    ok; `failures` counts them; `finish()` exits 1 if any failed."""

    def __init__(self, quiet=False):
        self.failures = 0
        self.quiet = quiet

    def __call__(self, ok, what, detail=""):
        if not ok or not self.quiet:
            print(("ok   " if ok else "FAIL ") + what, flush=True)
        if not ok:
            self.failures += 1
            if detail:
                print(detail[-3000:])
        return ok

    def finish(self):
        print("%d failure(s)" % self.failures)
        sys.exit(1 if self.failures else 0)


def vm_boot_counts(out):
    """The VM boot tests (tests/boot): exit 77 if the boot was skipped, 1 if
    the guest did not finish, else init's emitted counts (emitted.txt,
    `key=value` words) as a dict of strings."""
    if os.path.exists(os.path.join(out, "SKIPPED")):
        print("SKIP: " + open(os.path.join(out, "SKIPPED")).read().strip())
        sys.exit(77)
    path = os.path.join(out, "emitted.txt")
    if not os.path.exists(path):
        print("FAIL: no emitted.txt (the guest did not finish)")
        sys.exit(1)
    return dict(kv.split("=") for kv in open(path).read().split())


class TraceScan:
    """The events of a trace (babeltrace2), as (event message, ns from
    origin), noting on the way what most checks want: `discarded` (sum of
    the discarded-events messages), `clocks` (clock class uuids) and
    `ordered` (timestamps never go back within a stream)."""

    def __init__(self, path):
        self.path = path
        self.discarded = 0
        self.clocks = set()
        self.ordered = True

    def __iter__(self):
        import bt2
        last = {}
        for m in bt2.TraceCollectionMessageIterator(self.path):
            if type(m) is bt2._DiscardedEventsMessageConst:
                self.discarded += m.count or 0
            if type(m) is not bt2._EventMessageConst:
                continue
            ts = m.default_clock_snapshot.ns_from_origin
            self.clocks.add(m.default_clock_snapshot.clock_class.uuid)
            stream = m.event.stream.addr
            if stream in last and ts < last[stream]:
                self.ordered = False
            last[stream] = ts
            yield m, ts


_BT2 = []


def _bt2():
    """babeltrace2's Python bindings, imported once (only checks that read
    traces need them)."""
    if not _BT2:
        import bt2
        _BT2.append(bt2)
    return _BT2[0]


def field_value(f):
    """A babeltrace2 field as a plain Python value: int (enumerations
    too: their integer), float, str, bool, dict (structures), list
    (arrays and sequences), the selected option's value (variants),
    None (an empty option)."""
    if isinstance(f, _bt2()._IntegerFieldConst):  # the most common first
        return int(f)
    bt2 = _bt2()
    if isinstance(f, bt2._StructureFieldConst):
        return {k: field_value(v) for k, v in f.items()}
    if isinstance(f, bt2._ArrayFieldConst):
        return [field_value(x) for x in f]
    if isinstance(f, bt2._StringFieldConst):
        return str(f)
    if isinstance(f, bt2._RealFieldConst):
        return float(f)
    if isinstance(f, bt2._BoolFieldConst):
        return bool(f)
    if isinstance(f, bt2._VariantFieldConst):
        return field_value(f.selected_option)
    if isinstance(f, bt2._OptionFieldConst):
        return field_value(f.field) if f.has_field else None
    return int(f)


class Fields:
    """A babeltrace2 structure field read lazily as plain values: each
    member is converted (field_value) when it is looked up, so a check that
    keeps every event's payload pays only for the members it reads."""
    __slots__ = ("_f",)

    def __init__(self, f):
        self._f = f if f is not None else {}

    def __getitem__(self, key):
        return field_value(self._f[key])

    def __contains__(self, key):
        return key in self._f

    def __iter__(self):
        return iter(self._f)

    def __len__(self):
        return len(self._f)

    def get(self, key, default=None):
        return field_value(self._f[key]) if key in self._f else default

    def labels(self, key):
        """An enumeration member's labels (a list, empty when its value has
        none); None when the member is not an enumeration."""
        f = self._f[key]
        return list(f.labels) if isinstance(f, _bt2()._EnumerationFieldConst) else None

    def keys(self):
        return self._f.keys()

    def items(self):
        return [(k, field_value(v)) for k, v in self._f.items()]

    def __repr__(self):
        return repr(dict(self.items()))


class Msg:
    """One message of a trace as babeltrace2 gives it (trace_messages):
    `kind` is "event", "discarded_events" or "discarded_packets".  Every
    message has `stream` (a key of its stream, equal for the messages of
    one stream) and `env` (its trace's environment, plain values); an event
    has `name`, `ts` (ns from the clock's origin), `clock_value` (raw),
    `clock_uuid`, `tid` (event_tid), `context(key)` (its common context) and
    `fields` (its payload, members as plain values when read: Fields); a discarded-X
    message has `count` (1 where the trace does not say how many)."""
    __slots__ = ("kind", "_m", "_fields")

    def __init__(self, kind, m):
        self.kind, self._m, self._fields = kind, m, None

    @property
    def _stream(self):
        return self._m.event.stream if self.kind == "event" else self._m.stream

    @property
    def stream(self):
        return self._stream.addr

    @property
    def env(self):
        return {k: self.env_get(k) for k in self._stream.trace.environment}

    def env_get(self, key, default=None):
        """One environment entry as a plain value (default when absent)."""
        e = self._stream.trace.environment
        if key not in e:
            return default
        import bt2
        v = e[key]
        if isinstance(v, bt2._IntegerValueConst):
            return int(v)
        if isinstance(v, bt2._RealValueConst):
            return float(v)
        return str(v)

    def env_int(self, key, default=-1):
        """One environment entry as an int (default when absent)."""
        v = self.env_get(key)
        return default if v is None else int(v)

    @property
    def name(self):
        return self._m.event.name

    @property
    def ts(self):
        return self._m.default_clock_snapshot.ns_from_origin

    @property
    def clock_value(self):
        """The raw clock value (cycles), not converted to ns."""
        return self._m.default_clock_snapshot.value

    @property
    def clock_uuid(self):
        return self._m.default_clock_snapshot.clock_class.uuid

    @property
    def tid(self):
        return event_tid(self._m.event)

    def context(self, key, default=None):
        """One member of the event's common context (vtid, cpu_id, ...)."""
        try:
            return field_value(self._m.event.common_context_field[key])
        except (KeyError, TypeError):  # no such member, or no common context
            return default

    @property
    def fields(self):
        """The payload (Fields: members converted when read)."""
        if self._fields is None:
            self._fields = Fields(self._m.event.payload_field)
        return self._fields

    @property
    def count(self):
        return self._m.count if self._m.count is not None else 1


def trace_messages(path):
    """The event and discarded-events/-packets messages of the trace (or
    session directory) at path, or of the list of them merged, in
    babeltrace2's merged order, as Msg."""
    import bt2
    kinds = {bt2._EventMessageConst: "event", bt2._DiscardedEventsMessageConst: "discarded_events",
             bt2._DiscardedPacketsMessageConst: "discarded_packets"}
    for m in bt2.TraceCollectionMessageIterator(path):
        kind = kinds.get(type(m))
        if kind is not None:
            yield Msg(kind, m)


def _view_groups(strata, trace, reader):
    """`strata view` of `trace` through one reader ("strata" or
    "babeltrace2"): (exit status, lines grouped by their time stamp, in
    order, each group sorted: streams with events at the same nanosecond
    may be merged in either order), stderr."""
    env = dict(os.environ, TZ="UTC")
    if reader == "babeltrace2":
        env["STRATA_READER"] = "babeltrace2"
    else:
        env.pop("STRATA_READER", None)
    p = subprocess.run([strata, "view", trace], capture_output=True, env=env, timeout=600)
    groups, stamp = [], None
    for line in p.stdout.split(b"\n"):
        if not line:
            continue
        s = line[:line.find(b"]") + 1]
        if s != stamp:
            groups.append([])
            stamp = s
        groups[-1].append(line)
    return p.returncode, [sorted(g) for g in groups], p.stderr


def readers_agree(check, strata, trace, what=""):
    """Strata's own trace reader and babeltrace2 give the same events, in the
    same order, with the same field values (and the same losses): `strata
    view` through each, compared line by line (issue 49's agreement)."""
    rc_n, native, err_n = _view_groups(strata, trace, "strata")
    rc_b, bt2, err_b = _view_groups(strata, trace, "babeltrace2")
    n = sum(len(g) for g in native)
    stale = 0
    if rc_n == rc_b == 0 and len(native) == len(bt2) and native != bt2:
        # babeltrace2 2.0.4 sometimes prints an empty string field as the
        # string the same field held in an earlier event (seen on kernel
        # syscall_entry_newfstatat with AT_EMPTY_PATH: the record's bytes
        # hold the NUL at once, docs/reading.md).  Tolerated only there:
        # Strata's "" against babeltrace2's string, the lines equal
        # otherwise.
        strip = lambda ln: re.sub(rb'= "(?:[^"\\]|\\.)*"', b'= ""', ln)  # noqa: E731
        for i, (a, b) in enumerate(zip(native, bt2)):
            if a == b:
                continue
            if len(a) != len(b) or sorted(map(strip, a)) != sorted(map(strip, b)):
                break
            for x, y in zip(sorted(a, key=strip), sorted(b, key=strip)):
                if x != y:
                    if len(re.findall(rb'= ""', x)) <= len(re.findall(rb'= ""', y)):
                        break
                    stale += 1
            else:
                native[i] = bt2[i]
    if stale:
        print("babeltrace2 printed %d empty string(s) as an earlier event's string" % stale)
    same = rc_n == rc_b == 0 and native == bt2
    if not same:
        for i, (a, b) in enumerate(zip(native, bt2)):
            if a != b:
                print("first difference at group %d:\n  strata:      %r\n  babeltrace2: %r" % (i, a[:3], b[:3]))
                break
    if same:
        print("readers agree on %s: %d lines" % (trace, n))
    check(same, "%sStrata's reader and babeltrace2 agree on every line of %s (%d lines; exits %d/%d; %s)" %
          (what + ": " if what else "", trace, n, rc_n, rc_b, (err_n + err_b)[-300:]))
    return same


def tsc_usable():
    """Whether the TSC can back the consumer's clock page here."""
    with open("/proc/cpuinfo") as f:
        flags = [ln.split() for ln in f if ln.startswith("flags")]
    if not flags or not all("constant_tsc" in f and "nonstop_tsc" in f for f in flags):
        return False
    try:
        with open("/sys/devices/system/clocksource/clocksource0/current_clocksource") as f:
            # kvm-clock is the TSC scaled by the hypervisor; the daemon
            # checks that the CPUs' TSCs agree before it publishes a page.
            return f.read().strip() in ("tsc", "kvm-clock")
    except OSError:
        return False


def need_tsc_page():
    """Exit 77 (skipped) where the TSC cannot back the consumer's clock page,
    or where the module's page (/dev/strata) would take precedence."""
    if not tsc_usable() or os.path.exists("/dev/strata"):
        print("SKIP: no usable TSC, or the module's page would take precedence")
        sys.exit(77)


def clock_link_env(**extra):
    """need_tsc_page(), then the base environment of a clock-link test:
    consumer pages refreshed every 5 ms (a fresh page's first rate, from 2
    ms of calibration, is off by up to hundreds of ppm; frequent refreshes
    converge fast), EXTRA added, and none of the variables that would change
    a daemon's or a program's clock, name or recording."""
    need_tsc_page()
    base = dict(os.environ, STRATA_CLOCK="consumer-page", STRATA_CLOCK_REFRESH_MS="5", **extra)
    for v in ("STRATA_EARLY", "LD_PRELOAD", "STRATA_AGGREGATE", "XDG_RUNTIME_DIR", "STRATA_TEST_CLOCK_SKEW",
              "STRATA_TEST_CLOCK_STEP", "STRATA_TEST_HOSTNAME"):
        base.pop(v, None)
    return base
