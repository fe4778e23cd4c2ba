#!/bin/sh
# guest-serial.sh STRATA DEMO SYSNAMES OUTDIR - the in-guest half of
# kernel.kinteg_serial (docs/serial.md): `strata record --serial` into the
# guest's second serial port, which qemu writes to the host file
# VMOUT/ttyS1.bin (run-vm.sh); check_kinteg.py serial rebuilds the trace
# on the host with `strata receive` and counts.  The session records
# kernel:sched_process_exec, kernel:syscall_*_openat and demo:*; the
# workload is strata-demo (1 thread, 100 events + 1) then, exec'd by the
# same shell, strata-kinteg-sysnames 100 (102 openat after its exec).
#   ttyS1 at 3 Mbaud: within the line's bandwidth (every event there);
#   ttyS2 at 460800 baud (46080 B/s), sysnames 30000 (about 2.5 MB, ten
#   times what the bucket and a slow guest let through): above it (what the
#   receiver misses equals what the sender refused).
# The kernel sub-trace's metadata alone is about 177 KB (every syscall's
# event class): 15 s of a 115200-baud line, which is why the lines here
# are fast.  qemu's serial ports do not pace at the baud rate (ports
# joined to files); the sender's token bucket does.
set -u
strata=$1 demo=$2 sysnames=$3 o=$4
for t in ttyS1 ttyS2; do
	[ -c /dev/$t ] || { echo "no /dev/$t in the guest"; exit 77; }
done
run() { # NAME DEVICE SYSNAMES_N
	"$strata" record --serial "$2" -e 'kernel:sched_process_exec' -e 'kernel:syscall_*_openat' -e 'demo:*' \
		-- /bin/sh -c "'$demo' --threads 1 --events 100 > /dev/null && exec '$sysnames' $3" \
		> "$o/$1.out" 2> "$o/$1.err"
	echo $? > "$o/$1.rc"
}
run serial /dev/ttyS1,3000000 100
run serial-over /dev/ttyS2,460800 30000
exit 0
