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
files=$(for f in $files; do [ -f "$f" ] && echo "$f"; done) # tracked, not deleted
# One clang-format for all the files (a process per file took 30-110 s
# on a loaded 2-CPU machine, past the test's budget): --dry-run names each
# file that differs, then each of those is shown as a diff.
if [ "${1:-}" = --fix ]; then
	echo "$files" | xargs -r clang-format -i
	exit 0
fi
# clang-format's own failure (a file it cannot read or parse) fails the
# check too: without it no file would be named and the check would pass.
out=$(echo "$files" | xargs -r clang-format --dry-run 2>&1) || { echo "$out"; echo "format: clang-format failed"; exit 1; }
bad=$(echo "$out" | sed -n 's/^\(.*\):[0-9]*:[0-9]*: warning: code should be clang-formatted.*/\1/p' | sort -u)
fail=0
for f in $bad; do
	clang-format "$f" | diff -u --label "$f" --label "$f (clang-format)" "$f" -
	fail=1
done
[ "$fail" = 0 ] && echo "format: $(echo $files | wc -w) files clean"
exit $fail
