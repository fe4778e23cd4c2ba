// analyze_model.cpp - see analyze_model.h for the definitions used here.
#include "analyze_model.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
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

struct Work {
	LockStats st;
	std::vector<uint64_t> all_waits;
	std::map<uint64_t, Site> sites;
};

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
	Report rep;
	rep.procs = in.procs;
	rep.discarded = in.discarded;
	rep.other_events = in.other_events;
	rep.events = in.events.size();
	if (!in.events.empty()) {
		rep.first_ts = in.events.front().ts;
		rep.last_ts = in.events.back().ts;
	}

	std::map<LockKey, Work> locks;
	std::map<LockKey, CondStats> conds;
	auto cond_of = [&](const Event &e) -> CondStats & {
		CondStats &c = conds[LockKey{e.proc, e.cond}];
		c.proc = e.proc;
		c.addr = e.cond;
		return c;
	};
	// Open holds per (process, thread, lock): acquisition timestamps, LIFO.
	std::map<ThreadKey, std::vector<int64_t>> open;
	struct RawInterval {
		LockKey key;
		int64_t tid, start, end;
		bool wait;
	};
	std::vector<RawInterval> raw;

	auto work_of = [&](uint32_t proc, uint64_t addr, Op op) -> Work & {
		Work &w = locks[LockKey{proc, addr}];
		if (w.st.kind.empty()) {
			w.st.proc = proc;
			w.st.addr = addr;
			w.st.kind = is_rwlock(op) ? "rwlock" : "mutex";
		}
		return w;
	};
	auto end_hold = [&](Work &w, const ThreadKey &tk, int64_t at) -> bool {
		auto it = open.find(tk);
		if (it == open.end() || it->second.empty())
			return false;
		int64_t start = it->second.back();
		it->second.pop_back();
		uint64_t hold = at > start ? static_cast<uint64_t>(at - start) : 0;
		w.st.holds++;
		w.st.hold_total += hold;
		w.st.hold_max = std::max(w.st.hold_max, hold);
		raw.push_back({LockKey{tk.proc, tk.lock}, tk.tid, start, at, false});
		return true;
	};

	for (const Event &e : in.events) {
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
				continue;
			}
			w.st.acquisitions++;
			w.all_waits.push_back(e.wait_ns);
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
				int64_t ws = e.ts - static_cast<int64_t>(e.wait_ns);
				raw.push_back({LockKey{e.proc, e.lock}, e.tid, ws, e.ts, true});
			}
			if (e.wait_ns > s.wait_max || s.stack.empty()) {
				s.wait_max = std::max(s.wait_max, e.wait_ns);
				s.stack = e.stack;
			}
			open[tk].push_back(e.ts);
		} else if (e.op == Op::MutexUnlock || e.op == Op::RwUnlock) {
			if (!succeeded(e.ret))
				continue;
			Work &w = work_of(e.proc, e.lock, e.op);
			if (!end_hold(w, tk, e.ts))
				rep.unmatched_unlocks++;
		} else if (e.op == Op::CondWait || e.op == Op::CondTimedwait) {
			rep.cond_waits++;
			CondStats &cs = cond_of(e);
			cs.waits++;
			cs.timeouts += e.ret == ETIMEDOUT;
			cs.wait_total += e.wait_ns;
			cs.wait_max = std::max(cs.wait_max, e.wait_ns);
			cs.mutex = e.lock;
			if (!e.lock)
				continue;
			Work &w = work_of(e.proc, e.lock, Op::MutexLock);
			w.st.cond_waits++;
			int64_t released = e.ts - static_cast<int64_t>(e.wait_ns);
			end_hold(w, tk, released);
			// The wait returns with the mutex held (also on ETIMEDOUT).
			open[tk].push_back(e.ts);
		} else {
			rep.cond_signals++;
			CondStats &cs = cond_of(e);
			(e.op == Op::CondBroadcast ? cs.broadcasts : cs.signals)++;
		}
	}

	for (auto &kv : locks) {
		Work &w = kv.second;
		LockStats &st = w.st;
		st.wait_mean = st.acquisitions
				       ? static_cast<double>(st.wait_total) / static_cast<double>(st.acquisitions)
				       : 0.0;
		st.wait_p99 = percentile(w.all_waits, 99.0);
		for (auto &sv : w.sites)
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
		if (!sym || i >= std::max(opt.top, opt.timeline_locks))
			continue;
		for (Site &s : st.sites) {
			s.sym = sym(st.proc, s.caller, true);
			for (uint64_t a : s.stack)
				s.stack_syms.push_back(sym(st.proc, a, true));
		}
	}

	// Timeline: intervals of the top locks.  Over the bound, keep the
	// longest ones (waits first: they are what the page is about), then
	// restore time order.
	std::map<LockKey, size_t> top;
	for (size_t i = 0; i < rep.locks.size() && i < opt.timeline_locks; i++)
		top[LockKey{rep.locks[i].proc, rep.locks[i].addr}] = i;
	for (const RawInterval &r : raw) {
		auto it = top.find(r.key);
		if (it != top.end())
			rep.timeline.push_back({r.tid, r.key.proc, it->second, r.start, r.end, r.wait});
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
