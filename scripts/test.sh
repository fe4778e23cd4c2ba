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
status=0
run_suite() { # name, cmake args, ctest args
  local name=$1 cmake_args=$2 ctest_args=$3
  echo "==== $name: configure + build"
  cmake -S . -B "build-test-$name" $cmake_args >/dev/null
  cmake --build "build-test-$name" -j"$jobs" 2>&1 | grep -E "error|warning: " || true
  [ "${PIPESTATUS[0]}" = 0 ] || { echo "==== $name: BUILD FAILED"; status=1; return; }
  echo "==== $name: ctest"
  (cd "build-test-$name" && ctest --output-on-failure -j"$jobs" $ctest_args) || status=1
}
run_suite normal "-DCMAKE_BUILD_TYPE=RelWithDebInfo" ""
# Sanitizer builds: the kernel VM, packaging and benchmark smoke tests add
# nothing under a sanitizer and are left to the normal build.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
run_suite asan "-DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=address" "-LE no-sanitizer"
run_suite tsan "-DCMAKE_BUILD_TYPE=Debug -DSTRATA_SANITIZE=thread" "-LE no-sanitizer"
echo "==== test suite: $([ $status = 0 ] && echo PASSED || echo FAILED)"
exit $status
