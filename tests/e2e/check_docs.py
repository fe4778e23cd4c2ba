#!/usr/bin/python3
"""A document's shell blocks run as written, their output checked (issue 31:
the docs are tests).

usage: check_docs.py DOC WORKDIR BUILD_DIR
       check_docs.py --coverage SOURCE_DIR DOC...

The document is read from the top as a terminal session, in one bash:

- a fenced block introduced by a line ending in "`NAME`:" (e.g. "`hello.c`:")
  is written to the file NAME in the session's current directory, as shown;
- a fenced block tagged `sh` (or untagged, holding "$ " lines) is run: a line
  "$ CMD" is a command (a trailing backslash continues it) and the lines
  after it, up to the next command, its output; in a `sh` block without "$ "
  every line is a command whose output is not checked.  Each command must
  exit 0 and print what the document shows, where a run of digits stands for
  any number, 0x and hex digits for any hex number, and "..." for anything.
  A command ending in "&" runs in the background and must show no output;
- an HTML comment `<!-- doc-test: skip: REASON -->` before a block says the
  block is not run, and why (installs packages, needs qemu or a second
  machine); `<!-- doc-test: setup: CMD -->` runs CMD at that point (exit 0,
  output not checked); `<!-- doc-test: host: NAME -->` is the host name the
  document's output shows, this machine's here.

"/tmp/" in the document is WORKDIR/ here.  Before the first command the
build tree is installed into WORKDIR/prefix (cmake --install; nothing outside
WORKDIR is used), whose bin/ is first in PATH and whose strata.pc is on
PKG_CONFIG_PATH; STRATA_DOC_PREFIX, STRATA_DOC_BUILD name them for the
setup comments.  The daemon socket is WORKDIR's own.  What the session
leaves running gets SIGTERM at the end and must exit.

--coverage: every shell block of SOURCE_DIR's README.md and docs/*.md is
either in one of the DOCs (the documents the suite runs) or marked skip with
a reason; fails naming the documents where it is not.
"""
import glob
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

SHELL_TAGS = ("sh", "console", "bash")
DIRECTIVE = re.compile(r"^\s*<!-- doc-test: (skip|setup|host): (.*?) -->\s*$")
FENCE = re.compile(r"^(\s*)```(\S*)")


def parse(doc):
    """[(kind, data)] in document order: ("file", (name, text)),
    ("block", (tag, lines)), ("skip", (reason, lines)), ("setup", cmd),
    ("host", name)."""
    lines = open(doc).read().splitlines()
    items = []
    pending_skip = None
    k = 0
    while k < len(lines):
        line = lines[k]
        d = DIRECTIVE.match(line)
        if d:
            if d.group(1) == "skip":
                pending_skip = d.group(2)
            else:
                items.append((d.group(1), d.group(2)))
            k += 1
            continue
        f = FENCE.match(line)
        if not f:
            k += 1
            continue
        indent, tag = len(f.group(1)), f.group(2)
        body = []
        k += 1
        while k < len(lines) and not FENCE.match(lines[k]):
            body.append(lines[k][indent:] if lines[k][:indent].strip() == "" else lines[k])
            k += 1
        k += 1
        # "`NAME`:" ending the last non-blank line before the fence.
        prev = [ln for ln in lines[:k - len(body) - 2][-3:] if ln.strip()]
        named = re.search(r"`([\w.-]+)`:\s*$", prev[-1]) if prev else None
        if tag in SHELL_TAGS or (tag == "" and any(b.startswith("$ ") for b in body)):
            items.append(("skip", (pending_skip, body)) if pending_skip else ("block", (tag, body)))
        elif named:
            items.append(("file", (named.group(1), "\n".join(body) + "\n")))
        pending_skip = None
    return items


def commands(tag, body):
    """[(command, [expected lines] or None when not checked)] of a block."""
    out = []
    dollar = any(b.startswith("$ ") for b in body)
    k = 0
    while k < len(body):
        if dollar and not body[k].startswith("$ "):
            k += 1
            continue
        cmd = body[k][2:] if dollar else body[k]
        while cmd.endswith("\\") and k + 1 < len(body):
            k += 1
            cmd = cmd[:-1] + " " + body[k].strip()
        k += 1
        if not dollar:
            if cmd.strip():
                out.append((cmd, None))
            continue
        exp = []
        while k < len(body) and not body[k].startswith("$ "):
            if not body[k].startswith("# "):   # a comment between commands
                exp.append(body[k])
            k += 1
        out.append((cmd, exp))
    return out


def pattern(lines):
    """A line "..." stands for any number of lines, "..." in a line for
    anything, a run of digits for any number, 0x and hex digits (or @ and
    lower-case hex digits: a Java identity hash) for any such number; two or
    more spaces before a number for any run of spaces (a right-aligned
    column, as wide as its widest number)."""
    token = re.compile(r"\.\.\.|0x[0-9A-Fa-f]+|@[0-9a-f]+|\d+")
    wild = {"...": ".*"}
    p = ""
    for ln in lines:
        ln = ln.rstrip()
        if ln == "...":
            p += r"(?:[^\n]*\n)*"
            continue
        at = 0
        for m in token.finditer(ln):
            tok = m.group(0)
            lit = ln[at:m.start()]
            if tok != "..." and lit.endswith("  "):
                p += re.escape(lit.rstrip(" ")) + " +"
            else:
                p += re.escape(lit)
            p += wild.get(tok) or {"0": "0x[0-9A-Fa-f]+", "@": "@[0-9a-f]+"}.get(tok[0] if tok[:2] == "0x" or tok[0] == "@" else "", r"\d+")
            at = m.end()
        p += re.escape(ln[at:]) + "\n"
    return re.compile(p, re.S)


def end_started(work):
    """SIGTERM to what the session left running (the processes whose
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

    def alive(p):
        try:
            return open("/proc/%d/stat" % p).read().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False
    deadline = time.monotonic() + 30
    while any(alive(p) for p in mine):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def heredoc(name, text):
    mark = "STRATA_DOC_EOF"
    while mark in text:
        mark += "_"
    return "cat > %s <<'%s'\n%s%s" % (name, mark, text, mark)


def run_doc(doc, work, build):
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    prefix = os.path.join(work, "prefix")
    r = subprocess.run(["cmake", "--install", build, "--prefix", prefix], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("FAIL: cmake --install %s --prefix %s:\n%s%s" % (build, prefix, r.stdout, r.stderr))
    host = None
    steps = []   # (label, command, expected or None)
    skipped = []

    def here(s):
        s = s.replace("/tmp/", work + "/")
        return s.replace(" %s:" % host, " %s:" % socket.gethostname()) if host else s
    for kind, data in parse(doc):
        if kind == "host":
            host = data
        elif kind == "file":
            steps.append(("write " + data[0], heredoc(data[0], here(data[1])), None))
        elif kind == "setup":
            steps.append(("setup", here(data), None))
        elif kind == "skip":
            skipped.append((data[0], data[1]))
        else:
            for c, exp in commands(*data):
                steps.append(("$", here(c), [here(e) for e in exp] if exp is not None else None))
    if not any(label == "$" for label, _, _ in steps):
        sys.exit("FAIL: no command to run in %s" % doc)
    script = ["cd %s" % work]
    for k, (_, c, _) in enumerate(steps):
        script += ["echo '@@%d@@'" % k, c, "echo \"@@rc $?@@\""]
    script.append("echo '@@end@@'")
    env = dict(os.environ, PATH=os.path.join(prefix, "bin") + ":" + os.environ.get("PATH", ""),
               PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"),
               STRATA_CONSUMERD_SOCKET=os.path.join(work, "consumerd.sock"), STRATA_DOC_RUN=work,
               STRATA_DOC_PREFIX=prefix, STRATA_DOC_BUILD=build)
    for v in ("STRATA_EARLY", "XDG_RUNTIME_DIR", "LD_LIBRARY_PATH", "LD_PRELOAD", "STRATA_AGGREGATE"):
        env.pop(v, None)
    # Output to a file: a daemon the session started in the background
    # keeps what it inherited open.
    log = os.path.join(work, "session.log")
    with open(log, "w") as f:
        try:
            subprocess.run(["bash", "-c", "\n".join(script)], env=env, stdout=f, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, timeout=300)
        except subprocess.TimeoutExpired:
            print("FAIL the session did not end within 300 s")
    out = open(log).read()
    ended = end_started(work)
    failures = 0
    for k, (label, c, exp) in enumerate(steps):
        m = re.search(r"@@%d@@\n(.*?)@@rc (\d+)@@\n" % k, out, re.S)
        got = "\n".join(ln.rstrip() for ln in m.group(1).rstrip("\n").split("\n")) if m else None
        ok = m is not None and m.group(2) == "0" and (exp is None or pattern(exp).fullmatch(got + "\n" if got else "") is not None)
        shown = c if label == "$" or label == "setup" else label
        print(("ok   " if ok else "FAIL ") + ("$ " if label == "$" else label + ": ") + shown.split("\n")[0])
        if not ok:
            failures += 1
            if exp is not None:
                print("  expected:\n    " + "\n    ".join(exp))
            print("  got (exit %s):\n    %s" % (m.group(2) if m else "?", (got or "").replace("\n", "\n    ")))
    for reason, body in skipped:
        print("skip (%s): %s" % (reason, (body[0] if body else "").strip()))
    if not ended:
        failures += 1
        print("FAIL the processes the session started did not end on SIGTERM")
    print("%d failure(s), %d block(s) skipped" % (failures, len(skipped)))
    if not failures:
        shutil.rmtree(work, ignore_errors=True)
    return failures


def coverage(source, run_docs):
    """Every shell block of README.md and docs/*.md is run or skipped."""
    run = {os.path.realpath(d) for d in run_docs}
    bad = 0
    for doc in [os.path.join(source, "README.md")] + sorted(glob.glob(os.path.join(source, "docs", "*.md"))):
        blocks = [d for kind, d in parse(doc) if kind == "block"]
        if blocks and os.path.realpath(doc) not in run:
            bad += 1
            print("FAIL %s: %d shell block(s) neither run by the suite nor marked "
                  "<!-- doc-test: skip: REASON --> (first: %r)" % (doc, len(blocks), blocks[0][1][0]))
        else:
            print("ok   %s" % doc)
    return bad


def main():
    if sys.argv[1:2] == ["--coverage"]:
        sys.exit(1 if coverage(sys.argv[2], sys.argv[3:]) else 0)
    doc, work, build = (os.path.abspath(a) for a in sys.argv[1:4])
    sys.exit(1 if run_doc(doc, work, build) else 0)


if __name__ == "__main__":
    main()
