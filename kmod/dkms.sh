#!/bin/sh
# dkms.sh install|remove [DKMS OPTIONS...] - install strata.ko through DKMS.
#   install: lays the self-contained source tree out as
#            <sourcetree>/strata-<version>/ (stage.sh), `dkms add`s it, then
#            `dkms install`s it for every kernel installed with its headers
#            (AUTOINSTALL=yes in dkms.conf rebuilds it for later kernels).
#   remove:  `dkms remove strata/<version> --all` and deletes the source tree.
# Extra options go to every dkms call: --sourcetree DIR, --dkmstree DIR,
# --installtree DIR let a test install into scratch directories.
set -e
here=$(cd "$(dirname "$0")" && pwd)
cmd=${1:-}
[ $# -gt 0 ] && shift
command -v dkms >/dev/null || { echo "dkms.sh: dkms is not installed (apt-get install dkms)" >&2; exit 1; }
ver=$(sed -n 's/^PACKAGE_VERSION="\(.*\)"/\1/p' "$here/dkms.conf")
srctree=/usr/src instree=""
prev=""
for a in "$@"; do
	[ "$prev" = --sourcetree ] && srctree=$a
	[ "$prev" = --installtree ] && instree=$a
	prev=$a
done
case "$cmd" in
install)
	dest=$srctree/strata-$ver
	rm -rf "$dest"
	"$here/stage.sh" "$dest"
	# A stale registration (an earlier install) is replaced.
	dkms remove "strata/$ver" --all "$@" >/dev/null 2>&1 || true
	dkms add "strata/$ver" "$@"
	n=0
	for d in /lib/modules/*/; do
		k=$(basename "$d")
		[ -d "/lib/modules/$k/build" ] || [ -d "/usr/src/linux-headers-$k" ] || continue
		# dkms installs only into a kernel's existing module folder.
		[ -z "$instree" ] || mkdir -p "$instree/$k"
		dkms install "strata/$ver" -k "$k" "$@"
		n=$((n + 1))
	done
	[ "$n" -gt 0 ] || { echo "dkms.sh: no kernel with headers installed (apt-get install linux-headers-amd64)" >&2; exit 1; }
	;;
remove)
	dkms remove "strata/$ver" --all "$@" || true
	rm -rf "$srctree/strata-$ver"
	;;
*)
	echo "usage: dkms.sh install|remove [--sourcetree DIR --dkmstree DIR --installtree DIR]" >&2
	exit 2
	;;
esac
