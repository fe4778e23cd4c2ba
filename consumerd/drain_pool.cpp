/*
 * drain_pool.cpp - the pool of drain threads and their copy buffers
 * (drain_pool.h).
 */
#include "drain_pool.h"

#include <memory>
#include <sys/mman.h>
#include <system_error>
#include <thread>

#include "sched_policy.h"
#include "strata_abi.h"

namespace strata {

namespace {
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 // Linux 5.14 uapi; glibc 2.36 headers lack it
#endif
constexpr int kMadvPopulateWrite = MADV_POPULATE_WRITE;

// The copy buffer a thread keeps from one drain to the next: a pooled
// worker runs drains one after another, and a fresh buffer per drain would
// cost each traced process's drain about 1 MiB of page population beside
// the starting processes.  Kept while the worker lives; remade when a
// drain needs more, or much less (sub-buffers of another size).  Drain
// thread only (thread_local).
struct BatchCache {
	std::unique_ptr<uint8_t[]> buf;
	size_t cap = 0;
	bool populated = false;
};
thread_local BatchCache t_batch;
constexpr size_t kBatchSlack = 4u << 20; // kept up to this much above the need
} // namespace

CopyBuffer ready_batch(size_t need, bool populate, bool may_shrink)
{
	BatchCache &c = t_batch;
	if (c.cap < need || (may_shrink && c.cap - need > kBatchSlack)) {
		c.buf.reset();
		// Never zeroed (new[] of a plain type): every byte is copied
		// in before it is written out.
		c.buf.reset(new uint8_t[need]);
		c.cap = need;
		c.populated = false;
	}
	if (populate && !c.populated) {
		c.populated = true;
		const uintptr_t a =
			(reinterpret_cast<uintptr_t>(c.buf.get()) + 4095) & ~static_cast<uintptr_t>(4095);
		const uintptr_t e =
			(reinterpret_cast<uintptr_t>(c.buf.get()) + c.cap) & ~static_cast<uintptr_t>(4095);
		if (e > a)
			madvise(reinterpret_cast<void *>(a), e - a, kMadvPopulateWrite);
	}
	return CopyBuffer{c.buf.get(), c.cap};
}

DrainPool &DrainPool::get()
{
	static DrainPool *const pool = new DrainPool(); // never destroyed: see drain_pool.h
	return *pool;
}

bool DrainPool::run(PoolJob *d)
{
	std::unique_lock<std::mutex> lk(mu_);
	jobs_.push_back(d);
	if (idle_ >= jobs_.size()) {
		cv_.notify_one();
		return true;
	}
	try {
		std::thread([this] { worker(); }).detach();
	} catch (const std::system_error &) {
		// An idle worker may still be on its way to an earlier job:
		// take this one back rather than queue it behind nothing.
		for (auto it = jobs_.begin(); it != jobs_.end(); ++it)
			if (*it == d) {
				jobs_.erase(it);
				break;
			}
		return false;
	}
	return true;
}

void DrainPool::warm(uint64_t subbuf_size)
{
	std::unique_lock<std::mutex> lk(mu_);
	if (idle_ > jobs_.size() || warming_)
		return;
	warming_ = true;
	const size_t need = kBatchBytes + static_cast<size_t>(subbuf_size);
	try {
		std::thread([this, need] {
			ready_batch(need, true);
			{
				std::lock_guard<std::mutex> g(mu_);
				warming_ = false;
			}
			worker();
		}).detach();
	} catch (const std::system_error &) {
		warming_ = false; // the first drain starts its worker
	}
}

void DrainPool::join(PoolJob *d)
{
	std::unique_lock<std::mutex> lk(mu_);
	done_cv_.wait(lk, [d] { return d->released(); });
}

void DrainPool::worker()
{
	std::unique_lock<std::mutex> lk(mu_);
	for (;;) {
		idle_++;
		cv_.wait(lk, [this] { return !jobs_.empty(); });
		idle_--;
		PoolJob *d = jobs_.front();
		jobs_.pop_front();
		lk.unlock();
		const SchedChange sched = d->run_job();
		lk.lock();
		d->release(); // the last touch of d (join may free it now)
		done_cv_.notify_all();
		lk.unlock();
		default_scheduling(sched);
		lk.lock();
		if (idle_ >= kMaxIdle && jobs_.empty())
			return;
	}
}

void warm_drains(uint64_t subbuf_size)
{
	if (subbuf_size >= STRATA_MIN_SUBBUF_SIZE && subbuf_size <= STRATA_MAX_SUBBUF_SIZE)
		DrainPool::get().warm(subbuf_size);
}

} // namespace strata
