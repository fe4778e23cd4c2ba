/*
 * futex_ring.cpp - see futex_ring.h for the contract.  Raw io_uring system
 * calls (no liburing on Debian 12's build machines); the futex opcode is
 * newer than Debian 12's kernel headers, so its number is ours here.
 */
#include "futex_ring.h"

#include <cerrno>
#include <cstring>
#include <linux/io_uring.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

namespace strata {

namespace {
constexpr uint8_t kOpFutexWait = 51;        // IORING_OP_FUTEX_WAIT, Linux 6.7 uapi
constexpr uint32_t kFutex2Size32 = 0x02;    // FUTEX2_SIZE_U32; not FUTEX2_PRIVATE: shared memory
constexpr uint64_t kMatchAny = 0xffffffffu; // FUTEX_BITSET_MATCH_ANY

int enter(int fd, unsigned submit, unsigned min_complete, unsigned flags)
{
	return static_cast<int>(syscall(__NR_io_uring_enter, fd, submit, min_complete, flags, nullptr, 0));
}

template <typename T> T *at(void *base, uint32_t off)
{
	return reinterpret_cast<T *>(static_cast<char *>(base) + off);
}
} // namespace

bool FutexRing::open(unsigned cq_entries)
{
	struct io_uring_params p;
	memset(&p, 0, sizeof p);
	p.flags = IORING_SETUP_CQSIZE;
	p.cq_entries = cq_entries;
	const int fd = static_cast<int>(syscall(__NR_io_uring_setup, 64, &p));
	if (fd < 0)
		return false;
	const size_t sq_sz = p.sq_off.array + p.sq_entries * sizeof(uint32_t);
	const size_t cq_sz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
	const bool single = p.features & IORING_FEAT_SINGLE_MMAP;
	void *sq = mmap(nullptr, single && cq_sz > sq_sz ? cq_sz : sq_sz, PROT_READ | PROT_WRITE,
			MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
	void *cq = single ? sq
			  : mmap(nullptr, cq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd,
				 IORING_OFF_CQ_RING);
	void *sqes = mmap(nullptr, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
	if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) {
		close(fd); // the mappings (if any) stay: a few pages, once
		return false;
	}
	fd_ = fd;
	sq_head_ = at<uint32_t>(sq, p.sq_off.head);
	sq_tail_ = at<uint32_t>(sq, p.sq_off.tail);
	sq_mask_ = *at<uint32_t>(sq, p.sq_off.ring_mask);
	sq_entries_ = p.sq_entries;
	sq_array_ = at<uint32_t>(sq, p.sq_off.array);
	sqes_ = sqes;
	cq_head_ = at<uint32_t>(cq, p.cq_off.head);
	cq_tail_ = at<uint32_t>(cq, p.cq_off.tail);
	cq_mask_ = *at<uint32_t>(cq, p.cq_off.ring_mask);
	cqes_ = at<void>(cq, p.cq_off.cqes);
	// The probe: a wait on a word that does not hold the value must end
	// at once with EAGAIN; a kernel without the opcode says EINVAL.
	static uint32_t probe = 1; // never 0: the wait ends at once
	std::vector<Done> done;
	if (submit_wait(&probe, 0, 2))
		while (done.empty())
			reap(done);
	if (done.size() == 1 && done[0].tag == 2 && done[0].res == -EAGAIN)
		return true;
	close(fd_);
	fd_ = -1;
	return false;
}

bool FutexRing::push(uint8_t op, uint64_t addr, uint64_t addr2, uint32_t fd, uint64_t tag)
{
	std::lock_guard<std::mutex> g(sq_mu_);
	if (fd_ < 0)
		return false;
	// Relaxed: the tail is ours alone.  Acquire on head: pairs with the
	// kernel's release once it consumed entries (their slots are free).
	const uint32_t tail = __atomic_load_n(sq_tail_, __ATOMIC_RELAXED);
	if (tail - __atomic_load_n(sq_head_, __ATOMIC_ACQUIRE) >= sq_entries_)
		return false; // cannot happen: each push is submitted at once
	const uint32_t idx = tail & sq_mask_;
	auto *sqe = static_cast<struct io_uring_sqe *>(sqes_) + idx;
	memset(sqe, 0, sizeof *sqe);
	sqe->opcode = op;
	sqe->fd = static_cast<int32_t>(fd);
	sqe->addr = addr;
	sqe->off = addr2; // addr2 shares the word with off
	sqe->user_data = tag;
	if (op == kOpFutexWait)
		sqe->addr3 = kMatchAny;
	sq_array_[idx] = idx;
	// Release: the entry is whole before the kernel sees the new tail.
	__atomic_store_n(sq_tail_, tail + 1, __ATOMIC_RELEASE);
	for (int tries = 0;; tries++) {
		const int r = enter(fd_, 1, 0, 0);
		if (r >= 1)
			return true;
		if (r == 0 || (errno != EINTR && errno != EAGAIN && errno != EBUSY) || tries > 1000) {
			// Not taken: take it back, the kernel has not seen it.
			if (__atomic_load_n(sq_head_, __ATOMIC_ACQUIRE) == tail) {
				__atomic_store_n(sq_tail_, tail, __ATOMIC_RELEASE);
				return false;
			}
			return true; // taken after all (by a concurrent enter)
		}
		sched_yield();
	}
}

bool FutexRing::submit_wait(const uint32_t *word, uint32_t val, uint64_t tag)
{
	return push(kOpFutexWait, reinterpret_cast<uintptr_t>(word), val, kFutex2Size32, tag);
}

bool FutexRing::submit_cancel(uint64_t tag)
{
	return push(IORING_OP_ASYNC_CANCEL, tag, 0, 0, kCancelTag);
}

void FutexRing::reap(std::vector<Done> &out)
{
	// Relaxed: the head is the reaper's alone.  Acquire on tail: pairs
	// with the kernel's release after it wrote the entries.
	uint32_t head = __atomic_load_n(cq_head_, __ATOMIC_RELAXED);
	uint32_t tail = __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE);
	if (head == tail) {
		enter(fd_, 0, 1, IORING_ENTER_GETEVENTS); // EINTR: the loop below finds none
		tail = __atomic_load_n(cq_tail_, __ATOMIC_ACQUIRE);
	}
	for (; head != tail; head++) {
		const auto *cqe = static_cast<const struct io_uring_cqe *>(cqes_) + (head & cq_mask_);
		if (cqe->user_data != kCancelTag)
			out.push_back(Done{cqe->user_data, cqe->res});
	}
	// Release: we are done reading the entries before the kernel reuses them.
	__atomic_store_n(cq_head_, head, __ATOMIC_RELEASE);
}

} // namespace strata
