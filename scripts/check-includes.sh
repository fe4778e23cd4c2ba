#!/bin/sh
# check-includes.sh - no folder includes a higher one by a relative path:
# no `#include "../..."` (or <../...>) in any C or C++ file of the tree, and
# no Kbuild flag reaching out of kmod/ (the module builds from kmod/ plus
# abi/, staged by kmod/stage.sh).  A header another folder needs is reached
# through that folder's include path (abi/ by bare name, "strata_abi.h").
# Exit 0 clean, 1 some (listed as FILE:LINE).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top" || exit 1
bad=$(grep -rnE --include='*.c' --include='*.h' --include='*.cpp' --include='*.cc' \
	--exclude-dir='build*' --exclude-dir=Testing --exclude-dir=.git \
	'^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"]\.\./' . ;
      grep -nE '\.\./' kmod/Kbuild)
if [ -n "$bad" ]; then
	echo "$bad"
	echo "includes reaching a higher folder by a relative path: use the folder's include path"
	exit 1
fi
echo "includes: none reaches a higher folder by a relative path"
