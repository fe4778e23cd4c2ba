#!/bin/sh
# kver.sh - print the newest kernel version that is INSTALLED with its image,
# modules and headers (never `uname -r`: the build machine may run another
# kernel, one we cannot load modules into).  Exit 1 when there is none.
best=""
for d in /lib/modules/*/; do
	v=$(basename "$d")
	[ -r "/boot/vmlinuz-$v" ] && [ -d "/usr/src/linux-headers-$v" ] || continue
	best="$best$v
"
done
v=$(printf '%s' "$best" | sort -V | tail -n 1)
[ -n "$v" ] || exit 1
echo "$v"
