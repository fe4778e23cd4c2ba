#!/bin/busybox sh
# boot-crash-init.sh - PID 1 of kernel.crash_boot (test-crash.sh boot): the
# module was loaded before it by the initramfs with the command line's
# strata.boot_events (run-vm.sh --early-module), so the kernel's process
# events are recorded from here on with no daemon and nothing mounted.
# It starts 40 short processes (fork, exec of /bin/busybox-crashtest, exit
# each), then panics the
# kernel, still in early boot.
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
# The pvpanic driver (qemu learns of the panic through it).
for m in $(/bin/busybox cat /modules.list); do /bin/busybox insmod /mod/$m; done
# The counted processes exec a name of their own (busybox runs as itself
# under any name starting with "busybox").
/bin/busybox ln -s /bin/busybox /bin/busybox-crashtest
i=0
while [ $i -lt 40 ]; do
	/bin/busybox-crashtest true
	i=$((i + 1))
done
echo "boot-crash-init: $i processes run, panicking" > /dev/console
echo 1 > /proc/sys/kernel/sysrq
echo c > /proc/sysrq-trigger
