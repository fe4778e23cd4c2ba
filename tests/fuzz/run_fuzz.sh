#!/bin/sh
# run_fuzz.sh FUZZER SEEDS WORK SECONDS - the reader's fuzz target for a
# bounded time, from the committed seeds (read only) into a scratch corpus.
# A crash or a malformed packet handed out fails the test; the input is
# kept in WORK/crash-* (copy it to tests/fuzz/crashers/: the replay test
# runs it from then on).
set -eu
fuzzer=$1 seeds=$2 work=$3 secs=$4
rm -rf "$work"
mkdir -p "$work/corpus"
# Exit codes 1: libFuzzer's default (77) is CTest's skip code here.
# -timeout: one input taking seconds is a hang (every loop of the reader is
# bounded); -max_len: the seeds' size, so mutations can grow a little.
exec "$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -max_len=131072 \
	-error_exitcode=1 -timeout_exitcode=1 \
	-print_final_stats=1 -artifact_prefix="$work/" "$work/corpus" "$seeds"
