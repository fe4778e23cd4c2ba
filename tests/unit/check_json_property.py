#!/usr/bin/python3
"""Random bytes through every JSON output a unit can drive, parsed strictly.

usage: check_json_property.py JSON_PROPERTY [SEED] [CASES]

Runs JSON_PROPERTY (tests/unit/json_property.cpp) and checks each document
it wrote: it is UTF-8 (strict decoding), JSON (json.loads with strict=True:
no raw control character in a string; NaN and Infinity refused), and holds
what went in, as the writer's contract says (libtrace/json/json_writer.h):
each string as Python's bytes.decode('utf-8', 'replace') makes it (every
maximal ill-formed subsequence one U+FFFD).  For the writer's documents the
scalars are compared one by one, in order (integers exactly, doubles by
their bits, fixed-point numbers as decimals); for export, analyze and top
every string put in must be one of the document's strings; for text (SQL's,
utf8_append_repaired) the repaired string and whether the bytes were
well-formed (utf8_well_formed) against Python's strict decoding.
"""
import decimal
import json
import struct
import subprocess
import sys


def refuse_constant(name):
    raise ValueError("non-JSON constant %s" % name)


def strict_loads(text):
    return json.loads(text, strict=True, parse_constant=refuse_constant,
                      parse_float=decimal.Decimal, object_pairs_hook=lambda pairs: ("obj", pairs))


def scalars(v, out):
    """The document's scalars in order: keys and values, depth first."""
    if isinstance(v, tuple) and v[0] == "obj":
        for k, x in v[1]:
            out.append(("s", k))
            scalars(x, out)
    elif isinstance(v, list):
        for x in v:
            scalars(x, out)
    else:
        out.append(("s" if isinstance(v, str) else "v", v))
    return out


def expected(token):
    kind, _, rest = token.partition(" ")
    if kind == "s":
        return ("s", bytes.fromhex(rest[1:]).decode("utf-8", "replace"))
    if kind in ("i", "u"):
        return ("v", int(rest))
    if kind == "d":
        return ("v", struct.unpack("<d", struct.pack("<Q", int(rest, 16)))[0])
    if kind == "x":
        v, d = rest.split()
        return ("v", decimal.Decimal(int(v)).scaleb(-int(d)))
    if kind == "b":
        return ("v", rest == "1")
    if kind == "w":  # whether the bytes are well-formed UTF-8
        try:
            bytes.fromhex(rest[1:]).decode("utf-8")
            return ("v", True)
        except UnicodeDecodeError:
            return ("v", False)
    return ("v", None)


def same(got, want):
    if got[0] != want[0]:
        return False
    g, w = got[1], want[1]
    if isinstance(w, bool) or w is None or isinstance(g, bool) or g is None:
        return g is w
    if isinstance(w, float):
        return isinstance(g, (int, decimal.Decimal)) and float(g) == w
    if isinstance(w, str):
        return isinstance(g, str) and g == w
    return not isinstance(g, str) and g == w


def main():
    prog = sys.argv[1]
    seed = sys.argv[2] if len(sys.argv) > 2 else "1"
    cases = sys.argv[3] if len(sys.argv) > 3 else "4000"
    out = subprocess.run([prog, seed, cases], capture_output=True, timeout=120)
    if out.returncode != 0:
        print("json_property exited %d: %s" % (out.returncode, out.stderr.decode(errors="replace")))
        return 1
    data, pos, docs, failures = out.stdout, 0, {}, 0
    while pos < len(data):
        nl = data.index(b"\n", pos)
        _, kind, n = data[pos:nl].decode().split()
        pos = nl + 1
        tokens = []
        for _ in range(int(n)):
            nl = data.index(b"\n", pos)
            tokens.append(data[pos:nl].decode())
            pos = nl + 1
        nl = data.index(b"\n", pos)
        size = int(data[pos:nl])
        doc = data[nl + 1:nl + 1 + size]
        pos = nl + 1 + size + 1
        docs[kind] = docs.get(kind, 0) + 1
        try:
            parsed = strict_loads(doc.decode("utf-8"))
        except ValueError as e:
            failures += 1
            print("FAIL %s: not strict UTF-8 JSON (%s): %r" % (kind, e, doc[:400]))
            continue
        got = scalars(parsed, [])
        want = [expected(t) for t in tokens]
        if kind in ("writer", "text"):
            ok = len(got) == len(want) and all(same(g, w) for g, w in zip(got, want))
        else:
            strings = set(v for k, v in got if isinstance(v, str))
            missing = [w[1] for w in want if w[1] not in strings]
            ok = not missing
            want = missing
        if not ok:
            failures += 1
            print("FAIL %s: %r\n  want %r\n  got  %r" % (kind, doc[:400], want[:20], got[:20]))
    print("%s documents, %d failed" % (", ".join("%d %s" % (v, k) for k, v in sorted(docs.items())), failures))
    return 1 if failures or len(docs) != 5 else 0


if __name__ == "__main__":
    sys.exit(main())
