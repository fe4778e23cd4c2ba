#!/usr/bin/python3
"""A daemon killed (SIGKILL) while a session is active, in the middle of a
packet write: the stream file then ends inside a packet and babeltrace2
refuses the whole trace.  The next daemon on the same socket repairs the
output directories of the sessions that were active.

The torn write is made exact: after the kill, half of a real packet is
appended to the largest stream file, as an interrupted write() leaves it.
Oracle: babeltrace2 fails on the torn trace; after the next daemon started,
it reads exactly the events it read before the tear, with no error.
"""
import os
import signal
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks, bt_text, control_setup, start_daemon  # noqa: E402


def bt_events(path):
    rc, lines, errors, _ = bt_text(path)
    return rc, len(lines), errors


def main():
    a, work, env, strata = control_setup("strata-crash-", "demo")
    out = os.path.join(work, "trace")

    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    strata("create", "s", "-o", out)
    strata("enable-event", "s", "*")
    strata("start", "s")
    subprocess.run([a.demo, "--threads", "2", "--events", "20000"], env=env, check=True, stdout=subprocess.DEVNULL)
    # The demo exited; its drain finished when the daemon saw the exit.
    # Every packet on disk, then the session active again, as a long-running
    # session would be when its daemon is killed.
    strata("stop", "s")
    strata("start", "s")
    d.send_signal(signal.SIGKILL)
    d.wait()
    check = Checks()


    rc, before, _ = bt_events(out)
    check(rc == 0 and before > 0, "the trace reads before the tear (%d events)" % before)
    streams = []
    for root, _, files in os.walk(out):
        streams += [os.path.join(root, f) for f in files if f.startswith("channel0_") and not f.endswith(".idx")]
    big = max(streams, key=os.path.getsize)
    with open(big, "rb") as f:
        first = f.read(131072 * 2)
    size = struct.unpack_from("<Q", first, 56)[0] // 8  # first packet's packet_size (bits -> bytes)
    with open(big, "ab") as f:
        f.write(first[: size // 2])
    rc, _, _ = bt_events(out)
    check(rc != 0, "babeltrace2 refuses the torn trace (status %d)" % rc)

    d = start_daemon(a.consumerd, env["STRATA_CONSUMERD_SOCKET"], env)
    d.send_signal(signal.SIGTERM)
    d.wait(timeout=30)
    rc, after, errors = bt_events(out)
    check(rc == 0 and not errors, "after the next daemon started, babeltrace2 reads it (status %d, %s)" %
          (rc, errors[:1]))
    check(after == before, "the same %d events as before the tear (%d)" % (before, after))
    check(not os.path.exists(env["STRATA_CONSUMERD_SOCKET"] + ".active"), "the active-sessions note is gone")
    check.finish()


if __name__ == "__main__":
    main()
