#!/usr/bin/python3
"""The progress bar of `strata export` and `strata analyze mutex`: drawn on
standard error when it is a terminal (under script(1), a pseudo-terminal)
and erased at the end; never when it is a pipe.  The trace (pt_lockloop,
200,000 events) is past the first drawing point (65,536 events) whatever
the machine's speed.

usage: check_progress.py STRATA PT_LOCKLOOP WORKDIR"""
import os
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timeline_check import fail, record, run  # noqa: E402


def main():
    strata, loop, work = sys.argv[1:4]
    if not shutil.which("script"):
        print("SKIP: no script(1) (util-linux)")
        return 77
    trace = record(strata, work, [loop, "50000", "2"], subbuf="4M")
    for cmd, label in (([strata, "export", trace, "-o", os.path.join(work, "t.pftrace")], "export"),
                       ([strata, "analyze", "mutex", trace], "analyze")):
        tty = subprocess.run(["script", "-qec", " ".join(shlex.quote(c) for c in cmd) + " >/dev/null", "/dev/null"],
                             capture_output=True, timeout=300)
        out = tty.stdout.decode(errors="replace")
        if tty.returncode != 0 or ("\rstrata %s: [" % label) not in out or "\r\x1b[K" not in out:
            fail("%s on a terminal: no progress bar drawn and erased (%d, %r)" % (label, tty.returncode, out[-300:]))
        pipe = run(cmd)
        if "[" in pipe.stderr and "events" in pipe.stderr.split("[")[1][:60] or "\r" in pipe.stderr:
            fail("%s into a pipe drew a bar: %r" % (label, pipe.stderr[-300:]))
    print("ok: progress bars on a terminal only")
    return 0


if __name__ == "__main__":
    sys.exit(main())
