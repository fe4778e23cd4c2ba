#!/bin/sh
# build.sh KVER OUTDIR - build strata.ko against /usr/src/linux-headers-KVER
# in OUTDIR (a copy of the sources, so the source tree stays clean and
# several build directories do not race).
set -e
kver=$1
out=$2
src=$(cd "$(dirname "$0")" && pwd)
kdir=/usr/src/linux-headers-$kver
[ -d "$kdir" ] || { echo "build.sh: no headers at $kdir" >&2; exit 1; }
"$src/stage.sh" "$out"
make -C "$kdir" M="$out" modules
