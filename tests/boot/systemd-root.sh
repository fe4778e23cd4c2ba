#!/bin/sh
# systemd-root.sh CACHEDIR - print the path of a tarball of a minimal
# Debian 12 root file system booted by systemd (mmdebstrap
# --variant=minbase with systemd-sysv, initramfs-tools and the libraries
# Strata's programs load), made once and cached in CACHEDIR under a name
# keyed by a hash of its inputs (this script, suite, packages): CI pays the
# bootstrap once (5 minutes on a loaded 2-core machine, debootstrap took 8),
# later runs only unpack it.  Nothing of
# Strata is in it: tests/boot/systemd-boot.sh installs Strata into a copy
# as docs/boot.md tells a user to.  The mirror is the one apt is configured
# with (mmdebstrap comes from scripts/deps.sh).  Root only.
set -eu
cache=${1:?usage: systemd-root.sh CACHEDIR}
suite=bookworm
pkgs=systemd-sysv,kmod,initramfs-tools,liburcu8,libunwind8,libelf1,libdw1,libbabeltrace2-0
mirror=$(sed -n 's,^URIs: *\(https\?://[^ ]*/debian/\?\)$,\1,p' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1)
[ -n "$mirror" ] || mirror=$(sed -n 's,^deb \(https\?://[^ ]*/debian/\?\) .*,\1,p' /etc/apt/sources.list 2>/dev/null | head -n 1)
[ -n "$mirror" ] || mirror=http://deb.debian.org/debian
key=$( { cat "$0"; echo "$suite $pkgs"; } | sha256sum | cut -c1-16)
tar=$cache/debian-$suite-systemd-$key.tar
mkdir -p "$cache"
# One builder at a time; the others wait for it and use its result.
exec 9>"$cache/.lock"
flock 9
if [ ! -s "$tar" ]; then
	t=$(mktemp -d "$cache/build.XXXXXX")
	trap 'rm -rf "$t"' EXIT
	echo "systemd-root: mmdebstrap $suite ($pkgs) from $mirror, cached as $tar" >&2
	mmdebstrap --variant=minbase --include="$pkgs" "$suite" "$t/root.tar" "$mirror" > "$t/log" 2>&1 || {
		tail -n 30 "$t/log" >&2; echo "systemd-root: mmdebstrap failed" >&2; exit 1; }
	mv "$t/root.tar" "$tar"
	# Older roots of other inputs are not needed any more.
	find "$cache" -maxdepth 1 -name "debian-$suite-systemd-*.tar" ! -name "$(basename "$tar")" -delete
fi
echo "$tar"
