#!/bin/sh
# test-check-dmesg.sh - the harness's kernel-health oracle must reject every
# kind of report it claims to catch and accept a clean log (real lines from
# 6.1 kernels).  No VM needed.
set -u
check=$(dirname "$0")/check-dmesg.sh
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
clean='[    2.459942] strata: loading out-of-tree module taints kernel.
[    2.460199] strata: module verification failed: signature and/or required key missing - tainting kernel
[    2.463263] strata: loaded, kabi 1
[    7.047061] strata: unloaded, no object left'
printf '%s\n' "$clean" > "$tmp/clean"
"$check" "$tmp/clean" > /dev/null || { echo "FAIL: clean log rejected"; exit 1; }
fails=0
while IFS= read -r line; do
	[ -n "$line" ] || continue
	printf '%s\n%s\n' "$clean" "$line" > "$tmp/bad"
	if "$check" "$tmp/bad" > /dev/null; then
		echo "FAIL: not caught: $line"
		fails=1
	fi
done <<'BAD'
[   12.1] BUG: kernel NULL pointer dereference, address: 0000000000000010
[   12.1] Oops: 0000 [#1] PREEMPT SMP NOPTI
[   12.1] WARNING: CPU: 1 PID: 126 at kmod/strata_kbuf.c:370 strata_emit+0x1d0/0x200 [strata]
[  156.3] watchdog: BUG: soft lockup - CPU#0 stuck for 48s! [strata-ktest:122]
[   12.1] general protection fault, probably for non-canonical address 0xdead000000000100: 0000 [#1]
[   12.1] BUG: KASAN: use-after-free in strata_ctl_ioctl+0x50/0x300 [strata]
[   12.1] UBSAN: shift-out-of-bounds in kmod/strata_kbuf.c:200:3
[   12.1] refcount_t: underflow; use-after-free.
[   12.1] list_del corruption. prev->next should be ffff888004a8e0a8, but was dead000000000100
[   12.1] Kernel panic - not syncing: softlockup: hung tasks
[  191.9] rcu: INFO: rcu_preempt detected stalls on CPUs/tasks:
[    7.0] strata: leak: 3 objects not freed
BAD
[ "$fails" = 0 ] && echo "PASS: every report kind caught, clean log accepted"
exit "$fails"
