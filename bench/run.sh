#!/bin/sh
# bench/run.sh [--smoke] [--keep] [--only STEPS] [--json FILE] [BUILD_DIR]
# The single command of the benchmark suite: runs what CMake built in
# BUILD_DIR/bench (default: ../build next to this folder), prints the
# table "workload | Strata | LTTng-UST | ratio | target | met?" and writes the
# run as data (--json FILE, default BUILD_DIR/bench/results.json: machine,
# CPU, clock source, date, commit, every row; bench/table.py renders it).
# Builds nothing.  Needs root for lttng-sessiond.  See docs/benchmarks.md.
set -e
here=$(cd "$(dirname "$0")" && pwd)
build=
skip=
for a in "$@"; do
	if [ -n "$skip" ]; then
		skip=
		continue
	fi
	case "$a" in
	--only | --json) skip=1 ;;
	-*) ;;
	*) build=$a ;;
	esac
done
if [ -z "$build" ]; then
	build="$here/../build"
	set -- "$@" "$build"
fi
if [ ! -x "$build/bench/strata-bench-plain" ]; then
	echo "run.sh: $build/bench/strata-bench-plain not found: build first (cmake --build $build)" >&2
	exit 1
fi
exec /usr/bin/python3 "$here/run.py" "$@"
