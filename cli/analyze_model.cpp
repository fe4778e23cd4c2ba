// analyze_model.cpp - see analyze_model.h for the definitions used here.
#include "analyze_model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <deque>
#include <set>
#include <tuple>
#include <unordered_map>

namespace strata {
namespace analyze {

bool op_from_name(const std::string &name, Op *op)
{
	static const std::map<std::string, Op> names = {
		{"mutex_lock", Op::MutexLock},       {"mutex_timedlock", Op::MutexTimedlock},
		{"mutex_trylock", Op::MutexTrylock}, {"mutex_unlock", Op::MutexUnlock},
		{"rwlock_rdlock", Op::RwRdlock},     {"rwlock_wrlock", Op::RwWrlock},
		{"rwlock_tryrdlock", Op::RwTryrdlock}, {"rwlock_trywrlock", Op::RwTrywrlock},
		{"rwlock_unlock", Op::RwUnlock},     {"cond_wait", Op::CondWait},
		{"cond_timedwait", Op::CondTimedwait}, {"cond_signal", Op::CondSignal},
		{"cond_broadcast", Op::CondBroadcast},
	};
	auto it = names.find(name);
	if (it == names.end())
		return false;
	*op = it->second;
	return true;
}

uint64_t percentile(std::vector<uint64_t> v, double p)
{
	if (v.empty())
		return 0;
	size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
	if (rank < 1)
		rank = 1;
	if (rank > v.size())
		rank = v.size();
	std::nth_element(v.begin(), v.begin() + static_cast<long>(rank - 1), v.end());
	return v[rank - 1];
}

namespace {

bool is_acquire(Op op)
{
	switch (op) {
	case Op::MutexLock:
	case Op::MutexTimedlock:
	case Op::MutexTrylock:
	case Op::RwRdlock:
	case Op::RwWrlock:
	case Op::RwTryrdlock:
	case Op::RwTrywrlock:
		return true;
	default:
		return false;
	}
}

bool is_rwlock(Op op)
{
	return op == Op::RwRdlock || op == Op::RwWrlock || op == Op::RwTryrdlock ||
	       op == Op::RwTrywrlock || op == Op::RwUnlock;
}

// EOWNERDEAD: a robust mutex acquired from a dead owner is still acquired.
bool succeeded(int32_t ret) { return ret == 0 || ret == EOWNERDEAD; }

struct LockKey {
	uint32_t proc;
	uint64_t addr;
	bool operator<(const LockKey &o) const { return std::tie(proc, addr) < std::tie(o.proc, o.addr); }
};

struct Hold {
	int64_t ts;
	uint64_t caller;
	bool exclusive;    // mutex or write lock
};

struct Work {
	LockStats st;
	std::map<uint64_t, Site> sites;
	std::map<int64_t, std::vector<Hold>> open;   // per thread, LIFO
	// Per thread: indices in `holds` of holds ended by a handoff, whose
	// unlock (or cond wait) event has not come yet; LIFO like `open`.
	std::map<int64_t, std::vector<size_t>> closed_early;
	struct Span { // 32 bytes: one per acquisition is kept (blockers, timeline)
		int64_t start, end;
		int64_t tid;
		uint64_t caller;   // the acquisition's site
	};
	// Completed holds, contended waits.  Deques: no doubling slack (a
	// vector's capacity can be twice its size: 40% of the memory of a
	// 45 M-event analysis).
	std::deque<Span> holds, waits;
};

// Blockers: each contended wait's time is shared among the other threads'
// holds it overlapped, by overlap, and credited to where those holds were
// taken.  Holds are sorted by start; a hold overlapping [ws, we) starts
// after ws - (longest hold), which bounds the scan for overlapping read holds.
void blame(Work &w)
{
	std::sort(w.holds.begin(), w.holds.end(),
		  [](const Work::Span &a, const Work::Span &b) { return a.start < b.start; });
	std::map<uint64_t, Site> by_site;
	const int64_t longest = static_cast<int64_t>(w.st.hold_max);
	for (const Work::Span &wt : w.waits) {
		auto it = std::lower_bound(w.holds.begin(), w.holds.end(), wt.start - longest,
					   [](const Work::Span &h, int64_t v) { return h.start < v; });
		std::map<uint64_t, uint64_t> share_of;
		for (; it != w.holds.end() && it->start < wt.end; ++it) {
			if (it->tid == wt.tid)
				continue;
			int64_t lo = std::max(it->start, wt.start), hi = std::min(it->end, wt.end);
			if (hi > lo)
				share_of[it->caller] += static_cast<uint64_t>(hi - lo);
		}
		for (auto &kv : share_of) {
			Site &b = by_site[kv.first];
			b.caller = kv.first;
			b.contended++;
			b.wait_total += kv.second;
			b.wait_max = std::max(b.wait_max, kv.second);
		}
	}
	for (auto &kv : by_site)
		w.st.blockers.push_back(kv.second);
	std::sort(w.st.blockers.begin(), w.st.blockers.end(), [](const Site &a, const Site &b) {
		return std::tie(a.wait_total, b.caller) > std::tie(b.wait_total, a.caller);
	});
}

struct ThreadKey {
	uint32_t proc;
	int64_t tid;
	uint64_t lock;
	bool operator<(const ThreadKey &o) const
	{
		return std::tie(proc, tid, lock) < std::tie(o.proc, o.tid, o.lock);
	}
};

} // namespace

Report analyze(const Input &in, const Options &opt, const Symbolizer &sym)
{
	return analyze_feed(
		[&in](const std::function<void(const Event &)> &on) {
			for (const Event &e : in.events)
				on(e);
		},
		in, opt, sym);
}

Report analyze_feed(const EventFeed &feed, const Input &meta, const Options &opt, const Symbolizer &sym)
{
	Report rep;

	std::map<LockKey, Work> locks;
	std::map<LockKey, CondStats> conds;
	auto cond_of = [&](const Event &e) -> CondStats & {
		CondStats &c = conds[LockKey{e.proc, e.cond}];
		c.proc = e.proc;
		c.addr = e.cond;
		return c;
	};
	auto work_of = [&](uint32_t proc, uint64_t addr, Op op) -> Work & {
		Work &w = locks[LockKey{proc, addr}];
		if (w.st.kind.empty()) {
			w.st.proc = proc;
			w.st.addr = addr;
			w.st.kind = is_rwlock(op) ? "rwlock" : "mutex";
		}
		return w;
	};
	// Holds are counted once every event is seen (a handoff's end may still
	// move earlier, see end_hold).
	auto close_hold = [&](Work &w, int64_t tid, const Hold &h, int64_t at) {
		w.holds.push_back({h.ts, std::max(at, h.ts), tid, h.caller});
	};
	/*
	 * An acquisition proves that conflicting holds of other threads have
	 * ended: their unlock event can be stamped late (the thread was
	 * preempted between the real unlock and its event), so end them here;
	 * their unlock events are then consumed without a hold.
	 */
	auto handoff = [&](Work &w, int64_t tid, bool exclusive, int64_t at) {
		for (auto &th : w.open) {
			if (th.first == tid)
				continue;
			std::vector<Hold> keep;
			for (const Hold &h : th.second) {
				if (exclusive || h.exclusive) {
					close_hold(w, th.first, h, at);
					w.closed_early[th.first].push_back(w.holds.size() - 1);
				} else {
					keep.push_back(h);
				}
			}
			th.second.swap(keep);
		}
	};
	auto end_hold = [&](Work &w, const ThreadKey &tk, int64_t at) -> bool {
		auto it = w.open.find(tk.tid);
		if (it == w.open.end() || it->second.empty()) {
			// The hold was ended by another thread's acquisition; its
			// own release came no later than that and may be earlier (a
			// cond wait's release, seen only when the wait returns).
			auto ce = w.closed_early.find(tk.tid);
			if (ce == w.closed_early.end() || ce->second.empty())
				return false;
			Work::Span &h = w.holds[ce->second.back()];
			ce->second.pop_back();
			if (at < h.end)
				h.end = std::max(at, h.start);
			return true;
		}
		Hold h = it->second.back();
		it->second.pop_back();
		close_hold(w, tk.tid, h, at);
		return true;
	};

	// Locks built from a mutex and a condition variable (CPython's GIL):
	// see cond_locks() below.  Per condition variable, the threads that
	// waited and those that signalled; per thread, its unlocks so far (a
	// run of waits with no unlock between is one wait for the lock: the
	// mutex stays held across a timed wait's retries); per (thread, cond)
	// its current run of waits.
	struct CondUse {
		std::map<int64_t, uint64_t> waiters, signallers; // tid -> count
		std::deque<Work::Span> waits;                    // runs of waits (caller: the first's)
		std::map<int64_t, std::pair<size_t, uint64_t>> run; // tid -> (index in waits, unlocks then)
	};
	std::map<LockKey, CondUse> cond_use;
	std::map<std::pair<uint32_t, int64_t>, uint64_t> unlocks_of;

	// Events one at a time, in time order, none kept: memory grows with
	// locks, threads and waits, not with events.
	feed([&](const Event &e) {
		if (rep.events++ == 0)
			rep.first_ts = rep.last_ts = e.ts;
		if (e.ts < rep.first_ts)
			rep.first_ts = e.ts;
		if (e.ts > rep.last_ts)
			rep.last_ts = e.ts;
		ThreadKey tk{e.proc, e.tid, e.lock};
		if (is_acquire(e.op)) {
			Work &w = work_of(e.proc, e.lock, e.op);
			if (!succeeded(e.ret)) {
				w.st.failed++;
				w.st.failed_wait += e.wait_ns;
				return;
			}
			w.st.acquisitions++;
			w.st.wait_total += e.wait_ns;
			w.st.wait_max = std::max(w.st.wait_max, e.wait_ns);
			Site &s = w.sites[e.caller];
			s.caller = e.caller;
			s.acquisitions++;
			s.wait_total += e.wait_ns;
			if (e.contended) {
				w.st.contended++;
				w.st.waits.push_back(e.wait_ns);
				s.contended++;
				w.waits.push_back({e.ts - static_cast<int64_t>(e.wait_ns), e.ts, e.tid, e.caller});
			}
			if (e.wait_ns > s.wait_max || s.stack.empty()) {
				s.wait_max = std::max(s.wait_max, e.wait_ns);
				s.stack = e.stack;
			}
			const bool excl = e.op != Op::RwRdlock && e.op != Op::RwTryrdlock;
			handoff(w, e.tid, excl, e.ts);
			w.open[e.tid].push_back({e.ts, e.caller, excl});
		} else if (e.op == Op::MutexUnlock || e.op == Op::RwUnlock) {
			unlocks_of[{e.proc, e.tid}]++;
			if (!succeeded(e.ret))
				return;
			Work &w = work_of(e.proc, e.lock, e.op);
			if (!end_hold(w, tk, e.ts))
				rep.unmatched_unlocks++;
		} else if (e.op == Op::CondWait || e.op == Op::CondTimedwait) {
			rep.cond_waits++;
			{
				CondUse &cu = cond_use[LockKey{e.proc, e.cond}];
				cu.waiters[e.tid]++;
				const uint64_t unlocks = unlocks_of[{e.proc, e.tid}];
				auto r = cu.run.find(e.tid);
				if (r != cu.run.end() && r->second.second == unlocks) {
					cu.waits[r->second.first].end = e.ts; // the same wait, retried
				} else {
					cu.waits.push_back({e.ts - static_cast<int64_t>(e.wait_ns), e.ts, e.tid, e.caller});
					cu.run[e.tid] = {cu.waits.size() - 1, unlocks};
				}
			}
			CondStats &cs = cond_of(e);
			cs.waits++;
			cs.timeouts += e.ret == ETIMEDOUT;
			cs.wait_total += e.wait_ns;
			cs.wait_max = std::max(cs.wait_max, e.wait_ns);
			cs.mutex = e.lock;
			if (!e.lock)
				return;
			Work &w = work_of(e.proc, e.lock, Op::MutexLock);
			w.st.cond_waits++;
			int64_t released = e.ts - static_cast<int64_t>(e.wait_ns);
			end_hold(w, tk, released);
			// The wait returns with the mutex held (also on ETIMEDOUT).
			handoff(w, e.tid, true, e.ts);
			w.open[e.tid].push_back({e.ts, e.caller, true});
		} else {
			rep.cond_signals++;
			cond_use[LockKey{e.proc, e.cond}].signallers[e.tid]++;
			CondStats &cs = cond_of(e);
			(e.op == Op::CondBroadcast ? cs.broadcasts : cs.signals)++;
		}
	});
	rep.procs = meta.procs;
	rep.discarded = meta.discarded;
	rep.other_events = meta.other_events;

	for (auto &kv : locks) {
		Work &w = kv.second;
		LockStats &st = w.st;
		// Over the waits (contended acquisitions), not over every
		// acquisition: most acquisitions of a busy lock do not wait, and
		// their zeros would hide the waits (p99 0 ns).
		st.wait_mean = st.contended ? static_cast<double>(st.wait_total) / static_cast<double>(st.contended)
					    : 0.0;
		st.wait_p99 = percentile(st.waits, 99.0);
		for (auto &sv : w.sites)
			st.sites.push_back(sv.second);
		for (const Work::Span &h : w.holds) {
			uint64_t hold = static_cast<uint64_t>(h.end - h.start);
			st.holds++;
			st.hold_total += hold;
			st.hold_max = std::max(st.hold_max, hold);
		}
		blame(w);
		std::sort(st.sites.begin(), st.sites.end(), [](const Site &a, const Site &b) {
			return std::tie(a.wait_total, a.acquisitions, b.caller) >
			       std::tie(b.wait_total, b.acquisitions, a.caller);
		});
		rep.locks.push_back(std::move(st));
	}
	/*
	 * A condition variable that the same threads both wait on and signal
	 * (at least two of them) is a lock built from a mutex and a condition
	 * variable, handed from thread to thread: CPython's GIL (take_gil
	 * waits on gil->cond while another thread holds it; drop_gil signals
	 * it), or a baton.  Its waits are lock waits that cost time, not a
	 * worker idling for work (a pool's workers wait, its producers signal:
	 * other threads).  It is reported as a lock of kind "mutex+cond" at
	 * the condition variable's address, and no longer as a condition
	 * variable.  Acquisitions: its releases (the signals of those
	 * threads; drop_gil signals at every release); a wait is a run of one
	 * thread's waits with no unlock between (a timed wait retried).
	 */
	std::set<LockKey> cond_locks;
	for (auto &kv : cond_use) {
		CondUse &cu = kv.second;
		uint64_t both = 0, releases = 0;
		for (const auto &w : cu.waiters) {
			auto sg = cu.signallers.find(w.first);
			if (sg != cu.signallers.end()) {
				both++;
				releases += sg->second;
			}
		}
		if (both < 2)
			continue;
		cond_locks.insert(kv.first);
		LockStats st;
		st.proc = kv.first.proc;
		st.addr = kv.first.addr;
		st.kind = "mutex+cond";
		std::map<uint64_t, Site> sites;
		for (const Work::Span &w : cu.waits) {
			const uint64_t d = static_cast<uint64_t>(w.end - w.start);
			st.contended++;
			st.waits.push_back(d);
			st.wait_total += d;
			st.wait_max = std::max(st.wait_max, d);
			Site &site = sites[w.caller];
			site.caller = w.caller;
			site.acquisitions++;
			site.contended++;
			site.wait_total += d;
			site.wait_max = std::max(site.wait_max, d);
		}
		st.acquisitions = std::max<uint64_t>(releases, st.contended);
		st.wait_mean = st.contended ? static_cast<double>(st.wait_total) / static_cast<double>(st.contended) : 0.0;
		st.wait_p99 = percentile(st.waits, 99.0);
		for (auto &sv : sites)
			st.sites.push_back(sv.second);
		std::sort(st.sites.begin(), st.sites.end(), [](const Site &a, const Site &b) {
			return std::tie(a.wait_total, a.acquisitions, b.caller) >
			       std::tie(b.wait_total, b.acquisitions, a.caller);
		});
		rep.locks.push_back(std::move(st));
	}

	std::sort(rep.locks.begin(), rep.locks.end(), [](const LockStats &a, const LockStats &b) {
		return std::tie(a.wait_total, a.acquisitions, b.proc, b.addr) >
		       std::tie(b.wait_total, b.acquisitions, a.proc, a.addr);
	});

	for (auto &kv : conds)
		if (!cond_locks.count(kv.first))
			rep.conds.push_back(kv.second);
	std::sort(rep.conds.begin(), rep.conds.end(), [](const CondStats &a, const CondStats &b) {
		return std::tie(a.wait_total, a.waits, b.proc, b.addr) > std::tie(b.wait_total, b.waits, a.proc, a.addr);
	});
	for (size_t i = 0; sym && i < rep.conds.size() && i < opt.top; i++)
		rep.conds[i].name = sym(rep.conds[i].proc, rep.conds[i].addr, false);

	// Symbolize what the reports show: lock names and the top sites.
	for (size_t i = 0; i < rep.locks.size(); i++) {
		LockStats &st = rep.locks[i];
		if (sym)
			st.name = sym(st.proc, st.addr, false);
		if (st.sites.size() > opt.sites)
			st.sites.resize(opt.sites);
		if (st.blockers.size() > opt.sites)
			st.blockers.resize(opt.sites);
		if (!sym || i >= std::max(opt.top, opt.timeline_locks))
			continue;
		for (Site &s : st.sites) {
			s.sym = sym(st.proc, s.caller, true);
			for (uint64_t a : s.stack)
				s.stack_syms.push_back(sym(st.proc, a, true));
		}
		for (Site &b : st.blockers)
			b.sym = sym(st.proc, b.caller, true);
	}

	// Timeline: intervals of the top locks.  Over the bound, keep the
	// longest ones (waits first: they are what the page is about), then
	// restore time order.
	for (size_t i = 0; i < rep.locks.size() && i < opt.timeline_locks; i++) {
		const LockKey key{rep.locks[i].proc, rep.locks[i].addr};
		auto add = [&](const std::deque<Work::Span> &spans, bool wait) {
			for (const Work::Span &sp : spans)
				rep.timeline.push_back({sp.tid, key.proc, i, sp.start, sp.end, wait});
		};
		if (rep.locks[i].kind == "mutex+cond") {
			add(cond_use[key].waits, true);
		} else {
			add(locks[key].waits, true);
			add(locks[key].holds, false);
		}
	}
	if (rep.timeline.size() > opt.timeline_max) {
		auto longer = [](const Interval &a, const Interval &b) {
			return std::make_tuple(a.wait, a.end - a.start) > std::make_tuple(b.wait, b.end - b.start);
		};
		std::nth_element(rep.timeline.begin(), rep.timeline.begin() + static_cast<long>(opt.timeline_max),
				 rep.timeline.end(), longer);
		rep.timeline.resize(opt.timeline_max);
		rep.timeline_truncated = true;
	}
	std::sort(rep.timeline.begin(), rep.timeline.end(),
		  [](const Interval &a, const Interval &b) { return a.start < b.start; });
	return rep;
}

} // namespace analyze
} // namespace strata
