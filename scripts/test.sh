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
# build_tree NAME CMAKE_ARGS: configures and builds build-test-NAME (its log
# build-test-NAME.log).
build_tree() {
  cmake -S . -B "build-test-$1" $2 >"build-test-$1.log" 2>&1 &&
    cmake --build "build-test-$1" -j"$jobs" >>"build-test-$1.log" 2>&1
}
# The next tree is built while a phase's tests run, in SCHED_IDLE (chrt
# --idle): it gets only the CPU time the tests leave idle (a test that waits
# on a VM's boot, a daemon, a timeout) and yields at once to any test that
# wakes, so that the tests keep the machine as if alone; the normal tests
# left about a fifth of two CPUs idle.  Its own session (setsid), so that
# signal_bg stops all of it, compilers included.
bg_pid="" bg_name="" bg_t0=0
start_bg() { # name, cmake args
  bg_name=$1 bg_t0=$SECONDS
  echo "==== $1: configure + build (beside the tests, SCHED_IDLE)"
  env "${san_env[@]}" setsid -w chrt --idle 0 bash -c "$(declare -f build_tree); jobs=$jobs; build_tree $1 '$2'" &
  bg_pid=$!
}
# The tests that run alone (label alone: figures of the host's load, see
# tests/kernel/CMakeLists.txt) run with the background build stopped: every
# process of its session, never this script's own.
signal_bg() { # STOP or CONT
  [ -n "$bg_pid" ] || return 0
  local sid
  sid=$(ps -o sid= -p "$bg_pid" | tr -d ' ')
  [ "$sid" = "$bg_pid" ] || sid=$(ps -o sid= -p "$(pgrep -P "$bg_pid" | head -n 1)" | tr -d ' ')
  [ -n "$sid" ] && [ "$sid" != "$(ps -o sid= -p $$ | tr -d ' ')" ] && pkill "-$1" -s "$sid" || true
}
run_suite() { # name, cmake args, labels to leave out (a regex), next phase's name, its cmake args
  local name=$1 cmake_args=$2 ex=$3 dir="build-test-$1" t0=$SECONDS t1 built rc=0
  if [ "$bg_name" = "$name" ]; then
    # built beside the previous phase's tests: wait for the rest of it
    wait "$bg_pid" || rc=$?
    built="built in $((SECONDS - bg_t0)) s beside the tests before, $((SECONDS - t0)) s of it after them"
    bg_pid="" bg_name=""
  else
    echo "==== $name: configure + build"
    build_tree "$name" "$cmake_args" || rc=$?
    built="built in $((SECONDS - t0)) s"
  fi
  if [ "$rc" != 0 ]; then
    grep -E "error|Error" "$dir.log" | head -n 40
    echo "==== $name: BUILD FAILED (full log: $dir.log)"
    status=1 failed=$((failed + 1))
    [ -z "${4:-}" ] || start_bg "$4" "$5"
    return
  fi
  t1=$SECONDS c1=$(busy_s)
  echo "==== $name: ctest ($built)"
  [ -z "${4:-}" ] || start_bg "$4" "$5"
  local junit="$PWD/$dir.junit.xml" junit_alone="$PWD/$dir.alone.junit.xml"
  rm -f "$junit" "$junit_alone"
  # What the tests leave in /tmp, /run, /dev/shm and XDG_RUNTIME_DIR: listed
  # before and after; anything of Strata's left there fails the run.
  python3 scripts/leftovers.py snapshot "$dir.leftovers.json"
  # (one -LE: ctest leaves out a test only if it matches every -LE given)
  (cd "$dir" && ctest --output-on-failure --output-junit "$junit" -j"$jobs" -LE "alone${ex:+|$ex}") 2>&1 |
    tee "$dir.ctest.log" || true
  local junits=("$junit")
  local alone=(-L alone ${ex:+-LE "$ex"})
  if [ -n "$(cd "$dir" && ctest -N "${alone[@]}" | grep -E '^ *Test +#')" ]; then
    signal_bg STOP
    (cd "$dir" && ctest --output-on-failure --output-junit "$junit_alone" "${alone[@]}") 2>&1 |
      tee -a "$dir.ctest.log" || true
    signal_bg CONT
    junits+=("$junit_alone")
  fi
  # Passed, failed and skipped from ctest's own record (ctest's summary line
  # counts a skipped test as passed); each skip with the reason it printed.
  local sum p f s
  if ! sum=$(python3 scripts/ctest-summary.py "${junits[@]}"); then
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
  # (sleeps, timeouts) shows as less than nproc x its wall (the next tree's
  # build beside the tests counts in it).
  times+="$name: $built, tested in $((SECONDS - t1)) s ($(($(busy_s) - c1)) CPU-s busy); "
  passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
  [ "$f" = 0 ] || status=1
}
# Sanitizer builds: the kernel VM, packaging and benchmark smoke tests add
# nothing under a sanitizer and carry the label no-sanitizer; single-threaded
# tests that TSan only slows carry no-tsan (ASan still runs them).
# Their options are set for their builds (which run what they built, the
# man pages' `strata`) and phases only: the normal tree's fuzzers are ASan
# programs with their own settings (leaks found).
# scripts/tsan.supp: the races Strata makes on purpose, each with its reason.
# atexit_sleep_ms: TSan's main thread sleeps before a process with live
# threads exits, so that they race with its teardown; its default, 1 s,
# was much of the TSan phase's wall (a daemon, a `strata record`, a traced
# program with tp-async's thread: each exit waited 1 s on an idle CPU;
# control.traced alone took 92 s of wall for about 30 s of CPU, 39 s at
# 100 ms).  100 ms still leaves running threads millions of instructions
# against the exit's teardown.
san_env=(ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:atexit_sleep_ms=100:suppressions=$PWD/scripts/tsan.supp)
asan_args="-DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=address"
tsan_args="-DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=thread"
run_suite normal "-DCMAKE_BUILD_TYPE=RelWithDebInfo" "" asan "$asan_args"
export "${san_env[@]}"
run_suite asan "$asan_args" "no-sanitizer" tsan "$tsan_args"
run_suite tsan "$tsan_args" "no-sanitizer|no-tsan"
echo "==== test suite (normal, asan+ubsan, tsan):"
[ -z "${why//$'\n'/}" ] || printf '%s' "$why" | sed '/^$/d'
echo "${times}whole run ${SECONDS} s"
echo "$passed passed, $failed failed, $skipped skipped"
exit $status
