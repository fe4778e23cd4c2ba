#!/bin/sh
# stage.sh OUTDIR - lay out a self-contained module source tree in OUTDIR:
# the kmod/ sources (Kbuild, *.c, *.h, compat/, dkms.conf) and the top-level
# abi/ folder (the buffer layout and the module's ABI, shared with user
# space) as OUTDIR/abi/, where Kbuild finds it.  Used by build.sh, by dkms.sh
# and by `cmake --install` (the DKMS source tree), so that the tree builds on
# its own with nothing copied by hand.
set -e
out=$1
[ -n "$out" ] || { echo "usage: stage.sh OUTDIR" >&2; exit 2; }
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cp -a "$src"/Kbuild "$src"/dkms.conf "$src"/*.c "$src"/*.h "$out"/
abi=$(cd "$src/../abi" && pwd)
rm -rf "$out/compat" "$out/abi" && cp -a "$src/compat" "$abi" "$out"/
