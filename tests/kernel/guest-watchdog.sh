#!/bin/sh
# guest-watchdog.sh SECONDS - in the test guest: after SECONDS, report what
# every user task is doing (pid, comm, state, wait channel, each thread's
# kernel stack) and the kernel's blocked-task dump (sysrq w).  Started in
# the background by guest-suite.sh and killed when the suite ends in time.
# The report goes to the serial console first (console.log on the host),
# because a guest that hangs in its 9p file system could not write
# $STRATA_VM_OUT; then, best effort, to $STRATA_VM_OUT/watchdog.txt.
set -u
sleep "$1" || exit 0
rep=/tmp/strata-watchdog.txt
{
	echo "guest watchdog: the suite still runs after $1 s"
	for d in /proc/[0-9]*; do
		pid=${d#/proc/}
		[ "$pid" = $$ ] && continue
		# Kernel threads have an empty cmdline: only user tasks are of
		# interest.  (test -s does not do: /proc files have size 0.)
		cmd=$(tr '\0' ' ' < "$d/cmdline" 2> /dev/null | cut -c1-160)
		[ -n "$cmd" ] || continue
		echo "== $pid $(cat "$d/comm" 2> /dev/null) [$cmd]"
		for t in "$d"/task/*; do
			echo "-- tid ${t##*/} state $(cut -d' ' -f3 "$t/stat" 2> /dev/null) wchan $(cat "$t/wchan" 2> /dev/null)"
			cat "$t/stack" 2> /dev/null
		done
	done
} > "$rep" 2>&1
cat "$rep" > /dev/console 2>&1
# The blocked-task dump reaches the console only above the quiet log level.
echo 7 > /proc/sys/kernel/printk 2> /dev/null
echo w > /proc/sysrq-trigger 2> /dev/null
cp "$rep" "$STRATA_VM_OUT/watchdog.txt" &
