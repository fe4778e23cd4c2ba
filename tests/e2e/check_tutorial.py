#!/usr/bin/python3
"""A tutorial's shell blocks run as written, their output checked (issue 31:
the docs are tests).

usage: check_tutorial.py [--cwd SUB] [--setup CMD] [--host NAME] DOC SECTION WORKDIR BINDIR...

Every fenced block of the sections of DOC whose heading starts with SECTION
(e.g. "## 7.", or "## 4.|## 5." for several) is read as a terminal session: a line "$ CMD" is a command
(a trailing backslash continues it), the lines after it until the next
command are its output.  The section's commands run in order in one bash
(what it leaves running gets SIGTERM at the end and must exit), with the BINDIRs
first in PATH and a private daemon socket; each must exit 0 and print what
the document shows, where a run of digits stands for any number and "..."
for anything.  "/tmp/" in the document is WORKDIR/ here.

With --cwd, the commands run in WORKDIR/SUB, where every file the document
names before its block ("`hello.c`:" then a fenced block) is first written
as shown, and CMD (--setup) is run there first (it must exit 0): so a
section that builds on the files of earlier ones runs as written.  --host:
the host name the document's output shows, this machine's here.
"""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time


def section_blocks(doc, sections):
    text = open(doc).read()
    blocks = []
    for section in sections.split("|"):
        start = text.index("\n" + section) + 1
        end = text.find("\n## ", start + 1)
        body = text[start:end if end >= 0 else len(text)]
        blocks += re.findall(r"^```(?:sh)?\n(.*?)^```", body, re.M | re.S)
    return blocks


def named_files(doc):
    """{name: content} of the blocks the document introduces with "`NAME`:"."""
    return dict(re.findall(r"`([\w.]+)`:\n\n```\w*\n(.*?)^```", open(doc).read(), re.M | re.S))


def commands(blocks):
    """[(command, [expected lines])] of the blocks, in order."""
    out = []
    for b in blocks:
        lines = b.splitlines()
        k = 0
        while k < len(lines):
            if not lines[k].startswith("$ "):
                k += 1
                continue
            cmd = lines[k][2:]
            while cmd.endswith("\\") and k + 1 < len(lines):
                k += 1
                cmd = cmd[:-1] + " " + lines[k].strip()
            k += 1
            exp = []
            while k < len(lines) and not lines[k].startswith("$ "):
                exp.append(lines[k])
                k += 1
            out.append((cmd, exp))
    return out


def pattern(lines):
    parts = []
    for ln in lines:
        p = re.escape(ln)
        p = p.replace(re.escape("..."), ".*")
        p = re.sub(r"\d+", r"\\d+", p)
        parts.append(p)
    return re.compile("\n".join(parts), re.S)


def end_started(work):
    """SIGTERM to what the section left running (the processes whose
    environment holds STRATA_DOC_RUN=work), then wait until they are gone
    (bounded).  True if they all ended."""
    mark = ("STRATA_DOC_RUN=" + work).encode()
    mine = []
    for p in os.listdir("/proc"):
        try:
            if p.isdigit() and mark in open("/proc/%s/environ" % p, "rb").read().split(b"\0"):
                mine.append(int(p))
        except OSError:
            pass
    for pid in mine:
        try:
            os.kill(pid, signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + 30
    while any(os.path.exists("/proc/%d" % p) and open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[0] != "Z"
              for p in mine if os.path.exists("/proc/%d" % p)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def main():
    args = sys.argv[1:]
    opts = {}
    while args and args[0] in ("--cwd", "--setup", "--host"):
        opts[args[0]] = args[1]
        args = args[2:]
    doc, section, work = args[:3]
    bindirs = args[3:]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    host = opts.get("--host")

    def here(line):
        line = line.replace("/tmp/", work + "/")
        return line.replace(" %s:" % host, " %s:" % socket.gethostname()) if host else line
    cmds = [(c.replace("/tmp/", work + "/"), [here(e) for e in exp])
            for c, exp in commands(section_blocks(doc, section))]
    if not cmds:
        sys.exit("FAIL: no command in section %r of %s" % (section, doc))
    cwd = work
    if "--cwd" in opts:
        cwd = os.path.join(work, opts["--cwd"])
        os.makedirs(cwd)
        for name, content in named_files(doc).items():
            with open(os.path.join(cwd, name), "w") as f:
                f.write(content)
        if "--setup" in opts:
            r = subprocess.run(["bash", "-c", opts["--setup"]], cwd=cwd, capture_output=True, text=True,
                               timeout=120)
            if r.returncode != 0:
                sys.exit("FAIL: setup %r exited %d:\n%s%s" % (opts["--setup"], r.returncode, r.stdout, r.stderr))
    script = ["cd %s" % cwd]
    for k, (c, _) in enumerate(cmds):
        script.append("echo '@@%d@@'" % k)
        script.append(c)
        script.append("echo \"@@rc $?@@\"")
    script.append("echo '@@end@@'")
    env = dict(os.environ, PATH=":".join(bindirs + [os.environ.get("PATH", "")]),
               STRATA_CONSUMERD_SOCKET=os.path.join(work, "consumerd.sock"), STRATA_DOC_RUN=work)
    for v in ("STRATA_EARLY", "XDG_RUNTIME_DIR"):
        env.pop(v, None)
    # Output to a file: a daemon the section started in the background
    # keeps what it inherited open.
    log = os.path.join(work, "session.log")
    with open(log, "w") as f:
        subprocess.run(["bash", "-c", "\n".join(script)], env=env, stdout=f, stderr=subprocess.STDOUT, timeout=120)
    out = open(log).read()
    ended = end_started(work)
    failures = 0
    for k, (c, exp) in enumerate(cmds):
        m = re.search(r"@@%d@@\n(.*?)@@rc (\d+)@@\n" % k, out, re.S)
        got = m.group(1).rstrip("\n") if m else None
        ok = m is not None and m.group(2) == "0" and pattern(exp).fullmatch(got) is not None
        print(("ok   " if ok else "FAIL ") + "$ " + c)
        if not ok:
            failures += 1
            print("  expected:\n    " + "\n    ".join(exp))
            print("  got (exit %s):\n    %s" % (m.group(2) if m else "?", (got or "").replace("\n", "\n    ")))
    if not ended:
        failures += 1
        print("FAIL the processes the section started did not end on SIGTERM")
    print("%d failure(s)" % failures)
    if not failures:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
