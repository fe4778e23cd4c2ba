#!/bin/bash
# systemd-boot.sh --out DIR --build DIR [--cache DIR] [--timeout SECONDS]
#                 [--append "kernel args"]
# docs/boot.md "Boot tracing on a systemd machine", done as a user would on
# a VM, then checked:
#   1. a Debian 12 root booted by systemd (systemd-root.sh, cached);
#   2. Strata installed into it by `cmake --install --prefix /usr` (DESTDIR),
#      strata.ko where `kmod/dkms.sh install` puts it (updates/dkms; the
#      dkms route itself is test kernel.dkms), the unit checked by
#      `systemd-analyze verify` and enabled with `systemctl enable`;
#   3. `update-initramfs -c` run in the root: the installed hook must put
#      strata.ko and its load line into the initramfs (lsinitramfs, unpacked),
#      and, run for a kernel without strata.ko, warn and write no load line;
#   4. booted under qemu (TCG) from an ext4 image with the kernel command
#      line of docs/boot.md; systemd starts strata-consumerd.service, a
#      test unit ordered after it notes what the check needs and powers off;
#   5. /var/log/strata and the test unit's notes read back from the image
#      (debugfs, no mount) into DIR/disk for check_systemd_boot.py.
# The kernel is the installed Debian one (kver.sh), copied into the root
# with the modules its root device needs, since strata.ko is built for it.  Exit 77 (skip) when
# not root or when a package is missing (scripts/deps.sh installs them).
# Prints the time of each phase.
set -u
here=$(cd "$(dirname "$0")" && pwd)
src_root=$(cd "$here/../.." && pwd)
out="" build="" cache=${STRATA_VM_CACHE:-/var/cache/strata-test} tmo=600 append=""
while [ $# -gt 0 ]; do
	case "$1" in
	--out) out=$2; shift 2 ;;
	--build) build=$2; shift 2 ;;
	--cache) cache=$2; shift 2 ;;
	--timeout) tmo=$2; shift 2 ;;
	--append) append=$2; shift 2 ;;
	*) echo "systemd-boot.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ -n "$out" ] && [ -n "$build" ] || { echo "usage: systemd-boot.sh --out DIR --build DIR" >&2; exit 2; }
skip() { echo "SKIP: $*"; mkdir -p "$out" && echo "$*" > "$out/SKIPPED"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
t0=$(date +%s)
phase() { echo "systemd-boot: $1 ($(( $(date +%s) - t0 )) s)"; }

[ "$(id -u)" = 0 ] || skip "needs root (mmdebstrap, chroot)"
for c in qemu-system-x86_64:qemu-system-x86 mmdebstrap:mmdebstrap mkfs.ext4:e2fsprogs debugfs:e2fsprogs \
	 systemd-analyze:systemd lsinitramfs:initramfs-tools unmkinitramfs:initramfs-tools depmod:kmod; do
	command -v "${c%%:*}" >/dev/null || skip "${c%%:*} not installed (apt-get install ${c#*:})"
done
kver=$("$src_root/kmod/kver.sh") || skip "no installed kernel image + headers"
ko=$build/kmod/module/strata.ko
[ -r "$ko" ] || fail "no $ko (build the strata_kmod_module target)"
rm -rf "$out" && mkdir -p "$out" || exit 1
out=$(cd "$out" && pwd)
build=$(cd "$build" && pwd)

# ---- 1. the cached root
tar=$("$here/systemd-root.sh" "$cache") || fail "no root file system"
root=$out/root
mkdir "$root" && tar -C "$root" -xf "$tar" || fail "cannot unpack $tar"
phase "root unpacked from $tar"

# ---- 2. Strata, installed as docs/boot.md says
DESTDIR=$root cmake --install "$build" --prefix /usr > "$out/install.log" 2>&1 ||
	{ tail -n 20 "$out/install.log"; fail "cmake --install"; }
for f in usr/bin/strata-consumerd usr/bin/strata usr/bin/strata-boot-collect \
	 usr/lib/systemd/system/strata-consumerd.service usr/share/initramfs-tools/hooks/strata; do
	[ -e "$root/$f" ] || fail "cmake --install did not install /$f"
done
grep -qx 'ExecStart=/usr/bin/strata-boot-collect' "$root/usr/lib/systemd/system/strata-consumerd.service" ||
	fail "the installed unit does not run /usr/bin/strata-boot-collect"
# Of the kernel's modules only those the root device needs (and their
# dependencies): copying all 400 MB made the image three times slower to
# make.
rootmods="virtio_pci virtio_blk ext4"
mods=$(modprobe -S "$kver" -a --show-depends $rootmods | awk '$1 == "insmod" { print $2 }' | sort -u)
[ -n "$mods" ] || fail "no modules for $rootmods in /lib/modules/$kver"
mkdir -p "$root/lib/modules/$kver" &&
	cp /lib/modules/"$kver"/modules.builtin* /lib/modules/"$kver"/modules.order "$root/lib/modules/$kver/" &&
	for m in $mods; do install -D -m 644 "$m" "$root$m" || exit 1; done &&
	cp "/boot/vmlinuz-$kver" "/boot/config-$kver" "/boot/System.map-$kver" "$root/boot/" &&
	install -D -m 644 "$ko" "$root/lib/modules/$kver/updates/dkms/strata.ko" &&
	depmod -b "$root" "$kver" || fail "cannot install the kernel and strata.ko"
# The unit as systemd reads it (every unit it names, its ExecStart=).  Its
# Documentation= man page is the package's (e2e.man_pages, package.debs
# check it); this root has none, and systemd-analyze looks on the host.
if ! systemd-analyze verify --man=no --root="$root" strata-consumerd.service > "$out/verify.log" 2>&1 || [ -s "$out/verify.log" ]; then
	cat "$out/verify.log"; fail "systemd-analyze verify strata-consumerd.service"
fi
chroot "$root" systemctl enable strata-consumerd.service > "$out/enable.log" 2>&1 ||
	{ cat "$out/enable.log"; fail "systemctl enable"; }
[ -L "$root/etc/systemd/system/sysinit.target.wants/strata-consumerd.service" ] ||
	fail "systemctl enable made no sysinit.target.wants link"
phase "Strata installed, unit verified and enabled"

# What the test adds (not Strata's): an fstab, and a unit ordered after
# strata-consumerd.service (so it runs once the early buffers are adopted:
# Type=notify) that notes what the check needs and powers off.
echo '/dev/vda / ext4 rw 0 1' > "$root/etc/fstab"
echo strata-vm > "$root/etc/hostname"
cat > "$root/usr/local/sbin/strata-vmtest" <<'EOF'
#!/bin/sh
o=/var/log/strata-vmtest
mkdir -p $o
systemctl show -p ActiveState -p SubState -p StatusText strata-consumerd.service > $o/unit.txt
cat /sys/module/strata/parameters/boot_events > $o/boot_events.txt
for p in /proc/[0-9]*; do
	[ "$(readlink $p/exe)" = /usr/bin/strata-consumerd ] && echo "${p#/proc/}" >> $o/daemon.txt
done
ls /var/log/strata > $o/traces.txt
# The unit's daemon serves every user (docs/security.md): root's session
# records a process of uid 65534, which sees nothing of root's sessions.
u="setpriv --reuid=65534 --regid=65534 --clear-groups --"
strata create users -o $o/users > /dev/null && strata enable-event users 'demo:*' > /dev/null &&
	strata start users > /dev/null
$u strata-demo --threads 2 --events 1000 > $o/user-demo.txt 2>&1; echo "rc=$?" >> $o/user-demo.txt
$u strata status > $o/user-status.txt 2>&1; echo "rc=$?" >> $o/user-status.txt
$u strata stop users > $o/user-stop.txt 2>&1; echo "rc=$?" >> $o/user-stop.txt
strata stop users > $o/users-stop.txt 2>&1
sync
systemctl --no-block poweroff
EOF
chmod 755 "$root/usr/local/sbin/strata-vmtest"
cat > "$root/etc/systemd/system/strata-vmtest.service" <<'EOF'
[Unit]
Description=Strata VM test: notes for the check, then power off
After=strata-consumerd.service
[Service]
Type=oneshot
ExecStart=/usr/local/sbin/strata-vmtest
[Install]
WantedBy=multi-user.target
EOF
chroot "$root" systemctl enable strata-vmtest.service > /dev/null 2>&1 || fail "cannot enable the test unit"

# ---- 3. the initramfs, by update-initramfs in the root.  MODULES=list
# (the root device's drivers, named) instead of Debian's default "most"
# (which also took minutes on a loaded machine): the same hook runs.
printf '%s\n' $rootmods >> "$root/etc/initramfs-tools/modules"
echo MODULES=list > "$root/etc/initramfs-tools/conf.d/strata-vmtest"
# The initramfs, by update-initramfs in the root (proc mounted in a
# mount namespace of our own: nothing is left mounted on the host)
unshare -m sh -c "mount -t proc proc '$root/proc' && chroot '$root' update-initramfs -c -k '$kver'" \
	> "$out/update-initramfs.log" 2>&1 || { tail -n 20 "$out/update-initramfs.log"; fail "update-initramfs"; }
initrd=$root/boot/initrd.img-$kver
lsinitramfs "$initrd" > "$out/initramfs.list" || fail "lsinitramfs"
grep -qE "^usr/lib/modules/$kver/updates/dkms/strata\.ko(\.[a-z]+)?$|^lib/modules/$kver/updates/dkms/strata\.ko(\.[a-z]+)?$" \
	"$out/initramfs.list" || fail "strata.ko is not in the initramfs"
unmkinitramfs "$initrd" "$out/initramfs" || fail "unmkinitramfs"
mods=$(find "$out/initramfs" -path '*/conf/modules' | head -n 1)
[ -n "$mods" ] && grep -qx strata "$mods" || fail "the initramfs's conf/modules does not load strata"
rm -rf "$out/initramfs"
# For a kernel without strata.ko the hook warns and writes no load line.
mkdir -p "$root/tmp/nomod/conf"
chroot "$root" env version=0.0.0-none DESTDIR=/tmp/nomod verbose=n /usr/share/initramfs-tools/hooks/strata \
	> "$out/hook-nomodule.log" 2>&1 || { cat "$out/hook-nomodule.log"; fail "the hook failed for a kernel without strata.ko"; }
grep -q '^W: strata: no strata.ko for kernel 0.0.0-none' "$out/hook-nomodule.log" && [ ! -e "$root/tmp/nomod/conf/modules" ] ||
	{ cat "$out/hook-nomodule.log"; fail "the hook did not warn, or wrote a load line, for a kernel without strata.ko"; }
rm -rf "$root/tmp/nomod"
cp "$initrd" "$out/initrd.img" || exit 1
phase "initramfs made by update-initramfs: strata.ko and its load line inside"

# ---- 4. boot
mkfs.ext4 -q -F -d "$root" "$out/root.img" 1G > "$out/mkfs.log" 2>&1 || { cat "$out/mkfs.log"; fail "mkfs.ext4"; }
rm -rf "$root"
phase "root image made"
cmdline="root=/dev/vda rw console=ttyS0 panic=-1 $append"
echo "$cmdline" > "$out/cmdline.txt"
# thread=single: see tests/kernel/run-vm.sh (multi-threaded TCG ran stale
# translations of kernel text the module had the other CPU patch).
timeout --kill-after=10 "$tmo" qemu-system-x86_64 -accel tcg,thread=single -smp 2 -m 1024 -nographic -no-reboot -nic none \
	-kernel "/boot/vmlinuz-$kver" -initrd "$out/initrd.img" \
	-drive file="$out/root.img",format=raw,if=virtio \
	-append "$cmdline" < /dev/null > "$out/console.log" 2>&1
qrc=$?
phase "qemu exit $qrc"
[ "$qrc" = 0 ] || { tail -n 40 "$out/console.log"; fail "the guest did not power off (timeout ${tmo}s or crash)"; }

# ---- 5. what the boot left, read from the image
mkdir -p "$out/disk"
debugfs -R "rdump /var/log/strata /var/log/strata-vmtest /var/log/journal $out/disk" "$out/root.img" > "$out/debugfs.log" 2>&1
[ -d "$out/disk/strata-vmtest" ] || { cat "$out/debugfs.log"; tail -n 40 "$out/console.log"; fail "the test unit left no notes"; }
[ -n "${STRATA_KEEP_IMAGE:-}" ] || rm -f "$out/root.img"
phase "trace read back into $out/disk"
