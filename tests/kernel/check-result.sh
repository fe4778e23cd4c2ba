#!/bin/sh
# check-result.sh OUTDIR TEST - one CTest verdict from the shared VM run:
# 0 if OUTDIR/guest.log has "PASS TEST", 77 if the VM run was skipped.
out=$1
name=$2
[ -f "$out/SKIPPED" ] && { echo "SKIP: $(cat "$out/SKIPPED")"; exit 77; }
[ -f "$out/guest.log" ] || { echo "FAIL: no VM results in $out (kernel.vm did not run)"; exit 1; }
grep -E "^(PASS|FAIL|info) $name[ :]" "$out/guest.log"
grep -qE "^PASS $name( |$)" "$out/guest.log"
