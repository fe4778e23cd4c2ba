// table_cursor.cpp - a scan of a `strata` table (table_cursor.h).
#include "table_cursor.h"

#include <algorithm>
#include <cmath>

#include "scan_plan.h"
#include "sched_table.h"
#include "slices_table.h"
#include "small_tables.h"

namespace strata {
namespace query {
namespace {

// An event's class as the cursor's table takes it (typed: false when it
// is not the table's class), into cur->cm.
__attribute__((noinline)) bool take_class(Cur *cur, Vtab *v, const MetaEvent *cls)
{
	if (cls == cur->other_cls)
		return false; // the last class seen that is not this table's
	auto it = v->t->classes.find(cls);
	const ClassMap *cm = it == v->t->classes.end() ? nullptr : &it->second;
	if (v->kind == Kind::Typed && (!cm || cm->table != v->typed)) {
		cur->other_cls = cls;
		return false;
	}
	cur->cm_cls = cls;
	cur->cm = cm;
	return true;
}

// An event table's pass (cur->r, not started): its window, its pid and
// tid filters, in a key order its group's sub-traces, and for a typed
// table the sub-traces that have its class.
void events_pass(Cur *cur, const Vtab *v)
{
	if (cur->lo != INT64_MIN || cur->hi != INT64_MAX)
		cur->r->set_window(cur->lo, cur->hi);
	cur->filtered = cur->lo != INT64_MIN || cur->hi != INT64_MAX || cur->want_pid || cur->want_tid;
	const std::vector<const SubTrace *> *group =
		cur->groups.empty() ? nullptr : &cur->groups[cur->pass_k];
	const std::vector<const SubTrace *> *subs =
		v->kind == Kind::Typed ? &v->t->typed[v->typed].subs : nullptr;
	if (cur->want_pid || cur->want_tid || group || subs) {
		const bool wp = cur->want_pid, wt = cur->want_tid;
		const int64_t pid = cur->pid, tid = cur->tid;
		cur->r->set_stream_filter([=](const StreamInfo &s) {
			if ((group && !among(group, s)) || !among(subs, s))
				return false;
			if (wp && (s.trace->kernel || s.trace->vpid != pid))
				return false; // the kernel's events have no pid
			if (wt && !s.shared && s.trace->meta.record_format == STRATA_REC_COMPACT) {
				for (const PacketEntry &p : s.packets)
					if (p.vtid == tid)
						return true;
				return false;
			}
			return true;
		});
	}
}

// The end of a pass: EOF, or in thread order (Cur::by_thread) or a key
// order (Cur::groups) the next pass begun (true).
__attribute__((noinline)) bool pass_end(Cur *cur, Vtab *v)
{
	const size_t passes = cur->by_thread ? pass_tids(v).size() : cur->groups.size();
	if (++cur->pass_k >= passes) {
		cur->eof = true;
		return false;
	}
	v->reg->bytes += cur->r->stats().bytes - cur->bytes_before;
	cur->bytes_before = 0;
	cur->r = std::make_unique<TraceReader>();
	cur->r->share_index(v->t->index);
	if (cur->by_thread)
		cur->tid = pass_tids(v)[cur->pass_k];
	events_pass(cur, v);
	return true;
}

// The next event row of an event table (or EOF).
__attribute__((always_inline)) inline void next_event(Cur *cur, Vtab *v)
{
	for (;;) {
		if (!read_event(cur, v)) {
			if (pass_end(cur, v))
				continue;
			return;
		}
		const TraceEvent &e = *cur->m.event;
		if (cur->filtered) {
			if (e.ns > cur->hi) { // merged by time: nothing later can be in the window
				if (pass_end(cur, v))
					continue;
				return;
			}
			if (e.ns < cur->lo)
				continue;
			if (cur->want_tid && e.tid != cur->tid)
				continue;
			if (cur->want_pid && (e.trace().kernel || e.trace().vpid != cur->pid))
				continue;
		}
		if (e.cls != cur->cm_cls && !take_class(cur, v, e.cls))
			continue; // a stream is mostly runs of one class: one compare
		cur->decoded = 0;
		return;
	}
}

// A new scan on the cursor: what the last one left, dropped.
void reset_cursor(Cur *cur, Vtab *v)
{
	if (cur->r)
		v->reg->bytes += cur->r->stats().bytes - cur->bytes_before;
	cur->r.reset();
	cur->rows.clear();
	cur->ri = 0;
	cur->row_ids.clear();
	cur->eof = false;
	cur->cm = nullptr;
	cur->cm_cls = cur->other_cls = nullptr;
	cur->running.clear();
	cur->sched_done = false;
}

// The constraints x_best_index chose (idx: a letter each, argv their
// values): bounds on ts (cur->lo, cur->hi) and on a slice's ts_end, the
// slices' kinds, pid and tid.
struct ScanBounds {
	int64_t elo = INT64_MIN, ehi = INT64_MAX; // slices: bounds on ts_end
	unsigned kinds = kSlAll;                  // slices: the kinds asked for
	bool none = false;                        // a bound no row can meet (NULL, text)
};

// One numeric constraint `op` (a..e: = > >= < <=; p pid; t tid) into
// [lo, hi] or the cursor's pid and tid.
void apply_bound(Cur *cur, char op, sqlite3_value *a, int t, int64_t &lo, int64_t &hi)
{
	const double d = sqlite3_value_double(a);
	const bool is_int = t == SQLITE_INTEGER;
	const int64_t iv = sqlite3_value_int64(a);
	// Conservative bounds for REAL values: SQLite checks every row again.
	auto floor64 = [&] {
		return is_int         ? iv
		       : d <= -9.2e18 ? INT64_MIN
		       : d >= 9.2e18  ? INT64_MAX
				      : (int64_t)std::floor(d);
	};
	auto ceil64 = [&] {
		return is_int         ? iv
		       : d <= -9.2e18 ? INT64_MIN
		       : d >= 9.2e18  ? INT64_MAX
				      : (int64_t)std::ceil(d);
	};
	switch (op) {
	case 'a':
		lo = std::max(lo, floor64());
		hi = std::min(hi, ceil64());
		break;
	case 'b':
		lo = std::max(lo, is_int && iv < INT64_MAX ? iv + 1 : floor64());
		break;
	case 'c':
		lo = std::max(lo, floor64());
		break;
	case 'd':
		hi = std::min(hi, is_int && iv > INT64_MIN ? iv - 1 : ceil64());
		break;
	case 'e':
		hi = std::min(hi, ceil64());
		break;
	case 'p':
		if (is_int) {
			cur->want_pid = true;
			cur->pid = iv;
		}
		break;
	case 't':
		if (is_int) {
			cur->want_tid = true;
			cur->tid = iv;
		}
		break;
	default:
		break;
	}
}

ScanBounds read_bounds(Cur *cur, const char *idx, int argc, sqlite3_value **argv)
{
	ScanBounds b;
	cur->lo = INT64_MIN;
	cur->hi = INT64_MAX;
	cur->want_pid = cur->want_tid = false;
	for (int i = 0; i < argc && idx && idx[i]; i++) {
		sqlite3_value *a = argv[i];
		if (idx[i] == 'k') {
			b.kinds &= slice_kinds_of(a);
			continue;
		}
		const bool end = idx[i] >= 'f' && idx[i] <= 'j'; // ts_end's, as ts's a..e
		const int t = sqlite3_value_numeric_type(a);
		if (t != SQLITE_INTEGER && t != SQLITE_FLOAT) {
			b.none |= t == SQLITE_NULL;
			continue; // SQLite checks it (text compares above every number)
		}
		apply_bound(cur, end ? (char)(idx[i] - 5) : idx[i], a, t, end ? b.elo : cur->lo,
			    end ? b.ehi : cur->hi);
	}
	return b;
}

// The event tables' scan: in time order, or a pass per thread or per
// group of sub-traces (x_best_index's idx_num).
void start_events(Cur *cur, Vtab *v, int idx_num)
{
	cur->by_thread = (idx_num & 2) && !cur->want_tid;
	cur->pass_k = 0;
	cur->groups.clear();
	if (cur->by_thread) { // a pass per thread, in tid order: the first
		cur->want_tid = true;
		cur->tid = pass_tids(v).empty() ? -1 : pass_tids(v)[0];
	} else if (idx_num >> kKeyShift) { // a pass per group of sub-traces: the first
		cur->groups = key_passes(*v->t, idx_num);
		if (cur->groups.empty()) {
			cur->eof = true;
			return;
		}
	}
	events_pass(cur, v);
	next_event(cur, v);
}

// x_next of the tables other than the event tables.
__attribute__((noinline)) int next_other(Cur *cur, Vtab *v)
{
	if (v->kind == Kind::Slices) {
		slices_next(cur, v);
		return SQLITE_OK;
	}
	if (v->kind == Kind::Sched) {
		if (++cur->ri >= cur->rows.size()) {
			cur->rows.clear();
			cur->ri = 0;
			sched_advance(cur, v);
		}
		return SQLITE_OK;
	}
	cur->eof = ++cur->ri >= cur->rows.size();
	return SQLITE_OK;
}

// The names of the event's sub-trace (valid UTF-8, kept by the trace),
// or null when it is not one the trace indexed.
inline const SubText *sub_text(Cur *cur, Vtab *v, const SubTrace *sub)
{
	if (sub != cur->tsub) {
		auto it = v->t->sub_text.find(sub);
		cur->tsub = sub;
		cur->tsub_text = it == v->t->sub_text.end() ? nullptr : &it->second;
	}
	return cur->tsub_text;
}

// A text the trace keeps as long as the table exists (valid UTF-8): given
// to SQLite without a copy.
inline void result_kept(sqlite3_context *ctx, const std::string &s)
{
	sqlite3_result_text(ctx, s.data(), (int)s.size(), SQLITE_STATIC);
}

// Decodes the event's fields up to the want-th (every one for INT32_MAX),
// in place: no allocation once the vector has grown.
void decode_to(Cur *cur, const TraceEvent &e, int want)
{
	if (cur->decoded > want || cur->decoded >= (int)e.cls->info.fields.size())
		return;
	cur->fv.resize(e.cls->info.fields.size());
	int n = 0;
	e.for_each_field([cur, &n, want](const FieldValue &fv) {
		cur->fv[(size_t)n++] = fv;
		return n <= want;
	});
	cur->decoded = n;
}

// A typed table's field column: the class's plan for it (docs/query.md
// "Memory"): a number at a fixed offset is loaded, nothing else decoded.
void typed_column(Cur *cur, const TraceEvent &e, sqlite3_context *ctx, int col)
{
	const ColPlan &p = cur->cm->plan[(size_t)(col - kCommon)];
	const uint8_t *at = e.pkt + e.payload + p.off;
	switch (p.kind) {
	case ColPlan::Int:
		sqlite3_result_int64(ctx, load_int(at, p.bytes, true));
		return;
	case ColPlan::Uint:
		if (p.bytes == 8)
			result_u64(ctx, (uint64_t)load_int(at, 8, false));
		else
			sqlite3_result_int64(ctx, load_int(at, p.bytes, false));
		return;
	case ColPlan::Scalar: {
		FieldValue fv;
		fv.info = &e.cls->info.fields[(size_t)p.field];
		read_scalar(*fv.info, at, &fv);
		result_field(ctx, fv, p.label);
		return;
	}
	case ColPlan::Decode:
		decode_to(cur, e, p.field);
		if (p.field < cur->decoded)
			result_field(ctx, cur->fv[(size_t)p.field], p.label);
		else
			sqlite3_result_null(ctx);
		return;
	default:
		sqlite3_result_null(ctx); // a field this class lacks
		return;
	}
}

// The names of an event's sub-trace and class (machine, process, thread,
// provider, name): the trace's kept texts when it has them.
void name_column(Cur *cur, Vtab *v, const TraceEvent &e, sqlite3_context *ctx, int col)
{
	const SubTrace &sub = e.trace();
	if (col == kMachine) {
		if (const SubText *st = sub_text(cur, v, &sub))
			result_kept(ctx, st->machine);
		else
			result_text(ctx, sub.hostname.data(), sub.hostname.size());
	} else if (col == kProcess || col == kThread) {
		if (sub.kernel || (col == kThread && e.tid != sub.vpid))
			sqlite3_result_null(ctx);
		else if (const SubText *st = sub_text(cur, v, &sub))
			result_kept(ctx, st->process);
		else
			result_text(ctx, sub.procname.data(), sub.procname.size());
	} else if (col == kProvider) {
		if (cur->cm) {
			result_kept(ctx, cur->cm->provider);
		} else {
			const std::string &p = sub.kernel ? std::string("kernel") : e.cls->info.provider;
			result_text(ctx, p.data(), p.size());
		}
	} else if (cur->cm) { // kName
		result_kept(ctx, cur->cm->name);
	} else {
		result_text(ctx, e.cls->full_name.data(), e.cls->full_name.size());
	}
}

__attribute__((noinline)) int column_other(Cur *cur, Vtab *v, sqlite3_context *ctx, int col)
{
	if (!event_table(v)) {
		if (v->kind == Kind::Slices)
			slices_column(*cur->sl, ctx, col);
		else
			result_cell(ctx, cur->rows[cur->ri][(size_t)col]);
		return SQLITE_OK;
	}
	const TraceEvent &e = *cur->m.event;
	if (v->kind == Kind::Typed && col >= kCommon) {
		typed_column(cur, e, ctx, col);
		return SQLITE_OK;
	}
	const SubTrace &sub = e.trace();
	switch (col) {
	case kTs:
		sqlite3_result_int64(ctx, e.ns);
		return SQLITE_OK;
	case kPid:
		if (sub.kernel)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, sub.vpid);
		return SQLITE_OK;
	case kTid:
		if (e.tid < 0)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, e.tid);
		return SQLITE_OK;
	case kCpu:
		if (e.cpu < 0)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, e.cpu);
		return SQLITE_OK;
	case kMachine:
	case kProcess:
	case kThread:
	case kProvider:
	case kName:
		name_column(cur, v, e, ctx, col);
		return SQLITE_OK;
	default:
		break;
	}
	// fields: every field as JSON, into the cursor's buffer (no
	// allocation once it has grown).
	decode_to(cur, e, INT32_MAX);
	cur->fv.resize((size_t)cur->decoded);
	cur->json.clear();
	json_fields(&cur->json, cur->fv);
	sqlite3_result_text(ctx, cur->json.data(), (int)cur->json.size(), SQLITE_TRANSIENT);
	return SQLITE_OK;
}

} // namespace

int x_open(sqlite3_vtab *, sqlite3_vtab_cursor **out)
{
	*out = new Cur();
	return SQLITE_OK;
}

int x_close(sqlite3_vtab_cursor *c)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	if (cur->r)
		v->reg->bytes += cur->r->stats().bytes - cur->bytes_before;
	delete cur;
	return SQLITE_OK;
}

std::string damage_line(const TraceDamage &d)
{
	return "damaged: " + d.file + " at byte " + std::to_string(d.offset) +
	       (d.bytes ? " (" + std::to_string(d.bytes) + " bytes skipped)" : std::string()) + ": " + d.why;
}

__attribute__((noinline)) void note_damage_msg(Vtab *v, const TraceMsg &m)
{
	note_damage(v->reg, damage_line(*m.damage));
}

int x_filter(sqlite3_vtab_cursor *c, int idx_num, const char *idx, int argc, sqlite3_value **argv)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	reset_cursor(cur, v);
	if (!event_table(v) && v->kind != Kind::Sched && v->kind != Kind::Slices) {
		if (v->kind == Kind::Processes)
			fill_processes(cur, v);
		else if (v->kind == Kind::Threads)
			fill_threads(cur, v);
		else
			fill_lost(cur, v);
		cur->eof = cur->rows.empty();
		return SQLITE_OK;
	}
	const ScanBounds b = read_bounds(cur, idx, argc, argv);
	if (b.none || cur->lo > cur->hi || b.elo > b.ehi || !b.kinds) {
		cur->eof = true;
		return SQLITE_OK;
	}
	cur->r = std::make_unique<TraceReader>();
	cur->r->share_index(v->t->index);
	cur->bytes_before = 0;
	if (v->kind == Kind::Slices) {
		slices_start(cur, v, b.kinds, b.elo, b.ehi);
		slices_advance(cur, v);
		return SQLITE_OK;
	}
	if (v->kind == Kind::Sched) {
		cur->sched_history = idx_num & 1;
		cur->woken.clear();
		cur->forked.clear();
		if (cur->sched_history)
			sched_user_pids(cur, v);
		else if (cur->lo != INT64_MIN)
			cur->r->set_window(cur->lo, INT64_MAX); // the slices' ends lie past hi
		cur->r->set_stream_filter([](const StreamInfo &s) { return s.trace->kernel; });
		sched_advance(cur, v);
		return SQLITE_OK;
	}
	start_events(cur, v, idx_num);
	return SQLITE_OK;
}

// The row loop: an event table's next row takes a few compares past the
// reader's next event, the rest out of line (next_other, take_class).
int x_next(sqlite3_vtab_cursor *c)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	if (__builtin_expect(!event_table(v), 0))
		return next_other(cur, v);
	next_event(cur, v);
	return SQLITE_OK;
}

int x_eof(sqlite3_vtab_cursor *c)
{
	return static_cast<Cur *>(c)->eof;
}

// The columns a scan asks most, read at once (a typed table's number at a
// fixed offset, ts, tid); the rest out of line (column_other).
int x_column(sqlite3_vtab_cursor *c, sqlite3_context *ctx, int col)
{
	auto *cur = static_cast<Cur *>(c);
	auto *v = static_cast<Vtab *>(c->pVtab);
	if (event_table(v)) {
		const TraceEvent &e = *cur->m.event;
		if (col >= kCommon && v->kind == Kind::Typed) {
			const ColPlan &p = cur->cm->plan[(size_t)(col - kCommon)];
			if (p.kind == ColPlan::Int || (p.kind == ColPlan::Uint && p.bytes < 8)) {
				sqlite3_result_int64(ctx, load_int(e.pkt + e.payload + p.off, p.bytes,
								   p.kind == ColPlan::Int));
				return SQLITE_OK;
			}
			if (p.kind == ColPlan::Uint) {
				result_u64(ctx, (uint64_t)load_int(e.pkt + e.payload + p.off, 8, false));
				return SQLITE_OK;
			}
		} else if (col == kTs) {
			sqlite3_result_int64(ctx, e.ns);
			return SQLITE_OK;
		} else if (col == kTid && e.tid >= 0) {
			sqlite3_result_int64(ctx, e.tid);
			return SQLITE_OK;
		}
	}
	return column_other(cur, v, ctx, col);
}

int x_rowid(sqlite3_vtab_cursor *c, sqlite3_int64 *out)
{
	auto *cur = static_cast<Cur *>(c);
	const auto *v = static_cast<Vtab *>(c->pVtab);
	// A rowid names a row the same way in every scan (Trace::stream_base):
	// the small tables are made whole, in one order, by every scan.
	if (event_table(v))
		*out = event_rowid(*v->t, *cur->m.event);
	else if (v->kind == Kind::Slices)
		*out = slices_rowid(*cur->sl);
	else if (v->kind == Kind::Sched)
		*out = cur->row_ids[cur->ri];
	else
		*out = (sqlite3_int64)cur->ri + 1;
	return SQLITE_OK;
}

} // namespace query
} // namespace strata
