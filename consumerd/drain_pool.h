/*
 * drain_pool.h - the pool of drain threads.  Most drains are short-lived
 * processes' (a build, a test suite, a shell script under `strata
 * record`): a thread of its own per drain (its creation, its first touches
 * of a fresh stack, its exit) would cost the daemon much of its CPU per
 * traced process start, taken beside the starting process.  Threads are
 * kept instead: a worker runs one drain from start() to the end of
 * Drain::run(), undoes what the drain changed in its scheduling (sched_policy.h),
 * then takes the next drain.
 *
 * Contract:
 *   - roles: the main thread (and the attacher, for Drain::start) hands
 *     drains in (run) and waits for one to be left (join); workers take
 *     them.  A drain is run by exactly one worker, from start to end:
 *     its Reader and files stay single-threaded.
 *   - never fewer threads than drains being run: a drain waiting for a
 *     worker would leave its ring to fill.  run() starts a new worker
 *     unless the idle ones are at least as many as the jobs queued.
 *   - the pool knows a drain only as a PoolJob: a worker runs it
 *     (run_job) and is done with it when it called release() under mu_
 *     (and notified done_cv_); join() returns only once released() is
 *     true, so the Drain may be destroyed after it.  Workers never touch
 *     a drain after that.
 *   - a worker keeps its copy buffer (ready_batch) for its next drain: at
 *     most kMaxIdle idle buffers of about 1 MiB each (more for larger
 *     sub-buffers), freed when the worker exits.
 *   - warm() (a session's creation) starts one worker that maps its copy
 *     buffer before it waits for work, unless a worker is idle already:
 *     the session's first drain then finds a thread and a mapped buffer,
 *     and a fast producer does not lose events in its first lap.
 *   - at most kMaxIdle workers wait for work; one more exits.  The pool
 *     lives as long as the process (never destroyed: detached workers may
 *     be waiting in it when the process exits).
 */
#ifndef STRATA_CONSUMERD_DRAIN_POOL_H
#define STRATA_CONSUMERD_DRAIN_POOL_H

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>

#include "sched_policy.h"

namespace strata {

// What one turn of a drain (PoolJob::step) asks for next.
enum class StepResult : uint8_t {
	kAgain, // it did work: run it again (after the others waiting)
	kWait,  // nothing to do: run it again when its StepWait says
	kDone,  // finished: never run again
};
// kWait: until the shared 32-bit word `word` (the buffer's wake_seq, in
// the producer's memory) no longer holds `val` or a writer wakes it, or
// `timeout_ms`, or the job's finish.
struct StepWait {
	const uint32_t *word = nullptr;
	uint32_t val = 0;
	int timeout_ms = 0;
};

// What a worker runs: one drain, from start to end (drain.h).
class PoolJob {
public:
	virtual ~PoolJob() = default;
	// On the worker: the whole job; what it changed in the worker's
	// scheduling (undone before the next job).
	virtual SchedChange run_job() = 0;
	// One turn of the job (the body of run_job's loop), for a driver
	// that multiplexes many jobs on few threads.  Called by one thread
	// at a time, never after kDone.
	virtual StepResult step(StepWait *w) = 0;
	// Under the pool's mutex: the worker is done with it / was it?
	virtual void release() = 0;
	virtual bool released() const = 0;
};

// Bytes of whole packets gathered for one write (one packet at least): the
// copy buffer is this plus one sub-buffer.
constexpr size_t kBatchBytes = 1u << 20;

// The calling worker's copy buffer, kept from one drain to the next.
struct CopyBuffer {
	uint8_t *buf = nullptr;
	size_t cap = 0;
};
// Makes the calling thread's copy buffer ready for `need` bytes: made anew
// if it has less (or, with `may_shrink`, much more); with `populate`, its
// pages mapped in one system call (else they fault in as packets are
// copied).
CopyBuffer ready_batch(size_t need, bool populate, bool may_shrink = true);

class DrainPool {
public:
	static DrainPool &get();
	// False: no worker could be started (the drain is not run).
	bool run(PoolJob *d);
	// An idle worker with its copy buffer ready for sub-buffers of
	// `subbuf_size`, made now unless a worker is idle or being warmed.
	void warm(uint64_t subbuf_size);
	// Until no worker touches `d` any more.
	void join(PoolJob *d);

private:
	static constexpr size_t kMaxIdle = 4;
	void worker();
	std::mutex mu_;
	std::condition_variable cv_;      // workers wait for jobs_
	std::condition_variable done_cv_; // join waits for Released
	std::deque<PoolJob *> jobs_;      // started, not taken by a worker yet
	size_t idle_ = 0;                 // workers waiting on cv_
	bool warming_ = false;            // a warm() worker is still mapping its buffer
};

// A session's drains will copy sub-buffers of `subbuf_size`: have an idle
// pooled worker with its copy buffer mapped, ready for the first one, so
// that a first drain neither starts a thread nor maps its buffer while its
// producer's first lap waits.  No-op while a worker is idle.
void warm_drains(uint64_t subbuf_size);

} // namespace strata
#endif
