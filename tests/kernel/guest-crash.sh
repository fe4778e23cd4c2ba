#!/bin/sh
# guest-crash.sh STRATA CONSUMERD WORKLOAD N [kdump] - the in-guest half of kernel.crash
# (test-crash.sh): two sessions record the workload's numbered user events
# and kernel events (scheduler, its getppid and write syscalls; the flight
# recorder only the write), one in discard mode, one a flight recorder
# (overwrite, small sub-buffers); then
# the workload panics the kernel (sysrq c) while both record.  The host
# dumps the guest's memory and recovers the buffers from it.
set -u
strata=$1 consumerd=$2 workload=$3 n=$4
o=$STRATA_VM_OUT/crash
# kdump (test-crash.sh kdump): the same initramfs and command run again in
# the capture kernel, where /proc/vmcore is the panicked kernel's memory.
if [ -e /proc/vmcore ]; then
	echo "guest: capture kernel: strata recover /proc/vmcore" > /dev/console
	rm -rf "$o/recovered"
	"$strata" recover /proc/vmcore -o "$o/recovered" > "$o/recover.out" 2>&1
	exit $?
fi
rm -rf "$o" && mkdir -p "$o" || exit 1
if [ "${5:-}" = kdump ]; then # load the capture kernel: this initramfs, this command
	kexec -p "/boot/vmlinuz-$(uname -r)" --initrd="$STRATA_VM_OUT/initramfs.gz" \
		--append="console=ttyS0 quiet panic=-1 irqpoll nr_cpus=1 reset_devices tsc=reliable" \
		> "$o/kexec.log" 2>&1 || { cat "$o/kexec.log"; exit 1; }
	[ "$(cat /sys/kernel/kexec_crash_loaded)" = 1 ] || { echo "no capture kernel loaded"; exit 1; }
fi
echo 1 > /proc/sys/kernel/sysrq
dmesg | grep 'crash descriptor at' > "$o/desc.txt"
export STRATA_CONSUMERD_SOCKET=/tmp/crash.sock
mkfifo /tmp/crash.ready || exit 1
"$consumerd" --socket "$STRATA_CONSUMERD_SOCKET" --ready-fd 3 3> /tmp/crash.ready 2> "$o/consumerd.err" &
read -r _ < /tmp/crash.ready || { echo "daemon did not start"; exit 1; }
"$strata" create disc -o "$o/disc" --subbuf-size 256k --subbuf-count 8 > /dev/null &&
"$strata" create fr -o "$o/fr" --mode overwrite --subbuf-size 4k --subbuf-count 4 > /dev/null || exit 1
# The discard session's buffers (2 MiB per lane, per CPU for the kernel's)
# hold the whole run even if the daemon never drained them: no loss, so
# babeltrace2 has nothing to warn about however slow the VM is.
# The flight recorder's kernel buffer (discard mode, drained by the daemon,
# as small as the session's sub-buffers) gets only the panicking write.
for e in 'kcrash:*' 'kernel:sched_switch' 'kernel:sched_wakeup' 'kernel:syscall_*_getppid' \
	'kernel:syscall_entry_write'; do
	"$strata" enable-event disc "$e" > /dev/null || exit 1
done
for e in 'kcrash:*' 'kernel:syscall_entry_write'; do
	"$strata" enable-event fr "$e" > /dev/null || exit 1
done
"$strata" start disc > /dev/null && "$strata" start fr > /dev/null || exit 1
"$strata" status > "$o/status.txt" 2>&1
echo "guest: workload starts, the kernel panics at its end" > /dev/console
"$workload" "$n" > "$o/workload.out" 2> "$o/workload.err"
echo "guest: the workload returned $?: no panic" > /dev/console
exit 1
