// analyze_model.cpp - see analyze_model.h for the definitions used here.
#include "analyze_model.h"

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

namespace strata {
namespace analyze {

bool op_from_name(const std::string &name, Op *op)
{
	static const std::map<std::string, Op> names = {
		{"mutex_lock", Op::MutexLock},
		{"mutex_timedlock", Op::MutexTimedlock},
		{"mutex_trylock", Op::MutexTrylock},
		{"mutex_unlock", Op::MutexUnlock},
		{"rwlock_rdlock", Op::RwRdlock},
		{"rwlock_wrlock", Op::RwWrlock},
		{"rwlock_tryrdlock", Op::RwTryrdlock},
		{"rwlock_trywrlock", Op::RwTrywrlock},
		{"rwlock_unlock", Op::RwUnlock},
		{"cond_wait", Op::CondWait},
		{"cond_timedwait", Op::CondTimedwait},
		{"cond_signal", Op::CondSignal},
		{"cond_broadcast", Op::CondBroadcast},
		{"sem_wait", Op::SemWait},
		{"sem_timedwait", Op::SemTimedwait},
		{"sem_trywait", Op::SemTrywait},
		{"sem_post", Op::SemPost},
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

// WaitDist's histogram: values below 256 exactly, then 128 buckets per
// power of two.
constexpr size_t kFine = 256 + 56 * 128;

size_t fine_index(uint64_t v)
{
	if (v < 256)
		return static_cast<size_t>(v);
	const int e = 63 - __builtin_clzll(v);
	return 256 + static_cast<size_t>(e - 8) * 128 + static_cast<size_t>((v >> (e - 7)) - 128);
}

uint64_t fine_upper(size_t i)
{
	if (i < 256)
		return i;
	const int e = static_cast<int>((i - 256) / 128) + 8;
	const uint64_t lo = (128 + (i - 256) % 128) << (e - 7);
	return lo + ((uint64_t(1) << (e - 7)) - 1);
}

} // namespace

void WaitDist::add(uint64_t v)
{
	n_++;
	max_ = std::max(max_, v);
	// The bucket: the bit length of the microseconds, at most the last.
	const uint64_t us = v / 1000;
	const int k = us ? std::min(64 - __builtin_clzll(us), kUsBuckets - 1) : 0;
	us_[k]++;
	if (!fine_.empty()) {
		fine_[fine_index(v)]++;
		return;
	}
	exact_.push_back(v);
	if (exact_.size() <= kExact)
		return;
	fine_.assign(kFine, 0);
	for (uint64_t x : exact_)
		fine_[fine_index(x)]++;
	std::vector<uint64_t>().swap(exact_);
}

uint64_t WaitDist::percentile(double p) const
{
	if (fine_.empty())
		return analyze::percentile(exact_, p);
	uint64_t rank = static_cast<uint64_t>(std::ceil(p / 100.0 * static_cast<double>(n_)));
	rank = std::min(std::max<uint64_t>(rank, 1), n_);
	uint64_t seen = 0;
	for (size_t i = 0; i < kFine; i++) {
		seen += fine_[i];
		if (seen >= rank)
			return std::min(fine_upper(i), max_);
	}
	return max_;
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
	case Op::SemWait:
	case Op::SemTimedwait:
	case Op::SemTrywait:
		return true;
	default:
		return false;
	}
}

bool is_sem(Op op)
{
	return op == Op::SemWait || op == Op::SemTimedwait || op == Op::SemTrywait || op == Op::SemPost;
}

bool is_rwlock(Op op)
{
	return op == Op::RwRdlock || op == Op::RwWrlock || op == Op::RwTryrdlock || op == Op::RwTrywrlock ||
	       op == Op::RwUnlock;
}

// EOWNERDEAD: a robust mutex acquired from a dead owner is still acquired.
bool succeeded(int32_t ret)
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
	static bool above(const Span &a, const Span &b)
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
			std::nth_element(v_.begin(), v_.begin() + static_cast<long>(cap - 1), v_.end(),
					 above);
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
// whole chunks, and one spare chunk.  push_back() and back() go through
// the next free place of the last chunk (tail_), kept beside the table:
// a close of a hold pushes on three rings.
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
		c0_ = head_ = n_ = 0;
		tail_ = tail_end_ = nullptr;
	}

private:
	static constexpr size_t kChunk = 1024;
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
	T &at(size_t j) { return chunks_[c0_ + j / kChunk][j % kChunk]; }
	__attribute__((noinline)) void add_chunk()
	{
		chunks_.push_back(spare_ ? std::move(spare_)
					 : std::unique_ptr<T[]>(new T[kChunk])); // not zeroed
		tail_ = chunks_.back().get();
		tail_end_ = tail_ + kChunk;
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
	std::deque<Span> unblamed; // contended waits, by end
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
	void count_hold(Work &w, const Span &h);
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

void Model::count_hold(Work &w, const Span &h)
{
	const uint64_t hold = static_cast<uint64_t>(h.end - h.start);
	w.st.holds++;
	w.st.hold_total += hold;
	w.st.hold_max = std::max(w.st.hold_max, hold);
	keep(w.tl_holds, h);
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
	// only when n is a multiple of Ring's chunk size.  For the ring's
	// front is at base's place in a chunk: both start at 0 and move only
	// together (evict_holds(): drop_front(n) and base += n; nothing else
	// pops `recent` before finish()), so its next free place is n's.  A
	// chunk is whole blocks: a hold that does not start a block has room.
	// A change to how `recent` is popped or `base` moves must keep this.
	// (A test of full() in the condition below cost 0.7 to 0.9 % of
	// analyze mutex's instructions on the preload's traces: callgrind.)
	const uint64_t n = w.base + w.recent.size();
	static_assert(Ring<Done>::chunk() % kBlock == 0, "a chunk is whole blocks");
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
	for (auto &kv : locks_) {
		Work &w = kv.second;
		LockStats &st = w.st;
		// Open holds never end; the rest are final now.
		for (const Span &wt : w.unblamed)
			blame(w, wt);
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

} // namespace

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
