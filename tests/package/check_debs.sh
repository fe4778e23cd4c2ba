#!/bin/bash
# The Debian packages as a new user meets them (the piuparts idea):
#  1. dpkg-buildpackage -b builds the .debs from a copy of the tree (as the
#     README's "Packages" command does);
#  2. mmdebstrap makes a fresh Debian 12 root (minbase, the machine's apt
#     sources) with babeltrace2 and a C compiler from Debian;
#  3. inside it, apt installs the packages' dependencies, the file list is
#     taken, then `apt install ./strata*.deb ./libstrata*.deb`;
#  4. the installed tools record the bundled example (strata-demo) and a
#     pthread program (`strata record --preload pthread`, `strata analyze
#     mutex`); babeltrace2 reads both traces; `man -w strata-record` finds
#     the page; the SQLite extension loads by its bare name; dkms built
#     and installed strata.ko for the kernel headers installed before the
#     packages, and again for a kernel's headers installed after them;
#  5. `apt purge` of the packages; the file list is taken again and must
#     equal the first: nothing of theirs is left.
# Exit 77 (skipped) only where the machine cannot: not root (mmdebstrap
# and chroot), or a tool missing.
# usage: check_debs.sh SOURCE_DIR WORK_DIR   (STRATA_TEST_DEBS=DIR: see below)
set -u
src=$1 work=$2
skip() { echo "SKIP: $*"; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root: mmdebstrap and chroot need root"
for t in dpkg-buildpackage mmdebstrap dh_dkms; do
	command -v "$t" > /dev/null || skip "$t is not installed (apt-get install devscripts mmdebstrap dh-dkms)"
done
rm -rf "$work" && mkdir -p "$work/src/strata" "$work/debs"
# 1. A copy of the tree without build directories or git, built as the
# README says.
build_debs() {
	tar -C "$src" --exclude=./build --exclude='./build-*' --exclude=./.git --exclude='./obj-*' -cf - . |
		tar -C "$work/src/strata" -xf -
	# ccache, when there is one, keeps a second run short (the copy's path is fixed).
	if command -v ccache > /dev/null; then
		export CMAKE_C_COMPILER_LAUNCHER=ccache CMAKE_CXX_COMPILER_LAUNCHER=ccache
	fi
	# -g0: dh_strip takes the debug information out of every binary and,
	# with noddebs, nothing keeps it; the code is the same without it (-g
	# never changes what GCC generates), and making it was about a fifth
	# of the compile time.
	echo "+ dpkg-buildpackage -b -us -uc (log: $work/build.log)"
	if ! (cd "$work/src/strata" && DEB_BUILD_OPTIONS="nocheck noddebs parallel=2" \
		DEB_CFLAGS_APPEND=-g0 DEB_CXXFLAGS_APPEND=-g0 dpkg-buildpackage -b -us -uc) \
		> "$work/build.log" 2>&1; then
		tail -n 40 "$work/build.log"
		echo "FAIL dpkg-buildpackage"
		exit 1
	fi
	echo "ok   dpkg-buildpackage built $(ls "$work"/src/*.deb | wc -l) packages"
	mv "$work"/src/*.deb "$work/debs/"
}
# STRATA_TEST_DEBS=DIR: the .debs already built there (by the README's
# command) are the ones checked, and step 1 is left out.
if [ -n "${STRATA_TEST_DEBS:-}" ]; then
	cp "$STRATA_TEST_DEBS"/*.deb "$work/debs/" && rm -f "$work"/debs/*-dbgsym_*.deb
	echo "ok   the packages of $STRATA_TEST_DEBS (STRATA_TEST_DEBS; not built here)"
else
	build_debs
fi
for p in strata libstrata0 libstrata-dev strata-dkms libstrata-sqlite; do
	ls "$work"/debs/${p}_*.deb > /dev/null 2>&1 && echo "ok   $p built" || { echo "FAIL $p built"; exit 1; }
done

# The packaged module source builds with `dkms build` against the host's
# installed kernel headers (scratch DKMS trees; the fresh root has no
# kernel).  Not checked where no kernel with headers is installed.
kver=$("$src/kmod/kver.sh" 2> /dev/null)
if [ -n "$kver" ] && command -v dkms > /dev/null; then
	d=$work/dkms && mkdir -p "$d/x" "$d/tree"
	dpkg-deb -x "$work"/debs/strata-dkms_*.deb "$d/x"
	ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$d"/x/usr/src/strata-*/dkms.conf)
	if dkms add "strata/$ver" --sourcetree "$d/x/usr/src" --dkmstree "$d/tree" > "$d/log" 2>&1 &&
		dkms build "strata/$ver" -k "$kver" --sourcetree "$d/x/usr/src" --dkmstree "$d/tree" >> "$d/log" 2>&1 &&
		[ "$(modinfo -F vermagic "$d/tree/strata/$ver/$kver/x86_64/module/strata.ko" | cut -d' ' -f1)" = "$kver" ]; then
		echo "ok   strata-dkms: dkms build strata/$ver for $kver"
	else
		cat "$d/log"; echo "FAIL strata-dkms: dkms build strata/$ver for $kver"; exit 1
	fi
else
	echo "ok   strata-dkms: dkms build not checked (no kernel installed with headers, or no dkms)"
fi

# 2-5. A fresh root; the steps inside it are check_debs_inside.sh.
cc -std=c11 -O1 -pthread -o "$work/pt-plain" "$src/tests/package/pt_plain.c" || { echo "FAIL pt_plain.c builds"; exit 1; }
echo "+ mmdebstrap bookworm (log: $work/root.log)"
mmdebstrap --variant=minbase --include=babeltrace2,man-db,sqlite3,ca-certificates \
	--customize-hook="mkdir -p \"\$1/debs\" \"\$1/check\"" \
	--customize-hook="sync-in $work/debs /debs" \
	--customize-hook="copy-in $work/pt-plain $src/tests/package/check_debs_inside.sh /check" \
	--customize-hook="chroot \"\$1\" bash /check/check_debs_inside.sh > $work/inside.log 2>&1; echo \$? > $work/inside.rc" \
	bookworm "$work/root" > "$work/root.log" 2>&1
rc=$?
cat "$work/inside.log" 2> /dev/null
if [ $rc -ne 0 ] || [ "$(cat "$work/inside.rc" 2> /dev/null)" != 0 ]; then
	tail -n 20 "$work/root.log"
	echo "FAIL in the fresh root (mmdebstrap $rc, the checks $(cat "$work/inside.rc" 2> /dev/null))"
	exit 1
fi
rm -rf "$work/root" "$work/src"
echo "ok   the packages install, work and purge cleanly in a fresh Debian 12 root"
