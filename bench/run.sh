#!/bin/sh
# bench/run.sh [--smoke] [--keep] [--only STEPS] [BUILD_DIR]
# The single command of the benchmark suite: runs what CMake built in
# BUILD_DIR/bench (default: ../build next to this folder) and prints the
# table "workload | Strata | LTTng-UST | ratio | target | met?".
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
	--only) skip=1 ;;
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
