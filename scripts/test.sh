#!/usr/bin/env bash
# The whole test suite: installs what is needed, then builds and runs every
# test three ways: a normal build (including the kernel module in a real
# kernel under qemu), AddressSanitizer + UndefinedBehaviorSanitizer, and
# ThreadSanitizer.  Exit 0 only if all pass.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
strata_install_deps
jobs=$(nproc)
status=0 passed=0 failed=0 skipped=0 why="" times=""
# Busy CPU seconds of the whole machine so far (/proc/stat: user, nice, system, irq, softirq).
busy_s() { awk -v hz="$(getconf CLK_TCK)" '/^cpu /{print int(($2 + $3 + $4 + $7 + $8) / hz); exit}' /proc/stat; }
run_suite() { # name, cmake args, ctest args, ctest's parallel tests
  local name=$1 cmake_args=$2 ctest_args=$3 ctest_jobs=$4 dir="build-test-$1" t0=$SECONDS t1
  echo "==== $name: configure + build"
  if ! { cmake -S . -B "$dir" $cmake_args >"$dir.log" 2>&1 &&
         cmake --build "$dir" -j"$jobs" >>"$dir.log" 2>&1; }; then
    grep -E "error|Error" "$dir.log" | head -n 40
    echo "==== $name: BUILD FAILED (full log: $dir.log)"
    status=1 failed=$((failed + 1))
    return
  fi
  t1=$SECONDS c1=$(busy_s)
  echo "==== $name: ctest (built in $((t1 - t0)) s)"
  local junit="$PWD/$dir.junit.xml"
  rm -f "$junit"
  # What the tests leave in /tmp, /run, /dev/shm and XDG_RUNTIME_DIR: listed
  # before and after; anything of Strata's left there fails the run.
  python3 scripts/leftovers.py snapshot "$dir.leftovers.json"
  (cd "$dir" && ctest --output-on-failure --output-junit "$junit" -j"$ctest_jobs" $ctest_args) 2>&1 |
    tee "$dir.ctest.log" || true
  # Passed, failed and skipped from ctest's own record (ctest's summary line
  # counts a skipped test as passed); each skip with the reason it printed.
  local sum p f s
  if ! sum=$(python3 scripts/ctest-summary.py "$junit"); then
    echo "==== $name: ctest did not finish"
    status=1 failed=$((failed + 1))
    return
  fi
  sed '$d' <<<"$sum"
  if ! python3 scripts/leftovers.py compare "$dir.leftovers.json" >"$dir.leftovers.log"; then
    why+="$name: the tests left files of Strata's behind:"$'\n'$(grep '^LEFT' "$dir.leftovers.log" || true)$'\n'
    status=1 failed=$((failed + 1))
  fi
  cat "$dir.leftovers.log"
  # each failure with its reason, again at the very end of the log
  why+=$(sed '$d' <<<"$sum" | awk -v n="$name" '/^FAILED: /{print n ": " $0; f=1; next} /^    /&&f{print; next} {f=0}')$'\n'
  read -r p f s <<<"$(tail -n 1 <<<"$sum")"
  echo "==== $name: $p passed, $f failed, $s skipped"
  # Where the suite's time goes (a CI run shows only its log's ends).
  # The machine's busy CPU seconds beside the wall: a phase that waits
  # (sleeps, timeouts) shows as less than nproc x its wall.
  times+="$name: built in $((t1 - t0)) s, tested in $((SECONDS - t1)) s ($(($(busy_s) - c1)) CPU-s busy); "
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  [ "$f" = 0 ] || status=1
}
# Line tables only (-g1, CMakeLists.txt's STRATA_DEBUG_INFO): no test reads
# a variable, and full -g was a third of an -O2 object's compile.
run_suite normal "-DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTRATA_DEBUG_INFO=-g1" "" "$jobs"
# Sanitizer builds: the kernel VM, packaging and benchmark smoke tests add
# nothing under a sanitizer and carry the label no-sanitizer; single-threaded
# tests that TSan only slows carry no-tsan (ASan still runs them).
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# scripts/tsan.supp: the races Strata makes on purpose, each with its reason.
# atexit_sleep_ms: TSan's main thread sleeps before a process with live
# threads exits, so that they race with its teardown; its default, 1 s,
# was much of the TSan phase's wall (a daemon, a `strata record`, a traced
# program with tp-async's thread: each exit waited 1 s on an idle CPU;
# control.traced alone took 92 s of wall for about 30 s of CPU, 39 s at
# 100 ms).  100 ms still leaves running threads millions of instructions
# against the exit's teardown.
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:atexit_sleep_ms=100:suppressions=$PWD/scripts/tsan.supp
# One test more than CPUs in the sanitizer passes: their tests also wait
# (daemons' stops, a killed `record`'s random instants,
# polls), which left a CPU idle a quarter of the pass (ASan on the 2-CPU
# Intel Xeon kind: 303 busy CPU-s of 396).  Fresh trees, the same machine:
# ASan 198 -> 163 s, TSan 268 -> 218 s, every test passing; the slowest
# TSan test (control.traced) 33 -> 37 s of its 180.  The plain pass keeps
# one a CPU: its kernel VMs and package build take two CPUs each.
# (-O1 instead of -O0 was slower in all: ASan built in 272 s against 184,
# tested in 153 against 198.)
run_suite asan "-DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=address" "-LE no-sanitizer" "$((jobs + 1))"
run_suite tsan "-DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=thread" "-LE no-sanitizer|no-tsan" "$((jobs + 1))"
echo "==== test suite (normal, asan+ubsan, tsan):"
[ -z "${why//$'\n'/}" ] || printf '%s' "$why" | sed '/^$/d'
echo "${times}whole run ${SECONDS} s"
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
