#!/bin/bash
# Install Strata into a temporary prefix and use it the way a user would:
#  1. cmake --install BUILD --prefix PREFIX
#  2. configure + build examples/outside with find_package(Strata) against it
#  3. `PREFIX/bin/strata record` the built program; babeltrace2 reads the trace
#     with every event (outside:step index 0..N-1) and an empty stderr
#  4. pkg-config --cflags --libs strata; build the same program with them and
#     the tp_sync object (a path without the build type), record it too.
#  5. `PREFIX/bin/strata record --preload pthread` of an unmodified program
#     (pt_plain.c, no Strata in it): its lock events are recorded; every
#     installed RUNPATH is $ORIGIN's, none with an empty entry (check_runpath.py).
#  3b. `PREFIX/bin/strata view` reads that trace through the reader module
#     (lib/strata/libstrata-cli-read.so); strata copied away from it says so.
#  6. a preload library the loader refuses: strata record says so, with the
#     loader's message, and runs nothing.
# Nothing runs ldconfig and LD_LIBRARY_PATH is unset (but in 6, on purpose): every installed
# library and program must find what it needs by itself (RUNPATH).
# usage: check_package.sh BUILD_DIR SOURCE_DIR WORK_DIR
set -u
build=$1 src=$2 work=$3
prefix=$work/prefix
fails=0
ok()   { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
run()  { echo "+ $*"; "$@"; }

rm -rf "$work" && mkdir -p "$work"
unset LD_LIBRARY_PATH LD_PRELOAD

run cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 \
	&& ok "cmake --install into $prefix" || { cat "$work/install.log"; fail "cmake --install"; }
for f in bin/strata include/strata/tracepoint.h lib/libstrata.so lib/cmake/Strata/StrataConfig.cmake \
	 lib/cmake/Strata/StrataConfigVersion.cmake lib/cmake/Strata/StrataTargets.cmake \
	 lib/pkgconfig/strata.pc lib/strata/libstrata-cli-read.so; do
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

# 3b. `strata view` of the installed CLI reads that trace through its reader
# module (lib/strata/libstrata-cli-read.so, loaded by view and analyze only).
if [ -d "$work/trace-cmake" ]; then
	if "$prefix/bin/strata" view "$work/trace-cmake" > "$work/view.txt" 2> "$work/view.err"; then
		ok "installed strata view exits 0"
	else
		cat "$work/view.err"; fail "installed strata view exits 0"
	fi
	got=$(grep -c 'outside:step' "$work/view.txt")
	[ "$got" -eq 100 ] && ok "installed strata view: 100 outside:step events" \
		|| fail "installed strata view: 100 outside:step events (got $got)"
	# strata copied away from its module: view fails and says what is missing
	# (unless the configured libdir holds one, from an earlier install).
	cfg_libdir=$(sed -n 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$build/CMakeCache.txt")/$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$build/CMakeCache.txt")
	mkdir -p "$work/lonely/bin" && cp "$prefix/bin/strata" "$work/lonely/bin/"
	"$work/lonely/bin/strata" view "$work/trace-cmake" > "$work/lonely.txt" 2> "$work/lonely.err"
	rc=$?
	if [ -e "$cfg_libdir/strata/libstrata-cli-read.so" ]; then
		ok "strata without its reader module: not checked ($cfg_libdir/strata holds one)"
	elif [ $rc -eq 1 ] && grep -q "libstrata-cli-read.so not found" "$work/lonely.err"; then
		ok "strata without its reader module: view exits 1 naming the module"
	else
		cat "$work/lonely.err"; fail "strata without its reader module: view exits 1 naming the module (rc $rc)"
	fi
fi

# 3c. `strata query` of the installed CLI, and the installed SQLite
# extension (lib/libstrata-sqlite.so, docs/query.md) in the sqlite3 shell.
if [ -d "$work/trace-cmake" ]; then
	got=$("$prefix/bin/strata" query --csv "$work/trace-cmake" \
		"SELECT count(*) FROM \"outside:step\"" 2> "$work/query.err" | tail -n 1 | tr -d '\r')
	[ "$got" = 100 ] && ok "installed strata query: 100 outside:step rows" \
		|| { cat "$work/query.err"; fail "installed strata query: 100 outside:step rows (got '$got')"; }
	if [ -e "$prefix/lib/libstrata-sqlite.so" ] && command -v sqlite3 > /dev/null; then
		got=$(printf '.load %s\nSELECT strata_open(%s) > 0;\nSELECT count(*) FROM events;\n' \
			"$prefix/lib/libstrata-sqlite" "'$work/trace-cmake'" | sqlite3 2> "$work/sqlite.err" | tail -n 1)
		[ "$got" = 100 ] && ok "sqlite3 .load libstrata-sqlite: 100 events" \
			|| { cat "$work/sqlite.err"; fail "sqlite3 .load libstrata-sqlite: 100 events (got '$got')"; }
	else
		fail "installed lib/libstrata-sqlite.so (and the sqlite3 shell to load it)"
	fi
fi

# 4. pkg-config.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
flags=$(pkg-config --cflags --libs strata 2>&1)
echo "pkg-config --cflags --libs strata: $flags"
want="-I$(realpath "$prefix/include") -L$(realpath "$prefix/lib") -Wl,-rpath,$(realpath "$prefix/lib") -lstrata"
got=""
for f in $flags; do
	case $f in
	-I*) got="$got -I$(realpath "${f#-I}")" ;;
	-L*) got="$got -L$(realpath "${f#-L}")" ;;
	-Wl,-rpath,*) got="$got -Wl,-rpath,$(realpath "${f#-Wl,-rpath,}")" ;;
	*) got="$got $f" ;;
	esac
done
[ "${got# }" = "$want" ] && ok "pkg-config --cflags --libs strata resolves to the prefix" \
	|| fail "pkg-config flags: got '${got# }', want '$want'"
tp_sync=$(pkg-config --variable=tp_sync strata)
[ -f "$tp_sync" ] && ok "pkg-config --variable=tp_sync names an installed file" || fail "tp_sync object '$tp_sync' exists"
case $tp_sync in
*objects-*) fail "the tp_sync path depends on the build type: $tp_sync" ;;
*) ok "the tp_sync path does not depend on the build type ($tp_sync)" ;;
esac
if run cc -std=c11 -Wall -Wextra -Werror -o "$work/outside-pc" "$src/examples/outside/main.c" "$tp_sync" \
	$(pkg-config --cflags --libs strata) > "$work/pc-build.log" 2>&1; then
	ok "cc with pkg-config flags builds the example"
	check_trace pkgconfig "$work/outside-pc" 10
else
	cat "$work/pc-build.log"; fail "cc with pkg-config flags builds the example"
fi

# 5. The pthread preload on an unmodified program, from the prefix alone.
for f in lib/libstrata-pthread.so bin/strata bin/strata-consumerd; do
	if readelf -d "$prefix/$f" 2>/dev/null | grep -q 'RUNPATH.*\$ORIGIN'; then
		ok "$f has an \$ORIGIN RUNPATH"
	else
		fail "$f has an \$ORIGIN RUNPATH ($(readelf -d "$prefix/$f" | grep -E 'RPATH|RUNPATH'))"
	fi
done
if python3 "$src/tests/package/check_runpath.py" "$prefix" > "$work/runpath.log"; then
	ok "no installed file's RUNPATH has an empty entry ($(tail -1 "$work/runpath.log"))"
else
	cat "$work/runpath.log"; fail "no installed file's RUNPATH has an empty entry"
fi
if run cc -std=c11 -O1 -pthread -o "$work/pt-plain" "$src/tests/package/pt_plain.c" > "$work/pt-build.log" 2>&1; then
	out=$work/trace-preload
	if run "$prefix/bin/strata" record --preload pthread -o "$out" -- "$work/pt-plain" 500 \
		> "$work/preload-record.log" 2>&1; then
		ok "preload: strata record --preload pthread exits 0"
	else
		cat "$work/preload-record.log"; fail "preload: strata record --preload pthread exits 0"
	fi
	if grep -q "while loading shared libraries\|did not join\|refuses" "$work/preload-record.log"; then
		cat "$work/preload-record.log"; fail "preload: no loader error"
	fi
	babeltrace2 "$out" > "$work/preload.txt" 2> "$work/preload.err"
	[ ! -s "$work/preload.err" ] && ok "preload: babeltrace2 stderr empty" || { cat "$work/preload.err"; fail "preload: babeltrace2 stderr empty"; }
	# An acquisition is a mutex_lock, or an uncontended one folded into a
	# mutex_held (or a mutex_acquired before a cond wait), or one of the
	# `count` pairs of a mutex_counts (counting, the default): docs/pthread.md.
	got=$(awk '/pthread:mutex_(lock|held|acquired):/ { n++ }
		/pthread:mutex_counts:/ { if (match($0, / count = [0-9]+/)) n += substr($0, RSTART + 9, RLENGTH - 9) }
		END { print n + 0 }' "$work/preload.txt")
	[ "$got" -eq 1000 ] && ok "preload: 1000 mutex acquisitions recorded (2 threads x 500)" \
		|| fail "preload: 1000 mutex acquisitions recorded (got $got)"
else
	cat "$work/pt-build.log"; fail "pt_plain.c builds"
fi

# 6. A preload library the loader refuses (it needs a libstrata nobody
# has): refused up front with the loader's message.  Hermetic: a copy of
# the library whose DT_NEEDED names libstrata.so.9 (the same length, so
# the ELF stays whole), refused whatever is installed in system paths; and
# the loader finds a libstrata.so.0 meanwhile (LD_LIBRARY_PATH, as after
# `cmake --install` to /usr/local), which must change nothing.  (A plain
# copy of the library away from its libstrata.so.0 was accepted on a
# machine with Strata installed under /usr/local.)
mkdir -p "$work/broken/x" "$work/installed/lib"
perl -pe 's/libstrata\.so\.0\0/libstrata.so.9\0/g' "$prefix/lib/libstrata-pthread.so" \
	> "$work/broken/x/libstrata-pthread.so"
cp -L "$prefix/lib/libstrata.so.0" "$work/installed/lib/"
LD_LIBRARY_PATH="$work/installed/lib" "$prefix/bin/strata" record \
	--preload "$work/broken/x/libstrata-pthread.so" -o "$work/trace-broken" \
	-- "$work/pt-plain" 10 > "$work/broken.log" 2>&1
rc=$?
[ $rc -ne 0 ] && ok "broken preload: strata record fails (rc $rc)" || fail "broken preload: strata record fails"
grep -q "loader refuses .*libstrata.so.9" "$work/broken.log" \
	&& ok "broken preload: the loader's message names libstrata.so.9" \
	|| { cat "$work/broken.log"; fail "broken preload: the loader's message names libstrata.so.9"; }
grep -q "does it link" "$work/broken.log" && fail "broken preload: not blamed on the program" \
	|| ok "broken preload: not blamed on the program"

echo "$fails check(s) failed"
[ $fails -eq 0 ]
