#!/usr/bin/env bash
# The main job: install what is needed, build, record a real trace of the
# bundled example with `strata record`, and show it with `strata view`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
strata_install_deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
# The trace is kept beside the build for a second look, and replaced by the
# next run's: one demo, one trace (a directory a run in /tmp piled up).
out=build/demo-trace
rm -rf "$out"
echo "== strata record -o $out -- strata-demo --threads 2 --events 5"
build/cli/strata record -o "$out" -- build/examples/strata-demo --threads 2 --events 5
echo "== strata view $out"
build/cli/strata view "$out"
echo "== babeltrace2 reads the same trace:"
babeltrace2 "$out" | head -n 5
