#!/usr/bin/env python3
"""qmp-dump.py SOCKET DUMP TIMEOUT - the host's half of a guest panic
(run-vm.sh --crash-dump): on qemu's QMP socket, wait for the
GUEST_PANICKED event (the guest's pvpanic device, qemu run with
-action panic=pause), then dump-guest-memory as an ELF core to DUMP
(synchronous: the command returns once the file is written), then quit
qemu.  Exit 0 once the dump is written, 1 otherwise (no panic within
TIMEOUT seconds, qemu gone, dump refused)."""
import json
import os
import socket
import sys
import time


def main():
    path, dump, tmo = sys.argv[1], sys.argv[2], float(sys.argv[3])
    deadline = time.monotonic() + tmo
    s = socket.socket(socket.AF_UNIX)
    # qemu creates the socket as it starts (wait=off): connect once it is
    # there.  Bounded; not a synchronisation with the guest.
    while True:
        try:
            s.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            if time.monotonic() > deadline - 5:
                print("qmp-dump: no QMP socket at", path)
                return 1
            time.sleep(0.1)
    f = s.makefile("rwb", buffering=0)

    def send(cmd, **args):
        msg = {"execute": cmd}
        if args:
            msg["arguments"] = args
        f.write(json.dumps(msg).encode() + b"\n")

    def read():
        s.settimeout(max(1.0, deadline - time.monotonic()))
        line = f.readline()
        if not line:
            raise EOFError("qemu closed the QMP socket")
        return json.loads(line)

    def answer(cmd, **args):
        send(cmd, **args)
        while True:
            m = read()
            if "event" in m:
                print("qmp-dump: event", m["event"])
                continue
            return m

    try:
        read()  # greeting
        answer("qmp_capabilities")
        while True:
            m = read()
            if m.get("event") == "GUEST_PANICKED":
                print("qmp-dump: guest panicked:", json.dumps(m.get("data", {})))
                break
            if "event" in m:
                print("qmp-dump: event", m["event"])
        t0 = time.monotonic()
        r = answer("dump-guest-memory", paging=False, protocol="file:" + os.path.abspath(dump))
        if "error" in r:
            print("qmp-dump: dump-guest-memory:", r["error"])
            return 1
        print("qmp-dump: %d MiB written in %.1f s" % (os.path.getsize(dump) >> 20, time.monotonic() - t0))
        answer("quit")
        return 0
    except (EOFError, OSError, ValueError) as e:
        print("qmp-dump:", e)
        return 1


sys.exit(main())
