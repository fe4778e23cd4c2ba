#!/usr/bin/env bash
# The main job: install what is needed, build, record a real trace of the
# bundled example with `strata record`, and show it with `strata view`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
strata_install_deps
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j"$(nproc)"
out=$(mktemp -d /tmp/strata-demo-XXXXXX)
echo "== strata record -o $out/trace -- strata-demo --threads 2 --events 5"
build/cli/strata record -o "$out/trace" -- build/examples/strata-demo --threads 2 --events 5
echo "== strata view $out/trace"
build/cli/strata view "$out/trace"
echo "== babeltrace2 reads the same trace:"
babeltrace2 "$out/trace" | head -n 5
