#!/bin/bash
# test-crash.sh MODE BUILD_ROOT STRATA CONSUMERD WORKLOAD OUT - a real panic
# in the kernel VM, recovered from a dump of its memory (docs/crash.md).
#   session (kernel.crash): the guest (guest-crash.sh) records the workload
#     in two sessions and the workload panics it; check_crash.py.
#   boot (kernel.crash_boot): PID 1 (boot-crash-init.sh) runs processes in
#     early boot, the module recording kernel events from its load
#     (strata.boot_events), then panics; check_crash.py ... boot.
#   kdump (kernel.crash_kdump): as session, but the panic boots a capture
#     kernel (kexec -p, crashkernel=) that runs `strata recover /proc/vmcore`.
# qemu pauses at the panic, the host dumps the guest's 512 MiB
# (run-vm.sh --crash-dump), `strata recover` rebuilds the traces from the
# dump.  Exit 77 when the VM cannot run here.  STRATA_KEEP_DUMP=1 keeps
# the dump (else removed when the test passes).
set -u
here=$(cd "$(dirname "$0")" && pwd)
mode=$1 build=$2 strata=$3 consumerd=$4 workload=$5 out=$6
mkdir -p "$out" || exit 1
if [ "$mode" = boot ]; then
	n=40 # boot-crash-init.sh's processes
	"$here/run-vm.sh" --out "$out/vm" --build-root "$build" --build-module --mem 512 --timeout 300 \
		--init "$here/boot-crash-init.sh" --early-module --crash-dump "$out/vm/vmcore.elf" \
		--append "tsc=reliable strata.boot_events=kernel:sched_process_fork,kernel:sched_process_exec,kernel:sched_process_exit" \
		-- true
	check_mode=boot
elif [ "$mode" = kdump ]; then
	n=5000
	command -v kexec > /dev/null || { echo "SKIP: kexec not installed (apt-get install kexec-tools)"; exit 77; }
	# The panic boots the capture kernel (crashkernel= memory, loaded by
	# guest-crash.sh with kexec -p), which runs `strata recover /proc/vmcore`
	# and powers off: no dump by the host.
	"$here/run-vm.sh" --out "$out/vm" --build-root "$build" --build-module --mem 512 --timeout 300 \
		--append "tsc=reliable crashkernel=160M" \
		-- "$here/guest-crash.sh" "$strata" "$consumerd" "$workload" $n kdump
	rc=$?
	[ $rc = 0 ] || exit $rc
	rm -rf "$out/recovered" && cp "$out/vm/crash/recover.out" "$out/recover.out" &&
		ln -s vm/crash/recovered "$out/recovered" || exit 1
	STRATA_CONSUMERD=$consumerd /usr/bin/python3 "$here/check_crash.py" "$out" $n
	exit $?
else
	n=5000
	"$here/run-vm.sh" --out "$out/vm" --build-root "$build" --build-module --mem 512 --timeout 300 \
		--append "tsc=reliable" --crash-dump "$out/vm/vmcore.elf" \
		-- "$here/guest-crash.sh" "$strata" "$consumerd" "$workload" $n
	check_mode=
fi
rc=$?
[ $rc = 0 ] || exit $rc
rm -rf "$out/recovered"
start=$(date +%s%N)
STRATA_CONSUMERD=$consumerd "$strata" recover "$out/vm/vmcore.elf" -o "$out/recovered" > "$out/recover.out" 2>&1
rrc=$?
echo "strata recover: exit $rrc in $(( ($(date +%s%N) - start) / 1000000 )) ms"
[ $rrc = 0 ] || { cat "$out/recover.out"; exit 1; }
STRATA_CONSUMERD=$consumerd /usr/bin/python3 "$here/check_crash.py" "$out" $n $check_mode || exit 1
[ -n "${STRATA_KEEP_DUMP:-}" ] || rm -f "$out/vm/vmcore.elf" # 512 MiB: kept when the test fails
