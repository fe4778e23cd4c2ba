// sched_table.cpp - the `sched` table (sched_table.h).
#include "sched_table.h"

#include <algorithm>

namespace strata {
namespace query {
namespace {

// sched: what a kernel class gives the sched table.
Cur::SchedClass sched_class(const MetaEvent &me)
{
	Cur::SchedClass c;
	auto pick = [&](std::initializer_list<const char *> names) {
		std::vector<int> idx;
		for (const char *n : names)
			for (size_t f = 0; f < me.info.fields.size(); f++)
				if (me.info.fields[f].name == n)
					idx.push_back((int)f);
		return idx.size() == names.size() ? idx : std::vector<int>();
	};
	const std::string &n = me.full_name;
	if (n == "sched_switch")
		c.idx = pick({"prev_tid", "prev_state", "next_comm", "next_tid", "next_prio"});
	else if (n == "sched_waking" || n == "sched_wakeup" || n == "sched_wakeup_new")
		c.idx = pick({"tid"});
	else if (n == "sched_process_fork")
		c.idx = pick({"parent_tid", "parent_pid", "child_tid", "child_pid"});
	if (!c.idx.empty())
		c.kind = n == "sched_switch"         ? Cur::SchedClass::Switch
			 : n == "sched_process_fork" ? Cur::SchedClass::Fork
						     : Cur::SchedClass::Wake;
	return c;
}

// A user stream whose records name their thread (a shared lane, or a
// format with a tid per record): its threads are known by reading it.
bool tid_per_record(const StreamInfo &s)
{
	return !s.trace->kernel && (s.shared || s.trace->meta.record_format != STRATA_REC_COMPACT);
}

// sched: the process of kernel sub-trace sub's thread tid at ns: the
// tgid the last fork that named it (as parent or child) gave it; else the
// user sub-trace of the same machine that recorded the thread (the last
// to begin recording it at or before ns, else the first); tid 0 (the idle
// tasks) is pid 0; else NULL.
Cell sched_pid(Cur *cur, const SubTrace *sub, int64_t tid, int64_t ns)
{
	if (tid == 0)
		return cint(0);
	auto f = cur->forked.find({sub, tid});
	if (f != cur->forked.end())
		return cint(f->second);
	auto u = cur->user_pids.find(sub);
	if (u == cur->user_pids.end())
		return Cell();
	auto t = u->second.find(tid);
	if (t == u->second.end() || t->second.empty())
		return Cell();
	int64_t pid = t->second.front().second;
	for (const auto &x : t->second)
		if (x.first <= ns)
			pid = x.second;
	return cint(pid);
}

// sched at the end of the pass: the slices still running, no end known.
void sched_finish(Cur *cur)
{
	for (const auto &kv : cur->running) {
		const Cur::Running &r = kv.second;
		cur->rows.push_back({cint(r.ts), Cell(), Cell(), ctext(kv.first.first->hostname),
				     cint(kv.first.second), r.pid, cint(r.tid), ctext(r.comm), cint(r.prio),
				     Cell(), Cell(), Cell(), r.wake == INT64_MIN ? Cell() : cint(r.wake),
				     r.wake == INT64_MIN ? Cell() : cint(r.ts - r.wake)});
		cur->row_ids.push_back(r.rowid);
	}
	cur->running.clear();
	cur->sched_done = true;
}

} // namespace

// sched: the user sub-traces' threads on each kernel sub-trace's machine:
// an owned lane's packets name their thread and a process's main thread is
// its pid (the packet index: nothing read); the threads of the streams
// that name the thread per record (shared lanes) from those records, one
// entry per packet and thread (at its first record there).
void sched_user_pids(Cur *cur, Vtab *v)
{
	cur->user_pids.clear();
	std::map<std::string, std::unordered_map<int64_t, std::vector<std::pair<int64_t, int64_t>>>> by_host;
	bool read = false;
	for (const auto &s : v->t->index.streams()) {
		const SubTrace *sub = s->trace;
		if (sub->kernel)
			continue;
		read |= tid_per_record(*s);
		auto &tids = by_host[sub->hostname];
		for (const PacketEntry &p : s->packets) {
			const int64_t b = sub->meta.ns_from_origin(p.ts_begin);
			tids[sub->vpid].emplace_back(b, sub->vpid);
			if (!s->shared && sub->meta.record_format == STRATA_REC_COMPACT && p.vtid >= 0 &&
			    p.content > STRATA_PACKET_HEADER_SIZE)
				tids[p.vtid].emplace_back(b, sub->vpid);
		}
	}
	if (read) {
		TraceReader r;
		r.share_index(v->t->index);
		r.set_stream_filter([](const StreamInfo &s) { return tid_per_record(s); });
		std::unordered_map<int64_t, const PacketEntry *> last; // tid -> the packet of its last entry
		TraceMsg m;
		while (r.next(&m)) {
			if (m.kind != TraceMsgKind::Event || m.event->tid < 0)
				continue;
			const TraceEvent &e = *m.event;
			const PacketEntry *&lp = last[e.tid];
			if (lp == e.packet)
				continue;
			lp = e.packet;
			const SubTrace &sub = e.trace();
			by_host[sub.hostname][e.tid].emplace_back(e.ns, sub.vpid);
		}
		v->reg->bytes += r.stats().bytes;
	}
	for (auto &h : by_host)
		for (auto &t : h.second) {
			std::sort(t.second.begin(), t.second.end());
			// A (since, pid) per change of process.
			std::vector<std::pair<int64_t, int64_t>> runs;
			for (const auto &x : t.second)
				if (runs.empty() || runs.back().second != x.second)
					runs.push_back(x);
			t.second.swap(runs);
		}
	for (const auto &sub : v->t->index.traces())
		if (sub->kernel && by_host.count(sub->hostname))
			cur->user_pids[sub.get()] = by_host[sub->hostname];
}

// sched: the next slices that end (or, at the end of the trace, every
// CPU's last slice), into cur->rows; EOF when none is left.  Each
// sched_switch ends its CPU's running slice and begins the next thread's.
// A lower ts bound is the reader's window (a slice that begins in it has
// its end in it too), unless pid or a wake column is asked for: those
// need what came before (forks, wake-ups), so the pass then reads from the
// start and begins no slice before the bound.  Past an upper bound no
// slice begins, and the pass ends once those begun are ended.
//
// Wake-ups: a sched_waking, sched_wakeup or sched_wakeup_new of a thread
// is its wake-up unless one came already since the thread last ran (was
// the thread of a kernel event, switched in or out); the switch that puts
// it on a CPU takes it: wake_ts, and wake_latency = ts - wake_ts.
void sched_advance(Cur *cur, Vtab *v)
{
	cur->row_ids.clear();
	while (cur->rows.empty()) {
		if (cur->sched_done) {
			cur->eof = true;
			return;
		}
		if (!read_event(cur, v)) {
			sched_finish(cur);
			continue;
		}
		const TraceEvent &e = *cur->m.event;
		const SubTrace *sub = &whole_of(e.trace());
		if (e.tid >= 0 && !cur->woken.empty())
			cur->woken.erase({sub, e.tid}); // it ran
		auto it = cur->sched_classes.find(e.cls);
		if (it == cur->sched_classes.end())
			it = cur->sched_classes.emplace(e.cls, sched_class(*e.cls)).first;
		const Cur::SchedClass &sc = it->second;
		if (sc.kind == Cur::SchedClass::None)
			continue;
		e.decode(&cur->fv);
		auto val = [&](size_t k) { return int_value(cur->fv[(size_t)sc.idx[k]]); };
		if (sc.kind == Cur::SchedClass::Wake) {
			cur->woken.emplace(std::make_pair(sub, val(0)), e.ns); // the first since it ran
			continue;
		}
		if (sc.kind == Cur::SchedClass::Fork) {
			cur->forked[{sub, val(0)}] = val(1);
			cur->forked[{sub, val(2)}] = val(3);
			continue;
		}
		if (e.cpu < 0)
			continue;
		const FieldValue &comm = cur->fv[(size_t)sc.idx[2]];
		if (comm.info->type != STRATA_FT_STRING)
			continue;
		const int64_t prev = val(0), next = val(3);
		cur->woken.erase({sub, prev});
		auto w = cur->woken.find({sub, next});
		const int64_t wake = w == cur->woken.end() ? INT64_MIN : w->second;
		if (w != cur->woken.end())
			cur->woken.erase(w);
		if (e.ns < cur->lo)
			continue; // before the window: the state only
		const std::string next_comm(comm.str, comm.len);
		auto run = cur->running.find({sub, e.cpu});
		if (run != cur->running.end()) {
			const Cur::Running &r = run->second;
			cur->rows.push_back({cint(r.ts), cint(e.ns), cint(e.ns - r.ts), ctext(sub->hostname),
					     cint(e.cpu), r.pid, cint(r.tid), ctext(r.comm), cint(r.prio),
					     prev == r.tid ? cint(val(1)) : Cell(), cint(next),
					     ctext(next_comm), r.wake == INT64_MIN ? Cell() : cint(r.wake),
					     r.wake == INT64_MIN ? Cell() : cint(r.ts - r.wake)});
			cur->row_ids.push_back(r.rowid);
			if (e.ns > cur->hi)
				cur->running.erase(run);
		}
		if (e.ns <= cur->hi)
			cur->running[{sub, e.cpu}] = Cur::Running{e.ns,
								  next,
								  val(4),
								  next_comm,
								  sched_pid(cur, sub, next, e.ns),
								  wake,
								  event_rowid(*v->t, e)};
		else if (cur->running.empty())
			cur->sched_done = true; // every slice begun by the bound has ended
	}
	cur->eof = false;
}

} // namespace query
} // namespace strata
