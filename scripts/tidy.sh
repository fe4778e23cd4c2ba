#!/bin/sh
# tidy.sh [BUILD] - run clang-tidy (.clang-tidy's checks) over every C and
# C++ source of the tree that BUILD (default: build) compiles, using its
# compile_commands.json (CMAKE_EXPORT_COMPILE_COMMANDS is on).  Exits
# non-zero on any finding.  About two minutes on two cores: not part of the
# test suite; run it before sending a change (CONTRIBUTING.md).
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
command -v clang-tidy >/dev/null || { echo "tidy.sh: apt-get install clang-tidy" >&2; exit 2; }
[ -r "$build/compile_commands.json" ] || { echo "tidy.sh: no $build/compile_commands.json (configure first)" >&2; exit 2; }
python3 - "$build/compile_commands.json" "$top" <<'PY' | xargs -0 -r -n 4 -P "${TIDY_JOBS:-2}" clang-tidy --quiet -p "$build"
import json, sys, os
top = sys.argv[2]
seen = set()
for e in json.load(open(sys.argv[1])):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    # the tree's own sources, not generated files nor the benchmark's LTTng side
    if not f.startswith(top + "/") or "/build" in f[len(top):] or f in seen or "/bench/lttng" in f:
        continue
    seen.add(f)
    sys.stdout.write(f + "\0")
PY
