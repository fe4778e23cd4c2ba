/*
 * futex_ring.h - many futex waits in flight at once, reaped by one thread:
 * an io_uring (Linux >= 6.7, IORING_OP_FUTEX_WAIT) on which the
 * multiplexing drain driver (drain_pool.h) queues one wait per idle
 * buffer, on the very word a drain thread would FUTEX_WAIT on (the
 * buffer header's wake_seq).  The writers are unchanged: their
 * FUTEX_WAKE at a sub-buffer's completion ends the queued wait as it
 * ends a sleeping thread's (docs/ring-buffer.md, "Many processes").
 *
 * Contract:
 *   - roles: any number of submitters (submit_wait, submit_cancel:
 *     serialised by the ring's own mutex); exactly one reaper thread
 *     (reap).  The ring is never closed once open (the process's life).
 *   - a wait's tag comes back exactly once in a completion (woken, value
 *     changed at submission, or cancelled); a cancel's completion carries
 *     kCancelTag and is dropped.  Tags are the caller's: it must keep
 *     what a tag names alive until that completion is reaped.
 *   - the shared rings are kernel memory: head and tail words are read
 *     and written with acquire and release as io_uring(7) pairs them with
 *     the kernel's.
 */
#ifndef STRATA_CONSUMERD_FUTEX_RING_H
#define STRATA_CONSUMERD_FUTEX_RING_H

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace strata {

class FutexRing {
public:
	// Opens the ring and checks that the kernel runs futex waits on it
	// (a probe wait that must fail with EAGAIN).  False: no ring (an
	// older kernel, io_uring off by sysctl or seccomp); the caller uses
	// threads.
	bool open(unsigned cq_entries);
	// Queues a wait until *word != val or a FUTEX_WAKE on it (a shared
	// futex: the word is in another process's memory too).  False if it
	// could not be queued (nothing in flight then).
	bool submit_wait(const uint32_t *word, uint32_t val, uint64_t tag);
	// Asks the kernel to end the wait tagged `tag` now (it then completes
	// with -ECANCELED, or already did).
	bool submit_cancel(uint64_t tag);
	static constexpr uint64_t kCancelTag = 1;
	struct Done {
		uint64_t tag;
		int32_t res;
	};
	// The reaper: blocks until at least one completion, appends them all.
	void reap(std::vector<Done> &out);

private:
	bool push(uint8_t op, uint64_t addr, uint64_t addr2, uint32_t fd, uint64_t tag);
	int fd_ = -1;
	std::mutex sq_mu_; // submitters
	uint32_t *sq_head_ = nullptr, *sq_tail_ = nullptr, *sq_array_ = nullptr;
	uint32_t sq_mask_ = 0, sq_entries_ = 0;
	void *sqes_ = nullptr;
	uint32_t *cq_head_ = nullptr, *cq_tail_ = nullptr;
	uint32_t cq_mask_ = 0;
	void *cqes_ = nullptr;
};

} // namespace strata
#endif
