#!/usr/bin/python3
"""The man pages are the --help tables in roff (packaging/man.cmake).

usage: check_man_pages.py STRATA STRATA_CONSUMERD MANDIR

Every command `strata --help` lists has MANDIR/man1/strata-CMD.1, and no
page is left for a command that is gone; strata.1 names every command;
strata-consumerd.8 is there.  Each page's options (its .TP rows) are
exactly the options its program's --help shows, in the same order, with
the same value names; and each page is read by groff -man -ww without a warning
(when groff is installed).
"""
import os
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from strata_testlib import Checks  # noqa: E402

HELP_ROW = re.compile(r"^  (-\w)?(?:, )?(--[\w-]+)?(\[=[^\]]+\]| \S+)?(?:\s|$)")


def help_options(text):
    """[(short, long, value)] of the rows --help shows."""
    rows = []
    for line in text.splitlines():
        m = HELP_ROW.match(line)
        if m and (m.group(1) or m.group(2)):
            rows.append((m.group(1) or "", m.group(2) or "", (m.group(3) or "").strip(" []=")))
    return rows


def page_options(roff):
    """The same from a page: the line after each .TP."""
    rows = []
    lines = roff.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line != ".TP":
            continue
        row = lines[i + 1].replace("\\-", "-").replace("\\fB", "").replace("\\fR", "").replace("\\fI", "")
        m = re.match(r"^(-\w)?(?:, )?(--[\w-]+)?(\[=[^\]]+\]| \S+)?$", row)
        rows.append((m.group(1) or "", m.group(2) or "", (m.group(3) or "").strip(" []=")) if m else ("?", row, ""))
    return rows


def lint(check, path):
    if not shutil.which("groff"):
        return
    r = subprocess.run(["groff", "-man", "-ww", "-z", path], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
    check(r.returncode == 0 and not r.stderr.strip(), "%s: groff -man -ww reads it without a warning (%s)"
          % (os.path.basename(path), r.stderr.strip()[:300]))


def main():
    strata, consumerd, mandir = sys.argv[1:4]
    env = {"PATH": "/usr/bin:/bin", "STRATA_CONSUMERD_SOCKET": "/nonexistent/strata.sock"}
    check = Checks()

    def run(*args):
        return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=60).stdout

    commands = re.findall(r"^  ([a-z-]+) ", run(strata, "--help"), re.M)
    check(len(commands) >= 16, "strata --help lists the commands (%s)" % commands)
    pages = sorted(os.listdir(os.path.join(mandir, "man1")))
    want = sorted(["strata.1"] + ["strata-%s.1" % c for c in commands])
    check(pages == want, "man1 holds strata.1 and one page per command (extra %s, missing %s)"
          % (sorted(set(pages) - set(want)), sorted(set(want) - set(pages))))
    top = open(os.path.join(mandir, "man1", "strata.1")).read()
    for c in commands:
        check(re.search(r"^  %s: " % re.escape(c.replace("-", "\\-")), top, re.M) is not None,
              "strata.1 names %s" % c)
    lint(check, os.path.join(mandir, "man1", "strata.1"))
    tables = [(["strata", c], [strata, c], os.path.join(mandir, "man1", "strata-%s.1" % c)) for c in commands]
    tables.append((["strata-consumerd"], [consumerd], os.path.join(mandir, "man8", "strata-consumerd.8")))
    for who, argv, path in tables:
        if not os.path.exists(path):
            check(False, "%s exists" % path)
            continue
        want = help_options(run(*argv, "--help"))
        got = page_options(open(path).read())
        check(got == want, "%s: the page's %d options are --help's %d (page %s, help %s)"
              % (" ".join(who), len(got), len(want),
                 [r for r in got if r not in want][:3], [r for r in want if r not in got][:3]))
        lint(check, path)
    check.finish()


if __name__ == "__main__":
    sys.exit(main())
