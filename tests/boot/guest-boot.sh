#!/bin/sh
# guest-boot.sh CONSUMERD STRATA_CLI - the boot service of the VM boot test,
# run by /stage2 (chrooted into the host's root, /dev/shm and /run mounted)
# while PID 1 (boot_init.c) waits: starts strata-consumerd --adopt-early, a
# session that adopts the early buffers, tells init (fd 5) to record its
# later events, waits for init's "done" (fd 6: the emitted counts), stops the
# session.  The trace and the counts go to $STRATA_VM_OUT (check_boot.py).
# With strata.serial=DEV[,BAUD] on the kernel command line (as
# strata-boot-collect reads it, docs/boot.md) the session streams over that
# serial port instead (run-vm.sh joins ttyS1 to $STRATA_VM_OUT/ttyS1.bin) and
# check_boot.py --serial rebuilds the trace with strata receive.
set -u
consumerd=$1 cli=$2
unset STRATA_EARLY
o=$STRATA_VM_OUT
export STRATA_CONSUMERD_SOCKET=/run/strata-consumerd.sock
# The daemon says "ready" on fd 7 once it listens: a fifo on /run (tmpfs).
mkfifo /run/strata-ready || exit 1
"$consumerd" --socket "$STRATA_CONSUMERD_SOCKET" --ready-fd 7 --adopt-early -q 7>/run/strata-ready &
dpid=$!
read -r line < /run/strata-ready
[ "$line" = ready ] || { echo "FAIL: the daemon did not get ready"; exit 1; }
serial=""
for w in $(cat /proc/cmdline); do
	case "$w" in strata.serial=?*) serial=/dev/${w#strata.serial=} ;; esac
done
if [ -n "$serial" ]; then
	"$cli" create boot -o "$o/trace" --serial "$serial" >/dev/null || exit 1
else
	"$cli" create boot -o "$o/trace" >/dev/null || exit 1
fi
"$cli" start boot >/dev/null || exit 1
echo go >&5
read -r counts <&6 || { echo "FAIL: init did not answer"; exit 1; }
echo "$counts daemon=$dpid" > "$o/emitted.txt"
"$cli" stop boot >/dev/null || exit 1
"$cli" destroy boot >/dev/null || exit 1
kill "$dpid"; wait "$dpid"
echo "boot: $counts"
