// scan_plan.cpp - the planner's side of the `strata` tables (scan_plan.h).
#include "scan_plan.h"

#include <algorithm>
#include <cstdio>

#include "slices_table.h"
#include "sched_table.h"

namespace strata {
namespace query {
namespace {

// Whether a text constraint i may be pushed down, matched byte for byte:
// when it compares as BINARY (`kind = 'LOCK_WAIT' COLLATE NOCASE` is left
// to SQLite), and is not an IN: SQLite makes `kind = 'X' COLLATE NOCASE OR
// kind = 'y'` an IN that it then checks as BINARY in place of the OR
// (SQLite 3.40), a wrong answer that leaving the IN to it avoids.
bool text_pushdown(sqlite3_index_info *info, int i)
{
	const char *coll = sqlite3_vtab_collation(info, i);
	return (!coll || sqlite3_stricmp(coll, "BINARY") == 0) && !sqlite3_vtab_in(info, i, -1);
}

// A ts (or ts_end) constraint's letter from `base` (a: =, b: >, c: >=,
// d: <, e: <=), or 0.
char bound_op(unsigned char op, char base)
{
	switch (op) {
	case SQLITE_INDEX_CONSTRAINT_EQ:
		return base;
	case SQLITE_INDEX_CONSTRAINT_GT:
		return (char)(base + 1);
	case SQLITE_INDEX_CONSTRAINT_GE:
		return (char)(base + 2);
	case SQLITE_INDEX_CONSTRAINT_LT:
		return (char)(base + 3);
	case SQLITE_INDEX_CONSTRAINT_LE:
		return (char)(base + 4);
	default:
		return 0;
	}
}

// The letter of usable constraint i as the table pushes it down (0: left
// to SQLite).  Event tables and sched: a-e on ts, p pid =, t tid = (not
// sched); slices: a-e on ts, f-j on ts_end, k kind =, p pid =, t tid =.
char pushed_op(const Vtab *v, sqlite3_index_info *info, int i)
{
	const auto &c = info->aConstraint[i];
	const bool eq = c.op == SQLITE_INDEX_CONSTRAINT_EQ;
	if (v->kind == Kind::Slices) {
		if (c.iColumn == kSlTs || c.iColumn == kSlTsEnd)
			return bound_op(c.op, c.iColumn == kSlTs ? 'a' : 'f');
		if (eq && c.iColumn == kSlKind && text_pushdown(info, i))
			return 'k';
		return eq && c.iColumn == kSlPid ? 'p' : eq && c.iColumn == kSlTid ? 't' : 0;
	}
	if (!event_table(v) && v->kind != Kind::Sched)
		return 0;
	if (c.iColumn == kTs)
		return bound_op(c.op, 'a');
	if (!event_table(v))
		return 0; // sched: ts bounds only
	return eq && c.iColumn == kPid ? 'p' : eq && c.iColumn == kTid ? 't' : 0;
}

// The rows a scan of the table gives before any constraint, and what
// making them costs (x_filter reads the index whole, lost the trace whole).
std::pair<double, double> table_size(const Vtab *v)
{
	const Sizes &z = v->t->sizes;
	switch (v->kind) {
	case Kind::Events:
		return {z.events, z.events};
	case Kind::Typed:
		return {z.events / z.classes, z.events};
	case Kind::Sched:
		return {z.kernel_events / 2, z.kernel_events};
	case Kind::Slices:
		return {z.events / 4, z.events};
	case Kind::Processes:
		return {z.processes, z.packets};
	case Kind::Threads:
		return {z.threads, z.packets + z.shared_events};
	default:
		return {z.lost, z.events};
	}
}

// The records (Sizes::by_end) of the packets that meet [lo, hi]: all but
// those that end before lo and those that begin after hi.
double window_records(const Sizes &z, double lo, double hi)
{
	if (z.by_end.empty())
		return 0;
	auto upto = [](const std::vector<std::pair<int64_t, double>> &v, double t, bool with) {
		// The records of the packets whose time is below t (with: or at it).
		auto it = std::partition_point(v.begin(), v.end(), [&](const auto &x) {
			return with ? (double)x.first <= t : (double)x.first < t;
		});
		return it == v.begin() ? 0.0 : std::prev(it)->second;
	};
	const double all = z.by_end.back().second;
	const double got = all - upto(z.by_end, lo, false) - (all - upto(z.by_begin, hi, true));
	return std::max(0.0, got);
}

// The records the packet index gives process `id` (op 'p') or thread
// `id` ('t': its own lanes', and its share of the lanes whose records
// name their threads).
double id_records(const Sizes &z, char op, int64_t id)
{
	const auto &m = op == 'p' ? z.pid_records : z.tid_records;
	auto it = m.find(id);
	const double own = it == m.end() ? 0 : it->second;
	return op == 'p' ? own : own + z.unowned / z.threads;
}

// The rows and the cost of a scan with the constraints pushed down
// (ops[k] the letter of constraint used[k]): a ts window whose bounds
// SQLite knows already (constants) keeps the share of the records that
// the packet index puts in the packets it meets, one it does not (a
// join's) a quarter per bound; pid = N and tid = N the records of its
// streams (id_records), against a value not known yet a process's or a
// thread's share; kind = a fifth.
std::pair<double, double> estimate(const Vtab *v, sqlite3_index_info *info, const std::string &ops,
				   const std::vector<int> &used)
{
	const Sizes &z = v->t->sizes;
	auto [rows, cost] = table_size(v);
	double lo = (double)z.t0, hi = (double)z.t1, part = 1;
	for (size_t k = 0; k < ops.size(); k++) {
		const char op = ops[k] >= 'f' && ops[k] <= 'j' ? (char)(ops[k] - 5) : ops[k];
		sqlite3_value *rhs = nullptr;
		const bool known = op >= 'a' && op <= 'e' &&
				   sqlite3_vtab_rhs_value(info, used[k], &rhs) == SQLITE_OK && rhs &&
				   (sqlite3_value_numeric_type(rhs) == SQLITE_INTEGER ||
				    sqlite3_value_numeric_type(rhs) == SQLITE_FLOAT);
		const double x = known ? sqlite3_value_double(rhs) : 0;
		if ((op == 'p' || op == 't') && sqlite3_vtab_rhs_value(info, used[k], &rhs) == SQLITE_OK &&
		    rhs && sqlite3_value_type(rhs) == SQLITE_INTEGER)
			part *= std::min(1.0, id_records(z, op, sqlite3_value_int64(rhs)) / z.events);
		else if (op == 'a')
			part /= std::max(1.0, rows / 2); // a time held by an event or two
		else if (known && (op == 'b' || op == 'c'))
			lo = std::max(lo, x);
		else if (known)
			hi = std::min(hi, x);
		else
			part /= op == 'p' ? z.processes : op == 't' ? z.threads : op == 'k' ? 5 : 4;
	}
	if (lo > (double)z.t0 || hi < (double)z.t1)
		part *= hi < lo ? 0 : std::min(1.0, window_records(z, lo, hi) / z.events);
	const double got = std::max(1.0, rows * part);
	const bool reads = event_table(v) || v->kind == Kind::Sched || v->kind == Kind::Slices;
	return {got, reads ? z.packets / 16 + cost * std::max(part, 1.0 / std::max(1.0, rows)) : cost};
}

// Whether the ORDER BY (or GROUP BY) is tid, or tid then ts, ascending:
// the order of a pass per thread (Trace::thread_ids).
bool thread_order(const sqlite3_index_info *info)
{
	const auto *o = info->aOrderBy;
	return (info->nOrderBy == 1 || (info->nOrderBy == 2 && o[1].iColumn == kTs && !o[1].desc)) &&
	       o[0].iColumn == kTid && !o[0].desc;
}

int key_order(const sqlite3_index_info *info)
{
	int n = info->nOrderBy, bits = 0;
	if (n > 1 && info->aOrderBy[n - 1].iColumn == kTs && !info->aOrderBy[n - 1].desc)
		n--;
	if (n < 1 || n > 3)
		return 0;
	for (int i = 0; i < n; i++) {
		const auto &o = info->aOrderBy[i];
		const int code = o.iColumn == kMachine   ? 1
				 : o.iColumn == kPid     ? 2
				 : o.iColumn == kProcess ? 3
							 : 0;
		if (!code || o.desc)
			return 0;
		bits |= code << (kKeyShift + 2 * i);
	}
	return bits;
}

} // namespace

// The sub-traces grouped by their values of the key order's columns (the
// values x_column gives: machine and process as valid UTF-8, compared as
// SQLite's BINARY does), the groups in that order.
std::vector<std::vector<const SubTrace *>> key_passes(const Trace &t, int bits)
{
	std::map<std::vector<std::string>, std::vector<const SubTrace *>> groups;
	for (const auto &sub : t.index.traces()) {
		auto it = t.sub_text.find(sub.get());
		const SubText *st = it == t.sub_text.end() ? nullptr : &it->second;
		std::vector<std::string> key;
		for (int b = bits >> kKeyShift; b; b >>= 2) {
			if ((b & 3) == 1)
				key.push_back(st ? st->machine : sub->hostname);
			else if ((b & 3) == 3)
				key.push_back(st ? st->process : sub->procname);
			else { // a pid, as text in its numeric order
				char d[24];
				std::snprintf(d, sizeof d, "%016llx",
					      (unsigned long long)((uint64_t)sub->vpid ^ (1ull << 63)));
				key.push_back(d);
			}
		}
		groups[key].push_back(sub.get());
	}
	std::vector<std::vector<const SubTrace *>> out;
	for (auto &g : groups)
		out.push_back(std::move(g.second));
	return out;
}

// idxStr: one letter per argument (pushed_op).  Every constraint is
// checked again by SQLite (omit 0): the bounds may be REAL, a pushdown is
// a superset.  Rows come in ts order from the event tables (one scan:
// SQLite sorts itself when an IN makes several); sched's and slices' as
// they end.
int x_best_index(sqlite3_vtab *vt, sqlite3_index_info *info)
{
	const auto *v = static_cast<Vtab *>(vt);
	std::string ops;
	std::vector<int> used;
	for (int i = 0; i < info->nConstraint; i++) {
		const char op = info->aConstraint[i].usable ? pushed_op(v, info, i) : 0;
		if (!op)
			continue;
		ops += op;
		used.push_back(i);
		info->aConstraintUsage[i].argvIndex = (int)ops.size();
		info->aConstraintUsage[i].omit = 0;
	}
	if (event_table(v) && info->nOrderBy == 1 && info->aOrderBy[0].iColumn == kTs &&
	    !info->aOrderBy[0].desc)
		info->orderByConsumed = 1;
	else if (event_table(v) && thread_order(info) && !pass_tids(v).empty())
		info->orderByConsumed = 1, info->idxNum |= 2; // a pass per thread
	else if (event_table(v) && pass_keys(v) && key_order(info))
		info->orderByConsumed = 1, info->idxNum |= key_order(info); // a pass per group
	// sched: 1 when pid or a wake column is used (the pass reads from the start).
	if (v->kind == Kind::Sched &&
	    (info->colUsed & ((1ull << kSchedPid) | (1ull << kSchedWakeTs) | (1ull << kSchedWakeLatency))))
		info->idxNum = 1;
	const auto [rows, cost] = estimate(v, info, ops, used);
	info->estimatedRows = (sqlite3_int64)rows;
	info->estimatedCost = cost;
	if (!ops.empty()) {
		info->idxStr = sqlite3_mprintf("%s", ops.c_str());
		info->needToFreeIdxStr = 1;
	}
	return SQLITE_OK;
}

} // namespace query
} // namespace strata
