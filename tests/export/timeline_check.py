"""Readers of `strata export` output that are not ours: protoc (against
tests/export/perfetto_subset.proto, written from Perfetto's documented field
numbers) for the protobuf trace, json + jsonschema for the Chrome JSON
trace.  Shared by check_export_fixture.py and check_export_pthread.py."""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO = os.path.join(HERE, "perfetto_subset.proto")


sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import fail  # noqa: E402,F401  (the checks import it from here too)


def run(cmd, env=None):
    """cmd's completed process; fails the test unless it exits 0."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if r.returncode != 0:
        fail("%s: exit %d\n%s%s" % (cmd, r.returncode, r.stdout, r.stderr))
    return r


def record(strata, work, prog, subbuf="1M"):
    """A fresh WORK/trace of PROG (argv) under the pthread preload, every
    lock pair a record, with a private daemon socket; its path."""
    import shutil
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    trace = os.path.join(work, "trace")
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env["STRATA_CONSUMERD_SOCKET"] = os.path.join(work, "no-daemon.sock")
    # Every pair a record of its own, so that every hold is an interval
    # (counting, the preload's default, draws none: docs/viewing.md).
    env["STRATA_PTHREAD_COUNT"] = "0"
    run([strata, "record", "-o", trace, "--preload", "pthread", "--subbuf-size", subbuf, "--"] + prog, env=env)
    return trace


def record_contend(strata, workload, work, threads):
    """record() of pt_workload contend with THREADS threads."""
    return record(strata, work, [workload, "contend", os.path.join(work, "prog.json"), str(threads), "100", "50"])


def protoc_decode(path):
    """The trace as protoc prints it, parsed into nested dicts (repeated and
    message fields as lists).  protoc fails on a wire-format error; an
    unknown field number would print as a bare number, which we refuse."""
    with open(path, "rb") as f:
        r = subprocess.run(["protoc", "--proto_path=" + HERE, "--decode=perfetto.protos.Trace", PROTO],
                           stdin=f, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        fail("protoc --decode: " + r.stderr)
    return parse_text(r.stdout)


def parse_text(text):
    root = {}
    stack = [root]
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line == "}":
            stack.pop()
            continue
        m = re.match(r"^(\w+) \{$", line)
        if m:
            if m.group(1)[0].isdigit():
                fail("protoc printed an unknown field %s" % m.group(1))
            child = {}
            stack[-1].setdefault(m.group(1), []).append(child)
            stack.append(child)
            continue
        m = re.match(r"^(\w+): (.*)$", line)
        if not m:
            fail("cannot parse protoc line %r" % line)
        key, val = m.group(1), m.group(2)
        if key[0].isdigit():
            fail("protoc printed an unknown field %s" % key)
        if val.startswith('"'):
            val = unquote(val)
        elif re.match(r"^-?\d+$", val):
            val = int(val)
        stack[-1].setdefault(key, []).append(val)
    if len(stack) != 1:
        fail("unbalanced protoc output")
    return root


def unquote(lit):
    """A protoc text-format string literal ("..." with C escapes: \\n,
    \\", \\', \\\\, octal \\ooo, hex \\xhh) as text (UTF-8)."""
    body, out, i = lit[1:-1], bytearray(), 0
    simple = {"n": 10, "t": 9, "r": 13, '"': 34, "'": 39, "\\": 92, "a": 7, "b": 8, "f": 12, "v": 11, "?": 63}
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode()
            i += 1
            continue
        n = body[i + 1]
        if n in simple:
            out.append(simple[n])
            i += 2
        elif n in "01234567":
            j = i + 1
            while j < len(body) and j < i + 4 and body[j] in "01234567":
                j += 1
            out.append(int(body[i + 1:j], 8) & 255)
            i = j
        elif n == "x":
            j = i + 2
            while j < len(body) and j < i + 4 and body[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(body[i + 2:j], 16))
            i = j
        else:
            fail("unknown escape in protoc output: %r" % lit)
    return out.decode("utf-8", errors="replace")


def one(msg, key, default=None):
    v = msg.get(key)
    if not v:
        return default
    if len(v) != 1:
        fail("%s repeated: %r" % (key, v))
    return v[0]


def packets(trace):
    return trace.get("packet", [])


# The Chrome JSON trace-event format, as much as we write of it.
CHROME_SCHEMA = {
    "type": "object",
    "required": ["traceEvents"],
    "properties": {
        "displayTimeUnit": {"enum": ["ms", "ns"]},
        "traceEvents": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["ph", "pid"],
                "properties": {
                    "ph": {"enum": ["B", "E", "X", "i", "C", "b", "e", "s", "f", "M"]},
                    "name": {"type": "string"},
                    "cat": {"type": "string"},
                    "pid": {"type": "integer"},
                    "tid": {"type": "integer"},
                    "ts": {"type": "number"},
                    "dur": {"type": "number", "minimum": 0},
                    "s": {"enum": ["t", "p", "g"]},
                    "id": {"type": ["string", "integer"]},
                    "bp": {"enum": ["e"]},
                    "args": {"type": "object"},
                },
                "allOf": [
                    {"if": {"properties": {"ph": {"const": "M"}}},
                     "then": {"required": ["name", "args"]},
                     "else": {"required": ["ts"]}},
                    {"if": {"properties": {"ph": {"enum": ["B", "X", "i", "C", "b", "e", "s", "f"]}}},
                     "then": {"required": ["name"]}},
                    {"if": {"properties": {"ph": {"enum": ["b", "e", "s", "f"]}}},
                     "then": {"required": ["id", "cat"]}},
                    {"if": {"properties": {"ph": {"const": "X"}}}, "then": {"required": ["dur", "tid"]}},
                    {"if": {"properties": {"ph": {"enum": ["B", "E", "X"]}}}, "then": {"required": ["tid"]}},
                ],
            },
        },
    },
}


def check_json(path):
    """Schema, then structure: B/E balanced and nested per thread in time
    order, b/e paired per (cat, id, name), every flow start ended once.
    Returns the events."""
    import jsonschema
    with open(path) as f:
        doc = json.load(f)
    jsonschema.validate(doc, CHROME_SCHEMA)
    evs = doc["traceEvents"]
    # B/E per thread, in time order (stable: the file's order for equal ts).
    per_thread = {}
    for i, e in enumerate(evs):
        if e["ph"] in "BE":
            per_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], i, e))
    for key, lst in per_thread.items():
        lst.sort(key=lambda x: (x[0], x[1]))
        depth = 0
        for _, _, e in lst:
            depth += 1 if e["ph"] == "B" else -1
            if depth < 0:
                fail("E without B on thread %r at %s" % (key, e["ts"]))
    opened = {}
    for e in evs:
        if e["ph"] in "be":
            k = (e["cat"], e["id"], e["name"])
            opened[k] = opened.get(k, 0) + (1 if e["ph"] == "b" else -1)
            if opened[k] < 0:
                fail("async e before b: %r" % (k,))
    starts = [e["id"] for e in evs if e["ph"] == "s"]
    ends = [e["id"] for e in evs if e["ph"] == "f"]
    if len(set(ends)) != len(ends) or not set(ends) <= set(starts):
        fail("flow ends without one start each: %r %r" % (starts, ends))
    return evs
