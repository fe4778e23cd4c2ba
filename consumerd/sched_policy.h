/*
 * sched_policy.h - the scheduling policy of the daemon's drain threads: a short
 * time slice and a higher weight while a drain streams, undone when its
 * pooled worker takes the next drain.
 *
 * Contract: no shared state (the settings are read once from the
 * environment); each function changes only the calling thread.
 */
#ifndef STRATA_CONSUMERD_SCHED_POLICY_H
#define STRATA_CONSUMERD_SCHED_POLICY_H

#include <sched.h>

#include <cstdint>

namespace strata {

// Ask the scheduler for a short time slice (EEVDF, Linux >= 6.12) for the
// calling thread: a woken drain or control thread then preempts CPU-bound
// tasks sooner, without a larger CPU share (weight and nice unchanged).
// STRATA_CONSUMERD_SLICE_US overrides the 100 us default, 0 turns it off;
// a thread whose policy is not SCHED_OTHER is left alone.  True if the
// slice was set.
bool short_slice();

// A streaming drain thread's higher scheduling weight (nice -10 by
// default, STRATA_CONSUMERD_DRAIN_NICE): see sched_policy.cpp.  True if the
// thread's nice was changed.
bool streaming_weight();

// A multiplexing worker between streaming turns: SCHED_BATCH (on) or back
// to SCHED_OTHER (off), on the calling thread.  A batch thread is never
// placed ahead of the task running on a CPU when it wakes (no wake-up
// preemption): a first lap's turn, woken on the traced writer's CPU, waits
// there for an idle CPU to take it instead of stopping the writer, and in
// a first lap nothing can be lost (docs/benchmarks.md, "A short run's
// wall is bimodal").  STRATA_CONSUMERD_BATCH=0 turns it off; a policy not
// SCHED_OTHER or SCHED_BATCH is left alone.  True if the thread has it.
bool quiet_scheduling(bool on);

// A multiplexing worker about to run a turn for writers that last ran on
// the CPUs in `busy`: if the calling thread runs on one of them and may
// run on a CPU outside them, it moves there (its affinity narrowed to
// those CPUs, then given back as it was: the kernel leaves a thread where
// it runs when that CPU is allowed).  The wake-up that brought the worker
// may have placed it on the writer's CPU while another CPU idled (the
// kernel's idle search gives up on a busy LLC); the turn would then stop
// the writer for its length, 2-4 ms measured (docs/consumerd.md, "The
// daemon beside its writers").  STRATA_CONSUMERD_APART=0 turns it off.
// True if the thread moved.
bool step_off(const cpu_set_t &busy);

// A worker's memory of the CPUs its turns' writers ran on lately, so that
// it steps off them all, not only the current drain's: with writers of
// two drains on the two CPUs, stepping off each drain's in turn would
// move it at every turn for nothing.  One per worker thread.
class RecentWriters {
public:
	RecentWriters() { CPU_ZERO(&cpus_); }
	// Before a turn for writers on `busy`, at `now_ns` (steady): `busy`
	// joins the CPUs seen since the window began (kWindowNs; a new window
	// starts from `busy` alone), then step_off those.  True if moved.
	bool before_turn(const cpu_set_t &busy, uint64_t now_ns);
	static constexpr uint64_t kWindowNs = 10000000; // 10 ms

private:
	cpu_set_t cpus_;
	uint64_t since_ = 0;
	bool any_ = false;
};

// What a streaming drain changed in its thread's scheduling.
struct SchedChange {
	bool sliced = false;  // short_slice
	bool reniced = false; // streaming_weight
};
// Both of the above, on the calling thread.
SchedChange stream_scheduling();
// Undoes `c` on the calling thread: a pooled worker starts its next drain
// as a new thread would.
void default_scheduling(SchedChange c);

} // namespace strata
#endif
