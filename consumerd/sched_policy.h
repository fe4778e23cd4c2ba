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
#include <sys/types.h>

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

// A multiplexing worker (or the pool's reaper, `may_batch` false) between
// streaming turns, on thread `tid` (0: the calling thread; another thread
// of this process changes without being woken, and wakes with it).
//  - quick: SCHED_OTHER with the short slice (short_slice), while some
//    drain waits on a writer's first lap (a new buffer's first turn, its
//    first record, its first looks: DrainPool's first_laps_).  The wake-up
//    that ends such a wait can land on the writer's CPU (the kernel's idle
//    search gives up on a busy LLC; an io_uring wait's completion runs as
//    task work on the worker that queued it, where it last slept).  A
//    batch thread, or one with the kernel's slice, waits there for the
//    writer's slice to end (2.5-4.6 ms measured on a 2-CPU guest) while
//    the writer makes its first lap's pages itself, where a short slice
//    preempts it for the worker's move (step_off).
//  - else SCHED_BATCH where `may_batch`: never placed ahead of the task
//    running on a CPU when it wakes (no wake-up preemption), so a worker
//    woken beside busy writers waits for an idle CPU instead of stopping
//    one (docs/consumerd.md, "The daemon beside its writers"); SCHED_OTHER
//    with the kernel's slice otherwise (the reaper, whose turns are a few
//    microseconds, or STRATA_CONSUMERD_BATCH=0).
// STRATA_CONSUMERD_QUICK=0: never quick.  A policy not SCHED_OTHER or
// SCHED_BATCH (real time, SCHED_IDLE: someone's choice) is left alone.
// True if the thread has what was asked.
bool between_turns(pid_t tid, bool quick, bool may_batch);

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
