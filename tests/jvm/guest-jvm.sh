#!/bin/sh
# guest-jvm.sh STRATA JAVA CLASSPATH - the in-guest half of jvm.vm_crosslayer,
# run by tests/kernel/run-vm.sh with strata.ko loaded: one Java program
# (Contend.java: two threads contending for one monitor, Java API events)
# recorded with jvm, Java API and kernel events in one session.  The trace is
# checked on the host by check_crosslayer.py (bt2 under TCG is slow).
set -u
strata=$1 java=$2 cp=$3
o=$STRATA_VM_OUT/crosslayer
rm -rf "$o" && mkdir -p "$o" || exit 1
[ -c /dev/strata ] || { echo "FAIL jvm_crosslayer: /dev/strata missing"; exit 1; }
"$strata" record --jvm -o "$o/trace" --subbuf-size 1M --subbuf-count 32 \
	-e 'jvm:*' -e 'japp:*' -e 'kernel:*' -- "$java" -Xint -XX:+UseSerialGC -cp "$cp" Contend return 300 40 \
	> "$o/record.out" 2> "$o/record.err"
echo $? > "$o/record.rc"
echo "info jvm_crosslayer: rc $(cat "$o/record.rc"), trace in $o (checked on the host)"
exit 0
