/*
 * analyze_model.h - `strata analyze mutex`: the lock-contention model.
 *
 * Input: the `pthread` provider's events (preload/pthread_tp.h) decoded from
 * a trace (analyze_reader.cpp), in time order.  Output: one row per lock
 * (per process and address) with acquisitions, contention, wait and hold
 * statistics, top call sites, and the per-thread wait/hold intervals the
 * HTML report draws.  Pure computation: no I/O, so tests feed it events
 * directly.
 *
 * Definitions (docs/pthread.md):
 *   acquisition  a successful mutex_lock/_timedlock/_trylock, rwlock
 *                rdlock/wrlock/tryrdlock/trywrlock (ret 0, or EOWNERDEAD) or
 *                sem_wait/_timedwait/_trywait (a semaphore as a lock:
 *                kind "semaphore", sem_post its unlock);
 *                a condvar wait's re-acquisition is not one.
 *   contended    the call found the lock taken and blocked (field
 *                `contended`, set by the wrapper's try-first).
 *   wait         `wait_ns` of a contended acquisition; the mean, p99
 *                (nearest rank) and max are over the waits, not over all
 *                acquisitions (whose zeros would hide them).
 *   blocker      the hold a contended acquisition waited behind (see
 *                LockStats::blockers)
 *   hold         from an acquisition's timestamp to the same thread's next
 *                unlock of that lock (LIFO per thread and lock, so recursive
 *                mutexes and read locks pair correctly); a cond wait ends the
 *                hold wait_ns before its event and starts a new one at it.
 */
#ifndef STRATA_CLI_ANALYZE_MODEL_H
#define STRATA_CLI_ANALYZE_MODEL_H

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace strata {
namespace analyze {

enum class Op {
	MutexLock,
	MutexTimedlock,
	MutexTrylock,
	MutexUnlock,
	RwRdlock,
	RwWrlock,
	RwTryrdlock,
	RwTrywrlock,
	RwUnlock,
	CondWait,
	CondTimedwait,
	CondSignal,
	CondBroadcast,
	SemWait, // POSIX semaphores, taken as locks (CPython's threading.Lock)
	SemTimedwait,
	SemTrywait,
	SemPost,
	// Counting mode (docs/pthread.md, "Counting mode"): `count` uncontended
	// pairs of `lock` taken at `caller` (MutexCounts; Event::tried: by a
	// trylock), and a process's final flush (CountsDone).
	MutexCounts,
	CountsDone,
};

// Event name without the provider ("mutex_lock") -> Op; false if unknown.
bool op_from_name(const std::string &name, Op *op);

// The place of a key (a, b) in a table of 64 that caches look-ups of a
// map (the model's locks and threads, the exporter's lock tracks):
// several threads each nesting two locks take turns, which a short
// most-recent-first list missed, or walked and moved far, at every event.
constexpr size_t kCachePlaces = 64;
inline size_t cache_place(uint64_t a, uint64_t b)
{
	return static_cast<size_t>((a * 0x9e3779b97f4a7c15ULL + b * 0xc2b2ae3d27d4eb4fULL) >> 58);
}

struct Event {
	int64_t ts = 0;    // ns from the clock's origin
	uint32_t proc = 0; // index into Input::procs
	int64_t tid = 0;
	Op op = Op::MutexLock;
	uint64_t lock = 0; // mutex or rwlock (cond events: the mutex, if any)
	uint64_t cond = 0;
	int32_t ret = 0;
	bool contended = false;
	uint64_t wait_ns = 0;
	uint64_t caller = 0;
	std::vector<uint64_t> stack;
	// MutexCounts: pairs, how many of them were timed, the sum of those
	// holds, the longest timed hold so far, untimed holds that had waiters.
	uint64_t count = 0, timed = 0, hold_sum = 0, hold_max = 0, waited_untimed = 0;
	bool tried = false;
};

struct Mapping {
	uint32_t proc = 0;
	uint64_t start = 0, end = 0, offset = 0;
	std::string path;
};

struct Process {
	std::string name; // procname
	int64_t pid = 0;
	std::string trace_dir;
	// Its machine (env.hostname) when the trace holds several: then its
	// threads and locks are its own as in any process, and it is shown
	// "machine: name[pid]" (docs/pthread.md).
	std::string machine = std::string();
};

struct Input {
	std::vector<Process> procs;
	std::vector<Event> events; // time order
	std::vector<Mapping> maps;
	uint64_t discarded = 0;    // events the tracer reported lost
	uint64_t other_events = 0; // events of other providers (ignored)
};

// Symbolization of an address of a process: "func+0x1a", "file.c:42".
struct Symbol {
	std::string function; // "" when unknown
	std::string location; // "" when no line info
	std::string object;   // mapped file
};
using Symbolizer = std::function<Symbol(uint32_t proc, uint64_t addr, bool is_code)>;

/*
 * A distribution of wait times in bounded memory.  The values themselves
 * are kept up to kExact of them, so percentiles are exact (nearest rank,
 * as percentile() below); past that, a log-linear histogram (128 buckets
 * per power of two: a percentile within 1/128 of the true value, never
 * above the max) replaces them.  Also the log2 buckets the HTML report
 * draws (from 1 us).
 */
class WaitDist {
public:
	static constexpr size_t kExact = size_t(1) << 16;
	static constexpr int kUsBuckets = 24; // [0,1us), [1,2us), ... up to ~8 s
	void add(uint64_t v);
	uint64_t count() const { return n_; }
	bool exact() const { return fine_.empty(); }
	uint64_t percentile(double p) const;
	const uint64_t *us_buckets() const { return us_; }

private:
	uint64_t n_ = 0, max_ = 0;
	uint64_t us_[kUsBuckets] = {};
	std::vector<uint64_t> exact_;
	std::vector<uint64_t> fine_; // once over kExact
};

struct Site {
	uint64_t caller = 0;
	Symbol sym;
	uint64_t acquisitions = 0, contended = 0;
	uint64_t wait_total = 0, wait_max = 0;
	std::vector<uint64_t> stack; // of its longest wait
	std::vector<Symbol> stack_syms;
};

struct LockStats {
	uint32_t proc = 0;
	uint64_t addr = 0;
	std::string kind; // "mutex" or "rwlock"
	Symbol name;      // data symbol of the lock, when known
	uint64_t acquisitions = 0, contended = 0;
	uint64_t wait_total = 0, wait_max = 0, wait_p99 = 0;
	double wait_mean = 0;
	uint64_t holds = 0, hold_total = 0, hold_max = 0;
	uint64_t counted = 0;     // acquisitions (and holds) counted, not recorded one by one
	uint64_t untimed = 0;     // of them, holds not timed (sampling): estimated in hold_total
	uint64_t failed = 0;      // trylock EBUSY, timedlock ETIMEDOUT, errors
	uint64_t failed_wait = 0; // ns blocked in calls that did not acquire (timeouts)
	uint64_t cond_waits = 0;  // condvar waits that released this mutex
	WaitDist waits;           // contended waits' distribution
	std::vector<Site> sites;  // by wait_total, then acquisitions, descending
	// Where the holds that others waited behind were taken: each contended
	// wait's time is split among the other threads' holds it overlapped;
	// contended = waits a site's holds delayed, wait_total = the time.
	std::vector<Site> blockers;
};

// A condition variable: how long threads waited on it (not lock contention:
// a thread waiting for work is not slowed by a lock).
struct CondStats {
	uint32_t proc = 0;
	uint64_t addr = 0;
	Symbol name;
	uint64_t waits = 0, timeouts = 0, signals = 0, broadcasts = 0;
	uint64_t wait_total = 0, wait_max = 0;
	uint64_t mutex = 0; // the mutex of its last wait
};

// An object whose addresses had no symbol (stripped), and how to get its
// symbols: its GNU build id names its separate debug file
// (/usr/lib/debug/.build-id/xx/yyyy.debug, which libdw reads, as it asks
// debuginfod when DEBUGINFOD_URLS is set); Debian ships that file in the
// package's -dbgsym package.
struct MissingDebug {
	std::string object, build_id, debug_file, package;
	bool debug_file_present = false;
	bool libdw = true; // false: libdw (libdw1) is not installed
};

struct Interval {
	int64_t tid = 0;
	uint32_t proc = 0;
	size_t lock_index = 0; // into Report::locks
	int64_t start = 0, end = 0;
	bool wait = false; // wait (true) or hold (false)
};

struct Report {
	std::vector<Process> procs;
	std::vector<LockStats> locks;    // by wait_total, then acquisitions, descending
	std::vector<CondStats> conds;    // by wait_total descending
	std::vector<Interval> timeline;  // waits and holds of the top locks, by start
	bool timeline_truncated = false; // more than Options::timeline_max: longest kept
	// Streaming bounds reached (docs/pthread.md, "Memory"): blockers of
	// waits longer than the holds kept for them are partial.
	bool blockers_partial = false;
	uint64_t events = 0, discarded = 0, other_events = 0;
	uint64_t unmatched_unlocks = 0; // unlock without a traced acquisition
	// Counting mode: pairs counted (in acquisitions and holds, not in the
	// timeline), and the processes whose counts end without their final
	// flush (their trace stopped first: pairs counted since their last
	// records are missing).
	uint64_t counted = 0;
	uint64_t untimed = 0, waited_untimed = 0; // sampling: holds not timed, of them with waiters
	std::vector<uint32_t> counts_unfinished;
	uint64_t cond_waits = 0, cond_signals = 0;
	int64_t first_ts = 0, last_ts = 0;
	std::vector<MissingDebug> missing_debug; // filled by the caller (cmd_analyze.cpp)
};

struct Options {
	size_t top = 10;             // locks in the text/HTML report
	size_t sites = 5;            // call sites per lock
	size_t timeline_locks = 5;   // locks drawn in the timeline
	size_t timeline_max = 20000; // intervals kept for the timeline
};

Report analyze(const Input &in, const Options &opt, const Symbolizer &sym);

// What a feed gives its events to, in time order: the model itself,
// one call an event (no std::function between the reader and it).
class EventSink {
public:
	virtual void event(const Event &e) = 0;
	void operator()(const Event &e) { event(e); }
	// A compact record's uncontended hold (docs/pthread.md): event(acq),
	// then event() of its unlock at unlock_ts (acq's thread and lock).
	// acq: a successful MutexLock or MutexTrylock, no wait, no stack.
	virtual void held(const Event &acq, int64_t unlock_ts)
	{
		event(acq);
		event(unlock_of(acq, unlock_ts));
	}
	static Event unlock_of(const Event &acq, int64_t ts)
	{
		Event u;
		u.proc = acq.proc;
		u.tid = acq.tid;
		u.lock = acq.lock;
		u.caller = acq.caller;
		u.op = Op::MutexUnlock;
		u.ts = ts;
		return u;
	}

protected:
	~EventSink() = default;
};

// The same, streaming: `feed` calls its argument with each event in time
// order (the reader decodes them one at a time), and none is kept; memory
// is bounded by the locks, threads and call sites, not by the events
// (see lock_model.h, "Memory"); `meta`
// (procs, discarded, other_events) is read once feed has returned, so the
// reader may fill it meanwhile.  Input::events is not used.
using EventFeed = std::function<void(EventSink &)>;
Report analyze_feed(const EventFeed &feed, const Input &meta, const Options &opt, const Symbolizer &sym);

// Nearest-rank percentile (p in 0..100) of unsorted values; 0 if empty.
uint64_t percentile(std::vector<uint64_t> v, double p);

} // namespace analyze
} // namespace strata
#endif
