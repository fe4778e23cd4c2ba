// slices_table.cpp - the `slices` table (slices_table.h).
//
// The `slices` table pairs beginnings and ends (docs/query.md) in one pass
// over the trace: each event is given to the kinds it may begin or end,
// and the pairings that need what came before keep a state per key
// (bounded by what is pending: an acquisition not yet released, a syscall
// not yet exited).  The rows are those of the SQL over the typed tables
// that it replaces (`strata analyze mutex`'s pairing of holds, below).
#include "slices_table.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <unordered_map>

#include "column_values.h"

namespace strata {
namespace query {
namespace {

// What one event class gives the slices: field indices (-1: none).
struct SliceClass {
	unsigned wait = 0; // kSlLockWait, kSlCondWait or kSlMonitorWait: a row ending at ts
	int f_wait = -1, f_obj = -1, f_caller = -1, f_ret = -1, f_hold = -1, f_age = -1, f_lock = -1;
	bool held = false;     // mutex_held, mutex_tryheld: a hold row; an acquisition at ts - hold_ns
	bool acq = false;      // a full acquisition (ret 0 or 130) at ts
	bool excl = true;      // acq: not a read lock
	bool acquired = false; // mutex_acquired, mutex_tryacquired: acquired age_ns before ts
	bool release = false;  // mutex_unlock, rwlock_unlock
	bool sys = false, sys_entry = false; // named syscall_* (syscall_entry_*), any case
	std::string_view name;               // the row's name (the class's, less its provider)
	std::string exit_name;               // sys_entry: the exit that ends it
	bool any() const { return wait || held || acq || acquired || release || sys; }
};

bool ascii_prefix_nocase(const std::string &s, const char *p)
{
	const size_t n = strlen(p);
	if (s.size() < n)
		return false;
	for (size_t i = 0; i < n; i++)
		if (tolower((unsigned char)s[i]) != p[i])
			return false;
	return true;
}

// Which parts of the pairing this trace has (the SQL made a part only for
// the classes present): full holds need an acquisition and a release class,
// syscalls an entry class.
struct SliceParts {
	bool holds = false, syscalls = false;
};

SliceParts slice_parts(const Trace &t)
{
	SliceParts p;
	bool acq = false, rel = false;
	for (const auto &kv : t.typed_by_name) {
		const std::string &n = kv.first;
		for (const char *a :
		     {"pthread:mutex_lock", "pthread:mutex_timedlock", "pthread:mutex_trylock",
		      "pthread:rwlock_rdlock", "pthread:rwlock_wrlock", "pthread:rwlock_tryrdlock",
		      "pthread:rwlock_trywrlock", "pthread:mutex_acquired", "pthread:mutex_tryacquired",
		      "pthread:mutex_held", "pthread:mutex_tryheld"})
			acq |= n == a;
		rel |= n == "pthread:mutex_unlock" || n == "pthread:rwlock_unlock";
		p.syscalls |= n.compare(0, 14, "syscall_entry_") == 0;
	}
	p.holds = acq && rel;
	return p;
}

SliceClass slice_class(const MetaEvent &me)
{
	SliceClass c;
	const std::string &n = me.full_name;
	auto field = [&](const char *f) {
		for (size_t k = 0; k < me.info.fields.size(); k++)
			if (me.info.fields[k].name == f)
				return (int)k;
		return -1;
	};
	auto is = [&](std::initializer_list<const char *> names) {
		for (const char *x : names)
			if (n == x)
				return true;
		return false;
	};
	c.name = std::string_view(n);
	if (n.compare(0, 8, "pthread:") == 0)
		c.name.remove_prefix(8);
	else if (n.compare(0, 4, "jvm:") == 0)
		c.name.remove_prefix(4);
	c.f_lock = field("lock");
	c.f_caller = field("caller");
	if (is({"pthread:mutex_lock", "pthread:mutex_timedlock", "pthread:rwlock_rdlock",
		"pthread:rwlock_wrlock", "pthread:sem_wait", "pthread:sem_timedwait"}) &&
	    field("wait_ns") >= 0 && c.f_lock >= 0) {
		c.wait = kSlLockWait;
		c.f_wait = field("wait_ns");
		c.f_obj = c.f_lock;
	}
	if (is({"pthread:cond_wait", "pthread:cond_timedwait"}) && field("wait_ns") >= 0 &&
	    field("cond") >= 0) {
		c.wait = kSlCondWait;
		c.f_wait = field("wait_ns");
		c.f_obj = field("cond");
	}
	if (is({"jvm:monitor_contended_entered", "jvm:monitor_waited"}) && field("wait_ns") >= 0) {
		c.wait = kSlMonitorWait;
		c.f_wait = field("wait_ns");
		c.f_obj = field("class");
		c.f_caller = -1;
	}
	if (is({"pthread:mutex_held", "pthread:mutex_tryheld"}) && field("hold_ns") >= 0) {
		c.held = true;
		c.f_hold = field("hold_ns");
	}
	if (is({"pthread:mutex_lock", "pthread:mutex_timedlock", "pthread:mutex_trylock",
		"pthread:rwlock_rdlock", "pthread:rwlock_wrlock", "pthread:rwlock_tryrdlock",
		"pthread:rwlock_trywrlock"}) &&
	    field("ret") >= 0 && c.f_caller >= 0) {
		c.acq = true;
		c.f_ret = field("ret");
		c.excl = n.find("rdlock") == std::string::npos;
	}
	if (is({"pthread:mutex_acquired", "pthread:mutex_tryacquired"}) && field("age_ns") >= 0) {
		c.acquired = true;
		c.f_age = field("age_ns");
	}
	c.release = is({"pthread:mutex_unlock", "pthread:rwlock_unlock"});
	c.sys = ascii_prefix_nocase(n, "syscall_");
	c.sys_entry = ascii_prefix_nocase(n, "syscall_entry_");
	if (c.sys_entry) {
		c.name = std::string_view(n).substr(14);
		c.exit_name = "syscall_exit_" + n.substr(14);
	}
	return c;
}

// SQLite's `ts - x` for an INTEGER ts and a column's value x.
Cell cell_minus(int64_t ts, const Cell &x)
{
	if (x.type == Cell::Int)
		return cint(ts - x.i);
	Cell c;
	if (x.type == Cell::Null)
		return c;
	c.type = Cell::Real;
	c.d = (double)ts - (x.type == Cell::Real ? x.d : strtod(x.s.c_str(), nullptr));
	return c;
}

// SQLite's `x > 0` (TEXT compares above every number).
bool cell_positive(const Cell &x)
{
	return x.type == Cell::Text || (x.type == Cell::Int && x.i > 0) || (x.type == Cell::Real && x.d > 0);
}

// A time for the pairing's comparisons (a value past INT64_MAX: its bits).
int64_t cell_time(const Cell &x)
{
	if (x.type == Cell::Int)
		return x.i;
	if (x.type == Cell::Real)
		return (int64_t)x.d;
	return x.type == Cell::Text ? (int64_t)strtoull(x.s.c_str(), nullptr, 10) : 0;
}

struct SliceRow {
	const char *kind = nullptr;
	std::string_view name;
	Cell ts, ts_end, dur, object, caller;
	const SubTrace *sub = nullptr;
	int32_t tid = -1;
	int64_t rowid = 0; // the ending event's rowid * 4 + the row's slot (SliceSlot)
};

// The slice rows one event can make, a slot each (the low bits of their rowids).
enum SliceSlot : int { kSlotSyscall, kSlotWait, kSlotHeld, kSlotHold };

} // namespace

// The pass's state.  Holds of full records follow `strata analyze mutex`
// (docs/query.md): an acquisition A of lock L by thread T (a full
// mutex_lock, rwlock_*lock or their tries, or a mutex_acquired, at its
// acquisition time) makes a hold when the next of T's rows on L in time
// (acquisitions, the compact records' at ts - hold_ns, releases) is a
// release R; the hold ends at R, or earlier when the next acquisition of
// L by any thread in record order (`pos`: the record's ts) was recorded
// before R and one of the two is exclusive: then at that acquisition's
// time, or at A if that was later.  Records come in time order, so a
// release ends the pending acquisition of its (T, L) at once: an
// acquisition read after it lies at or past it.
struct SliceState {
	struct TKey {
		int proc;
		int32_t tid;
		uint64_t lock;
		bool operator==(const TKey &o) const
		{
			return proc == o.proc && tid == o.tid && lock == o.lock;
		}
	};
	struct TKeyHash {
		size_t operator()(const TKey &k) const
		{
			return std::hash<uint64_t>()(k.lock * 0x9e3779b97f4a7c15ull ^
						     ((uint64_t)k.proc << 32) ^ (uint32_t)k.tid);
		}
	};
	struct Pending {
		int64_t a = 0; // acquired at
		Cell caller;
		std::string_view name;
		const SubTrace *sub = nullptr;
		bool excl = true;
		bool has_next = false; // the lock's next acquisition (any thread) is known
		int64_t nat = 0, npos = 0;
		bool nexcl = false;
		uint64_t seq = 0;
	};
	struct LKey {
		int proc;
		uint64_t lock;
		bool operator==(const LKey &o) const { return proc == o.proc && lock == o.lock; }
	};
	struct LKeyHash {
		size_t operator()(const LKey &k) const
		{
			return std::hash<uint64_t>()(k.lock * 0x9e3779b97f4a7c15ull ^ (uint64_t)k.proc);
		}
	};
	struct Last { // the lock's last acquisition, when it is a pending one
		int32_t tid;
		uint64_t seq;
	};
	struct Sys {
		const SliceClass *entry;
		int64_t ts;
		const SubTrace *sub;
	};
	const Trace *t = nullptr;
	SliceParts parts;
	unsigned kinds = kSlAll;
	int64_t begin_max = INT64_MAX; // holds: no acquisition after this can make a row
	int64_t end_max = INT64_MAX;   // no row ends after this
	std::unordered_map<const MetaEvent *, SliceClass> classes;
	const MetaEvent *last_cls = nullptr;
	const SliceClass *last_sc = nullptr;
	std::map<std::pair<std::string, int64_t>, int> proc_ids; // (machine, pid)
	std::map<std::string, int> host_ids;
	std::unordered_map<const SubTrace *, std::pair<int, int>> sub_ids; // (proc, host)
	const SubTrace *last_sub = nullptr;
	std::pair<int, int> last_ids;
	std::unordered_map<TKey, Pending, TKeyHash> pending;
	std::unordered_map<LKey, Last, LKeyHash> last;
	std::map<std::pair<int, int32_t>, Sys> sys; // (host, tid): a syscall entered
	uint64_t seq = 0;
	std::vector<FieldValue> fv;
	std::vector<SliceRow> rows; // the first nrows are the rows ready (the others kept for reuse)
	size_t nrows = 0, ri = 0;
	bool done = false;

	const SliceClass &class_of(const MetaEvent *m)
	{
		if (m == last_cls)
			return *last_sc;
		auto it = classes.find(m);
		if (it == classes.end())
			it = classes.emplace(m, slice_class(*m)).first;
		last_cls = m;
		last_sc = &it->second;
		return it->second;
	}
	std::pair<int, int> ids(const SubTrace *sub)
	{
		if (sub == last_sub)
			return last_ids;
		last_sub = sub;
		auto it = sub_ids.find(sub);
		if (it != sub_ids.end())
			return last_ids = it->second;
		last_ids = make_ids(sub);
		return last_ids;
	}
	std::pair<int, int> make_ids(const SubTrace *sub)
	{
		auto it = sub_ids.find(sub);
		if (it != sub_ids.end())
			return it->second;
		const int p =
			proc_ids.emplace(std::make_pair(sub->hostname, sub->kernel ? INT64_MIN : sub->vpid),
					 (int)proc_ids.size())
				.first->second;
		const int h = host_ids.emplace(sub->hostname, (int)host_ids.size()).first->second;
		return sub_ids[sub] = {p, h};
	}
	SliceRow &row(const char *kind, std::string_view name, const TraceEvent &e, SliceSlot slot)
	{
		SliceRow &r = next_row(e, slot);
		r.kind = kind;
		r.name = name;
		r.sub = &e.trace();
		r.tid = e.tid;
		return r;
	}

	SliceRow &next_row(const TraceEvent &e, SliceSlot slot)
	{
		if (nrows == rows.size())
			rows.emplace_back();
		SliceRow &r = rows[nrows++];
		r.rowid = event_rowid(*t, e) * 4 + slot;
		for (Cell *c : {&r.ts, &r.ts_end, &r.dur, &r.object, &r.caller}) {
			c->type = Cell::Null;
			c->s.clear();
		}
		return r;
	}

	// An acquisition row of the pairing: at time xa, read at xpos.
	void acquisition(const TKey &k, int64_t xa, int64_t xpos, bool xexcl, bool full, const SliceClass &sc,
			 const TraceEvent &e, Cell caller)
	{
		if (!full && pending.empty())
			return; // no hold pending: an acquisition that begins none changes nothing
		const LKey lk{k.proc, k.lock};
		auto li = last.find(lk);
		if (li != last.end()) {
			auto p = pending.find(TKey{k.proc, li->second.tid, k.lock});
			if (p != pending.end() && p->second.seq == li->second.seq && !p->second.has_next) {
				p->second.has_next = true;
				p->second.nat = xa;
				p->second.npos = xpos;
				p->second.nexcl = xexcl;
			}
			last.erase(li);
		}
		auto p = pending.find(k);
		if (p != pending.end() && (xa == xpos || xa > p->second.a)) {
			pending.erase(p); // its thread's next row on the lock is this acquisition: no hold
			p = pending.end();
		}
		if (!full || p != pending.end() || xa > begin_max)
			return;
		Pending &n = pending[k];
		n.a = xa;
		n.caller = std::move(caller);
		n.name = sc.name;
		n.sub = &e.trace();
		n.excl = xexcl;
		n.seq = ++seq;
		last[lk] = Last{k.tid, n.seq};
	}

	void release(const TKey &k, const TraceEvent &e)
	{
		auto p = pending.find(k);
		if (p == pending.end())
			return;
		const Pending &a = p->second;
		const int64_t end =
			a.has_next && a.npos < e.ns && (a.excl || a.nexcl) ? std::max(a.nat, a.a) : e.ns;
		if (end <= end_max) {
			SliceRow &r = next_row(e, kSlotHold);
			r.kind = "lock_hold";
			r.name = a.name;
			r.ts = cint(a.a);
			r.ts_end = cint(end);
			r.dur = cint(end - a.a);
			r.object = k.lock <= (uint64_t)INT64_MAX ? cint((int64_t)k.lock) : Cell();
			if (k.lock > (uint64_t)INT64_MAX) {
				r.object.type = Cell::Text;
				append_decimal(&r.object.s, k.lock);
			}
			r.caller = a.caller;
			r.sub = a.sub;
			r.tid = k.tid;
		}
		pending.erase(p);
	}

	// One event: the rows it ends, the state it changes.
	void event(const TraceEvent &e)
	{
		const SliceClass &sc = class_of(e.cls);
		if (!sc.any())
			return;
		const bool past = e.ns > end_max; // only ends pending holds
		if (sc.sys && (kinds & kSlSyscall) && parts.syscalls && !past) {
			const std::pair<int, int32_t> k{ids(&e.trace()).second, e.tid};
			auto it = sys.find(k);
			if (it != sys.end() && it->second.entry->exit_name == e.cls->full_name) {
				SliceRow &r = row("syscall", it->second.entry->name, e, kSlotSyscall);
				r.ts = cint(it->second.ts);
				r.ts_end = cint(e.ns);
				r.dur = cint(e.ns - it->second.ts);
				r.sub = it->second.sub;
			}
			if (sc.sys_entry && e.ns <= begin_max)
				sys[k] = Sys{&sc, e.ns, &e.trace()};
			else if (it != sys.end())
				sys.erase(it);
		}
		const bool pair = (kinds & kSlLockHold) && parts.holds;
		const bool wait = sc.wait && (kinds & sc.wait) && !past;
		const bool held = sc.held && (kinds & kSlLockHold);
		if (!wait && !held && !(pair && (sc.acq || sc.acquired || sc.release)))
			return;
		e.decode(&fv);
		if (wait) {
			const Cell w = cell_of(fv[(size_t)sc.f_wait]);
			if (sc.wait != kSlLockWait || cell_positive(w)) {
				SliceRow &r = row(sc.wait == kSlLockWait   ? "lock_wait"
						  : sc.wait == kSlCondWait ? "cond_wait"
									   : "monitor_wait",
						  sc.name, e, kSlotWait);
				r.ts = cell_minus(e.ns, w);
				r.ts_end = cint(e.ns);
				r.dur = w;
				if (sc.f_obj >= 0)
					r.object = cell_of(fv[(size_t)sc.f_obj]);
				if (sc.f_caller >= 0 && sc.wait != kSlMonitorWait)
					r.caller = cell_of(fv[(size_t)sc.f_caller]);
			}
		}
		if (held && !past) {
			const Cell h = cell_of(fv[(size_t)sc.f_hold]);
			SliceRow &r = row("lock_hold", sc.name, e, kSlotHeld);
			r.ts = cell_minus(e.ns, h);
			r.ts_end = cint(e.ns);
			r.dur = h;
			if (sc.f_lock >= 0)
				r.object = cell_of(fv[(size_t)sc.f_lock]);
		}
		if (!pair || sc.f_lock < 0)
			return;
		const FieldValue &lv = fv[(size_t)sc.f_lock];
		if (lv.info->type != STRATA_FT_INTEGER && lv.info->type != STRATA_FT_ENUM)
			return;
		const TKey k{ids(&e.trace()).first, e.tid, lv.u};
		if (sc.release) {
			release(k, e);
		} else if (sc.acq) {
			const Cell ret = cell_of(fv[(size_t)sc.f_ret]);
			if (ret.type == Cell::Int && (ret.i == 0 || ret.i == 130))
				acquisition(k, e.ns, e.ns, sc.excl, true, sc, e,
					    cell_of(fv[(size_t)sc.f_caller]));
		} else if (sc.acquired) {
			acquisition(k, cell_time(cell_minus(e.ns, cell_of(fv[(size_t)sc.f_age]))), e.ns, true,
				    true, sc, e, Cell());
		} else if (sc.held) {
			acquisition(k, cell_time(cell_minus(e.ns, cell_of(fv[(size_t)sc.f_hold]))), e.ns,
				    true, false, sc, e, Cell());
		}
	}
};

void SliceStateFree::operator()(SliceState *s) const
{
	delete s;
}

// slices: a pass for these kinds and bounds (ts in [cur->lo, cur->hi],
// ts_end in [elo, ehi]).  A row that ends at its event (the waits, the
// compact holds) lies in the window [max(ts lower, ts_end lower), ts_end
// upper]; a pair (a full hold, a syscall) begins at or after the lower
// bound on ts, and a full hold may end past every bound (ended early by
// another acquisition): the pass then goes on until the holds begun by the
// bounds have ended.  `tid =` becomes the stream filter only without full
// holds, whose ends need every thread's acquisitions.
void slices_start(Cur *cur, Vtab *v, unsigned kinds, int64_t elo, int64_t ehi)
{
	cur->sl.reset(new SliceState());
	SliceState &s = *cur->sl;
	s.t = v->t.get();
	s.parts = slice_parts(*v->t);
	s.kinds = kinds;
	s.begin_max = std::min(cur->hi, ehi);
	s.end_max = ehi;
	const bool holds = (kinds & kSlLockHold) && s.parts.holds;
	int64_t wlo = INT64_MAX;
	if (kinds & (kSlLockWait | kSlCondWait | kSlMonitorWait))
		wlo = std::max(elo, cur->lo);
	if (kinds & (kSlLockHold | kSlSyscall))
		wlo = std::min(wlo, cur->lo);
	const int64_t whi = holds ? INT64_MAX : ehi;
	if (wlo != INT64_MIN || whi != INT64_MAX)
		cur->r->set_window(wlo, whi);
	const bool wp = cur->want_pid, wt = cur->want_tid && !holds;
	const int64_t pid = cur->pid, tid = cur->tid;
	const bool kernel = (kinds & kSlSyscall) && s.parts.syscalls, user = kinds & ~kSlSyscall;
	cur->r->set_stream_filter([=](const StreamInfo &st) {
		const SubTrace &sub = *st.trace;
		if (sub.kernel ? !kernel : !user && !kernel)
			return false;
		if (wp && (sub.kernel || sub.vpid != pid))
			return false;
		if (wt && !st.shared && sub.meta.record_format == STRATA_REC_COMPACT) {
			for (const PacketEntry &p : st.packets)
				if (p.vtid == tid)
					return true;
			return false;
		}
		return true;
	});
}

// slices: the next rows (those the next events end) into cur->sl->rows;
// EOF at the end of the pass.
void slices_advance(Cur *cur, Vtab *v)
{
	SliceState &s = *cur->sl;
	s.nrows = 0;
	s.ri = 0;
	const bool holds = (s.kinds & kSlLockHold) && s.parts.holds;
	while (!s.nrows) {
		if (s.done) {
			cur->eof = true;
			return;
		}
		if (!read_event(cur, v)) {
			s.done = true; // acquisitions still pending: never released, no hold
			continue;
		}
		const TraceEvent &e = *cur->m.event;
		if (e.ns > s.end_max && (!holds || s.pending.empty())) {
			s.done = true;
			continue;
		}
		s.event(e);
	}
	cur->eof = false;
}

void slices_next(Cur *cur, Vtab *v)
{
	if (++cur->sl->ri >= cur->sl->nrows)
		slices_advance(cur, v);
}

int64_t slices_rowid(const SliceState &s)
{
	return s.rows[s.ri].rowid;
}

void slices_column(const SliceState &s, sqlite3_context *ctx, int col)
{
	const SliceRow &r = s.rows[s.ri];
	const SubTrace &sub = *r.sub;
	const Cell *cell = col == kSlTs       ? &r.ts
			   : col == kSlTsEnd  ? &r.ts_end
			   : col == kSlDur    ? &r.dur
			   : col == kSlObject ? &r.object
			   : col == kSlCaller ? &r.caller
					      : nullptr;
	if (cell) {
		result_cell(ctx, *cell);
		return;
	}
	switch (col) {
	case kSlKind:
		sqlite3_result_text(ctx, r.kind, -1, SQLITE_STATIC);
		return;
	case kSlName:
		result_text(ctx, r.name.data(), r.name.size());
		return;
	case kSlMachine:
		result_text(ctx, sub.hostname.data(), sub.hostname.size());
		return;
	case kSlPid:
		if (sub.kernel)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, sub.vpid);
		return;
	case kSlTid:
		if (r.tid < 0)
			sqlite3_result_null(ctx);
		else
			sqlite3_result_int64(ctx, r.tid);
		return;
	case kSlProcess:
		if (sub.kernel)
			sqlite3_result_null(ctx);
		else
			result_text(ctx, sub.procname.data(), sub.procname.size());
		return;
	default:
		sqlite3_result_null(ctx);
	}
}

// slices: the kind `kind = a` selects (none for a value that names none).
unsigned slice_kinds_of(sqlite3_value *a)
{
	if (sqlite3_value_type(a) != SQLITE_TEXT)
		return 0; // a number never equals a kind (the column's TEXT affinity makes it text)
	const unsigned char *k = sqlite3_value_text(a);
	const std::string ks = k ? (const char *)k : "";
	return ks == "lock_wait"      ? kSlLockWait
	       : ks == "cond_wait"    ? kSlCondWait
	       : ks == "lock_hold"    ? kSlLockHold
	       : ks == "monitor_wait" ? kSlMonitorWait
	       : ks == "syscall"      ? kSlSyscall
				      : 0u;
}

} // namespace query
} // namespace strata
