#!/usr/bin/python3
"""A busy writer's first lap (issue 38, docs/ring-buffer.md "A busy writer's
first lap"): the daemon makes the pages of a busy lane's first lap ahead of
its writer, and none of an idle one's.

Three live processes (tp-sync, "serve" mode) in one session of 8 x 128 KiB
sub-buffers: an idle one writes IDLE events (its first page), an early one
EARLY (past Reader::kBusyBytes, 64 KiB, inside its first sub-buffer: the
writer faulted in only the pages it wrote), a busy one BUSY (inside the
second sub-buffer: its writer faulted the first in and populated the second
at its open), then all stay alive and idle.  The buffer's allocated pages are read from its memfd
(st_blocks of /proc/PID/fd/N: shmem counts each page once, whoever made it).

Oracle: the idle buffer holds its metadata pages and one page of events,
nothing more, while the session runs and after its stop; the early one reaches its metadata
and two sub-buffers but the few pages between its writer and the daemon's
margin (16 KiB past it), and never more; the busy one exactly its metadata
and three sub-buffers (the third made by the daemon: up to the end of the
sub-buffer after the writer's) and never more; every event is recorded or
counted.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, control_setup, end_daemon, start_daemon, tick_tally, wait_for  # noqa: E402

SUBBUF = 128 << 10
# ctltest:tick records are 20-32 bytes: 3,500 of them end inside the first
# sub-buffer past Reader::kBusyBytes (70-112 KiB), 7,500 inside the second
# (150-240 KiB).
IDLE, EARLY, BUSY = 20, 3500, 7500


def buffer_kib(pid):
    """Allocated KiB of the process's Strata buffer (memfd strata-slot-*)."""
    total = 0
    fd_dir = "/proc/%d/fd" % pid
    for n in os.listdir(fd_dir):
        try:
            if "strata-slot" in os.readlink(os.path.join(fd_dir, n)):
                total += os.stat(os.path.join(fd_dir, n)).st_blocks * 512 // 1024
        except OSError:
            pass
    return total


def main():
    a, work, env, strata = control_setup("strata-firstlap-", "app")
    out = os.path.join(work, "trace")

    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    check = Checks()
    strata("create", "s", "-o", out, "--subbuf-size", "128K", "--subbuf-count", "8")
    strata("enable-event", "s", "ctltest:*")
    strata("start", "s")
    apps = {}
    for name, n in (("idle", IDLE), ("early", EARLY), ("busy", BUSY)):
        p = subprocess.Popen([a.app, "1", str(n), "serve"], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, bufsize=1)
        p.stdin.write("\n")
        p.stdin.flush()
        check(p.stdout.readline().strip() == "ok", "the %s process wrote its batch" % name)
        apps[name] = p
    idle, early, busy = apps["idle"].pid, apps["early"].pid, apps["busy"].pid
    meta = buffer_kib(idle) - 4  # header, descriptors, lane words: the same in both
    check(meta > 0, "the idle buffer holds its metadata and one page of events (%d KiB)" % (meta + 4))
    # Early: all of its first two sub-buffers but [head, head + 16 KiB)
    # rounded out to pages (20 KiB at most), which its writer faults in.
    top = meta + 2 * SUBBUF // 1024
    wait_for(lambda: buffer_kib(early) >= top - 20, "the daemon's pages ahead of the early writer", 30.0)
    check(top - 20 <= buffer_kib(early) <= top, "the early buffer: metadata + 2 sub-buffers but the margin, "
          "%d-%d KiB (%d)" % (top - 20, top, buffer_kib(early)))
    want = meta + 3 * SUBBUF // 1024
    wait_for(lambda: buffer_kib(busy) >= want, "the daemon's pages ahead of the busy writer", 30.0)
    check(buffer_kib(busy) == want, "the busy buffer: metadata + 3 sub-buffers, %d KiB (%d)" % (
        want, buffer_kib(busy)))
    # The idle one's drain looked at it meanwhile (its first turns, 1 and 3
    # ms later): nothing made.
    check(buffer_kib(idle) == meta + 4, "the idle buffer still holds %d KiB (%d)" % (meta + 4, buffer_kib(idle)))
    # The session's last turns: nothing more for the busy one, and the
    # final drain, which closes the idle one's first packet and reads it,
    # maps only the page its writer made (the process, tp-sync, never
    # learns of the stop and keeps the buffer until it exits).
    strata("stop", "s")
    check(buffer_kib(idle) == meta + 4, "after the stop, the idle buffer still holds %d KiB (%d)" % (
        meta + 4, buffer_kib(idle)))
    check(buffer_kib(busy) == want, "the busy buffer still holds %d KiB (%d)" % (want, buffer_kib(busy)))
    check(buffer_kib(early) <= top, "the early buffer still holds at most %d KiB (%d)" % (top, buffer_kib(early)))
    for p in apps.values():
        p.stdin.close()
        check(p.wait(timeout=60) == 0, "pid %d exits 0" % p.pid)
        p.stdout.close()
    strata("destroy", "s")
    end_daemon(d, check)
    ticks, discarded = tick_tally(out)
    got = {pid: len(ticks.get(pid, ())) + discarded.get(pid, 0) for pid in set(ticks) | set(discarded)}
    check(got.get(idle) == IDLE and got.get(early) == EARLY and got.get(busy) == BUSY,
          "every event recorded or counted: idle %s of %d, early %s of %d, busy %s of %d" % (
              got.get(idle), IDLE, got.get(early), EARLY, got.get(busy), BUSY))
    check.finish()


if __name__ == "__main__":
    main()
