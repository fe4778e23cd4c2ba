/*
 * futex_waits.h - the contract of "many futex waits in flight, reaped by
 * one thread", which the multiplexing drain driver (drain_pool.h) sleeps
 * on.  Two implementations:
 *   - FutexRing (futex_ring.h): an io_uring of IORING_OP_FUTEX_WAIT, Linux
 *     >= 6.7; no thread of its own, no limit but the ring's completions.
 *   - FutexWaitv (futex_waitv.h): a few waiter threads, each blocked in
 *     futex_waitv(2) (Linux >= 5.16) on at most 127 queued waits plus a
 *     control word; for Linux 6.1 (Debian 12's kernel).  Its capacity is
 *     fixed: submit_wait says false when every slot is taken.
 *
 * Contract (both):
 *   - roles: any number of submitters (submit_wait, submit_cancel);
 *     exactly one reaper thread (reap).  Never closed once open (the
 *     process's life).
 *   - a wait's tag comes back exactly once from reap (woken, value changed
 *     at submission, or cancelled).  A cancel's own completion, if any,
 *     carries kCancelTag and is never returned.  Tags are the caller's: it
 *     must keep what a tag names alive until that tag was reaped.  The
 *     word may be unmapped before (a drain ending): its wait then ends,
 *     maybe with -EFAULT, never the process.
 *   - submit_wait false: nothing was queued and no completion will come
 *     for that tag; the caller must still get its drain run (drain_pool.cpp
 *     keeps it on its safety-net timer at the drain's own step, 50 ms,
 *     never backed off, and asks again at its next wait).
 *   - submit_cancel of a tag whose wait already completed (reaped or not):
 *     true, and no second completion.
 */
#ifndef STRATA_CONSUMERD_FUTEX_WAITS_H
#define STRATA_CONSUMERD_FUTEX_WAITS_H

#include <cstdint>
#include <vector>

namespace strata {

class FutexWaits {
public:
	virtual ~FutexWaits() = default;
	// Queues a wait until *word != val or a FUTEX_WAKE on it (a shared
	// futex: the word is in another process's memory too).  False if it
	// could not be queued (nothing in flight then).
	virtual bool submit_wait(const uint32_t *word, uint32_t val, uint64_t tag) = 0;
	// Ends the wait tagged `tag` now (it then completes with -ECANCELED,
	// or already did).  False: it could not be asked (a broken ring).
	virtual bool submit_cancel(uint64_t tag) = 0;
	static constexpr uint64_t kCancelTag = 1;
	struct Done {
		uint64_t tag;
		int32_t res; // 0 woken, -EAGAIN value changed, -ECANCELED, or an error
	};
	// The reaper: blocks until at least one completion, appends them all.
	virtual void reap(std::vector<Done> &out) = 0;
};

} // namespace strata
#endif
