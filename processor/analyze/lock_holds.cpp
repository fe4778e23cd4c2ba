// lock_holds.cpp - the lock model's closed holds (lock_model.h): a wait is
// blamed on the holds it overlapped once their ends are final, the holds
// no wait can need any more leave and are counted, and at the end each
// lock's final figures, the condition variables' locks and the timeline;
// the entry points analyze() and analyze_feed() (analyze_model.h).
#include "lock_model.h"

namespace strata {
namespace analyze {
namespace model {

inline void Model::count_hold(Work &w, const Span &h)
{
	const uint64_t hold = static_cast<uint64_t>(h.end - h.start);
	w.st.holds++;
	w.st.hold_total += hold;
	w.st.hold_max = std::max(w.st.hold_max, hold);
	keep(w.tl_holds, h);
}

// The earliest start of a hold of the lock whose end is not final yet
// (open, or ended by a handoff and its own release not seen).
int64_t Model::nonfinal_from(const Work &w)
{
	int64_t m = std::numeric_limits<int64_t>::max();
	if (!w.open_n && !w.early_n)
		return m;
	// The walks end with the last hold (open_n, early_n: how many).
	size_t left = w.open_n;
	for (auto it = w.open.begin(); left > 0 && it != w.open.end(); ++it) {
		for (const Hold &h : it->second)
			m = std::min(m, h.ts);
		left -= std::min(left, it->second.size());
	}
	left = w.early_n;
	for (auto it = w.closed_early.begin(); left > 0 && it != w.closed_early.end(); ++it) {
		for (uint64_t n : it->second)
			if (n >= w.base)
				m = std::min(m, w.recent[n - w.base].s.start);
		left -= std::min(left, it->second.size());
	}
	return m;
}

// Blockers: a contended wait's time is shared among the other threads'
// holds it overlapped, by overlap, and credited to where those holds were
// taken.  A hold closed before the wait started cannot overlap it, nor
// can one closed lag_longest or more after the wait's end (it started at
// or after that end); closed_at does not decrease along `recent`: scan
// back from the last hold closed before that to the first one closed
// after the wait started (a wait is blamed kSettleNs after its end, and
// the holds closed meanwhile would otherwise be scanned for nothing).
// Where blame()'s scan back starts: no hold after the last block that
// holds one started before the wait's end can overlap it, nor one closed
// at or after its end + lag_longest (closed_at does not decrease along
// `recent`).  That block is looked for from the last wait's, by steps
// that double (the places a search from the middle of `lows` and `recent`
// looked at were cache misses, most of a wait's cost; a search from the
// end took 20 steps, the waits blamed being kSettleNs old).
size_t Model::blame_upto(Work &w, const Span &wt)
{
	const int64_t past = wt.end > std::numeric_limits<int64_t>::max() - w.lag_longest
				     ? std::numeric_limits<int64_t>::max()
				     : wt.end + w.lag_longest;
	// Starts below wt.end before lo, none from hi (they increase along
	// `lows`): from the last answer, by steps that double, then by halves.
	const size_t size = w.lows.size();
	const size_t h = w.lows_hint > w.lows_dropped
				 ? static_cast<size_t>(std::min<uint64_t>(w.lows_hint - w.lows_dropped, size))
				 : 0;
	size_t lo = 0, hi = size;
	if (h > 0 && w.lows[h - 1].start >= wt.end) {
		hi = h - 1; // down from h - 1
		for (size_t step = 1; step <= hi; step *= 2) {
			if (w.lows[hi - step].start < wt.end) {
				lo = hi - step + 1;
				break;
			}
			hi -= step;
		}
	} else {
		lo = h; // up from h
		for (size_t step = 1; lo + step <= hi; step *= 2) {
			if (w.lows[lo + step - 1].start >= wt.end) {
				hi = lo + step - 1;
				break;
			}
			lo += step;
		}
	}
	while (lo < hi) {
		const size_t mid = lo + (hi - lo) / 2;
		if (w.lows[mid].start < wt.end)
			lo = mid + 1;
		else
			hi = mid;
	}
	w.lows_hint = w.lows_dropped + lo;
	const uint64_t bound = lo ? (w.lows[lo - 1].block + 1) * kBlock : 0;
	size_t upto =
		std::min<size_t>(w.recent.size(), bound > w.base ? static_cast<size_t>(bound - w.base) : 0);
	if (upto > 0 && w.recent[upto - 1].closed_at >= past)
		upto = closed_before(w, upto, past);
	return upto;
}

// How many of the first `upto` holds of `recent` closed before t (a
// prefix: closed_at does not decrease), found by halves.
size_t Model::closed_before(const Work &w, size_t upto, int64_t t)
{
	size_t first = 0;
	for (size_t len = upto; len > 0;) {
		const size_t half = len / 2;
		if (w.recent[first + half].closed_at < t) {
			first += half + 1;
			len -= half + 1;
		} else {
			len = half;
		}
	}
	return first;
}

// The share of a caller other than the last one's (blame()): a flat
// table of a few callers; past 16 callers, their places by caller.
std::pair<uint64_t, uint64_t> *Model::share_of(uint64_t caller)
{
	std::vector<std::pair<uint64_t, uint64_t>> &shares = shares_;
	size_t k = 0;
	if (shares.size() < 16) {
		while (k < shares.size() && shares[k].first != caller)
			k++;
	} else {
		if (share_index_.empty())
			for (size_t j = 0; j < shares.size(); j++)
				share_index_.emplace(shares[j].first, j);
		k = share_index_.emplace(caller, shares.size()).first->second;
	}
	if (k == shares.size())
		shares.emplace_back(caller, 0);
	return &shares[k];
}

void Model::blame(Work &w, const Span &wt)
{
	shares_.clear();
	if (!share_index_.empty())
		share_index_.clear();
	// The last hold's caller's share: a few callers, each mostly many
	// holds in a row.
	std::pair<uint64_t, uint64_t> *share = nullptr;
	// The wait's fields, once (the shares' stores could alias them).
	const int64_t start = wt.start, end = wt.end, tid = wt.tid;
	// Back from blame_upto(), a block at a time: one that started at or
	// after the wait's end is skipped whole (those closed before it
	// started would end the scan: the next one looked at ends it then);
	// the others' holds are looked at one by one.  The blocks skipped are
	// read along block_start's chunks; 64 of them (a super block) are
	// skipped at once from the first one looked at, and from the last of
	// a super block (one long hold makes lag_longest long, and every
	// later wait would step through that many blocks closed after it).
	constexpr uint64_t kPerSuper = kSuper / kBlock;
	const uint64_t b0 = w.base / kBlock; // block_start[0]'s
	bool first = true;
	for (size_t i = blame_upto(w, wt); i > 0;) {
		uint64_t b = (w.base + i - 1) / kBlock;
		for (;;) {
			if (first || b % kPerSuper == kPerSuper - 1) {
				first = false;
				if (w.super_start[b / kPerSuper - b0 / kPerSuper] >= end) {
					if (b / kPerSuper == b0 / kPerSuper)
						goto scanned;
					b = b / kPerSuper * kPerSuper - 1;
					continue;
				}
			}
			// b's and the blocks before it in its chunk and super block.
			size_t run = 0;
			const int64_t *p = w.block_start.run_back(static_cast<size_t>(b - b0), &run);
			run = std::min<size_t>(run, b % kPerSuper + 1);
			size_t k = 0;
			while (k < run && *(p - k) >= end)
				k++;
			if (k < run) {
				b -= k;
				break;
			}
			if (b - b0 < run)
				goto scanned; // none left
			b -= run;
		}
		i = std::min<size_t>(i, static_cast<size_t>((b + 1) * kBlock - w.base));
		const uint64_t first_n = b * kBlock;
		const size_t from = first_n > w.base ? static_cast<size_t>(first_n - w.base) : 0;
		while (i > from) { // back along the ring's chunks
			size_t run = 0;
			const Done *last = w.recent.run_back(i - 1, &run);
			const size_t stop = std::min(run, i - from);
			for (const Done *d = last, *e = last - stop; d != e; --d) {
				if (d->closed_at < start)
					goto scanned;
				if (d->s.start >= end || d->s.tid == tid) // most: started after it
					continue;
				const int64_t lo = std::max(d->s.start, start), hi = std::min(d->s.end, end);
				if (hi > lo) {
					if (__builtin_expect(!share || share->first != d->s.caller, 0))
						share = share_of(d->s.caller);
					share->second += static_cast<uint64_t>(hi - lo);
				}
			}
			i -= stop;
		}
	}
scanned:
	if (w.base > 0 && !w.recent.empty() && w.recent.front().closed_at >= wt.start)
		rep_.blockers_partial = true; // holds it overlapped may be gone
	credit_shares(w);
}

// blame()'s shares to the blocking holds' sites.
void Model::credit_shares(Work &w)
{
	for (auto &kv : shares_) {
		Site &b = w.blockers[kv.first];
		b.caller = kv.first;
		b.contended++;
		b.wait_total += kv.second;
		b.wait_max = std::max(b.wait_max, kv.second);
	}
}

// When settle_waits() may blame a wait next: at once past kUnblamedCap
// or for a wait ending at the clock's lowest value, else not before the
// first one's end and the settling time (the settling time can only grow
// meanwhile, with hold_longest: then it is called early and arms again).
void Model::arm(Work &w)
{
	int64_t at = std::numeric_limits<int64_t>::max();
	if (!w.unblamed.empty()) {
		const int64_t end = w.unblamed.front().end;
		if (w.unblamed.size() > kUnblamedCap || end == std::numeric_limits<int64_t>::min() ||
		    __builtin_add_overflow(end, std::max(kSettleNs, w.hold_longest), &at))
			at = std::numeric_limits<int64_t>::min();
	}
	w.settle_at = at;
}

// Blames the waits whose overlapping holds are all final (kSettleNs);
// past kUnblamedCap waiting, the oldest now (a read hold that never ends
// would keep them all).
void Model::settle_waits(Work &w)
{
	const int64_t settle = std::max(kSettleNs, w.hold_longest);
	int64_t from = std::numeric_limits<int64_t>::min();
	if (w.unblamed.front().end + settle <= now_)
		from = std::min(nonfinal_from(w), now_ - settle);
	while (!w.unblamed.empty() && (w.unblamed.front().end <= from || w.unblamed.size() > kUnblamedCap)) {
		if (w.unblamed.front().end > from)
			rep_.blockers_partial = true;
		blame(w, w.unblamed.front());
		w.unblamed.pop_front();
	}
	arm(w);
}

/*
 * The holds closed before the limit leave `recent` (closed_at does not
 * decrease along it: a prefix), and past the caps as many more as over()
 * asked, one at a time before: counted in their order, then dropped at
 * once with their blocks.
 */
void Model::evict_holds(Work &w)
{
	settle(w);
	int64_t horizon = std::max<int64_t>(kHorizonMinNs, 2 * static_cast<int64_t>(w.st.wait_max));
	int64_t limit = std::min(now_ - horizon, nonfinal_from(w));
	if (!w.unblamed.empty())
		limit = std::min(limit, w.unblamed.front().start);
	const size_t size = w.recent.size();
	// over() held before the n-th pop while n < over_n (both its terms
	// fall by one a pop).
	size_t over_n = size > kHoldsCap ? size - kHoldsCap : 0;
	if (recent_total_ > kHoldsTotalCap && size > kEvictBatch)
		over_n = std::max(over_n, std::min(recent_total_ - kHoldsTotalCap, size - kEvictBatch));
	// The holds closed before the limit; past the caps, over_n at least.
	size_t n = closed_before(w, size, limit);
	if (n < over_n) {
		n = over_n;
		rep_.blockers_partial = true;
	}
	// count_hold()'s sums in registers; the timeline's candidates only
	// those the timeline may keep (the others would only be dropped).
	uint64_t total = 0, longest = w.st.hold_max;
	int64_t keeps_from = w.tl_holds.keeps_from();
	for (size_t i = 0, run = 0; i < n; i += run) {
		const Done *d = w.recent.run(i, &run);
		run = std::min(run, n - i);
		for (size_t k = 0; k < run; k++) {
			const int64_t len = d[k].s.end - d[k].s.start;
			total += static_cast<uint64_t>(len);
			longest = std::max(longest, static_cast<uint64_t>(len));
			if (__builtin_expect(len >= keeps_from, 0)) {
				keep(w.tl_holds, d[k].s);
				keeps_from = w.tl_holds.keeps_from();
			}
		}
	}
	w.st.holds += n;
	w.st.hold_total += total;
	w.st.hold_max = longest;
	w.recent.drop_front(n);
	const uint64_t from = w.base;
	w.base += n;
	if (w.base / kBlock != from / kBlock) {
		w.block_start.drop_front(static_cast<size_t>(w.base / kBlock - from / kBlock));
		w.drop_lows(w.base / kBlock);
	}
	w.super_start.drop_front(static_cast<size_t>(w.base / kSuper - from / kSuper));
	recent_total_ -= n;
	w.evict_at = w.recent.size() + kEvictBatch;
}

void Model::shrink_timelines()
{
	while (tl_kept_ > kTimelineBudget && tl_cap_ > 64) {
		tl_cap_ /= 2;
		tl_kept_ = 0;
		for (auto &kv : locks_)
			tl_kept_ += kv.second.tl_waits.shrink(tl_cap_) + kv.second.tl_holds.shrink(tl_cap_);
		for (auto &kv : cond_use_)
			tl_kept_ += kv.second.tl.shrink(tl_cap_);
	}
}

namespace {

void sort_sites(std::vector<Site> &v)
{
	std::sort(v.begin(), v.end(), [](const Site &a, const Site &b) {
		return std::tie(a.wait_total, a.acquisitions, b.caller) >
		       std::tie(b.wait_total, b.acquisitions, a.caller);
	});
}

// A lock's final wait figures and its sites, most waited behind first.
// The mean and p99 are over the waits (contended acquisitions), not over
// every acquisition: most acquisitions of a busy lock do not wait, and
// their zeros would hide the waits (p99 0 ns).
void wait_and_sites(LockStats &st, const std::map<uint64_t, Site> &sites)
{
	st.wait_mean =
		st.contended ? static_cast<double>(st.wait_total) / static_cast<double>(st.contended) : 0.0;
	st.wait_p99 = st.waits.percentile(99.0);
	for (const auto &sv : sites)
		st.sites.push_back(sv.second);
	sort_sites(st.sites);
}

// Symbolize what the reports show: lock names and the top sites.
void symbolize(Report &rep, const Options &opt, const Symbolizer &sym)
{
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
}

} // namespace

/*
 * A condition variable that the same threads both wait on and signal (at
 * least two of them) is a lock built from a mutex and a condition
 * variable, handed from thread to thread: CPython's GIL (take_gil waits on
 * gil->cond while another thread holds it; drop_gil signals it), or a
 * baton.  Its waits are lock waits that cost time, not a worker idling for
 * work (a pool's workers wait, its producers signal: other threads).  It
 * is reported as a lock of kind "mutex+cond" at the condition variable's
 * address, and no longer as a condition variable.  Acquisitions: its
 * releases (the signals of those threads; drop_gil signals at every
 * release); a wait is a run of one thread's waits with no unlock between
 * (a timed wait retried).
 */
void Model::cond_locks()
{
	for (auto &kv : cond_use_) {
		CondUse &cu = kv.second;
		for (auto &r : cu.run)
			end_run(cu, r.second.first);
		cu.run.clear();
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
		cond_lock_keys_.insert(kv.first);
		LockStats &st = cu.st;
		st.proc = kv.first.proc;
		st.addr = kv.first.addr;
		st.kind = "mutex+cond";
		st.acquisitions = std::max<uint64_t>(releases, st.contended);
		wait_and_sites(st, cu.sites);
		rep_.locks.push_back(std::move(st));
	}
}

// Timeline: intervals of the top locks.  Over the bound, keep the longest
// ones (waits first: they are what the page is about), then restore time
// order.  Each lock kept its timeline_max longest waits and holds, a
// superset of what survives the bound.
void Model::timeline()
{
	for (size_t i = 0; i < rep_.locks.size() && i < opt_.timeline_locks; i++) {
		const LockKey key{rep_.locks[i].proc, rep_.locks[i].addr};
		auto add = [&](Longest &spans, bool wait) {
			for (const Span &sp : spans.spans(tl_cap_))
				rep_.timeline.push_back({sp.tid, key.proc, i, sp.start, sp.end, wait});
			rep_.timeline_truncated |= spans.dropped;
		};
		if (rep_.locks[i].kind == "mutex+cond") {
			add(cond_use_[key].tl, true);
		} else {
			add(locks_[key].tl_waits, true);
			add(locks_[key].tl_holds, false);
		}
	}
	if (rep_.timeline.size() > opt_.timeline_max) {
		// A total order: which equal ones stay is not left to the
		// order they came in.
		auto longer = [](const Interval &a, const Interval &b) {
			if (a.wait != b.wait || a.end - a.start != b.end - b.start)
				return std::make_tuple(a.wait, a.end - a.start) >
				       std::make_tuple(b.wait, b.end - b.start);
			return std::tie(a.start, a.lock_index, a.tid) <
			       std::tie(b.start, b.lock_index, b.tid);
		};
		std::nth_element(rep_.timeline.begin(),
				 rep_.timeline.begin() + static_cast<long>(opt_.timeline_max),
				 rep_.timeline.end(), longer);
		rep_.timeline.resize(opt_.timeline_max);
		rep_.timeline_truncated = true;
	}
	std::sort(rep_.timeline.begin(), rep_.timeline.end(), [](const Interval &a, const Interval &b) {
		return std::tie(a.start, a.end, a.lock_index, a.wait, a.tid) <
		       std::tie(b.start, b.end, b.lock_index, b.wait, b.tid);
	});
}

void Model::finish(const Symbolizer &sym)
{
	rep_.events = events_;
	rep_.first_ts = events_ ? first_ts_ : 0;
	rep_.last_ts = events_ ? now_ : 0;
	rep_.locks.reserve(rep_.locks.size() + locks_.size()); // no regrowth: a lock's stats are large
	for (auto &kv : locks_) {
		Work &w = kv.second;
		LockStats &st = w.st;
		// Open holds never end; the rest are final now.
		for (size_t i = 0; i < w.unblamed.size(); i++)
			blame(w, w.unblamed[i]);
		w.unblamed.clear();
		arm(w);
		for (size_t i = 0; i < w.recent.size(); i++)
			count_hold(w, w.recent[i].s);
		w.base += w.recent.size();
		w.recent.clear();
		w.block_start.clear();
		w.super_start.clear();
		w.lows.clear();
		wait_and_sites(st, w.sites);
		for (auto &kv2 : w.blockers)
			st.blockers.push_back(kv2.second);
		std::sort(st.blockers.begin(), st.blockers.end(), [](const Site &a, const Site &b) {
			return std::tie(a.wait_total, b.caller) > std::tie(b.wait_total, a.caller);
		});
		rep_.locks.push_back(std::move(st));
	}
	cond_locks();
	for (const auto &kv : counts_done_)
		if (!kv.second)
			rep_.counts_unfinished.push_back(kv.first);
	std::sort(rep_.locks.begin(), rep_.locks.end(), [](const LockStats &a, const LockStats &b) {
		return std::tie(a.wait_total, a.acquisitions, b.proc, b.addr) >
		       std::tie(b.wait_total, b.acquisitions, a.proc, a.addr);
	});
	for (auto &kv : conds_)
		if (!cond_lock_keys_.count(kv.first))
			rep_.conds.push_back(kv.second);
	std::sort(rep_.conds.begin(), rep_.conds.end(), [](const CondStats &a, const CondStats &b) {
		return std::tie(a.wait_total, a.waits, b.proc, b.addr) >
		       std::tie(b.wait_total, b.waits, a.proc, a.addr);
	});
	for (size_t i = 0; sym && i < rep_.conds.size() && i < opt_.top; i++)
		rep_.conds[i].name = sym(rep_.conds[i].proc, rep_.conds[i].addr, false);
	symbolize(rep_, opt_, sym);
	timeline();
}

} // namespace model

using model::Model;

Report analyze(const Input &in, const Options &opt, const Symbolizer &sym)
{
	return analyze_feed(
		[&in](EventSink &on) {
			for (const Event &e : in.events)
				on(e);
		},
		in, opt, sym);
}

// Events one at a time, in time order, none kept (see "Memory" above).
Report analyze_feed(const EventFeed &feed, const Input &meta, const Options &opt, const Symbolizer &sym)
{
	Report rep;
	Model m(rep, opt);
	feed(m);
	rep.procs = meta.procs;
	rep.discarded = meta.discarded;
	rep.other_events = meta.other_events;
	m.finish(sym);
	return rep;
}

} // namespace analyze
} // namespace strata
