/*
 * table_cursor.h - a scan of a `strata` table: the cursor every table's
 * scan keeps its state in, the module's cursor methods (table_cursor.cpp:
 * the event tables' row loop and columns, the constraints a scan was
 * given) and what the other tables' scans share with it.
 */
#ifndef STRATA_QUERY_TABLE_CURSOR_H
#define STRATA_QUERY_TABLE_CURSOR_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "column_values.h"
#include "query_trace.h"

namespace strata {
namespace query {

// The slices table's pass (slices_table.cpp).
struct SliceState;
struct SliceStateFree {
	void operator()(SliceState *s) const;
};

struct Cur : sqlite3_vtab_cursor {
	std::unique_ptr<TraceReader> r;
	TraceMsg m;
	bool eof = true;
	int64_t lo = INT64_MIN, hi = INT64_MAX;
	bool want_pid = false, want_tid = false;
	bool filtered = false; // a window, want_pid or want_tid: checked per row
	// In thread order (x_best_index's idxNum bit 2): a pass per thread of
	// Trace::thread_ids, this the pass_k-th, its tid as cur->tid.  In the
	// order of a key (idxNum's key bits): a pass per group, the pass_k-th.
	bool by_thread = false;
	size_t pass_k = 0;
	std::vector<std::vector<const SubTrace *>> groups;
	int64_t pid = 0, tid = 0;
	// The current event's fields, decoded on first use.
	std::vector<FieldValue> fv;
	int decoded = 0;              // fields of fv decoded (the first ones)
	const ClassMap *cm = nullptr; // the event's class (typed: only its table's)
	const MetaEvent *cm_cls = nullptr, *other_cls = nullptr; // the classes last looked up
	const SubTrace *tsub = nullptr;                          // the sub-trace last looked up
	const SubText *tsub_text = nullptr;                      // and its names
	std::string json;                                        // the fields column's text
	// Small tables; sched's rows ready to be read (and their rowids: the
	// rowid of the switch that began the slice).
	std::vector<std::vector<Cell>> rows;
	std::vector<int64_t> row_ids;
	size_t ri = 0;
	uint64_t bytes_before = 0;
	// sched: each CPU's slice begun and not yet ended; what each class
	// gives (SchedClass); each thread's first wake-up since it last ran
	// and the process the kernel's forks last gave it; the user
	// sub-traces' threads by kernel sub-trace (sched_user_pids).
	struct Running {
		int64_t ts = 0, tid = 0, prio = 0;
		std::string comm;
		Cell pid;
		int64_t wake = INT64_MIN; // none
		int64_t rowid = 0;        // of the switch that began it
	};
	struct SchedClass {
		enum { None, Switch, Wake, Fork } kind = None;
		std::vector<int> idx; // Switch: prev_tid, prev_state, next_comm, next_tid, next_prio;
				      // Wake: tid; Fork: parent_tid, parent_pid, child_tid, child_pid
	};
	std::map<std::pair<const SubTrace *, int32_t>, Running> running;
	std::unordered_map<const MetaEvent *, SchedClass> sched_classes;
	struct SubTid {
		size_t operator()(const std::pair<const SubTrace *, int64_t> &k) const
		{
			return std::hash<int64_t>()(k.second) ^ std::hash<const void *>()(k.first);
		}
	};
	// By (kernel sub-trace, tid): the first wake-up since it ran; the fork's pid.
	std::unordered_map<std::pair<const SubTrace *, int64_t>, int64_t, SubTid> woken, forked;
	bool sched_history = false; // pid or a wake column asked for: read from the start
	std::map<const SubTrace *, std::unordered_map<int64_t, std::vector<std::pair<int64_t, int64_t>>>>
		user_pids; // kernel sub-trace -> tid -> (since, pid), by since
	bool sched_done = false;
	std::unique_ptr<SliceState, SliceStateFree> sl; // slices
};

int x_open(sqlite3_vtab *, sqlite3_vtab_cursor **out);
int x_close(sqlite3_vtab_cursor *c);
int x_filter(sqlite3_vtab_cursor *c, int idx_num, const char *idx, int argc, sqlite3_value **argv);
int x_next(sqlite3_vtab_cursor *c);
int x_eof(sqlite3_vtab_cursor *c);
int x_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col);
int x_rowid(sqlite3_vtab_cursor *c, sqlite3_int64 *out);

// A damage message as the user is told it.
std::string damage_line(const TraceDamage &d);
__attribute__((noinline)) void note_damage_msg(Vtab *v, const TraceMsg &m);

// The pass's next event into cur->m (damage on the way noted); false at
// its end.  The row loop's: kept small, the rare work out of line.
inline bool read_event(Cur *cur, Vtab *v)
{
	while (cur->r->next(&cur->m)) {
		if (__builtin_expect(cur->m.kind == TraceMsgKind::Event, 1))
			return true;
		if (cur->m.kind == TraceMsgKind::Damage)
			note_damage_msg(v, cur->m);
	}
	return false;
}

} // namespace query
} // namespace strata
#endif
