/*
 * drain_pool.h - the threads that run the drains, two drivers.
 *
 * The multiplexer (the default): a drain is a step function
 * (PoolJob::step, one turn of a drain's loop), and a fixed set of workers
 * (as many as CPUs, at least 2) runs the turns of every multiplexable
 * drain, while one reaper thread collects the idle drains' futex waits
 * (futex_waits.h): from an io_uring (futex_ring.h, Linux >= 6.7), else
 * from 2-4 futex_waitv threads (futex_waitv.h, Linux 6.1) whose slots,
 * once all taken, leave a further idle drain polled by its safety-net
 * timer at the drain's own step (50 ms).  The daemon's threads are then bounded
 * whatever the number of live traced processes (docs/ring-buffer.md,
 * "Many processes"; docs/consumerd.md).
 *
 * One thread per drain (a drain that cannot be multiplexed: a streamed
 * output, a kernel buffer; or every drain when the kernel has neither
 * io_uring futex waits nor futex_waitv, or STRATA_CONSUMERD_DRAIN_THREADS=1).  Most such drains
 * were short-lived processes' (a build, a test suite, a shell script under
 * `strata record`): a thread of its own per drain (its creation, its
 * first touches of a fresh stack, its exit) would cost the daemon much of
 * its CPU per traced process start, taken beside the starting process.
 * Threads are kept instead: a worker runs one drain from start() to the
 * end of Drain::run(), undoes what the drain changed in its scheduling
 * (sched_policy.h), then takes the next drain.
 *
 * Contract:
 *   - roles: the main thread (and the attacher, for Drain::start) hands
 *     drains in (run), asks a waiting one to run now (wake, at finish) and
 *     waits for one to be left (join); workers take them; the reaper
 *     turns completed futex waits into runnable drains.
 *   - one thread at a time runs a drain: a threaded drain is run by
 *     exactly one worker from start to end; a multiplexed drain is, at any
 *     instant, in exactly one place under mu_ (PoolJob::Mux: ready_, a
 *     worker, or armed), and only a worker that took it from ready_ runs
 *     its turn.  Its Reader and files stay single-threaded; each turn
 *     happens-after the previous one (mu_ between them).
 *   - threaded: never fewer threads than drains being run: a drain waiting
 *     for a worker would leave its ring to fill.  run() starts a new
 *     worker unless the idle ones are at least as many as the jobs queued.
 *     Multiplexed: a turn is bounded (drain_once: 64 packets a lane), so a
 *     ready drain waits for at most a few turns of others.
 *   - the pool knows a drain only as a PoolJob: a worker runs it
 *     (run_job, or step until kDone) and is done with it when it called
 *     release() under mu_ (and notified done_cv_); join() returns only
 *     once released() is true, so the Drain may be destroyed after it.
 *     A multiplexed drain with a futex wait in the ring is released only
 *     when that wait completed (cancelled at kDone): no completion names a
 *     freed Drain, no timer either (removed before release).
 *   - scheduling: a threaded worker undoes what its drain changed
 *     (run_job's SchedChange) before the next; a multiplexing worker takes
 *     the streaming scheduling before a turn of a job that wants it
 *     (PoolJob::streaming) and drops it before a turn of one that does
 *     not, so that a drain streaming once does not leave its weight and
 *     short slice to every later turn on that worker.  Between streaming
 *     turns a worker is batch, or quick while a job is armed for a young
 *     writer's first lap (first_laps_ not 0): whichever thread changes
 *     first_laps_ across zero, or a worker that finds it changed before
 *     it sleeps, sets every pool thread's policy (mux_sched_apply, under
 *     sched_mu_, never under mu_); a worker's own streaming change takes
 *     sched_mu_ too, so the two never cross.
 *   - a worker keeps its copy buffer (ready_batch) for its next drain
 *     (threaded) or turn (multiplexed): at most kMaxIdle idle buffers of
 *     about 1 MiB each (more for larger sub-buffers), plus one per
 *     multiplexing worker, freed when the worker exits.
 *   - warm() (a session's creation) starts one worker that maps its copy
 *     buffer before it waits for work, unless a worker is idle already
 *     or the multiplexer runs: the session's first drain then finds a
 *     thread and a mapped buffer, and a fast producer does not lose events
 *     in its first lap.
 *   - a multiplexed drain whose futex wait could not be queued
 *     (submit_wait false: FutexWaitv full) stays armed on its timer alone,
 *     at the drain's wait (never backed off), and asks again at its next
 *     kWait: it is polled, never given a thread.
 *   - at most kMaxIdle threaded workers wait for work; one more exits.
 *     The multiplexer's threads never exit (an io_uring request is
 *     cancelled when the thread that submitted it exits).  The pool lives
 *     as long as the process (never destroyed: detached workers may be
 *     waiting in it when the process exits).
 */
#ifndef STRATA_CONSUMERD_DRAIN_POOL_H
#define STRATA_CONSUMERD_DRAIN_POOL_H

#include <sched.h>
#include <sys/types.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "futex_ring.h"
#include "futex_waitv.h"
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
// `timeout_ms`, or the job's finish.  first_poll_us, when not 0: a first
// lap's look (Drain::step), that many microseconds, which the pool takes
// as it is (no back-off of its own); the thread driver, whose waits are
// in milliseconds, takes timeout_ms.  first_lap: the wait is for a young
// buffer's writer in its first lap (its first record, or a first look):
// the pool's workers take the quick scheduling while any such wait is
// armed (sched_policy.h, between_turns).
struct StepWait {
	const uint32_t *word = nullptr;
	uint32_t val = 0;
	int timeout_ms = 0;
	int first_poll_us = 0;
	bool first_lap = false;
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
	// May it share a worker with other jobs (the multiplexing driver)?
	// Asked once, at run().  False for a job that waits on an fd or
	// whose writes may block (a relay or serial output).
	virtual bool multiplexable() const = 0;
	// Do its turns want the streaming scheduling (sched_policy.h)?  Asked
	// by the multiplexing driver before each turn, on the thread about to
	// run it: that worker takes or drops it on a change.
	virtual bool streaming() const { return false; }
	// The CPUs its busy writers last ran on (cleared first), asked by the
	// multiplexing driver before each turn, on the thread about to run
	// it: false if it knows none.  The worker then keeps off them when it
	// can (step_off, sched_policy.h).
	virtual bool writer_cpus(cpu_set_t *busy) const
	{
		(void)busy;
		return false;
	}
	// Under the pool's mutex: the worker is done with it / was it?
	virtual void release() = 0;
	virtual bool released() const = 0;

private:
	friend class DrainPool;
	// The multiplexing driver's bookkeeping, all under DrainPool::mu_.
	// kOff: run by a thread of its own; kReady: in ready_; kRunning: a
	// worker runs its step; kArmed: waits (its timer in timers_, maybe a
	// futex wait in the ring); kEnding: done, its futex wait being
	// cancelled (released when that completes).
	enum class Mux : uint8_t { kOff, kReady, kRunning, kArmed, kEnding };
	Mux mux_ = Mux::kOff;
	bool wait_out_ = false;  // a futex wait tagged with this job is in the ring
	bool kick_ = false;      // wake() came while a worker ran it
	uint8_t idle_turns_ = 0; // kWait turns in a row: the safety net's back-off
	uint64_t timer_at_ = 0;  // its key in timers_ (0: none)
	bool first_lap_ = false; // new, or armed with StepWait::first_lap: counted in first_laps_
};

// Bytes of whole packets gathered for one write (one packet at least): the
// copy buffer is this plus one sub-buffer, plus batch_pad().
constexpr size_t kBatchBytes = 1u << 20;
constexpr size_t kMaxPacketAlign = 4096;
// Room for each packet of a write (at most 16, drain_internal.h) to grow
// to the output's alignment (Output::packet_align, at most
// kMaxPacketAlign): only in a daemon asked for direct writes
// (STRATA_DIRECT_IO=1, output_disk.cpp), the one case an output aligns
// packets; else 0, and no worker's buffer carries 64 KiB it never uses.
size_t batch_pad();
inline size_t batch_need(uint64_t subbuf_size)
{
	return kBatchBytes + static_cast<size_t>(subbuf_size) + batch_pad();
}

// The calling worker's copy buffer, kept from one drain to the next.
struct CopyBuffer {
	uint8_t *buf = nullptr;
	size_t cap = 0;
};
// Makes the calling thread's copy buffer ready for `need` bytes: made anew
// if it has less (or, with `may_shrink`, much more), page-aligned (an
// O_DIRECT write's memory, output_disk.cpp); with `populate`, its pages
// mapped in one system call (else they fault in as packets are copied).
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
	// d's finish was asked (Drain::finish): a multiplexed job waiting for
	// its buffer runs now.  No-op for a job on a thread of its own (its
	// own wait ends on its stop word).
	void wake(PoolJob *d);
	// The multiplexer's workers (0: it is off, one thread per drain).
	size_t mux_workers();

private:
	static constexpr size_t kMaxIdle = 4;
	void worker();
	// The multiplexing driver (drain_pool.cpp, "Multiplexing").
	bool mux_on();     // under mu_: started now if it can be
	bool open_waits(); // under mu_, once: waits_ set, or false
	void mux_worker();
	void mux_reaper();
	void mux_ready(PoolJob *d, bool notify = true);              // under mu_
	void mux_after(PoolJob *d, StepResult r, const StepWait &w); // under mu_
	void mux_completed(PoolJob *d);                              // under mu_
	void mux_disarm(PoolJob *d);                                 // under mu_
	// The workers' and the reaper's scheduling between streaming turns
	// (between_turns): quick while first_laps_ is not 0.  Called without
	// mu_; sched_mu_ orders the callers, each applying what first_laps_
	// says when it holds it, so the last change wins.
	void mux_sched_apply();
	// A pool thread (worker or reaper) joins the list above; a worker
	// marks its streaming turns, during which the list leaves it alone.
	size_t mux_sched_join(bool may_batch);
	void mux_sched_streaming(size_t slot, bool streaming);
	enum class MuxState : uint8_t { kUnknown, kOn, kOff };
	MuxState mux_state_ = MuxState::kUnknown;
	size_t mux_threads_ = 0;
	FutexRing ring_;              // Linux >= 6.7
	FutexWaitv waitv_;            // else (Linux >= 5.16): a few waiter threads
	FutexWaits *waits_ = nullptr; // the one opened (set once under mu_, by mux_on)
	bool polled_said_ = false;    // "more buffers than waits" logged (under mu_)
	unsigned first_laps_ = 0;     // jobs with first_lap_ (under mu_)
	struct SchedSlot {
		pid_t tid;
		bool may_batch; // a worker (the reaper is never batch)
		bool streaming; // its own streaming scheduling: left alone
	};
	std::mutex sched_mu_;                // after mu_ is released, never inside it
	std::vector<SchedSlot> sched_slots_; // under sched_mu_
	bool sched_quick_ = false;           // applied to them (under sched_mu_)
	bool quick_seen_ = false;            // what the last apply read (under mu_)
	std::condition_variable mux_cv_;     // workers wait for ready_ or their next timer
	std::deque<PoolJob *> ready_;
	std::set<std::pair<uint64_t, PoolJob *>> timers_; // (deadline ns, job)
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
