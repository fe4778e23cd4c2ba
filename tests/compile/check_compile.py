#!/usr/bin/python3
"""Compile checks of the public headers.

usage: check_compile.py INCLUDE_DIR WORKDIR CC [CC...]
Each CC is a C compiler (gcc, clang); its C++ sibling (g++, clang++) is used too.

1. Every header in INCLUDE_DIR/strata/ compiles alone (and included twice) as
   C11 and as C++17 with -Wall -Wextra -Werror.
2. bad_call.c compiles cleanly without a bad case, as C and as C++.
3. Each bad case fails to compile WITHOUT -Werror (the header itself turns
   these conversions into errors) and the diagnostic names the argument.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# case -> (what, pattern the diagnostics must match)
BAD_CASES = {
    1: ("pointer for an integer field", r"wrong_ptr[\s\S]*int ?\*|int ?\*[\s\S]*wrong_ptr"),
    2: ("double for an integer field", r"wrong_double[\s\S]*double|double[\s\S]*wrong_double"),
    3: ("int * for a uint32_t * sequence", r"wrong_ids[\s\S]*(uint32_t|unsigned)|(uint32_t|unsigned)[\s\S]*wrong_ids"),
    4: ("too few arguments", r"too few arguments|requires \d+ arguments?, but \d+ (was|were) provided"),
    5: ("too many arguments", r"too many arguments|requires \d+ arguments?, but \d+ (was|were) provided"),
    6: ("integer for a string field", r"wrong_int[\s\S]*char|char[\s\S]*wrong_int"),
}

sys.path.insert(0, os.path.join(HERE, "..", "lib"))
from strata_testlib import Checks  # noqa: E402

check = Checks()


def cxx_of(cc):
    base = os.path.basename(cc)
    return os.path.join(os.path.dirname(cc), {"gcc": "g++", "clang": "clang++", "cc": "c++"}.get(base, base + "++"))


def compile_(compiler, lang, std, src, inc, extra):
    cmd = [compiler, "-x", lang, "-std=" + std, "-I", inc, "-I", HERE, "-fsyntax-only"] + extra + [src]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout + r.stderr


def main():
    inc, work = sys.argv[1], sys.argv[2]
    compilers = sys.argv[3:]
    os.makedirs(work, exist_ok=True)
    headers = sorted(h for h in os.listdir(os.path.join(inc, "strata")) if h.endswith(".h"))
    check(bool(headers), "public headers found in %s/strata" % inc)
    strict = ["-Wall", "-Wextra", "-Werror"]
    for cc in compilers:
        langs = [(cc, "c", "c11"), (cxx_of(cc), "c++", "c++17")]
        for comp, lang, std in langs:
            tag = "%s %s" % (os.path.basename(comp), std)
            for h in headers:
                src = os.path.join(work, "alone_%s_%s.%s" % (h.replace(".", "_"), lang.replace("+", "x"),
                                                            "c" if lang == "c" else "cpp"))
                with open(src, "w") as f:
                    f.write("#include <strata/%s>\n#include <strata/%s>\nint strata_compile_probe;\n" % (h, h))
                rc, out = compile_(comp, lang, std, src, inc, strict)
                check(rc == 0, "%s: <strata/%s> compiles alone, -Wall -Wextra -Werror" % (tag, h), out)
            bad = os.path.join(HERE, "bad_call.c")
            rc, out = compile_(comp, lang, std, bad, inc, strict)
            check(rc == 0, "%s: the good calls of bad_call.c compile, -Wall -Wextra -Werror" % tag, out)
            for case, (what, pattern) in sorted(BAD_CASES.items()):
                rc, out = compile_(comp, lang, std, bad, inc, ["-DSTRATA_BAD_CASE=%d" % case])
                check(rc != 0, "%s: %s is rejected (no -Werror)" % (tag, what), out)
                check(re.search(pattern, out) is not None,
                      "%s: the error for '%s' names the argument" % (tag, what), out)
    check.finish()


if __name__ == "__main__":
    sys.exit(main())
