#!/bin/sh
# replay_bt2.sh REPLAY CTFDIR INPUT... - replays the inputs (reader_fuzz.cpp's
# oracle), then babeltrace2 reads every trace made of what the reader handed
# out, with no error.
set -u
replay=$1 ctf=$2
shift 2
rm -rf "$ctf"
"$replay" --ctf "$ctf" "$@" || exit 1
fails=0 n=0
for d in "$ctf"/*; do
	[ -d "$d" ] || continue
	n=$((n + 1))
	if ! babeltrace2 "$d" > /dev/null 2> "$d.err" || grep -qv '^WARNING: Tracer' "$d.err"; then
		echo "FAIL babeltrace2 $d:"; cat "$d.err"; fails=$((fails + 1))
	fi
done
echo "babeltrace2 read $((n - fails)) of $n trace(s) cleanly"
[ $n -gt 0 ] && [ $fails -eq 0 ]
