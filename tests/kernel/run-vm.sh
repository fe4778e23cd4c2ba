#!/bin/bash
# run-vm.sh - boot the installed Debian kernel under qemu (TCG), load the
# Strata module and run one command inside the guest, chrooted into the host's
# root file system (shared read-only over 9p).  Facts this relies on:
# /work/shared/notes/kernel-vm.md.
#
#   run-vm.sh --out DIR [--module KO | --build-module | --dkms-module] [--kver KVER]
#             [--timeout SECONDS] [--append "kernel args"] [--build-root DIR]
#             [--init PROGRAM [--init-lib LIB]... [--early-module]] [--disk MB]
#             [--mem MB] [--smp N] [--port NAME=SOCK]... [--net]
#             -- COMMAND...
#
# --dkms-module: the module built as the strata-dkms package builds it, by
# Debian's dkms from the staged source tree (kmod/dkms.conf), for KVER, into
# scratch DKMS trees under DIR (the system's are left alone); needs dkms and
# root, else the run is skipped (77) with the reason.
# --init PROGRAM: PROGRAM (with its shared libraries, from ldd) is the
# initramfs's /init, PID 1 started by the kernel; the usual set-up script is
# /stage2, which PROGRAM runs (busybox sh /stage2) when it wants the rest of
# the boot (tests/boot/boot_init.c).  --init-lib LIB also puts LIB (for
# example a library named by LD_PRELOAD on the kernel command line) and its
# libraries into the initramfs at their paths.  /stage2 unsets LD_PRELOAD:
# it is meant for PID 1, not for the rest of the boot.  --early-module
# (with --module or --build-module): the initramfs loads the module before
# PID 1's program, with the kernel command line's strata.NAME=VALUE words as
# its parameters (as modprobe would), then execs PROGRAM as PID 1.
# --mem MB: guest memory (default 2048).  --smp N: guest CPUs (default 2;
# the clock checks take 1, docs/clocks.md "What the measurements say").  --crash-dump FILE: the guest is
# expected to panic (tests/kernel/test-crash.sh): it gets a pvpanic device
# (driver loaded by the initramfs) and panic=0, qemu pauses on the panic
# (-action panic=pause) and qmp-dump.py, on qemu's QMP socket, waits for
# the GUEST_PANICKED event, dumps the guest's physical memory as an ELF
# core to FILE (dump-guest-memory) and quits qemu.  Success is then that
# dump, not the guest command's status (it never returns).
# --port NAME=SOCK (repeatable): a virtio-serial port named NAME in the guest
# (/sys/class/virtio-ports/*/name; no udev, so no /dev/virtio-ports link),
# whose host end is the unix socket SOCK, qemu listening (docs/clocks.md:
# clock links and the VM clock checks).
# --net: the guest also gets a virtio-net card on qemu's user networking
# (slirp: no host network set up, nothing but qemu's own sockets), eth0 at
# 10.0.2.15, whose gateway 10.0.2.2 reaches the host's loopback: a guest's
# TCP connection to 10.0.2.2:PORT arrives at the host's 127.0.0.1:PORT.
# --disk MB: the guest also gets a virtio disk of MB MiB (a sparse raw
# image, DIR/disk.img, zeros), /dev/vda: a block device for the block
# request events (the root is shared over 9p, which has none).
#
# DIR (created, emptied of previous results) is shared read-write with the
# guest and appears there at the same absolute path.  After the run it holds:
#   guest.log   stdout+stderr of COMMAND      guest.rc   its exit status
#   insmod.log  insmod output                 insmod.rc  its exit status
#   rmmod.rc    status of unloading the module at the end (leak checks)
#   dmesg.txt   the guest kernel log          console.log  qemu's serial console
#   ttyS1.bin, ttyS2.bin  what the guest wrote to its second and third serial
#               ports (strata --serial, docs/serial.md)
# COMMAND finds DIR in $STRATA_VM_OUT (for files worth keeping).
# Exit status: 0 when COMMAND succeeded, the module loaded and unloaded, and
# dmesg shows no oops/BUG/WARNING/KASAN; 77 when qemu or an installed kernel
# image/headers are missing (the caller reports SKIP); 1 otherwise.
set -u

here=$(cd "$(dirname "$0")" && pwd)
src_root=$(cd "$here/../.." && pwd)
out="" module="" build_module=0 dkms_module=0 kver="" tmo=600 append="" build_root_opt="" init_prog="" init_libs="" early_module=0
disk_mb=0 mem_mb=2048 smp=2 crash_dump="" ports=() net=0
while [ $# -gt 0 ]; do
	case "$1" in
	--out) out=$2; shift 2 ;;
	--module) module=$2; shift 2 ;;
	--build-module) build_module=1; shift ;;
	--dkms-module) dkms_module=1; shift ;;
	--kver) kver=$2; shift 2 ;;
	--timeout) tmo=$2; shift 2 ;;
	--append) append=$2; shift 2 ;;
	--build-root) build_root_opt=$2; shift 2 ;;
	--init) init_prog=$2; shift 2 ;;
	--init-lib) init_libs="$init_libs $2"; shift 2 ;;
	--early-module) early_module=1; shift ;;
	--disk) disk_mb=$2; shift 2 ;;
	--mem) mem_mb=$2; shift 2 ;;
	--smp) smp=$2; shift 2 ;;
	--crash-dump) crash_dump=$2; shift 2 ;;
	--port) ports+=("$2"); shift 2 ;;
	--net) net=1; shift ;;
	--) shift; break ;;
	*) echo "run-vm.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ -n "$out" ] || { echo "run-vm.sh: --out DIR is required" >&2; exit 2; }
[ $# -gt 0 ] || { echo "run-vm.sh: no command given" >&2; exit 2; }

skip() { echo "SKIP: $*"; mkdir -p "$out" && echo "$*" > "$out/SKIPPED"; exit 77; }

# ---- what is installed (never the running kernel: we cannot load into it)
qemu=$(command -v qemu-system-x86_64) || skip "qemu-system-x86_64 not installed (apt-get install qemu-system-x86)"
busybox=/bin/busybox
[ -x "$busybox" ] && "$busybox" --list >/dev/null 2>&1 || skip "static busybox not installed (apt-get install busybox-static)"
file -L "$busybox" 2>/dev/null | grep -q 'statically linked' || \
	skip "$busybox is not statically linked (apt-get install busybox-static)"
command -v cpio >/dev/null || skip "cpio not installed"
if [ -z "$kver" ]; then
	kver=$("$src_root/kmod/kver.sh") || skip "no installed kernel image + headers (apt-get install linux-image-amd64 linux-headers-amd64)"
fi
kernel=/boot/vmlinuz-$kver
moddir=/lib/modules/$kver
[ -r "$kernel" ] && [ -d "$moddir/kernel" ] || skip "kernel $kver not installed"

rm -rf "$out" && mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
# The build tree (--build-root, else the current directory).
build_root=$(cd "${build_root_opt:-.}" && pwd)

if [ "$build_module" = 1 ]; then
	"$src_root/kmod/build.sh" "$kver" "$out/kbuild" > "$out/kbuild.log" 2>&1 || {
		cat "$out/kbuild.log"; echo "FAIL: module build"; exit 1; }
	module=$out/kbuild/strata.ko
fi
if [ "$dkms_module" = 1 ]; then
	command -v dkms >/dev/null || skip "dkms not installed (apt-get install dkms)"
	[ "$(id -u)" = 0 ] || skip "dkms needs root"
	dk=$out/dkms ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$src_root/kmod/dkms.conf")
	dopts="--sourcetree $dk/src --dkmstree $dk/tree --installtree $dk/inst"
	mkdir -p "$dk/src" "$dk/tree" "$dk/inst/$kver" || exit 1
	# shellcheck disable=SC2086 # three scratch paths without blanks
	{ "$src_root/kmod/stage.sh" "$dk/src/strata-$ver" && dkms add "strata/$ver" $dopts &&
	  dkms install "strata/$ver" -k "$kver" $dopts; } > "$out/dkms.log" 2>&1 || {
		cat "$out/dkms.log"; echo "FAIL: dkms build of the module for $kver"; exit 1; }
	module=$dk/inst/$kver/updates/dkms/strata.ko
	echo "run-vm.sh: module built by dkms for $kver: $(modinfo -F vermagic "$module" 2>/dev/null)"
fi
if [ -n "$module" ]; then
	module=$(cd "$(dirname "$module")" && pwd)/$(basename "$module")
	[ -r "$module" ] || { echo "FAIL: no module at $module"; exit 1; }
fi

# ---- initramfs: static busybox, the 9p-over-virtio modules, /init
root=$out/initramfs
mkdir -p "$root/bin" "$root/mod" "$root/proc" "$root/sys" "$root/dev" "$root/mnt" || exit 1
cp "$busybox" "$root/bin/busybox" || exit 1

# Load order from modules.dep: dependencies first, each module once.
declare -A seen
order=()
add_mod() {
	local rel=$1 line deps d
	[ -n "${seen[$rel]:-}" ] && return
	seen[$rel]=1
	line=$(grep -m1 "^$rel:" "$moddir/modules.dep") || { echo "FAIL: $rel not in modules.dep"; exit 1; }
	deps=${line#*:}
	for d in $deps; do add_mod "$d"; done
	order+=("$rel")
}
wanted="virtio_pci 9pnet_virtio 9p"
[ "$disk_mb" = 0 ] || wanted="$wanted virtio_blk"
[ -z "$crash_dump" ] || wanted="$wanted pvpanic-pci"
[ ${#ports[@]} = 0 ] || wanted="$wanted virtio_console"
[ "$net" = 0 ] || wanted="$wanted virtio_net"
for want in $wanted; do
	rel=$(grep -m1 -E "/$want\.ko(\.[a-z]+)?:" "$moddir/modules.dep" | cut -d: -f1)
	[ -n "$rel" ] || skip "module $want not found for kernel $kver"
	add_mod "$rel"
done
: > "$root/modules.list"
for rel in "${order[@]}"; do
	name=$(basename "$rel")
	case "$name" in
	*.ko) cp "$moddir/$rel" "$root/mod/$name" ;;
	*.ko.xz) xz -dc "$moddir/$rel" > "$root/mod/${name%.xz}"; name=${name%.xz} ;;
	*.ko.zst) zstd -qdc "$moddir/$rel" > "$root/mod/${name%.zst}"; name=${name%.zst} ;;
	*.ko.gz) gzip -dc "$moddir/$rel" > "$root/mod/${name%.gz}"; name=${name%.gz} ;;
	esac
	echo "$name" >> "$root/modules.list"
done

# The command runs inside the chroot with the same paths as on the host.
{
	echo '#!/bin/sh'
	echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp LC_ALL=C.UTF-8'
	printf 'export STRATA_VM_OUT=%q\n' "$out"
	printf 'cd %q || exit 1\n' "$(pwd)"
	printf '%q ' "$@"; echo
} > "$out/cmd.sh"

cat > "$root/init" <<INIT
#!/bin/busybox sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
for m in \$(cat /modules.list); do insmod /mod/\$m || echo "init: insmod \$m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 hostroot /mnt || { echo "init: no hostroot"; poweroff -f; }
if [ "$net" = 1 ]; then
	ip link set lo up && ip link set eth0 up && ip addr add 10.0.2.15/24 dev eth0 && ip route add default via 10.0.2.2 ||
		echo "init: no network"
fi
mount -t proc proc /mnt/proc
mount -t sysfs sys /mnt/sys
mount -t devtmpfs dev /mnt/dev
mkdir -p /mnt/dev/shm /mnt/dev/pts
mount -t tmpfs shm /mnt/dev/shm
mount -t devpts devpts /mnt/dev/pts
mount -t tmpfs tmp /mnt/tmp
mount -t tmpfs run /mnt/run
mount -t tracefs tracefs /mnt/sys/kernel/tracing 2>/dev/null
mount -t debugfs debugfs /mnt/sys/kernel/debug 2>/dev/null
# The source and build trees are exported on their own, so that they are seen
# at their host paths even when they live under /tmp or /run, which the tmpfs
# mounts above hide (a CI clone may well be under /tmp).
mkdir -p /mnt$src_root /mnt$build_root
mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=262144 src /mnt$src_root || { echo "init: no src"; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 bld /mnt$build_root || { echo "init: no bld"; poweroff -f; }
mkdir -p /mnt$out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /mnt$out || { echo "init: no out"; poweroff -f; }
O=/mnt$out
if [ -f /insmod.rc ]; then # loaded before PID 1 (--early-module)
	cp /insmod.log \$O/insmod.log; cp /insmod.rc \$O/insmod.rc
elif [ -n "$module" ]; then
	insmod /mnt$module > \$O/insmod.log 2>&1; echo \$? > \$O/insmod.rc
fi
unset LD_PRELOAD
chroot /mnt /bin/sh $out/cmd.sh > \$O/guest.log 2>&1
echo \$? > \$O/guest.rc
if [ -n "$module" ]; then
	rmmod strata > \$O/rmmod.log 2>&1; echo \$? > \$O/rmmod.rc
fi
dmesg > \$O/dmesg.txt
sync
umount \$O
poweroff -f
INIT
chmod +x "$root/init"
if [ -n "$init_prog" ]; then
	mv "$root/init" "$root/stage2"
	if [ "$early_module" = 1 ]; then
		[ -n "$module" ] || { echo "run-vm.sh: --early-module needs --module or --build-module" >&2; exit 2; }
		cp "$module" "$root/strata.ko" || exit 1
		cp "$init_prog" "$root/init.prog" || exit 1
		cat > "$root/init" <<'EARLY'
#!/bin/busybox sh
# The initramfs's part of an early boot: the module first, with the kernel
# command line's strata.* words (what modprobe does), then PID 1's program.
/bin/busybox mount -t proc proc /proc
args=""
for w in $(/bin/busybox cat /proc/cmdline); do
	case "$w" in strata.*) args="$args ${w#strata.}" ;; esac
done
/bin/busybox umount /proc
/bin/busybox insmod /strata.ko $args > /insmod.log 2>&1
echo $? > /insmod.rc
exec /init.prog
EARLY
		chmod +x "$root/init"
	else
		cp "$init_prog" "$root/init" || exit 1
	fi
	# The dynamic loader and libraries, at the paths the program names.
	for lib in $(ldd "$init_prog" $init_libs | grep -o '/[^ :]*' | sort -u) $init_libs; do
		mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib" || exit 1
	done
fi
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$out/initramfs.gz" || exit 1
rm -rf "$root"

disk_opt=()
if [ "$disk_mb" != 0 ]; then
	truncate -s "${disk_mb}M" "$out/disk.img" || exit 1
	disk_opt=(-drive "file=$out/disk.img,if=virtio,format=raw")
fi
net_opt=()
[ "$net" = 0 ] || net_opt=(-netdev user,id=net0 -device virtio-net-pci,netdev=net0)
crash_opt=()
qmp_pid=""
if [ -n "$crash_dump" ]; then
	rm -f "$crash_dump"
	crash_opt=(-device pvpanic-pci -action panic=pause -qmp "unix:$out/qmp.sock,server=on,wait=off")
	append="$append panic=0"
fi
port_opt=()
if [ ${#ports[@]} != 0 ]; then
	port_opt=(-device virtio-serial-pci)
	i=0
	for p in "${ports[@]}"; do
		port_opt+=(-chardev "socket,id=port$i,path=${p#*=},server=on,wait=off"
			-device "virtserialport,chardev=port$i,name=${p%%=*}")
		i=$((i + 1))
	done
fi
start=$(date +%s)
# A guest still running 40 s before the timeout gets an NMI through qemu's
# monitor: with unknown_nmi_panic it panics, and panic_print=0x40 prints
# every CPU's backtrace on the console first.  A guest frozen in its
# kernel (every CPU spinning with interrupts off) shows nothing else: TCG
# has no NMI watchdog.  A guest merely waiting in user space has reported
# already (guest-watchdog.sh).  Not a synchronisation: only a report.
mon=$out/monitor.sock
(
	[ "$tmo" -gt 60 ] || exit 0
	sleep $((tmo - 40)) &
	sp=$!
	trap 'kill $sp 2> /dev/null; exit 0' TERM
	wait $sp
	[ -f "$out/guest.rc" ] && exit 0
	echo "vm: the guest still runs after $((tmo - 40)) s: NMI for a backtrace" >&2
	python3 -c 'import socket, sys, time
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(b"nmi\n"); time.sleep(1)' "$mon"
) > "$out/nmi.log" 2>&1 < /dev/null &
nmi_pid=$!
# thread=single: both vCPUs run in one host thread (round-robin TCG).  With
# qemu 7.2's default multi-threaded TCG a guest CPU went on executing a
# stale translation of kernel text that the other CPU had just patched
# back (an int3 of text_poke_bp, at the irq_handler_entry static key): it
# trapped, kprobes found no int3 in memory and re-ran the instruction, for
# ever, in hard-irq context, so the patching CPU waited on its IPI until
# the soft-lockup panic (CI, stop 21).  Arming and disarming tracepoints
# is exactly what the module does, so the test must not depend on qemu
# getting cross-CPU code modification right.  Same run time here (96 s).
timeout --kill-after=10 "$tmo" "$qemu" -accel tcg,thread=single -smp "$smp" -m "$mem_mb" -nographic -no-reboot \
	-monitor "unix:$mon,server=on,wait=off" \
	-kernel "$kernel" -initrd "$out/initramfs.gz" \
	-append "console=ttyS0 quiet panic=-1 softlockup_panic=1 unknown_nmi_panic panic_print=0x40 $append" \
	-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
	-virtfs local,path="$src_root",mount_tag=src,security_model=none,readonly=on,multidevs=remap \
	-virtfs local,path="$build_root",mount_tag=bld,security_model=none,multidevs=remap \
	-virtfs local,path="$out",mount_tag=out,security_model=none "${disk_opt[@]}" "${crash_opt[@]}" "${port_opt[@]}" "${net_opt[@]}" \
	-serial stdio -serial "file:$out/ttyS1.bin" -serial "file:$out/ttyS2.bin" \
	< /dev/null > "$out/console.log" 2>&1 &
q_pid=$!
if [ -n "$crash_dump" ]; then
	python3 "$here/qmp-dump.py" "$out/qmp.sock" "$crash_dump" "$tmo" > "$out/qmp.log" 2>&1 &
	qmp_pid=$!
fi
wait "$q_pid"
qrc=$?
kill "$nmi_pid" 2> /dev/null
echo "vm: qemu exit $qrc after $(( $(date +%s) - start )) s (kernel $kver)"
[ -s "$out/nmi.log" ] && cat "$out/nmi.log"

fail=0
if [ -n "$crash_dump" ]; then
	wait "$qmp_pid"
	qmp_rc=$?
	cat "$out/qmp.log"
	echo "---- guest.log"
	cat "$out/guest.log" 2> /dev/null
	if [ "$qmp_rc" != 0 ] || [ ! -s "$crash_dump" ]; then
		echo "FAIL: no memory dump after the guest's panic; console tail:"
		tail -n 40 "$out/console.log"
		exit 1
	fi
	grep -q 'Kernel panic' "$out/console.log" || { echo "FAIL: no panic on the console"; exit 1; }
	exit 0
fi
if [ ! -f "$out/guest.rc" ]; then
	echo "FAIL: the guest did not finish (timeout ${tmo}s or crash); console tail:"
	# With a guest watchdog's report (tests/kernel/guest-watchdog.sh) on the
	# console, all of it.
	if grep -q 'guest watchdog:\|Kernel panic\|NMI' "$out/console.log"; then
		sed -n '/kinteg:\|guest: ktest done\|guest watchdog:\|NMI/,$p' "$out/console.log"
	else
		tail -n 40 "$out/console.log"
	fi
	[ -s "$out/guest.log" ] && { echo "---- guest.log (tail)"; tail -n 20 "$out/guest.log"; }
	exit 1
fi
if [ -n "$module" ] && [ "$(cat "$out/insmod.rc")" != 0 ]; then
	echo "FAIL: insmod: $(cat "$out/insmod.log")"; fail=1
fi
if [ -n "$module" ] && [ "$(cat "$out/rmmod.rc" 2>/dev/null)" != 0 ]; then
	echo "FAIL: rmmod: $(cat "$out/rmmod.log" 2>/dev/null)"; fail=1
fi
if ! "$here/check-dmesg.sh" "$out/dmesg.txt" > "$out/dmesg-bad.txt"; then
	echo "FAIL: the kernel log shows a problem:"; cat "$out/dmesg-bad.txt"; fail=1
fi
grc=$(cat "$out/guest.rc")
[ "$grc" = 0 ] || { echo "FAIL: guest command exited $grc"; fail=1; }
cat "$out/guest.log"
exit $fail
