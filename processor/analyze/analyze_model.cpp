// analyze_model.cpp - the lock model's per-event path (lock_model.h): each
// event's acquisitions, holds and releases, compact records, condition
// waits and counts.
#include "lock_model.h"

namespace strata {
namespace analyze {
namespace model {

// A lock's first use sets its kind: the first look-up misses the cache.
Work &Model::work_miss(uint32_t proc, uint64_t addr, Op op)
{
	RecentWork &r = recent_work_[cache_place(proc, addr)];
	r = RecentWork{{proc, addr}, &locks_[LockKey{proc, addr}]};
	Work &w = *r.w;
	if (w.st.kind.empty()) {
		w.st.proc = proc;
		w.st.addr = addr;
		w.st.kind = is_rwlock(op) ? "rwlock" : is_sem(op) ? "semaphore" : "mutex";
	}
	return w;
}

// close_hold()'s steps for every hold (all of them for one that neither
// starts a block nor lowers its block's earliest start, as on held()'s
// fast path): the hold, ended at `at` or at its start, onto `recent`
// (kRoom: its last chunk has room, see held(); no test), and the lock's
// longest hold and lag.  `now`: now_, passed in (a store to `recent`
// could alias it).
template <bool kRoom>
inline void Model::push_closed(Work &w, int64_t tid, uint64_t caller, int64_t start, int64_t at, int64_t now)
{
	const int64_t end = std::max(at, start);
	const Done d{{start, end, tid, caller}, now};
	if constexpr (kRoom)
		w.recent.push_back_unchecked(d);
	else
		w.recent.push_back(d);
	recent_total_++;
	if (end - start > w.hold_longest)
		w.hold_longest = end - start;
	if (now - start > w.lag_longest)
		w.lag_longest = now - start;
}

// Holds are counted once their end is final (a handoff's end may still
// move earlier, see end_hold): when they leave `recent`.
inline uint64_t Model::close_hold(Work &w, int64_t tid, const Hold &h, int64_t at)
{
	push_closed<false>(w, tid, h.caller, h.ts, at, now_);
	const uint64_t n = w.base + w.recent.size() - 1;
	// The earliest starts of its block and of its block's super block:
	// the latter changes only with the former (no later than it).
	if (n % kBlock == 0 || w.block_start.empty()) {
		w.block_start.push_back(h.ts);
		w.low(n / kBlock, h.ts);
	} else if (h.ts < w.block_start.back()) {
		w.block_start.back() = h.ts;
		w.low(n / kBlock, h.ts);
	} else if (__builtin_expect(!w.super_start.empty(), 1)) {
		return n;
	}
	if (n % kSuper == 0 || w.super_start.empty())
		w.super_start.push_back(h.ts);
	else
		w.super_start.back() = std::min(w.super_start.back(), h.ts);
	return n;
}

/*
 * An acquisition proves that conflicting holds of other threads have
 * ended: their unlock event can be stamped late (the thread was
 * preempted between the real unlock and its event), so end them here;
 * their unlock events are then consumed without a hold.
 */
void Model::handoff(Work &w, int64_t tid, bool exclusive, int64_t at)
{
	if (w.open_n == w.open_of(tid).size())
		return; // no other thread holds it (the common case: nothing to walk)
	for (auto &th : w.open) {
		if (th.first == tid || th.second.empty())
			continue;
		// The holds kept moved down in place (their order kept).
		size_t k = 0;
		for (size_t i = 0; i < th.second.size(); i++) {
			const Hold h = th.second[i];
			if (exclusive || h.exclusive) {
				w.closed_early[th.first].push_back(close_hold(w, th.first, h, at));
				w.early_n++;
			} else
				th.second[k++] = h;
		}
		w.open_n -= th.second.size() - k;
		th.second.resize(k);
	}
}

bool Model::end_hold(Work &w, const ThreadKey &tk, int64_t at)
{
	std::vector<Hold> &mine = w.open_of(tk.tid);
	if (mine.empty()) {
		// The hold was ended by another thread's acquisition; its own
		// release came no later than that and may be earlier (a cond
		// wait's release, seen only when the wait returns).
		auto ce = w.closed_early.find(tk.tid);
		if (ce == w.closed_early.end() || ce->second.empty())
			return false;
		const uint64_t n = ce->second.back();
		ce->second.pop_back();
		w.early_n--;
		if (n >= w.base) { // else counted already (cap reached)
			Span &h = w.recent[n - w.base].s;
			if (at < h.end)
				h.end = std::max(at, h.start);
		}
		return true;
	}
	Hold h = mine.back();
	mine.pop_back();
	w.open_n--;
	close_hold(w, tk.tid, h, at);
	return true;
}

void Model::on_acquire(const Event &e)
{
	Work &w = work_of(e.proc, e.lock, e.op);
	if (!succeeded(e.ret)) {
		w.st.failed++;
		w.st.failed_wait += e.wait_ns;
		return;
	}
	w.st.wait_total += e.wait_ns;
	w.st.wait_max = std::max(w.st.wait_max, e.wait_ns);
	Site &s = w.site_of(e.caller);
	s.caller = e.caller;
	s.wait_total += e.wait_ns;
	if (e.contended) {
		w.st.contended++;
		w.st.waits.add(e.wait_ns);
		s.contended++;
		const Span wt{e.ts - static_cast<int64_t>(e.wait_ns), e.ts, e.tid, e.caller};
		w.unblamed.push_back(wt);
		if (w.unblamed.size() == 1 || w.unblamed.size() > kUnblamedCap)
			arm(w);
		keep(w.tl_waits, wt);
	}
	if (e.wait_ns > s.wait_max || (s.stack.empty() && !e.stack.empty())) { // else nothing changes
		s.wait_max = std::max(s.wait_max, e.wait_ns);
		s.stack = e.stack;
	}
	take_hold(w, s, w.open_of(e.tid), e, e.op != Op::RwRdlock && e.op != Op::RwTryrdlock);
}

// An acquisition's steps past its wait (all of them for an uncontended
// one): its counts and its hold, open in `mine` (w.open_of(e.tid), or
// held_cache_'s).
inline void Model::take_hold(Work &w, Site &s, std::vector<Hold> &mine, const Event &e, bool excl)
{
	w.st.acquisitions++;
	s.acquisitions++;
	open_hold(w, mine, e.tid, Hold{e.ts, e.caller, excl});
}

// A hold that begins (an acquisition, a cond wait's return): the end of
// other threads' conflicting holds, and h on the thread's holds (mine).
inline void Model::open_hold(Work &w, std::vector<Hold> &mine, int64_t tid, const Hold &h)
{
	handoff(w, tid, h.exclusive, h.ts);
	mine.push_back(h);
	w.open_n++;
	settle(w);
	evict(w);
}

// A successful unlock's steps past its count (unlocks_of()): the end of
// the thread's last hold of the lock.
inline void Model::release_hold(Work &w, const ThreadKey &tk, int64_t at)
{
	if (!end_hold(w, tk, at))
		rep_.unmatched_unlocks++;
	settle(w);
	evict(w);
}

void Model::end_run(CondUse &cu, const Span &run)
{
	const uint64_t d = static_cast<uint64_t>(run.end - run.start);
	LockStats &st = cu.st;
	st.contended++;
	st.waits.add(d);
	st.wait_total += d;
	st.wait_max = std::max(st.wait_max, d);
	Site &site = cu.sites[run.caller];
	site.caller = run.caller;
	site.acquisitions++;
	site.contended++;
	site.wait_total += d;
	site.wait_max = std::max(site.wait_max, d);
	keep(cu.tl, run);
}

void Model::on_cond_wait(const Event &e)
{
	rep_.cond_waits++;
	CondUse &cu = cond_use_[LockKey{e.proc, e.cond}];
	cu.waiters[e.tid]++;
	const uint64_t unlocks = unlocks_of(e.proc, e.tid);
	auto r = cu.run.find(e.tid);
	if (r != cu.run.end() && r->second.second == unlocks) {
		r->second.first.end = e.ts; // the same wait, retried
	} else {
		if (r != cu.run.end())
			end_run(cu, r->second.first);
		cu.run[e.tid] = {Span{e.ts - static_cast<int64_t>(e.wait_ns), e.ts, e.tid, e.caller},
				 unlocks};
	}
	CondStats &cs = conds_[LockKey{e.proc, e.cond}];
	cs.proc = e.proc;
	cs.addr = e.cond;
	cs.waits++;
	cs.timeouts += e.ret == ETIMEDOUT;
	cs.wait_total += e.wait_ns;
	cs.wait_max = std::max(cs.wait_max, e.wait_ns);
	cs.mutex = e.lock;
	if (!e.lock)
		return;
	Work &w = work_of(e.proc, e.lock, Op::MutexLock);
	w.st.cond_waits++;
	end_hold(w, ThreadKey{e.proc, e.tid, e.lock}, e.ts - static_cast<int64_t>(e.wait_ns));
	// The wait returns with the mutex held (also on ETIMEDOUT).
	open_hold(w, w.open_of(e.tid), e.tid, Hold{e.ts, e.caller, true});
}

// Counted uncontended pairs: acquisitions and holds without intervals (no
// wait, no timeline, nothing for the blockers: the preload keeps the
// per-pair record of a hold that had waiters).
void Model::on_counts(const Event &e)
{
	if (e.op == Op::CountsDone) {
		counts_done_[e.proc] = true;
		return;
	}
	counts_done_[e.proc] = false;
	Work &w = work_of(e.proc, e.lock, e.tried ? Op::MutexTrylock : Op::MutexLock);
	const uint64_t timed = std::min(e.timed, e.count);
	w.st.acquisitions += e.count;
	w.st.counted += e.count;
	w.st.holds += e.count;
	// Untimed holds (sampling): estimated at the timed ones' mean.
	w.st.hold_total += e.hold_sum + (timed ? static_cast<uint64_t>(static_cast<double>(e.hold_sum) /
								       static_cast<double>(timed) *
								       static_cast<double>(e.count - timed))
					       : 0);
	w.st.hold_max = std::max(w.st.hold_max, e.hold_max);
	w.st.untimed += e.count - timed;
	rep_.counted += e.count;
	rep_.untimed += e.count - timed;
	rep_.waited_untimed += e.waited_untimed;
	if (e.waited_untimed)
		rep_.blockers_partial = true; // holds others waited behind, without their interval
	Site &s = w.sites[e.caller];
	s.caller = e.caller;
	s.acquisitions += e.count;
}

/*
 * A compact record's hold: what on_event() does with its acquisition and
 * its unlock, in one pass (the preload's records are nearly all these):
 * one look-up of the lock and of the thread's holds, and the hold never
 * pushed on them.  Only when the acquisition's own steps change nothing
 * but the counts: no other thread's hold to hand off (handoff() returns
 * at once), no wait that settle() could blame (the first unblamed one
 * ended after the acquisition, which is then not final, or is younger
 * than the settling time), and evict() finds `recent` as the lock's last
 * event left it, below evict_at.  Otherwise the two events in turn.
 */
void Model::held(const Event &acq, int64_t unlock_ts)
{
	// The fields read, once (the stores below could alias them).
	const int64_t ts = acq.ts;
	const LastHeld &l = held_cache_[held_place(acq)];
	if (__builtin_expect(!l.of(acq), 0))
		return held_miss(acq, unlock_ts);
	Work &w = *l.w;
	// The common case, inline and with no call but at its end (no
	// registers to save): no wait that settle() could blame (before
	// settle_at), no hold of the lock open (no handoff), room in
	// `recent`'s last chunk, and the hold neither starts a block nor
	// lowers its block's earliest start (close_hold() then does only
	// push_closed()'s steps).  The rest: held_slow(), all of it.
	// (block_start holds the block of a hold numbered n, not its first,
	// and super_start its super block: evict_holds() drops only blocks
	// before base's.)
	const int64_t last = now_;
	int64_t now = last > ts ? last : ts; // (std::max's reference went through memory)
	now = now > unlock_ts ? now : unlock_ts;
	// push_closed<true>() below pushes on `recent` with no test for room.
	// It relies on an invariant that only the assert after the test
	// checks (debug builds; none in release): recent's last chunk is full
	// only when n is a multiple of Ring's chunk size (of its first
	// chunk's, while that one grows).  For the ring's
	// front is at base's place in a chunk: both start at 0 and move only
	// together (evict_holds(): drop_front(n) and base += n; nothing else
	// pops `recent` before finish()), so its next free place is n's.  A
	// chunk is whole blocks: a hold that does not start a block has room.
	// A change to how `recent` is popped or `base` moves must keep this.
	// (A test of full() in the condition below cost 0.7 to 0.9 % of
	// analyze mutex's instructions on the preload's traces: callgrind.)
	const uint64_t n = w.base + w.recent.size();
	static_assert(Ring<Done>::chunk() % kBlock == 0 && Ring<Done>::first_chunk() % kBlock == 0,
		      "a chunk is whole blocks");
	if (__builtin_expect(
		    now >= w.settle_at || w.open_n != 0 || n % kBlock == 0 || ts < w.block_start.back(), 0))
		return held_slow(l, acq, unlock_ts);
	assert(!w.recent.full()); // the invariant above
	const int64_t tid = acq.tid;
	const uint64_t caller = acq.caller;
	events_ += 2;
	const int64_t first = std::min(ts, unlock_ts);
	if (__builtin_expect(first < first_ts_, 0))
		first_ts_ = first;
	now_ = now;
	w.st.acquisitions++;
	l.site->acquisitions++;
	(*l.unlocks)++;
	push_closed<true>(w, tid, caller, ts, unlock_ts, now);
	if (__builtin_expect(w.recent.size() >= w.evict_at, 0))
		return held_settle(w);
}

// held() of a hold whose look-ups missed held_cache_.
void Model::held_miss(const Event &acq, int64_t unlock_ts)
{
	held_slow(held_look_up(acq), acq, unlock_ts);
}

void Model::held_settle(Work &w)
{
	settle(w);
	evict(w);
}

// held() in full, for any hold: its acquisition's and unlock's steps in
// one pass when they change nothing but the counts, else held_two().
void Model::held_slow(const LastHeld &l, const Event &acq, int64_t unlock_ts)
{
	Work &w = *l.w;
	const std::vector<Hold> &mine = *l.mine;
	// Before settle_at (arm(): no later than the first wait's end and
	// settling time, the lowest time when that end is the clock's lowest),
	// it blames none.
	const int64_t now = std::max(now_, acq.ts);
	bool blames = false;
	if (__builtin_expect(now >= w.settle_at, 0) && !w.unblamed.empty()) {
		const int64_t end = w.unblamed.front().end;
		blames = end + std::max(kSettleNs, w.hold_longest) <= now
				 ? end <= acq.ts
				 : end == std::numeric_limits<int64_t>::min();
	}
	if (blames || w.open_n != mine.size())
		return held_two(l, acq, unlock_ts);
	// The acquisition (on_event, on_acquire), and the unlock (on_event,
	// end_hold): the hold just taken is the last.  The two events' times
	// at once.
	events_ += 2;
	first_ts_ = std::min(first_ts_, std::min(acq.ts, unlock_ts));
	now_ = std::max(now_, std::max(acq.ts, unlock_ts));
	w.st.acquisitions++;
	Site &s = *l.site;
	s.caller = acq.caller;
	s.acquisitions++;
	(*l.unlocks)++;
	close_hold(w, acq.tid, Hold{acq.ts, acq.caller, true}, unlock_ts);
	settle(w);
	evict(w);
}

// What on_event() does with the acquisition (on_acquire() of an
// uncontended one: no wait, no stack) and then with its unlock, with
// held_cache_'s look-ups (the same lock, holds, site and unlock count).
void Model::held_two(const LastHeld &l, const Event &acq, int64_t unlock_ts)
{
	Work &w = *l.w;
	tick(acq.ts);
	take_hold(w, *l.site, *l.mine, acq, true);
	tick(unlock_ts);
	(*l.unlocks)++;
	release_hold(w, ThreadKey{acq.proc, acq.tid, acq.lock}, unlock_ts);
}

// held()'s look-ups for a hold of another thread, lock or site than the
// last one's (all made by the first event of each, none undone).
const Model::LastHeld &Model::held_look_up(const Event &acq)
{
	Work &w = work_of(acq.proc, acq.lock, acq.op);
	Work::RecentOpen &ro = w.open_entry(acq.tid);
	if (!ro.unlocks)
		ro.unlocks = &unlocks_of(acq.proc, acq.tid);
	LastHeld &l = held_cache_[held_place(acq)];
	Site &site = w.site_of(acq.caller);
	site.caller = acq.caller; // as on_acquire() sets it (held() does not)
	l = LastHeld{acq.proc, acq.lock, acq.caller, acq.tid, &w, ro.v, &site, ro.unlocks};
	return l;
}

// One event, in time order; none is kept.
void Model::on_event(const Event &e)
{
	tick(e.ts);
	if (e.op == Op::MutexCounts || e.op == Op::CountsDone) {
		on_counts(e);
	} else if (is_acquire(e.op)) {
		on_acquire(e);
	} else if (e.op == Op::MutexUnlock || e.op == Op::RwUnlock || e.op == Op::SemPost) {
		unlocks_of(e.proc, e.tid)++;
		if (!succeeded(e.ret))
			return;
		release_hold(work_of(e.proc, e.lock, e.op), ThreadKey{e.proc, e.tid, e.lock}, e.ts);
	} else if (e.op == Op::CondWait || e.op == Op::CondTimedwait) {
		on_cond_wait(e);
	} else {
		rep_.cond_signals++;
		cond_use_[LockKey{e.proc, e.cond}].signallers[e.tid]++;
		CondStats &cs = conds_[LockKey{e.proc, e.cond}];
		cs.proc = e.proc;
		cs.addr = e.cond;
		(e.op == Op::CondBroadcast ? cs.broadcasts : cs.signals)++;
	}
}

} // namespace model
} // namespace analyze
} // namespace strata
