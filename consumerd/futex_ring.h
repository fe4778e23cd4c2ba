/*
 * futex_ring.h - many futex waits in flight at once, reaped by one thread:
 * an io_uring (Linux >= 6.7, IORING_OP_FUTEX_WAIT) on which the
 * multiplexing drain driver (drain_pool.h) queues one wait per idle
 * buffer, on the very word a drain thread would FUTEX_WAIT on (the
 * buffer header's wake_seq).  The writers are unchanged: their
 * FUTEX_WAKE at a sub-buffer's completion ends the queued wait as it
 * ends a sleeping thread's (docs/ring-buffer.md, "Many processes").
 *
 * Contract: FutexWaits's (futex_waits.h), and:
 *   - submitters are serialised by the ring's own mutex; the reaper reads
 *     the completion ring alone.  No thread of its own.
 *   - a cancel's completion carries kCancelTag and is dropped by reap.
 *   - submit_wait is false only when the kernel refuses the entry (a
 *     full completion ring waits in the kernel's overflow list instead).
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

#include "futex_waits.h"

namespace strata {

class FutexRing final : public FutexWaits {
public:
	// Opens the ring and checks that the kernel runs futex waits on it
	// (a probe wait that must fail with EAGAIN).  False: no ring (an
	// older kernel, io_uring off by sysctl or seccomp); the caller uses
	// threads.
	bool open(unsigned cq_entries);
	// FutexWaits (futex_waits.h).
	bool submit_wait(const uint32_t *word, uint32_t val, uint64_t tag) override;
	bool submit_cancel(uint64_t tag) override;
	void reap(std::vector<Done> &out) override;

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
