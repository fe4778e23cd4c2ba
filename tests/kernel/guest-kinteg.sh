#!/bin/sh
# guest-kinteg.sh STRATA DEMO CAUSAL - the in-guest half of the kernel
# integration tests (kernel.kinteg_*): record with `strata record` while
# strata.ko is loaded; the traces land in $STRATA_VM_OUT/kinteg and are
# checked on the host, after the VM, by check_kinteg.py (bt2 under TCG
# emulation would cost minutes).
set -u
strata=$1 demo=$2 causal=$3
o=$STRATA_VM_OUT/kinteg
rm -rf "$o" && mkdir -p "$o" || exit 1

# (a) user and kernel events of one command in one session directory.
"$strata" record -o "$o/record" -e 'kernel:*' -e 'demo:*' -- "$demo" --threads 2 --events 200 \
	> "$o/record.out" 2> "$o/record.err"
echo $? > "$o/record.rc"

# (b) causality: each kcausal:before precedes its getppid's sys_enter, with
# the clock page and with clock_gettime stamping the user events.
for c in page monotonic; do
	STRATA_CLOCK=$c "$strata" record -o "$o/causal_$c" -e 'kernel:sys_enter' -e 'kcausal:*' \
		--subbuf-size 1M -- "$causal" 100000 > "$o/causal_$c.out" 2> "$o/causal_$c.err"
	echo $? > "$o/causal_$c.rc"
done
cat /sys/module/strata/parameters/* > "$o/kmod-params.txt" 2>/dev/null
echo "info kinteg: traces in $o (checked on the host)"
exit 0
