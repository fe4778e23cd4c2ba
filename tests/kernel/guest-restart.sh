#!/bin/sh
# guest-restart.sh STRATA CONSUMERD APP APP_ASYNC KILLS - the in-guest half of
# kernel.restart (test-restart.sh), the module loaded:
#  1. check_restart.py --kernel with APP (tp-sync), then APP_ASYNC (tp-async);
#  2. a slot nobody takes over: with keep_orphan_ms at 300, a daemon
#     recording kernel events is killed; the module clears its slot once
#     the time passed (dmesg), and a daemon that comes later starts a new
#     kernel sub-trace, saying in its log that its predecessor's buffer is gone.
set -u
strata=$1 consumerd=$2 app=$3 app_async=$4 kills=$5
here=$(cd "$(dirname "$0")" && pwd)
check="/usr/bin/python3 $here/../control/check_restart.py --kernel --kills $kills --strata $strata --consumerd $consumerd"
echo "== tp-sync" && $check --app "$app" || exit 1
echo "== tp-async" && $check --app "$app_async" || exit 1

echo "== a kept slot not taken over"
w=$(mktemp -d) || exit 1
export STRATA_CONSUMERD_SOCKET=$w/sock
daemon() { # start one, wait for "ready" on fd 3
	mkfifo "$w/ready.$1" || exit 1
	"$consumerd" --socket "$STRATA_CONSUMERD_SOCKET" --ready-fd 3 3> "$w/ready.$1" 2> "$w/daemon.$1.err" &
	dpid=$!
	read -r _ < "$w/ready.$1" || { echo "FAIL daemon $1 did not start"; exit 1; }
}
echo 300 > /sys/module/strata/parameters/keep_orphan_ms || exit 1
daemon 1
"$strata" create o -o "$w/trace" > /dev/null && "$strata" enable-event o 'kernel:syscall_entry_getppid' > /dev/null &&
	"$strata" start o > /dev/null || exit 1
kill -9 $dpid; wait $dpid
# Sub-traces are lazy: the killed daemon made `kernel` only if it wrote a
# kernel packet before its death.  The next daemon's go to a new one.
if [ -d "$w/trace/kernel" ]; then next=kernel.1; else next=kernel; fi
n=0 # the module's delayed work clears it (a condition polled with a deadline)
until dmesg | grep -q 'slot [0-9]*: not taken over in time: cleared'; do
	n=$((n + 1)); [ $n -lt 200 ] || { echo "FAIL the kept slot was not cleared within 20 s"; exit 1; }
	sleep 0.1
done
echo "ok   the kept slot was cleared once keep_orphan_ms passed"
daemon 2
# Kernel events after the take-up: a sub-trace is made once its buffer has
# events (lazy sub-traces), so the oracle below needs some.
/usr/bin/python3 -c 'import os; [os.getppid() for _ in range(3)]' || exit 1
"$strata" stop o > /dev/null && "$strata" destroy o > /dev/null || exit 1
kill $dpid; wait $dpid
grep -q "previous daemon's kernel buffer is gone" "$w/daemon.2.err" &&
	echo "ok   the next daemon says its predecessor's kernel buffer is gone" ||
	{ echo "FAIL the next daemon did not say so:"; cat "$w/daemon.2.err"; exit 1; }
got=$(babeltrace2 "$w/trace/$next" 2>&1 | grep -c 'syscall_entry_getppid')
[ "$got" -ge 3 ] &&
	echo "ok   its kernel events go to a new sub-trace ($next: $got getppid entries)" ||
	{ echo "FAIL kernel sub-traces: $(ls "$w/trace"), $got getppid entries in $next"; cat "$w/daemon.2.err"; exit 1; }
echo 60000 > /sys/module/strata/parameters/keep_orphan_ms
