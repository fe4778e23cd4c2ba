#!/bin/sh
# measure_overhead.sh BUILD_DIR [alternations] - the overhead figures of
# docs/pthread.md: an uncontended lock/unlock loop (pt_lockloop) bare, under
# libstrata-pthread.so with tracing off and on (strata record), and under
# LTTng-UST's pthread wrapper in a running LTTng session.  The four runs
# alternate N times; each run prints its best round; compare medians.
# Needs a running lttng-sessiond (root: `lttng-sessiond -d`).  Not a test.
set -eu
B=$(cd "$1" && pwd)
N=${2:-5}
LOOP=$B/tests/pthread/pt_lockloop
LIB=$B/preload/libstrata-pthread.so
LTTNG_WRAP=/usr/lib/x86_64-linux-gnu/liblttng-ust-pthread-wrapper.so
W=$(mktemp -d /tmp/strata-pt-overhead.XXXXXX)
PAIRS=200000
ROUNDS=5
best() { sed -n 's/.*best \([0-9.]*\) ns.*/\1/p'; }
median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# Every command names the session: others may change ~/.lttngrc's current one.
S=strata-pt-overhead-$$
lttng create "$S" --output="$W/lttng-trace" >/dev/null
lttng enable-channel -s "$S" -u ch --subbuf-size 1M --num-subbuf 8 >/dev/null
lttng enable-event -s "$S" -u -c ch 'lttng_ust_pthread:*' >/dev/null
for i in $(seq "$N"); do
	"$LOOP" $PAIRS $ROUNDS | best >>"$W/bare"
	STRATA_CONSUMERD_SOCKET="$W/none.sock" LD_PRELOAD="$LIB" "$LOOP" $PAIRS $ROUNDS | best >>"$W/off"
	STRATA_CONSUMERD_SOCKET="$W/priv.sock" "$B/cli/strata" record -o "$W/strata-$i" --preload pthread \
		--subbuf-size 1M --subbuf-count 8 -- "$LOOP" $PAIRS $ROUNDS 2>/dev/null | best >>"$W/on"
	lttng start "$S" >/dev/null
	LD_PRELOAD="$LTTNG_WRAP" "$LOOP" $PAIRS $ROUNDS | best >>"$W/lttng"
	lttng stop "$S" >/dev/null
	rm -rf "$W/strata-$i"
done
lttng destroy "$S" >/dev/null
for k in bare off on lttng; do
	printf '%-6s median of best ns/pair over %s runs: %s   (runs: %s)\n' "$k" "$N" \
		"$(median <"$W/$k")" "$(tr '\n' ' ' <"$W/$k")"
done
rm -rf "$W"
