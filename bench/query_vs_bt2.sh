#!/bin/sh
# bench/query_vs_bt2.sh [--rows N] [--trace DIR] [BUILD_DIR]
# Issue 50's question, "which lock did thread X wait on longest between t1
# and t2", on the sqlite3 lock trace of bench/run.py's reading_large step
# (Debian's sqlite3 under `strata record --preload pthread`, every lock
# operation a record; --rows N inserts, default 6300000: about 45 M
# events), answered three ways: `strata query` over the `slices` table,
# the same SQL from Python's sqlite3 with libstrata-sqlite.so loaded, and
# babeltrace2's text output read by a streaming filter.  For every thread
# of the trace and three windows [t1, t2]: the middle and the last third of
# the process's time span, and all of it.
# Prints each answer, the CPU time (user + sys) and peak RSS of each, and
# whether they agree; exit status 1 when they do not.  --trace DIR asks a
# trace made before (kept); else one is recorded in a temporary directory
# and removed.  Slow (babeltrace2 reads the whole trace: minutes), so a
# bench script, not a test.
set -e
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
rows=6300000
trace=
while [ $# -gt 0 ]; do
	case "$1" in
	--rows) rows=$2; shift 2 ;;
	--trace) trace=$2; shift 2 ;;
	-*) echo "usage: $0 [--rows N] [--trace DIR] [BUILD_DIR]" >&2; exit 2 ;;
	*) build=$1; shift ;;
	esac
done
strata="$build/cli/strata"
ext="$build/processor/query/libstrata-sqlite.so"
for f in "$strata" "$ext"; do
	[ -e "$f" ] || { echo "query_vs_bt2.sh: $f not found: build first" >&2; exit 1; }
done
command -v babeltrace2 >/dev/null || { echo "query_vs_bt2.sh: babeltrace2 not installed" >&2; exit 1; }
work=$(mktemp -d /tmp/strata-qvb.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
if [ -z "$trace" ]; then
	sqlite3=$(command -v sqlite3) || { echo "query_vs_bt2.sh: sqlite3 not installed" >&2; exit 1; }
	trace="$work/trace"
	/usr/bin/python3 -c "import sys; sys.path.insert(0, sys.argv[1]); import run; print(run.sqlite_script(int(sys.argv[2])), end='')" \
		"$here" "$rows" >"$work/load.sql"
	env -u XDG_RUNTIME_DIR STRATA_CONSUMERD_SOCKET="$work/no-daemon.sock" STRATA_PTHREAD_COUNT=0 \
		"$strata" record -o "$trace" --preload pthread --subbuf-size 1048576 --subbuf-count 8 -- \
		"$sqlite3" "$work/db" <"$work/load.sql" >/dev/null
	rm -f "$work/db"
fi
/usr/bin/python3 - "$strata" "$ext" "$trace" "$work" <<'PYEOF'
import os, subprocess, sys

strata, ext, trace, work = sys.argv[1:5]
WAITS = ("mutex_lock", "mutex_timedlock", "rwlock_rdlock", "rwlock_wrlock", "sem_wait", "sem_timedwait")


def timed(cmd):
    """stdout of cmd under /usr/bin/time: (text, CPU s, peak RSS MiB)."""
    tf = os.path.join(work, "time")
    p = subprocess.run(["/usr/bin/time", "-o", tf, "-f", "%U %S %M"] + cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit("%s exited %d: %s" % (cmd[0], p.returncode, p.stderr[-500:]))
    u, s, m = open(tf).read().split()[-3:]
    return p.stdout, float(u) + float(s), int(m) / 1024.0


def query(sql):
    out = subprocess.run([strata, "query", "--csv", trace, sql], capture_output=True, text=True, check=True).stdout
    return [line.split(",") for line in out.strip().splitlines()[1:]]


procs = query("SELECT pid, ts, ts_end FROM processes WHERE domain = 'ust'")
if len(procs) != 1:
    sys.exit("query_vs_bt2.sh: expected one process in %s, found %d" % (trace, len(procs)))
pid, b, e = (int(x) for x in procs[0])
WINDOWS = (("the middle third", b + (e - b) // 3, e - (e - b) // 3), ("the last third", e - (e - b) // 3, e),
           ("the whole run", b, e))
tids = [int(r[0]) for r in query("SELECT DISTINCT tid FROM threads WHERE pid = %d ORDER BY tid" % pid)]
events = int(query("SELECT count(*) FROM events")[0][0])
SQL = ("SELECT printf('0x%x', object) AS lock, dur AS waited_ns, ts_end AS acquired FROM slices "
       "WHERE kind = 'lock_wait' AND tid = {tid} AND ts_end BETWEEN {t1} AND {t2} ORDER BY dur DESC, ts_end LIMIT 1")
print("trace: %s (%d events, pid %d, %d threads)" % (trace, events, pid, len(tids)))
print("question: the lock thread X waited on longest, the wait ending in [t1, t2], for each thread X:")
print("  " + SQL)

# 1. strata query, a process per question.
ans_q, cpu_q, rss_q = {}, 0.0, 0.0
for w, t1, t2 in WINDOWS:
    for tid in tids:
        out, cpu, rss = timed([strata, "query", "--csv", trace, SQL.format(tid=tid, t1=t1, t2=t2)])
        r = [line.split(",") for line in out.strip().splitlines()[1:]]
        ans_q[(w, tid)] = (r[0][0], int(r[0][1]), int(r[0][2])) if r else None
        cpu_q, rss_q = cpu_q + cpu, max(rss_q, rss)

# 2. Python's sqlite3 with the extension loaded (a child: its own CPU time and RSS).
PY = """
import sqlite3, sys
db = sqlite3.connect(":memory:")
db.enable_load_extension(True)
db.load_extension(sys.argv[1])
db.enable_load_extension(False)
db.execute("SELECT strata_open(?)", (sys.argv[2],))
for arg in sys.argv[4:]:
    w, tid, t1, t2 = arg.split(":")
    r = db.execute(sys.argv[3].format(tid=int(tid), t1=int(t1), t2=int(t2))).fetchone()
    print(w, tid, *(r if r else ("-",)))
"""
out, cpu_p, rss_p = timed(["/usr/bin/python3", "-c", PY, ext, trace, SQL] +
                          ["%d:%d:%d:%d" % (k, tid, t1, t2) for k, (w, t1, t2) in enumerate(WINDOWS) for tid in tids])
ans_p = {}
for line in out.splitlines():
    f = line.split()
    ans_p[(WINDOWS[int(f[0])][0], int(f[1]))] = (f[2], int(f[3]), int(f[4])) if len(f) == 5 else None

# 3. babeltrace2's text, the blocking lock calls' lines only, read as it streams.
FILTER = r"""
import re, sys
pid = int(sys.argv[1])
windows = [tuple(int(x) for x in a.split(":")) for a in sys.argv[2].split(",")]
waits = set(sys.argv[3:])
pat = re.compile(r"^\[(\d+)\.(\d{9})\] .*?:\((\d+)\) pthread:(\w+): \{[^}]*\bvtid = (\d+)[^}]*\}, "
                 r"\{ lock = (0x[0-9A-Fa-f]+), .*?\bwait_ns = (\d+)")
best = {}
for line in sys.stdin:
    m = pat.match(line)
    if not m or m.group(4) not in waits or int(m.group(3)) != pid:
        continue
    ts, tid, wait = int(m.group(1)) * 1000000000 + int(m.group(2)), int(m.group(5)), int(m.group(7))
    if wait <= 0:
        continue
    for k, (t1, t2) in enumerate(windows):
        cur = best.get((k, tid))
        if t1 <= ts <= t2 and (cur is None or wait > cur[1] or (wait == cur[1] and ts < cur[2])):
            best[(k, tid)] = ("0x%x" % int(m.group(6), 16), wait, ts)
for (k, tid), a in sorted(best.items()):
    print(k, tid, *a)
"""
with open(os.path.join(work, "filter.py"), "w") as f:
    f.write(FILTER)
c0 = os.times()
bt = subprocess.Popen(["babeltrace2", "--clock-seconds", trace], stdout=subprocess.PIPE)
gr = subprocess.Popen(["grep", "-E", " pthread:(%s): " % "|".join(WAITS)], stdin=bt.stdout, stdout=subprocess.PIPE)
bt.stdout.close()
fl = subprocess.Popen(["/usr/bin/python3", os.path.join(work, "filter.py"), str(pid),
                       ",".join("%d:%d" % (t1, t2) for w, t1, t2 in WINDOWS)] + list(WAITS),
                      stdin=gr.stdout, stdout=subprocess.PIPE, text=True)
gr.stdout.close()
out = fl.communicate()[0]
rcs = (bt.wait(), gr.wait(), fl.returncode)
c1 = os.times()
if rcs[0] or rcs[1] > 1 or rcs[2]:
    sys.exit("babeltrace2 | grep | filter exited %r" % (rcs,))
cpu_b = (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system)
ans_b = {}
for line in out.splitlines():
    f = line.split()
    ans_b[(WINDOWS[int(f[0])][0], int(f[1]))] = (f[2], int(f[3]), int(f[4]))

agree, waited = True, 0
for w, t1, t2 in WINDOWS:
    print("[t1, t2] = %s: [%d, %d]" % (w, t1, t2))
    quiet = []
    for tid in tids:
        k = (w, tid)
        same = ans_q.get(k) == ans_p.get(k) == ans_b.get(k)
        agree &= same
        if not same or ans_b.get(k) or ans_q.get(k):
            waited += ans_b.get(k) is not None
            print("  thread %d: strata query %s | Python sqlite3 %s | babeltrace2 %s: %s" % (
                tid, ans_q.get(k), ans_p.get(k), ans_b.get(k), "agree" if same else "DIFFER"))
        else:
            quiet.append(tid)
    if quiet:
        print("  %d threads waited on no lock then, by all three" % len(quiet))
print("CPU (user + sys), peak RSS: strata query %.2f s for %d queries, %.1f MiB at most; Python sqlite3 %.2f s, "
      "%.1f MiB; babeltrace2 | grep | filter %.2f s" % (cpu_q, len(WINDOWS) * len(tids), rss_q, cpu_p, rss_p, cpu_b))
print("answers agree: %s (%d answers naming a lock)" % ("yes" if agree else "NO", waited))
sys.exit(0 if agree else 1)
PYEOF
