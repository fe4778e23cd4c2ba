/*
 * futex_waitv.h - FutexWaits (futex_waits.h) for kernels without io_uring
 * futex waits (Linux < 6.7: Debian 12's 6.1): a few waiter threads, each
 * blocked in futex_waitv(2) (Linux >= 5.16) on up to kSlots queued waits
 * plus a private control word of its own, through which a submitter wakes
 * it when its set changes (a new wait, a cancel).  The daemon's threads
 * stay bounded: the waiters are a fixed number; a buffer beyond their
 * capacity is not waited on but polled by the drain pool's safety-net
 * timer (submit_wait false; docs/ring-buffer.md, "Many processes").
 *
 * Contract: FutexWaits's, and:
 *   - roles: submitters (under their own lock, e.g. DrainPool::mu_; then
 *     mu_ here: never the other way round), the waiter threads (mu_ only
 *     to take their set and to settle it after a wait), the reaper (mu_
 *     only to take the completions).
 *   - a slot is in exactly one waiter's set, from submit_wait until that
 *     waiter completes it (woken, word moved, cancelled); only the waiter
 *     removes it, so a slot's index is stable across its futex_waitv call
 *     (submitters only append, or mark a slot cancelled).
 *   - a cancelled wait completes (-ECANCELED) only once its waiter is back
 *     from the futex_waitv that may name its word: after its tag is
 *     reaped, nothing here touches the word.
 *   - a writer's FUTEX_WAKE that reaches a waiter already woken by another
 *     word is lost to the kernel, but the writers bump wake_seq before
 *     they wake: the kernel's comparison at the waiter's next call ends it
 *     at once (EAGAIN), and the waiter then completes each slot whose word
 *     moved.  Words are read by the kernel only (futex_waitv,
 *     process_vm_readv on itself), never dereferenced here: a drain that
 *     ends unmaps its buffer before it cancels its wait, and a word gone
 *     ends its slot (-EFAULT) rather than the daemon.
 *   - threads never exit (the process's life), as the pool's.
 */
#ifndef STRATA_CONSUMERD_FUTEX_WAITV_H
#define STRATA_CONSUMERD_FUTEX_WAITV_H

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "futex_waits.h"

namespace strata {

class FutexWaitv final : public FutexWaits {
public:
	static constexpr unsigned kSlots = 127; // FUTEX_WAITV_MAX (128) less the control word
	static constexpr unsigned kMaxWaiters = 4;
	// Checks that the kernel has futex_waitv (a probe that must fail with
	// EAGAIN) and starts `waiters` threads (1..kMaxWaiters).  False:
	// neither (the caller runs a thread per drain).
	bool open(unsigned waiters);
	using Word = const uint32_t *;
	// Waits that can be in flight at once (0 before open).
	unsigned capacity();
	bool submit_wait(const uint32_t *word, uint32_t val, uint64_t tag) override;
	bool submit_cancel(uint64_t tag) override;
	void reap(std::vector<Done> &out) override;

private:
	struct Slot {
		const uint32_t *word;
		uint32_t val;
		uint64_t tag;
		bool cancel;
	};
	struct Waiter {
		// Bumped (relaxed, under mu_) whenever `slots` changes; the
		// waiter's futex_waitv sleeps on it with the value it read
		// under mu_ with its set.  Private: this process only.
		uint32_t ctl = 0;
		std::vector<Slot> slots; // under mu_
	};
	void waiter(Waiter *w);
	// Under mu_: after a futex_waitv of `n` slots that returned `r`.
	void settle(Waiter *w, unsigned n, long r);
	void poke(Waiter *w); // under mu_
	std::mutex mu_;
	std::condition_variable done_cv_; // the reaper waits for done_
	std::vector<Done> done_;          // under mu_
	Waiter waiters_[kMaxWaiters];
	unsigned n_ = 0; // threads running (set once, under mu_)
};

} // namespace strata
#endif
