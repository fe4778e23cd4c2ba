#!/bin/bash
# test-restart.sh BUILD_ROOT STRATA CONSUMERD APP APP_ASYNC OUT - kernel.restart:
# a daemon that comes back with the kernel module loaded (docs/crash.md,
# "The daemon dies").  In the kernel VM, check_restart.py --kernel runs its
# numbered workload (processes that join through the module: APP with
# tp-sync, then APP_ASYNC with tp-async, which the module signals) and the
# test's getppid syscalls as kernel events, kills strata-consumerd with
# SIGKILL KILLS times and restarts it; the module keeps the session's slot
# and kernel buffer for each new daemon, which takes them over; then a slot
# nobody takes over in time (guest-restart.sh).  The
# verdict is check_restart.py's (guest.log); run-vm.sh adds the module's
# health (no oops or WARNING in dmesg, rmmod succeeds).  Exit 77 when the
# VM cannot run here.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$1 strata=$2 consumerd=$3 app=$4 app_async=$5 out=$6 kills=${STRATA_RESTART_KILLS:-2}
mkdir -p "$out" || exit 1
"$here/run-vm.sh" --out "$out/vm" --build-root "$build" --build-module --timeout 600 --append "tsc=reliable" \
	-- "$here/guest-restart.sh" "$strata" "$consumerd" "$app" "$app_async" "$kills"
rc=$?
grep -v 'the writers discarded' "$out/vm/guest.log" 2>/dev/null
grep -h 'slot [0-9]*: \(its owner\|taken over\|not taken\)' "$out/vm/dmesg.txt" 2>/dev/null
exit $rc
