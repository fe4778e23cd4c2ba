#!/bin/sh
# guest-suite.sh KTEST [ARGS] - the in-guest part of the kernel test set,
# run by run-vm.sh inside the chroot with strata.ko loaded.
set -u
ktest=$1
shift
echo "guest: kernel $(uname -r), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
[ -c /dev/strata ] || { echo "FAIL device: /dev/strata missing"; exit 1; }
# Per-test verdicts are the PASS/FAIL lines (kernel.<name> in CTest); the
# VM run itself fails only on infrastructure or kernel-health problems.
"$ktest" "$@" || echo "guest: some tests failed (exit $?)"
exit 0
