#!/bin/bash
# Install Strata into a temporary prefix and use it the way a user would:
#  1. cmake --install BUILD --prefix PREFIX
#  2. configure + build examples/outside with find_package(Strata) against it
#  3. `PREFIX/bin/strata record` the built program; babeltrace2 reads the trace
#     with every event (outside:step index 0..N-1) and an empty stderr
#  4. pkg-config --cflags --libs strata; build the same program with them and
#     the tp_sync object, record it too.
# usage: check_package.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -u
build=$1 src=$2 work=$3
prefix=$work/prefix
fails=0
ok()   { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
run()  { echo "+ $*"; "$@"; }

rm -rf "$work" && mkdir -p "$work"

run cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 \
	&& ok "cmake --install into $prefix" || { cat "$work/install.log"; fail "cmake --install"; }
for f in bin/strata include/strata/tracepoint.h lib/libstrata.so lib/cmake/Strata/StrataConfig.cmake \
	 lib/cmake/Strata/StrataConfigVersion.cmake lib/cmake/Strata/StrataTargets.cmake \
	 lib/pkgconfig/strata.pc; do
	[ -e "$prefix/$f" ] && ok "installed $f" || fail "installed $f"
done

# 2. find_package(Strata) from a project outside the tree.
if run cmake -S "$src/examples/outside" -B "$work/outside" -DCMAKE_PREFIX_PATH="$prefix" \
	> "$work/outside-configure.log" 2>&1 && run cmake --build "$work/outside" \
	> "$work/outside-build.log" 2>&1; then
	ok "examples/outside configures and builds with find_package(Strata)"
else
	cat "$work"/outside-*.log; fail "examples/outside against the installed package"
fi

# Record a program with the installed CLI; check the trace with babeltrace2.
check_trace() { # name binary n
	local name=$1 bin=$2 n=$3 out=$work/trace-$1
	if ! run "$prefix/bin/strata" record -o "$out" -- "$bin" "$n" > "$work/$name-record.log" 2>&1; then
		cat "$work/$name-record.log"; fail "$name: strata record exits 0"; return
	fi
	ok "$name: strata record exits 0"
	babeltrace2 "$out" > "$work/$name.txt" 2> "$work/$name.err"
	local rc=$?
	[ $rc -eq 0 ] && ok "$name: babeltrace2 exits 0" || fail "$name: babeltrace2 exits 0 (got $rc)"
	[ ! -s "$work/$name.err" ] && ok "$name: babeltrace2 stderr empty" || { cat "$work/$name.err"; fail "$name: babeltrace2 stderr empty"; }
	local got
	got=$(grep -c 'outside:step' "$work/$name.txt")
	[ "$got" -eq "$n" ] && ok "$name: $n outside:step events" || fail "$name: $n outside:step events (got $got)"
	local i
	for i in 0 $((n - 1)); do
		grep -q "outside:step: .* { index = $i, what = \"$([ $((i % 2)) -eq 1 ] && echo odd || echo even)\" }" \
			"$work/$name.txt" && ok "$name: event index $i read back" || fail "$name: event index $i read back"
	done
}
[ -x "$work/outside/strata-outside" ] && check_trace cmake "$work/outside/strata-outside" 100

# 4. pkg-config.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs strata 2>&1)
echo "pkg-config --cflags --libs strata: $flags"
want="-I$(realpath "$prefix/include") -L$(realpath "$prefix/lib") -lstrata"
got=""
for f in $flags; do
	case $f in
	-I*) got="$got -I$(realpath "${f#-I}")" ;;
	-L*) got="$got -L$(realpath "${f#-L}")" ;;
	*) got="$got $f" ;;
	esac
done
[ "${got# }" = "$want" ] && ok "pkg-config --cflags --libs strata resolves to the prefix" \
	|| fail "pkg-config flags: got '${got# }', want '$want'"
tp_sync=$(pkg-config --variable=tp_sync strata)
[ -f "$tp_sync" ] && ok "pkg-config --variable=tp_sync names an installed file" || fail "tp_sync object '$tp_sync' exists"
if run cc -std=c11 -Wall -Wextra -Werror -o "$work/outside-pc" "$src/examples/outside/main.c" "$tp_sync" \
	$(pkg-config --cflags --libs strata) -Wl,-rpath,"$prefix/lib" > "$work/pc-build.log" 2>&1; then
	ok "cc with pkg-config flags builds the example"
	check_trace pkgconfig "$work/outside-pc" 10
else
	cat "$work/pc-build.log"; fail "cc with pkg-config flags builds the example"
fi

echo "$fails check(s) failed"
[ $fails -eq 0 ]
