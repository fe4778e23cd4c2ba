#!/usr/bin/python3
"""style.docs: the documents stay design, not logs (issue 52).

usage: check_docs_shape.py SOURCE_DIR

- every README.md, CONTRIBUTING.md and docs/*.md has at most its cap of
  lines (CAPS; DEFAULT_CAP for the others): history belongs in git and
  CHANGELOG.md, so a document that keeps growing is a log;
- no heading (a markdown "#" line outside code blocks, or a paragraph's bold
  lead-in "**...**") is a run log's: dated ("2026-11-26 run", "(since
  2026-11-24)") or numbered ("The ninth session", "session 8", "run 3");
- CHANGELOG.md has one "## Unreleased" section, on top, and its other
  sections are releases, "## X.Y.Z (YYYY-MM-DD)";
- the tables of docs/benchmarks.md are what bench/table.py makes from their
  results files (bench/table.py --check).

Fails naming each document and line.  Under a second.
"""
import glob
import os
import re
import subprocess
import sys

DEFAULT_CAP = 800
# The larger design notes, each capped a little above its size once its run
# logs were cut: raise a cap only for design a document has to carry.
CAPS = {
    "docs/benchmarks.md": 300,
    "docs/ring-buffer.md": 735,
    "docs/control-protocol.md": 950,
    "docs/kernel-module.md": 800,
    "docs/pthread.md": 315,
    "docs/probes.md": 720,
    "docs/crash.md": 700,
}
ORDINAL = (r"(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
           r"\d+(st|nd|rd|th))")
RUN_LOG = [
    (re.compile(r"\b\d{4}-\d{2}-\d{2}\b"), "dated"),
    (re.compile(r"\b" + ORDINAL + r"\s+(session|run|sitting)s?\b", re.I), "numbered session"),
    (re.compile(r"\b(session|run|sitting)\s+#?\d+\b", re.I), "numbered session"),
]
FENCE = re.compile(r"^\s*(```|~~~)")
BOLD_LEAD = re.compile(r"^\*\*(.+?)\*\*")
RELEASE = re.compile(r"^## \d+\.\d+\.\d+ \(\d{4}-\d{2}-\d{2}\)$")


def headings(path):
    """(line number, text) of every heading and bold lead-in outside code."""
    out, fenced = [], False
    for n, line in enumerate(open(path, encoding="utf-8").read().split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced or line.startswith("    "):
            continue
        if re.match(r"^#{1,6} ", line):
            out.append((n, line))
        else:
            m = BOLD_LEAD.match(line)
            if m:
                out.append((n, m.group(1)))
    return out


def check_doc(src, rel, fail):
    path = os.path.join(src, rel)
    n = len(open(path, encoding="utf-8").read().rstrip("\n").split("\n"))
    cap = CAPS.get(rel, DEFAULT_CAP)
    if n > cap:
        fail("%s: %d lines, over its cap of %d (design and today's figures only; history goes to "
             "git and CHANGELOG.md)" % (rel, n, cap))
    for ln, text in headings(path):
        for rx, kind in RUN_LOG:
            if rx.search(text):
                fail("%s:%d: %s run-log heading: %s" % (rel, ln, kind, text.strip()))


def check_changelog(src, fail):
    rel = "CHANGELOG.md"
    secs = [(n, l) for n, l in enumerate(open(os.path.join(src, rel)).read().split("\n"), 1)
            if l.startswith("## ")]
    if not secs or secs[0][1] != "## Unreleased":
        fail("%s: the first section must be '## Unreleased'" % rel)
    for n, l in secs[1:]:
        if not RELEASE.match(l):
            fail("%s:%d: not a release heading '## X.Y.Z (YYYY-MM-DD)': %s" % (rel, n, l))


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    src = argv[1]
    errors = []
    docs = ["README.md", "CONTRIBUTING.md"] + sorted(
        os.path.relpath(p, src) for p in glob.glob(os.path.join(src, "docs", "*.md")))
    for rel in docs:
        check_doc(src, rel, errors.append)
    for rel in CAPS:
        if rel not in docs:
            errors.append("%s: capped in CAPS but missing" % rel)
    check_changelog(src, errors.append)
    p = subprocess.run([sys.executable, os.path.join(src, "bench", "table.py"), "--check",
                        os.path.join(src, "docs", "benchmarks.md")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        errors.append(p.stdout.strip())
    for e in errors:
        print("FAIL: " + e)
    if errors:
        return 1
    print("ok: %d documents within their caps, no run-log heading, CHANGELOG in releases, "
          "benchmarks.md's tables made from bench/results" % len(docs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
