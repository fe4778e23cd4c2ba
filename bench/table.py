#!/usr/bin/python3
"""bench/table.py - a bench run's results file as the markdown table of
docs/benchmarks.md.

usage: table.py RESULTS.json...        print each run's table
       table.py --check DOC            DOC's tables are what their files make
       table.py --update DOC           rewrite DOC's tables from their files

bench/run.sh writes a run as data (--json FILE, default
BUILD/bench/results.json; schema 1: date, commit, kind, machine with its CPU
model, CPU count, kernel and clock source, the rows as printed, the lines
under the table).  In a document a table made from a file sits between

    <!-- bench-table: bench/results/NAME.json -->
    ...
    <!-- end bench-table -->

(the path relative to the repository), so that the document's figures are
the file's and tests/style/check_docs_shape.py can check them (--check).
Prose that cites a figure printed under a run's table takes it the same way:

    <!-- bench-lines: bench/results/NAME.json PREFIX -->
    ...
    <!-- end bench-lines -->

writes, as list items indented as the marker is, every line of the file's
`lines` that begins with PREFIX (none is an error: the figure went away).
"""
import json
import os
import re
import sys

HEAD = ("workload", "Strata", "LTTng-UST", "ratio", "target", "met?")
KEYS = ("workload", "strata", "lttng", "ratio", "target", "met")
BEGIN = re.compile(r"^<!-- bench-table: (\S+) -->$")
END = "<!-- end bench-table -->"
LINES_BEGIN = re.compile(r"^(\s*)<!-- bench-lines: (\S+) (.+) -->$")
LINES_END = "<!-- end bench-lines -->"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cell(v):
    return str(v).replace("|", "\\|")


def render(path):
    """The markdown of one results file: a line naming the run and the
    machine, then the table."""
    with open(path) as f:
        r = json.load(f)
    if r.get("schema") != 1:
        raise ValueError("%s: schema %r, expected 1" % (path, r.get("schema")))
    m = r["machine"]
    clock = m["clock_source"] + (" (tsc=unstable)" if m.get("tsc_unstable") else "")
    out = ["Run: `%s` (%s run) at %s, %s. Machine: %s, %d CPUs, Linux %s, clock source `%s`." % (
        r.get("command", "bash bench/run.sh build"), r["kind"], r["commit"], r["date"], m["cpu_model"],
        m["cpus"], m["kernel"], clock)]
    if r.get("source"):
        out[0] += " " + r["source"]
    out.append("")
    out.append("| " + " | ".join(HEAD) + " |")
    out.append("|" + "|".join("---" for _ in HEAD) + "|")
    for row in r["rows"]:
        out.append("| " + " | ".join(cell(row.get(k, "")) for k in KEYS) + " |")
    for ln in r.get("lines", []):
        out.append("")
        out.append(ln)
    return out


def render_lines(path, prefix, indent):
    """The `lines` of one results file that begin with prefix, as list
    items."""
    with open(path) as f:
        r = json.load(f)
    out = [indent + "- " + ln.replace("\n", "\n" + indent + "  ") for ln in r.get("lines", [])
           if ln.startswith(prefix)]
    if not out:
        raise ValueError("%s: no line begins with %r" % (path, prefix))
    return out


def rebuild(doc):
    """(the document's lines with every table made again, [files named])."""
    lines = open(doc).read().split("\n")
    out, files, k = [], [], 0
    while k < len(lines):
        out.append(lines[k])
        m = BEGIN.match(lines[k])
        ml = LINES_BEGIN.match(lines[k])
        k += 1
        if ml:
            files.append(ml.group(2))
            while k < len(lines) and lines[k].strip() != LINES_END:
                k += 1
            if k == len(lines):
                raise ValueError("%s: %s has no %s" % (doc, ml.group(0).strip(), LINES_END))
            out.extend(render_lines(os.path.join(ROOT, ml.group(2)), ml.group(3), ml.group(1)))
            out.append(lines[k])
            k += 1
            continue
        if not m:
            continue
        files.append(m.group(1))
        while k < len(lines) and lines[k] != END:
            k += 1
        if k == len(lines):
            raise ValueError("%s: %s has no %s" % (doc, m.group(0), END))
        out.extend(render(os.path.join(ROOT, m.group(1))))
        out.append(END)
        k += 1
    return out, files


def main(argv):
    if len(argv) == 3 and argv[1] in ("--check", "--update"):
        doc = argv[2]
        new, files = rebuild(doc)
        if argv[1] == "--update":
            with open(doc, "w") as f:
                f.write("\n".join(new))
            return 0
        if not files:
            print("%s: no bench-table block" % doc)
            return 1
        if "\n".join(new) != open(doc).read():
            print("%s: a table is not what its results file makes: run bench/table.py --update %s" % (doc, doc))
            return 1
        return 0
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    for i, p in enumerate(argv[1:]):
        if i:
            print()
        print("\n".join(render(p)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
