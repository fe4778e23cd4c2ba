#!/bin/sh
# guest-clocks.sh STRATA CONSUMERD PINGPONG N [plain|kernel [KBASE [PERIOD [LINK [APP]]]]] - the guest's half of
# check_clock_vm.py (run by run-vm.sh in the guest): a daemon that follows
# the host's clock over the virtio-serial port org.strata.sync (LINK
# `virtio`, the default) or over TCP (LINK `tcp:HOST:PORT`: run-vm.sh's
# --net) (probing every PERIOD ms, default 4; `default`: no --sync-period,
# the daemon's own adaptive rate), a session
# recording syncpp:* (`kernel`: also the guest kernel's read and write
# system calls, the module loaded by run-vm.sh) into $STRATA_VM_OUT/guest-trace (the folder shared with
# the host), and the ping-pong's client on the port org.strata.app (APP `virtio`, the default) or
# over TCP (APP `tcp:HOST:PORT`, the link kind's own path).
set -u
strata=$1 consumerd=$2 prog=$3 n=$4 kernel=${5:-} kbase=${6:-0} period=${7:-4} link=${8:-virtio} appl=${9:-virtio}
out=$STRATA_VM_OUT
port() { # the device of the virtio-serial port named $1 (no udev here)
	for d in /sys/class/virtio-ports/*; do
		[ "$(cat "$d/name")" = "$1" ] && echo "/dev/$(basename "$d")"
	done
}
# wait_for SECONDS CMD...: CMD until it succeeds, at most SECONDS
wait_for() {
	t=$(($1 * 10)); shift
	while ! "$@" > /dev/null 2>&1; do
		t=$((t - 1)); [ $t -gt 0 ] || return 1
		sleep 0.1
	done
}
answered() { "$strata" status G 2>/dev/null | sed -n 's/.* \([0-9]*\) of [0-9]* probe(s) answered.*/\1/p'; }
if [ "$appl" = virtio ]; then
	app=$(port org.strata.app)
	[ -z "$app" ] || app=dev:$app
else
	app=$appl
fi
if [ "$link" = virtio ]; then
	sync=$(port org.strata.sync)
	link=virtio:$sync
	[ -n "$sync" ] || app=""
fi
[ -n "$app" ] || { echo "guest: no virtio ports"; ls /sys/class/virtio-ports; exit 1; }
export STRATA_CONSUMERD_SOCKET=/tmp/g.sock
if [ "$period" = default ]; then
	"$consumerd" --socket /tmp/g.sock --sync "host=$link" -q &
else
	"$consumerd" --socket /tmp/g.sock --sync "host=$link" --sync-period "$period" -q &
fi
dpid=$!
wait_for 30 test -S /tmp/g.sock || { echo "guest: no daemon"; exit 1; }
"$strata" create G -o "$out/guest-trace" && "$strata" enable-event G 'syncpp:*' || exit 1
if [ "$kernel" = kernel ]; then
	"$strata" enable-event G 'kernel:syscall_entry_write' && "$strata" enable-event G 'kernel:syscall_exit_read' || exit 1
fi
"$strata" start G || exit 1
wait_for 60 sh -c "'$strata' status G | grep -q 'bound width'" || { echo "guest: the link never came up"; "$strata" status G; exit 1; }
SYNCPP_KBASE=$kbase "$prog" client "$app" "$n" || { echo "guest: the ping-pong failed"; exit 1; }
# Probes after the last message, so that its time lies inside the map.
a0=$(answered)
wait_for 30 sh -c "[ \$('$strata' status G | sed -n 's/.* \([0-9]*\) of [0-9]* probe(s) answered.*/\1/p') -ge $((a0 + 10)) ]" ||
	echo "guest: few probes after the exchange"
"$strata" status G > "$out/guest-status.txt"
"$strata" stop G || exit 1
kill "$dpid"; wait "$dpid"
echo "guest: done"
