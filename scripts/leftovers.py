#!/usr/bin/env python3
"""What a test run leaves behind in the shared temporary and runtime places.

usage: leftovers.py snapshot FILE    (before the run: what is there)
       leftovers.py compare FILE     (after it: what is new; exit 1 if any is Strata's)

The places: /tmp, /var/tmp, /dev/shm, /run, /run/strata, $XDG_RUNTIME_DIR and
$XDG_RUNTIME_DIR/strata, each listed one level deep (entries of the current
user only).  After the run every new entry is listed; one whose name says
strata (strata-record-XXXXXX, strata-state-XXXXXX, a daemon's socket or
<socket>.state, ...) fails the run: the suite and the daemons it starts leave
nothing of Strata's outside their build tree.  A new entry not named so is
listed as a note only: another program of the same user may have made it.
"""
import json
import os
import sys


def places():
    out = ["/tmp", "/var/tmp", "/dev/shm", "/run", "/run/strata"]
    xdg = os.environ.get("XDG_RUNTIME_DIR", "")
    if xdg.startswith("/"):
        out += [xdg, os.path.join(xdg, "strata")]
    return out


def entries():
    uid = os.getuid()
    found = set()
    for d in places():
        try:
            names = os.listdir(d)
        except OSError:
            continue
        for n in names:
            p = os.path.join(d, n)
            try:
                if os.lstat(p).st_uid == uid:
                    found.add(p)
            except OSError:
                pass
    return found


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("snapshot", "compare"):
        sys.exit(__doc__.strip().splitlines()[2])
    what, path = sys.argv[1], sys.argv[2]
    if what == "snapshot":
        with open(path, "w") as f:
            json.dump(sorted(entries()), f)
        return 0
    with open(path) as f:
        before = set(json.load(f))
    new = sorted(entries() - before)
    ours = [p for p in new if "strata" in p.lower()]
    for p in new:
        print("%s: %s" % ("LEFT BEHIND" if p in ours else "new (not named Strata's)", p))
    print("leftovers: %d new entr%s, %d of them Strata's" % (len(new), "y" if len(new) == 1 else "ies", len(ours)))
    return 1 if ours else 0


if __name__ == "__main__":
    sys.exit(main())
