#!/bin/sh
# check-dmesg.sh DMESG_FILE - exit 1 (and print the lines) if the guest's
# kernel log shows a problem: oops, BUG (soft lockups included), WARNING,
# KASAN/UBSAN reports, refcount or list corruption, a panic, or the module's
# own leak / disable messages.  Exit 0 otherwise.
bad='Oops|BUG:|WARNING:|KASAN|UBSAN|general protection fault|kernel BUG|Kernel panic|refcount_t:|list_add corruption|list_del corruption|rcu: INFO: rcu_.* detected stalls|strata: .*(leak|disabled)'
if grep -E "$bad" "$1"; then
	exit 1
fi
exit 0
