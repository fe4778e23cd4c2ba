#!/usr/bin/python3
"""A full disk under a running session (issue 32).

usage: check_fulldisk.py STRATA PROG WORKDIR   (STRATA_CONSUMERD: the daemon)

The session's output is a 2 MiB tmpfs (needs root and mount: exit 77, a
skip, otherwise).
  1. A process (strata-test-fulldisk) fills the disk while 1 MiB is taken by
     a filler file, waits; `strata status` then names the error and the
     file ("No space left on device", the stream file's path).  The filler
     goes, the process emits 5000 more events and exits: recording resumed
     by itself, every one of those events is in the trace, and babeltrace2
     reports the packets lost in between (discarded packets).  `strata stop`
     names the error too.  babeltrace2 reads the trace with no error.
  2. The disk full at a sub-trace's creation: a second session whose first
     process cannot get its metadata written.  No empty or torn metadata is
     left (its directory is removed), status names the error; once there is
     room, a later process of the session records, and babeltrace2 reads
     the session with no error.
  3. The sub-trace's directory removed (rm -r) while its process records:
     the daemon makes it again (directory, metadata, stream files) from the
     next packet on; every event emitted after the removal is in the trace
     and babeltrace2 reads it with no error.
"""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, bt_clean, payload_ints, start_daemon, wait_for  # noqa: E402

ENOSPC = "No space left on device"


def fill(path, size=None):
    """A filler file of `size` bytes, or as large as the disk allows."""
    with open(path, "wb", buffering=0) as f:  # unbuffered: nothing left to fail at close
        chunk = b"\0" * 65536
        written = 0
        try:
            while size is None or written < size:
                written += f.write(chunk)
        except OSError:
            pass


def main():
    strata, prog, work = sys.argv[1:4]
    consumerd = os.environ.get("STRATA_CONSUMERD")
    if os.geteuid() != 0 or not consumerd:
        print("SKIP: needs root (to mount a tmpfs) and STRATA_CONSUMERD")
        sys.exit(77)
    shutil.rmtree(work, ignore_errors=True)
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", mnt]).returncode != 0:
        print("SKIP: cannot mount a tmpfs here")
        sys.exit(77)
    check = Checks()
    env = dict(os.environ)
    env.pop("XDG_RUNTIME_DIR", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "sock")
    d = None
    try:
        d = start_daemon(consumerd, env["STRATA_CONSUMERD_SOCKET"], env)

        def cli(*args):
            return subprocess.run([strata] + list(args), env=env, capture_output=True, text=True, timeout=60)

        def session(name, path):
            cli("create", name, "-o", path)
            cli("enable-event", name, "fulldisk:*")
            cli("start", name)

        def two_bursts(before, after, part):
            """The program after its first burst, waiting for a line."""
            p = subprocess.Popen([prog, str(before), str(after)], env=env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)
            check(p.stdout.readline().strip() == "waiting", "%d: the process emitted its first %d events" %
                  (part, before))
            return p

        def go(p, what):
            p.stdin.write("go\n")
            p.stdin.flush()
            check(p.stdout.readline().strip() == "done", what)
            p.wait()

        def later_events(path):
            return [f["i"] for _, f in payload_ints(path, "phase", "i")[0] if f["phase"] == 2]

        # 1. Full while a process records, then room again.
        out = os.path.join(mnt, "trace")
        filler = os.path.join(mnt, "filler")
        fill(filler, 1 << 20)
        session("s", out)
        p = two_bursts(60000, 5000, 1)
        wait_for(lambda: ENOSPC in cli("status", "s").stdout, "status to name the full disk")
        st = cli("status", "s").stdout
        check(ENOSPC in st and os.path.join(out, "ust") in st,
              "1: strata status names the error and the file:\n" + st)
        os.unlink(filler)
        go(p, "1: and 5000 more once there was room")
        stop = cli("stop", "s")
        check(ENOSPC in stop.stdout + stop.stderr, "1: strata stop names it: " + (stop.stdout + stop.stderr).strip())
        ok, rc, why = bt_clean(out)
        check(ok, "1: babeltrace2 reads the trace with no error (rc %d) %s" % (rc, why))
        phase = {1: [], 2: []}
        recs, lost_packets, _ = payload_ints(out, "phase", "i")
        for _, f in recs:
            phase[f["phase"]].append(f["i"])
        check(phase[2] == list(range(5000)), "1: recording resumed: all 5000 later events (read %d)" % len(phase[2]))
        check(0 < len(phase[1]) < 60000 and phase[1] == sorted(set(phase[1])),
              "1: a part of the first 60000, in order, each once (read %d)" % len(phase[1]))
        check(lost_packets > 0, "1: the lost packets are counted in the trace (%d)" % lost_packets)
        cli("destroy", "s")
        shutil.rmtree(out)

        # 2. Full when a sub-trace is created.
        out2 = os.path.join(mnt, "trace2")
        session("s2", out2)
        fill(filler)
        r = subprocess.run([prog, "100", "0"], env=env, input="go\n", capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, "2: the process ran")
        wait_for(lambda: ENOSPC in cli("status", "s2").stdout, "status to name the full disk at creation")
        st = cli("status", "s2").stdout
        check("metadata" in st and ENOSPC in st, "2: status names the metadata that could not be written:\n" + st)
        empty = [os.path.join(dp, f) for dp, _, fs in os.walk(out2) for f in fs
                 if f == "metadata" and os.path.getsize(os.path.join(dp, f)) == 0]
        check(not empty, "2: no empty metadata left (%s)" % empty)
        os.unlink(filler)
        r = subprocess.run([prog, "100", "50"], env=env, input="go\n", capture_output=True, text=True, timeout=60)
        cli("stop", "s2")
        ok, rc, why = bt_clean(out2)
        check(ok, "2: babeltrace2 reads the session with no error (rc %d) %s" % (rc, why))
        n = len(payload_ints(out2)[0])
        check(n == 150, "2: the later process's 150 events are there (%d)" % n)
        cli("destroy", "s2")
        shutil.rmtree(out2)

        # 3. The sub-trace's directory removed while its process records.
        # Its two bursts need about half the disk, and a daemon slower to
        # write (a sanitizer build, a loaded machine) puts more of the first
        # one after the removal: the parts before must have left nothing
        # open (payload_ints() lets go of babeltrace2's files).
        v = os.statvfs(mnt)
        used = (v.f_blocks - v.f_bfree) * v.f_frsize
        check(used < (256 << 10), "3: the disk is free before it (%d KiB in use)" % (used // 1024))
        out3 = os.path.join(mnt, "trace3")
        session("s3", out3)
        p = two_bursts(5000, 5000, 3)
        pid_dir = os.path.join(out3, "ust", "pid")
        wait_for(lambda: os.path.isdir(pid_dir) and any(
            os.path.exists(os.path.join(pid_dir, s, "channel0_0")) for s in os.listdir(pid_dir)),
            "the first packets on disk")
        shutil.rmtree(os.path.join(out3, "ust"))
        go(p, "3: and 5000 more after its directory was removed")
        cli("stop", "s3")
        ok, rc, why = bt_clean(out3)
        check(ok, "3: babeltrace2 reads the session with no error (rc %d) %s" % (rc, why))
        later = later_events(out3)
        check(later == list(range(5000)), "3: the sub-trace was made again: all 5000 later events (read %d)" %
              len(later))
    finally:
        if d:
            d.terminate()
            d.wait()
        subprocess.run(["umount", "-l", mnt])
    check.finish()


main()
