#!/bin/sh
# test-dkms.sh - kmod/dkms.sh install, the one documented command, run with
# Debian's dkms against the installed linux-headers, into scratch DKMS trees
# (--sourcetree/--dkmstree/--installtree: the system's are left alone).
# Oracles: the staged source tree holds everything Kbuild needs (no path
# outside it), `dkms install` puts strata.ko into <installtree>/<KVER>/
# updates/dkms for EVERY kernel installed with headers, each built for that
# kernel (vermagic) and named strata; `dkms.sh remove` unregisters it.
# Exit 77 (skip) without dkms, root or installed headers.
set -u
here=$(cd "$(dirname "$0")" && pwd)
kmod=$here/../../kmod
command -v dkms >/dev/null || { echo "SKIP: dkms not installed (apt-get install dkms)"; exit 77; }
[ "$(id -u)" = 0 ] || { echo "SKIP: dkms needs root"; exit 77; }
kvers=""
for d in /lib/modules/*/; do
	k=$(basename "$d")
	{ [ -d "/lib/modules/$k/build" ] || [ -d "/usr/src/linux-headers-$k" ]; } && kvers="$kvers $k"
done
[ -n "$kvers" ] || { echo "SKIP: no kernel headers installed"; exit 77; }
t=$(mktemp -d) || exit 1
trap 'rm -rf "$t"' EXIT
opts="--sourcetree $t/src --dkmstree $t/dkms --installtree $t/inst"
mkdir -p "$t/src" "$t/dkms" "$t/inst"
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$kmod/dkms.conf")
# shellcheck disable=SC2086
if ! "$kmod/dkms.sh" install $opts > "$t/log" 2>&1; then
	cat "$t/log"; echo "FAIL: dkms.sh install"; exit 1
fi
fail=0
for f in abi/strata_abi.h abi/strata_kabi.h dkms.conf Kbuild; do
	[ -r "$t/src/strata-$ver/$f" ] || { echo "FAIL: the source tree lacks $f"; fail=1; }
done
if grep -n '\.\./' "$t/src/strata-$ver"/*.c "$t/src/strata-$ver"/*.h "$t/src/strata-$ver"/abi/*.h \
	"$t/src/strata-$ver"/compat/*.h "$t/src/strata-$ver"/Kbuild; then
	echo "FAIL: the source tree refers outside itself"; fail=1
fi
for k in $kvers; do
	ko=$t/inst/$k/updates/dkms/strata.ko
	if [ ! -r "$ko" ]; then echo "FAIL: no $ko"; fail=1; continue; fi
	vm=$(modinfo -F vermagic "$ko"); nm=$(modinfo -F name "$ko")
	case "$vm" in "$k "*) ;; *) echo "FAIL: $ko vermagic '$vm' is not for $k"; fail=1 ;; esac
	[ "$nm" = strata ] || { echo "FAIL: $ko is named '$nm'"; fail=1; }
	echo "dkms: strata.ko for $k ($vm)"
done
# shellcheck disable=SC2086
"$kmod/dkms.sh" remove $opts > "$t/log" 2>&1
# shellcheck disable=SC2086
if dkms status strata $opts 2>/dev/null | grep -q strata; then echo "FAIL: still registered after remove"; fail=1; fi
[ ! -e "$t/src/strata-$ver" ] || { echo "FAIL: source tree left after remove"; fail=1; }
[ "$fail" = 0 ] && echo "PASS: dkms install for:$kvers"
exit $fail
