#!/bin/sh
# stage.sh OUTDIR - lay out a self-contained module source tree in OUTDIR:
# the kmod/ sources (Kbuild, *.c, *.h, uapi/, compat/, dkms.conf) and the
# buffer layout shared with user space, libtrace/abi/strata_abi.h, as
# OUTDIR/abi/strata_abi.h (Kbuild looks there first).  Used by build.sh, by
# dkms.sh and by `cmake --install` (the DKMS source tree), so that the tree
# builds on its own with nothing copied by hand.
set -e
out=$1
[ -n "$out" ] || { echo "usage: stage.sh OUTDIR" >&2; exit 2; }
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cp -a "$src"/Kbuild "$src"/dkms.conf "$src"/*.c "$src"/*.h "$out"/
rm -rf "$out/uapi" "$out/compat" && cp -a "$src/uapi" "$src/compat" "$out"/
mkdir -p "$out/abi" && cp "$src/../libtrace/abi/strata_abi.h" "$out/abi/"
