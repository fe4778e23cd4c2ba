# Queries that once answered differently from the same SQL over an ordinary
# SQLite copy of the tables (tests/query/fuzz_query.py replays each; a line
# starting `ORDERED:` compares the rows in order).  They are written for the
# fuzzer's fixture trace (its seed and span fixed in fuzz_query.py).
#
# MULTI-INDEX OR: a scan per term, rows told apart by rowid; every scan once
# numbered its rows from 1, so the second term's rows were dropped.
SELECT count(*) FROM events WHERE (ts BETWEEN 1000000000 AND 1075000000) OR (ts BETWEEN 1075000001 AND 1200000000)
SELECT count(*) FROM events WHERE tid = 103 OR ts BETWEEN 1040000000 AND 1080000000
SELECT count(*) FROM "sched_waking" WHERE (((ts BETWEEN 1043677287 AND 1054795089) OR (ts BETWEEN 1122749508 AND 1125256109)) OR (ts BETWEEN 1039891282 AND 1078326649))
SELECT "next_prio", count(*), min("pid"), max("pid"), count(DISTINCT "pid") FROM "sched_switch" WHERE ((ts BETWEEN 1081944828 AND 1113010274) OR (ts BETWEEN 1009216179 AND 1065513724)) GROUP BY 1
SELECT count(*) FROM "app:note" WHERE ("ts" IN (0, 1075085290, 1000003000, 1000002000) OR (ts BETWEEN 1000001700 AND 1000001700))
SELECT "machine", count(*), min("tid"), max("tid"), count(DISTINCT "tid") FROM "pthread:mutex_lock" WHERE ((ts BETWEEN 1000001600 AND 1000001600) OR (ts BETWEEN 1000001100 AND 1000001601)) GROUP BY 1
SELECT count(*) FROM sched WHERE ts < 1030000000 OR ts > 1120000000
SELECT count(*) FROM slices WHERE ts < 1000001500 OR ts_end > 1000001700
ORDERED: SELECT ts, tid FROM events WHERE tid = 103 OR ts < 1010000000 ORDER BY ts, rowid
# An IN list is a scan per value: rowids that restarted made ORDER BY rowid wrong.
SELECT count(*), sum(a."tid" IS b."tid") FROM (SELECT * FROM "sched_switch" WHERE "tid" IN (103, 0, -9223372036854775808, -1) ORDER BY rowid LIMIT 40) AS a JOIN "sched_switch" AS b ON b.ts = a.ts WHERE b."prev_state" > 1
# A text constraint pushed down compares byte for byte: only under BINARY.
SELECT count(*) FROM slices WHERE kind = 'LOCK_WAIT' COLLATE NOCASE
SELECT count(*) FROM slices WHERE kind = 'Syscall' COLLATE NOCASE OR kind = 'monitor_wait'
# u64 past INT64_MAX: exact aggregates.
SELECT u64_sum(x64), u64_min(x64), u64_max(x64) FROM "demo:ints"
