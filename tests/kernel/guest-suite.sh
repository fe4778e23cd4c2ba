#!/bin/sh
# guest-suite.sh [--kinteg STRATA DEMO CAUSAL CONSUMERD ASYNC_APP KWAIT SYSNAMES] KTEST [ARGS] - the in-guest
# part of the kernel test set, run by run-vm.sh inside the chroot with
# strata.ko loaded.  --kinteg: also record the integration traces
# (guest-kinteg.sh) after KTEST's tests.
set -u
here=$(cd "$(dirname "$0")" && pwd)
kinteg=""
if [ "${1:-}" = --kinteg ]; then
	kinteg="$2 $3 $4 $5 $6 $7 $8"
	shift 8
fi
ktest=$1
shift
echo "guest: kernel $(uname -r), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource)"
[ -c /dev/strata ] || { echo "FAIL device: /dev/strata missing"; exit 1; }
# Per-test verdicts are the PASS/FAIL lines (kernel.<name> in CTest); the
# VM run itself fails only on infrastructure or kernel-health problems.
# A watchdog for a guest that stops making progress (seen: an intermittent
# hang that qemu's timeout ended with nothing to show): before run-vm.sh's
# timeout kills qemu, it writes every task's state, wait channel and kernel
# stack and the kernel's blocked-task dump (sysrq w) to the serial console,
# which run-vm.sh prints when the guest did not finish.  Not a
# synchronisation: it only reports.
"$here/guest-watchdog.sh" "${STRATA_GUEST_WATCHDOG_S:-420}" &
wd=$!
"$ktest" "$@" || echo "guest: some tests failed (exit $?)"
echo "guest: ktest done" | tee "$STRATA_VM_OUT/progress.txt" > /dev/console
# shellcheck disable=SC2086 # seven paths without blanks (build tree)
[ -z "$kinteg" ] || "$here/guest-kinteg.sh" $kinteg || echo "guest: kinteg recording failed"
kill "$wd" 2> /dev/null
exit 0
