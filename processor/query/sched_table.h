/*
 * sched_table.h - the `sched` table (docs/query.md): the CPUs' slices,
 * from the kernel's sched_switch, with wake-ups and processes.
 */
#ifndef STRATA_QUERY_SCHED_TABLE_H
#define STRATA_QUERY_SCHED_TABLE_H

#include "table_cursor.h"

namespace strata {
namespace query {

const char *const kSchedDecl =
	"CREATE TABLE x(ts INTEGER, ts_end INTEGER, dur INTEGER, machine TEXT, cpu INTEGER, pid INTEGER, "
	"tid INTEGER, comm TEXT, prio INTEGER, end_state INTEGER, next_tid INTEGER, next_comm TEXT, "
	"wake_ts INTEGER, wake_latency INTEGER)";

enum : int { kSchedPid = 5, kSchedWakeTs = 12, kSchedWakeLatency = 13 };

// The user sub-traces' threads by kernel sub-trace (Cur::user_pids).
void sched_user_pids(Cur *cur, Vtab *v);
// The next slices that end into cur->rows; cur->eof when none is left.
void sched_advance(Cur *cur, Vtab *v);

} // namespace query
} // namespace strata
#endif
