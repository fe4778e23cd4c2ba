/*
 * lock_model.h - the lock model behind analyze_model.h's analyze(): each
 * lock's state as the events come (Work: its open holds, the holds closed
 * recently that a wait may blame, its waits not yet blamed), and the Model
 * that feeds it.  Its per-event path is analyze_model.cpp; the closed
 * holds (the blame of waits, their eviction and counting, the report's
 * figures made at the end) lock_holds.cpp.  Internal to processor/analyze.
 */
#ifndef STRATA_ANALYZE_LOCK_MODEL_H
#define STRATA_ANALYZE_LOCK_MODEL_H

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cmath>
#include <deque>
#include <limits>
#include <memory>
#include <set>
#include <tuple>
#include <unordered_map>

#include "analyze_model.h"

namespace strata {
namespace analyze {
namespace model {

inline bool is_acquire(Op op)
{
	switch (op) {
	case Op::MutexLock:
	case Op::MutexTimedlock:
	case Op::MutexTrylock:
	case Op::RwRdlock:
	case Op::RwWrlock:
	case Op::RwTryrdlock:
	case Op::RwTrywrlock:
	case Op::SemWait:
	case Op::SemTimedwait:
	case Op::SemTrywait:
		return true;
	default:
		return false;
	}
}

inline bool is_sem(Op op)
{
	return op == Op::SemWait || op == Op::SemTimedwait || op == Op::SemTrywait || op == Op::SemPost;
}

inline bool is_rwlock(Op op)
{
	return op == Op::RwRdlock || op == Op::RwWrlock || op == Op::RwTryrdlock || op == Op::RwTrywrlock ||
	       op == Op::RwUnlock;
}

// EOWNERDEAD: a robust mutex acquired from a dead owner is still acquired.
inline bool succeeded(int32_t ret)
{
	return ret == 0 || ret == EOWNERDEAD;
}

struct LockKey {
	uint32_t proc;
	uint64_t addr;
	bool operator<(const LockKey &o) const { return std::tie(proc, addr) < std::tie(o.proc, o.addr); }
};

struct ThreadKey {
	uint32_t proc;
	int64_t tid;
	uint64_t lock;
};

struct Hold {
	int64_t ts;
	uint64_t caller;
	bool exclusive; // mutex or write lock
};

// A completed hold, a contended wait, or a run of condition waits.
struct Span {
	int64_t start, end;
	int64_t tid;
	uint64_t caller; // the acquisition's site
};

// The longest spans seen, at most `cap` of them: the timeline's
// candidates.  `dropped`: some were not kept.  Ranked by length, then
// earlier start, thread and site (a total order: which of equal-length
// spans stay does not depend on the order they came in).  Once `cap` were
// seen, a span ranked above the floor (the last kept at the last cut) is
// appended, and past half as many again the candidates are cut back to
// the `cap` best: a heap of 20,000 spans replaced its least one per
// longer span, two sifts through memory that had left the cache (6 % of
// `analyze mutex` on a contended trace).
class Longest {
public:
	// True when it kept one more (below `cap`).  Inlined up to the
	// common answer once full: not above the floor.
	bool add(const Span &s, size_t cap)
	{
		if (!full_) {
			if (v_.size() < cap) {
				v_.push_back(s);
				return true;
			}
			full_ = true;
			if (cap > 0)
				cut(cap, true);
		}
		dropped = true;
		const int64_t l = len(s);
		if (cap == 0 || l < floor_len_ || (l == floor_len_ && !above(s, floor_)))
			return false;
		v_.push_back(s);
		if (v_.size() >= cap + cap / 2)
			cut(cap, false);
		return false;
	}
	// Keeps the `cap` best; how many it keeps.
	size_t shrink(size_t cap)
	{
		if (v_.size() > cap) {
			dropped = full_ = true;
			if (cap > 0)
				cut(cap, false);
			else
				v_.clear();
		}
		std::vector<Span>(v_).swap(v_);
		return v_.size();
	}
	// The `cap` best (cap: the last add()'s or shrink()'s), in no order.
	const std::vector<Span> &spans(size_t cap)
	{
		if (v_.size() > cap)
			cut(cap, false);
		return v_;
	}
	// add() of a span shorter than this only sets `dropped` (once full:
	// below the floor).
	int64_t keeps_from() const { return full_ ? floor_len_ : std::numeric_limits<int64_t>::min(); }
	bool dropped = false;

private:
	static int64_t len(const Span &s) { return s.end - s.start; }
	__attribute__((always_inline)) static bool above(const Span &a, const Span &b)
	{
		const int64_t la = len(a), lb = len(b);
		if (la != lb)
			return la > lb;
		return std::tie(a.start, a.tid, a.caller) < std::tie(b.start, b.tid, b.caller);
	}
	// The `cap` best first and the rest dropped (or, all: only the floor
	// found); the floor is the least of them.
	__attribute__((noinline)) void cut(size_t cap, bool all)
	{
		if (!all) {
			// A lambda, not the function: its own instantiation, the
			// comparison inlined.
			std::nth_element(v_.begin(), v_.begin() + static_cast<long>(cap - 1), v_.end(),
					 [](const Span &a, const Span &b) { return above(a, b); });
			v_.resize(cap);
			floor_ = v_.back();
			floor_len_ = len(floor_);
		} else {
			floor_ = *std::min_element(v_.begin(), v_.end(),
						   [](const Span &a, const Span &b) { return above(b, a); });
			floor_len_ = len(floor_);
		}
	}
	std::vector<Span> v_;
	bool full_ = false;
	Span floor_{0, 0, 0, 0};
	int64_t floor_len_ = 0; // len(floor_)
};

/*
 * Memory.  Per lock, the completed holds are kept only while a wait can
 * still need them for its blockers: those closed within the horizon
 * (twice the longest wait seen on the lock, at least kHorizonMinNs) and
 * since the start of the oldest wait not yet blamed, at most kHoldsCap
 * (and past kHoldsTotalCap over all locks, the lock being added to sheds
 * its oldest).
 * Past the cap the oldest go and report.blockers_partial says so.  A
 * hold leaves `recent` in its closing order (closed_at: the latest event
 * time when it closed, so non-decreasing along the deque); its statistics
 * are counted then, when its end can no longer move.
 */
constexpr int64_t kHorizonMinNs = 100 * 1000 * 1000;
constexpr size_t kHoldsCap = size_t(1) << 19;      // 20 MiB of holds per lock
constexpr size_t kHoldsTotalCap = size_t(1) << 22; // 160 MiB over all locks
// The timeline's candidates over all locks: past this many, every lock
// keeps half as many (the timeline then says it is truncated).
constexpr size_t kTimelineBudget = size_t(1) << 21;
constexpr size_t kEvictBatch = 4096;
/*
 * A wait is blamed once every hold that can overlap it is final.  Most
 * holds close in time order, but a compact record (pthread:mutex_held)
 * arrives at its release with its acquisition hold_ns back, and its event
 * may be stamped after the acquisition that waited behind it: a wait waits
 * kSettleNs, or the longest hold of the lock so far, before it is blamed.
 */
constexpr int64_t kSettleNs = 10 * 1000 * 1000;
constexpr size_t kUnblamedCap = size_t(1) << 16;

struct Done {
	Span s;
	int64_t closed_at;
};

// A FIFO indexed from its front, in chunks of 1024: what std::deque gave
// `recent` and `block_start`, without its chunk per 12 holds allocated and
// freed as they pass, nor its division per index (blame() indexes along
// thousands of holds per wait).  Memory: the elements held, rounded up to
// whole chunks, and one spare chunk.  A ring's first chunk starts at
// kFirst elements and doubles in place up to a whole one before a second
// is added: a trace of 50,000 locks with a few holds each (a program that
// churns them) holds 2.3 KB a lock, not 72 KB of address space and its
// first pages.  push_back() and back() go through the next free place of
// the last chunk (tail_), kept beside the table: a close of a hold pushes
// on three rings.
template <class T> class Ring {
public:
	size_t size() const { return n_; }
	bool empty() const { return n_ == 0; }
	T &operator[](size_t i) { return at(head_ + i); }
	const T &operator[](size_t i) const
	{
		const size_t j = head_ + i;
		return chunks_[c0_ + j / kChunk][j % kChunk];
	}
	T &front() { return at(head_); }
	const T &front() const { return (*this)[0]; }
	T &back() { return tail_[-1]; }                  // not empty: the last push is just before tail_
	bool full() const { return tail_ == tail_end_; } // push_back() would add a chunk
	static constexpr size_t chunk() { return kChunk; }
	static constexpr size_t first_chunk() { return kFirst; }
	void push_back_unchecked(const T &x) // not full(): the caller knows (held(): see there)
	{
		*tail_++ = x;
		n_++;
	}
	void push_back(const T &x)
	{
		if (__builtin_expect(tail_ == tail_end_, 0))
			add_chunk();
		*tail_++ = x;
		n_++;
	}
	void pop_back() // a last chunk left empty goes spare
	{
		n_--;
		if (--tail_ == chunks_.back().get() && chunks_.size() - c0_ > 1) {
			spare_ = std::move(chunks_.back());
			chunks_.pop_back();
			tail_ = tail_end_ = chunks_.back().get() + kChunk;
		}
	}
	void pop_front()
	{
		n_--;
		if (++head_ == kChunk) {
			spare_ = std::move(chunks_[c0_++]);
			head_ = 0;
			if (c0_ >= 64 && 2 * c0_ >= chunks_.size()) {
				chunks_.erase(chunks_.begin(), chunks_.begin() + static_cast<ptrdiff_t>(c0_));
				c0_ = 0;
			}
		}
	}
	// The first n elements leave at once (as n pop_front()).
	void drop_front(size_t n)
	{
		n_ -= n;
		for (head_ += n; head_ >= kChunk; head_ -= kChunk) {
			spare_ = std::move(chunks_[c0_++]);
			if (c0_ >= 64 && 2 * c0_ >= chunks_.size()) {
				chunks_.erase(chunks_.begin(), chunks_.begin() + static_cast<ptrdiff_t>(c0_));
				c0_ = 0;
			}
		}
	}
	// Element i and how many follow it in the same chunk (*run, i
	// included): a walk along the ring without a division per element.
	const T *run(size_t i, size_t *run) const
	{
		const size_t j = head_ + i;
		*run = std::min(kChunk - j % kChunk, n_ - i);
		return &chunks_[c0_ + j / kChunk][j % kChunk];
	}
	// Element i and how many precede it in the same chunk (*run, i
	// included): a walk back along the ring.
	const T *run_back(size_t i, size_t *run) const
	{
		const size_t j = head_ + i;
		*run = std::min(j % kChunk + 1, i + 1);
		return &chunks_[c0_ + j / kChunk][j % kChunk];
	}
	void clear()
	{
		chunks_.clear();
		c0_ = head_ = n_ = cap_ = 0;
		tail_ = tail_end_ = nullptr;
	}

private:
	static constexpr size_t kChunk = 1024;
	static constexpr size_t kFirst = 32; // divides kChunk: each size is full at a multiple of it
	// The chunks in use are chunks_[c0_, end): those popped are dropped
	// from the table once they are half of it.
	std::vector<std::unique_ptr<T[]>> chunks_;
	size_t c0_ = 0;
	std::unique_ptr<T[]> spare_;
	size_t head_ = 0, n_ = 0; // head_: the front's place in chunks_[c0_]
	// The next place to push, in the last chunk, and that chunk's end
	// (equal when it is full, or when the last chunk went spare: the
	// ring emptied at a chunk's end).
	T *tail_ = nullptr, *tail_end_ = nullptr;
	// The last chunk's size: kChunk, but for a first chunk still growing
	// (then it is the only one, c0_ == 0: nothing was popped from it, for
	// head_ never reaches kChunk in it); 0 before the first push.
	size_t cap_ = 0;
	T &at(size_t j) { return chunks_[c0_ + j / kChunk][j % kChunk]; }
	__attribute__((noinline)) void add_chunk()
	{
		if (cap_ != 0 && cap_ < kChunk) { // the first chunk, twice the size, its places kept
			std::unique_ptr<T[]> bigger(new T[2 * cap_]);
			const size_t used = cap_;
			std::copy(chunks_.back().get(), tail_, bigger.get());
			chunks_.back() = std::move(bigger);
			cap_ *= 2;
			tail_ = chunks_.back().get() + used;
			tail_end_ = chunks_.back().get() + cap_;
			return;
		}
		const bool first = chunks_.empty() && !spare_;
		cap_ = first ? kFirst : kChunk;
		chunks_.push_back(spare_ ? std::move(spare_)
					 : std::unique_ptr<T[]>(new T[cap_])); // not zeroed
		tail_ = chunks_.back().get();
		tail_end_ = tail_ + cap_;
	}
};
constexpr uint64_t kBlock = 32;
constexpr uint64_t kSuper = kBlock * 64; // blocks of blocks (super_start)

struct Work {
	LockStats st;
	std::map<uint64_t, Site> sites;
	// sites[caller] of recent callers (std::map's nodes do not move): a
	// lock taken in turns at a few sites (malloc and free) missed a cache
	// of the last one at every other event.  Two places per cache_place()
	// pair (two callers of a lock often fall in one): a new caller goes
	// first, the first one's moves second.
	struct RecentSite {
		uint64_t caller = 0;
		Site *site = nullptr;
	} recent_sites[16];
	Site &site_of(uint64_t caller)
	{
		RecentSite *r = &recent_sites[(cache_place(caller, 0) >> 2) & ~size_t(1)];
		if (__builtin_expect(r[0].site && r[0].caller == caller, 1))
			return *r[0].site;
		if (r[1].site && r[1].caller == caller)
			return *r[1].site;
		r[1] = r[0];
		r[0] = RecentSite{caller, &sites[caller]};
		return *r[0].site;
	}
	std::map<int64_t, std::vector<Hold>> open; // per thread, LIFO
	size_t open_n = 0;                         // holds in `open`, over its threads
	// open[tid] of the last threads, most recent first (their events
	// interleave; std::map's nodes do not move, and none is erased).
	// With each, the thread's unlock count (Model::unlocks_of(), null
	// until the model asks for it).
	struct RecentOpen {
		int64_t tid = 0;
		std::vector<Hold> *v = nullptr;
		uint64_t *unlocks = nullptr;
	} recent_open[4];
	std::vector<Hold> &open_of(int64_t tid) { return *open_entry(tid).v; }
	RecentOpen &open_entry(int64_t tid)
	{
		if (__builtin_expect(recent_open[0].v && recent_open[0].tid == tid, 1))
			return recent_open[0];
		return open_miss(tid);
	}
	__attribute__((noinline)) RecentOpen &open_miss(int64_t tid)
	{
		if (recent_open[1].v && recent_open[1].tid == tid) { // two threads in turns
			std::swap(recent_open[0], recent_open[1]);
			return recent_open[0];
		}
		size_t i = 2;
		while (i < 4 && !(recent_open[i].v && recent_open[i].tid == tid))
			i++;
		const RecentOpen hit = i < 4 ? recent_open[i] : RecentOpen{tid, &open[tid], nullptr};
		std::move_backward(recent_open, recent_open + (i < 4 ? i : 3),
				   recent_open + (i < 4 ? i + 1 : 4));
		recent_open[0] = hit;
		return recent_open[0];
	}
	// Per thread: the numbers (base + index in `recent`) of holds ended by
	// a handoff, whose unlock (or cond wait) event has not come yet; LIFO
	// like `open`.
	std::map<int64_t, std::vector<uint64_t>> closed_early;
	size_t early_n = 0; // numbers in closed_early, over its threads
	Ring<Done> recent;
	uint64_t base = 0; // number of recent.front()
	// The earliest start of the holds numbered [kBlock * k, kBlock * (k + 1)),
	// k from base / kBlock on (a lower bound once the block's first holds
	// have left `recent`): blame() skips a block that started after a wait.
	Ring<int64_t> block_start;
	// The same per kSuper holds: blame() skips 64 blocks at once (one
	// long hold makes lag_longest long, and every later wait would step
	// through that many blocks closed after it).
	Ring<int64_t> super_start;
	// The blocks whose earliest start is below every later block's (their
	// numbers and starts both increasing): the last block with a hold
	// that started before a time t is the last of them below t, which
	// bounds blame()'s scan (lag_longest is one hold's, often far longer
	// than those closed after a wait that started before its end: a
	// mutex has one such hold at a time).
	struct BlockLow {
		uint64_t block;
		int64_t start;
	};
	Ring<BlockLow> lows;
	void low(uint64_t block, int64_t start) // block is the last one; start its new earliest
	{
		if (!lows.empty() && lows.back().block == block)
			lows.pop_back();
		while (!lows.empty() && lows.back().start >= start)
			lows.pop_back();
		lows.push_back({block, start});
	}
	void drop_lows(uint64_t below) // the blocks before `below` left
	{
		while (!lows.empty() && lows.front().block < below) {
			lows.pop_front();
			lows_dropped++;
		}
	}
	// Entries that left `lows` from its front, and blame_upto()'s last
	// answer (counted from the first entry ever): the next wait blamed
	// ends near the last one, and its search starts there.
	uint64_t lows_dropped = 0, lows_hint = 0;
	size_t evict_at = kEvictBatch;
	Ring<Span> unblamed; // contended waits, by end (a Ring: nothing allocated for a lock without one)
	// Before this time (now_) settle_waits() blames none of them (arm()).
	int64_t settle_at = std::numeric_limits<int64_t>::max();
	int64_t hold_longest = 0;          // of the holds closed so far
	int64_t lag_longest = 0;           // of closed_at - start, over the holds closed so far
	std::map<uint64_t, Site> blockers; // by caller of the blocking holds
	Longest tl_waits, tl_holds;
};

// A condition variable's use (see cond_locks in finish()): the threads
// that waited and those that signalled; per thread its current run of
// waits (a run: waits with no unlock of that thread between: the mutex
// stays held across a timed wait's retries) and its unlock count then.
struct CondUse {
	std::map<int64_t, uint64_t> waiters, signallers; // tid -> count
	std::map<int64_t, std::pair<Span, uint64_t>> run;
	LockStats st; // its runs, as lock waits
	std::map<uint64_t, Site> sites;
	Longest tl;
};

// The place of a compact hold's key in Model::held_cache_, with one
// multiplication (held() hashes every compact record): the thread and
// process moved above a lock's and a site's low bits, which differ the
// most.
constexpr size_t held_place_of(uint64_t lock, uint64_t caller, int64_t tid, uint32_t proc)
{
	return static_cast<size_t>(
		((lock ^ caller ^ (static_cast<uint64_t>(tid) << 24) ^ (static_cast<uint64_t>(proc) << 48)) *
		 0x9e3779b97f4a7c15ULL) >>
		58);
}
static_assert(held_place_of(0, 0, 0, 0) == 0 && held_place_of(1, 0, 0, 0) != 0, "held_cache_'s unused keys");

class Model final : public EventSink {
public:
	Model(Report &rep, const Options &opt) : rep_(rep), opt_(opt), tl_cap_(opt.timeline_max)
	{
		// An unused place's key is not of that place (LastHeld::of() then
		// needs no test of w): all zeros is place 0's, lock 1 another's.
		held_cache_[0].lock = 1;
	}
	void event(const Event &e) override { on_event(e); }
	void held(const Event &acq, int64_t unlock_ts) override;
	void on_event(const Event &e);
	void finish(const Symbolizer &sym);

private:
	// The lock's state: the cache's answer inline, else work_miss().
	Work &work_of(uint32_t proc, uint64_t addr, Op op)
	{
		const RecentWork &r = recent_work_[cache_place(proc, addr)];
		if (__builtin_expect(r.w && r.key.proc == proc && r.key.addr == addr, 1))
			return *r.w;
		return work_miss(proc, addr, op);
	}
	Work &work_miss(uint32_t proc, uint64_t addr, Op op);
	inline __attribute__((always_inline)) uint64_t close_hold(Work &w, int64_t tid, const Hold &h,
								  int64_t at);
	template <bool kRoom>
	inline __attribute__((always_inline)) void push_closed(Work &w, int64_t tid, uint64_t caller,
							       int64_t start, int64_t at, int64_t now);
	// Inlined into its two callers (lock_holds.cpp), as it was when the
	// model was one file.
	inline __attribute__((always_inline)) void count_hold(Work &w, const Span &h);
	void handoff(Work &w, int64_t tid, bool exclusive, int64_t at);
	bool end_hold(Work &w, const ThreadKey &tk, int64_t at);
	static int64_t nonfinal_from(const Work &w);
	void blame(Work &w, const Span &wt);
	void credit_shares(Work &w);
	static size_t blame_upto(Work &w, const Span &wt);
	static size_t closed_before(const Work &w, size_t upto, int64_t t);
	__attribute__((noinline)) std::pair<uint64_t, uint64_t> *share_of(uint64_t caller);
	void settle(Work &w)
	{
		if (now_ >= w.settle_at)
			settle_waits(w);
	}
	static void arm(Work &w);
	void settle_waits(Work &w);
	void evict(Work &w)
	{
		if (w.recent.size() >= w.evict_at)
			evict_holds(w);
	}
	void evict_holds(Work &w);
	void on_acquire(const Event &e);
	// One event's clock: its count, the earliest and the latest time.
	void tick(int64_t ts)
	{
		events_++;
		first_ts_ = std::min(first_ts_, ts);
		now_ = std::max(now_, ts);
	}
	inline __attribute__((always_inline)) void take_hold(Work &w, Site &s, std::vector<Hold> &mine,
							     const Event &e, bool excl);
	inline __attribute__((always_inline)) void open_hold(Work &w, std::vector<Hold> &mine, int64_t tid,
							     const Hold &h);
	inline __attribute__((always_inline)) void release_hold(Work &w, const ThreadKey &tk, int64_t at);
	void on_cond_wait(const Event &e);
	void on_counts(const Event &e);
	void end_run(CondUse &cu, const Span &run);
	void cond_locks();
	void timeline();
	std::vector<std::pair<uint64_t, uint64_t>> shares_; // blame()'s, kept for its buffer
	std::unordered_map<uint64_t, size_t> share_index_;  // into shares_, past 16 callers
	void keep(Longest &l, const Span &s)
	{
		if (l.add(s, tl_cap_) && ++tl_kept_ > kTimelineBudget)
			shrink_timelines();
	}
	void shrink_timelines();

	Report &rep_;
	const Options &opt_;
	// The events so far, the earliest and the latest time (Report's
	// events, first_ts and last_ts, set by finish()).
	uint64_t events_ = 0;
	// Before the first event, the values that any time replaces (so
	// held() and on_event() take no branch for the first one).
	int64_t first_ts_ = std::numeric_limits<int64_t>::max();
	int64_t now_ = std::numeric_limits<int64_t>::min();
	size_t recent_total_ = 0; // holds in every lock's `recent`
	size_t tl_cap_;           // timeline candidates kept per lock and kind
	size_t tl_kept_ = 0;      // over all locks
	std::map<LockKey, Work> locks_;
	// work_of()'s answers by key (cache_place(); std::map's nodes do not
	// move, and none is erased).
	struct RecentWork {
		LockKey key{0, 0};
		Work *w = nullptr;
	} recent_work_[kCachePlaces];
	std::map<LockKey, CondStats> conds_;
	std::map<LockKey, CondUse> cond_use_;
	std::map<std::pair<uint32_t, int64_t>, uint64_t> unlocks_of_;
	// unlocks_of_'s entries by key (as recent_work_).
	struct RecentUnlocks {
		std::pair<uint32_t, int64_t> key{0, 0};
		uint64_t *n = nullptr;
	} recent_unlocks_[kCachePlaces];
	uint64_t &unlocks_of(uint32_t proc, int64_t tid)
	{
		const std::pair<uint32_t, int64_t> key{proc, tid};
		RecentUnlocks &r = recent_unlocks_[cache_place(proc, static_cast<uint64_t>(tid))];
		if (!r.n || r.key != key)
			r = RecentUnlocks{key, &unlocks_of_[key]};
		return *r.n;
	}
	// held()'s look-ups of compact holds by key (cache_place() of the
	// lock and site, the thread and process: on a contended lock the
	// threads' records interleave, and a list of the last two keys missed
	// at most events): the lock, the thread's holds of it, the site and
	// the thread's unlock count (map nodes: they do not move, and none is
	// erased).
	struct LastHeld {
		uint32_t proc = 0;
		uint64_t lock = 0, caller = 0;
		int64_t tid = 0;
		Work *w = nullptr;
		std::vector<Hold> *mine = nullptr;
		Site *site = nullptr;
		uint64_t *unlocks = nullptr;
		bool of(const Event &e) const
		{
			return lock == e.lock && tid == e.tid && caller == e.caller && proc == e.proc;
		}
	} held_cache_[kCachePlaces];
	static size_t held_place(const Event &e) { return held_place_of(e.lock, e.caller, e.tid, e.proc); }
	__attribute__((noinline)) const LastHeld &held_look_up(const Event &acq);
	__attribute__((noinline, cold)) void held_miss(const Event &acq, int64_t unlock_ts);
	__attribute__((noinline)) void held_slow(const LastHeld &l, const Event &acq, int64_t unlock_ts);
	__attribute__((noinline)) void held_settle(Work &w);
	void held_two(const LastHeld &l, const Event &acq, int64_t unlock_ts);
	std::set<LockKey> cond_lock_keys_;
	std::map<uint32_t, bool> counts_done_; // per process with counts: its final flush seen since
};

} // namespace model
} // namespace analyze
} // namespace strata
#endif
