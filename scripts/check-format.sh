#!/bin/sh
# check-format.sh [--fix] - check that the files on the allow-list below
# follow .clang-format exactly (clang-format 14, Debian 12).  The tree as a
# whole is NOT reformatted (that would collide with every branch in
# flight): a file joins the list when someone who is changing it anyway
# reformats it whole (`clang-format -i FILE`) in the same commit.  --fix
# reformats the listed files in place.  Exit 0 clean, 1 a file differs
# (its diff is printed), 77 clang-format is not installed (ctest: skipped).
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
files="
consumerd/access.cpp
consumerd/access.h
abi/strata_probe_report.h
libtrace/agg_spec.h
cli/cmd_list.cpp
cli/cmd_record.cpp
cli/proc_memfd.cpp
cli/proc_memfd.h
consumerd/ack_tracker.cpp
consumerd/ack_tracker.h
consumerd/attacher.cpp
consumerd/attacher.h
consumerd/commands.cpp
consumerd/daemon.cpp
consumerd/daemon_impl.h
consumerd/drain_pool.cpp
consumerd/drain_pool.h
consumerd/futex_ring.cpp
consumerd/futex_ring.h
consumerd/futex_waits.h
consumerd/futex_waitv.cpp
consumerd/futex_waitv.h
consumerd/event_loop.cpp
consumerd/event_loop.h
consumerd/filter_check.cpp
consumerd/filter_check.h
consumerd/fs.cpp
consumerd/fs.h
consumerd/grant_tables.cpp
consumerd/grant_tables.h
consumerd/log.cpp
consumerd/log.h
consumerd/process_registry.cpp
consumerd/process_registry.h
consumerd/reattach.cpp
consumerd/reattach.h
consumerd/restart.cpp
consumerd/sched_policy.cpp
consumerd/sched_policy.h
consumerd/session.h
consumerd/session_table.cpp
consumerd/session_table.h
consumerd/state_store.cpp
consumerd/state_store.h
libtrace/runtime/change_hook.cpp
libtrace/runtime/probe_report.cpp
libtrace/runtime/runtime.h
libtrace/runtime/writer.cpp
libtrace/runtime/writer_hooks.h
tests/unit/futex_waits_test.cpp
tests/unit/session_table_test.cpp
tp-async/tp_async.c
tests/control/restart_app.c
tests/unit/state_store_test.cpp
tp-sync/tp_sync.c
tests/e2e/list_target.c
"
command -v clang-format >/dev/null || { echo "SKIP: clang-format not installed (apt-get install clang-format)"; exit 77; }
fail=0
for f in $files; do
	if [ "${1:-}" = --fix ]; then
		clang-format -i "$top/$f"
	elif ! clang-format "$top/$f" | diff -u --label "$f" --label "$f (clang-format)" "$top/$f" -; then
		fail=1
	fi
done
[ "$fail" = 0 ] && echo "format: $(echo $files | wc -w) files clean"
exit $fail
