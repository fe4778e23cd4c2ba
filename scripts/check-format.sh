#!/bin/sh
# check-format.sh [--fix] - check that every C and C++ file of the tree
# follows .clang-format exactly (clang-format 14, Debian 12), kmod/ aside:
# the module follows the kernel's own style (scripts/checkpatch.pl).  The
# files are the ones git tracks, or, outside a git checkout (a source
# tarball), every *.c, *.h, *.cpp under the top folders.  --fix reformats
# them in place.  Exit 0 clean, 1 a file differs (its diff is printed), 77
# clang-format is not installed (ctest: skipped).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
command -v clang-format >/dev/null || { echo "SKIP: clang-format not installed (apt-get install clang-format)"; exit 77; }
cd "$top" || exit 1
if git -C "$top" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	files=$(git -C "$top" ls-files '*.c' '*.h' '*.cpp' '*.hpp' | grep -v '^kmod/')
else
	files=$(find . -path ./kmod -prune -o -path './build*' -prune -o \
		\( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.hpp' \) -type f -print | sed 's|^\./||' | sort)
fi
fail=0
for f in $files; do
	[ -f "$f" ] || continue
	if [ "${1:-}" = --fix ]; then
		clang-format -i "$f"
	elif ! clang-format "$f" | diff -u --label "$f" --label "$f (clang-format)" "$f" -; then
		fail=1
	fi
done
[ "$fail" = 0 ] && echo "format: $(echo $files | wc -w) files clean"
exit $fail
