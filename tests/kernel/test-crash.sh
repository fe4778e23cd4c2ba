#!/bin/bash
# test-crash.sh BUILD_ROOT STRATA CONSUMERD WORKLOAD OUT - kernel.crash: a
# real panic in the kernel VM (docs/crash.md).  The guest (guest-crash.sh)
# records the workload in two sessions and the workload panics it; qemu
# pauses, the host dumps its 512 MiB of memory (run-vm.sh --crash-dump),
# `strata recover` rebuilds the traces from the dump and check_crash.py
# checks them.  Exit 77 when the VM cannot run here.
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$1 strata=$2 consumerd=$3 workload=$4 out=$5
n=5000
mkdir -p "$out" || exit 1
"$here/run-vm.sh" --out "$out/vm" --build-root "$build" --build-module --mem 512 --timeout 300 \
	--append "tsc=reliable" --crash-dump "$out/vm/vmcore.elf" \
	-- "$here/guest-crash.sh" "$strata" "$consumerd" "$workload" $n
rc=$?
[ $rc = 0 ] || exit $rc
rm -rf "$out/recovered"
start=$(date +%s%N)
STRATA_CONSUMERD=$consumerd "$strata" recover "$out/vm/vmcore.elf" -o "$out/recovered" > "$out/recover.out" 2>&1
rrc=$?
echo "strata recover: exit $rrc in $(( ($(date +%s%N) - start) / 1000000 )) ms"
[ $rrc = 0 ] || { cat "$out/recover.out"; exit 1; }
STRATA_CONSUMERD=$consumerd /usr/bin/python3 "$here/check_crash.py" "$out" $n || exit 1
rm -f "$out/vm/vmcore.elf" # 512 MiB: kept only when the test fails
