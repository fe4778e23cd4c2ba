/*
 * attacher.cpp - the attacher thread (attacher.h).
 */
#include "attacher.h"

#include <sys/eventfd.h>
#include <system_error>
#include <unistd.h>

#include "log.h"

namespace strata {
namespace daemon_impl {

bool Attacher::start()
{
	efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (efd_ < 0)
		return false;
	try {
		thread_ = std::thread([this] { loop(); });
	} catch (const std::system_error &e) {
		logf("cannot start the attacher thread (%s): BUFFERs are attached on the main thread",
		     e.what());
		close(efd_);
		efd_ = -1;
		return false;
	}
	return true;
}

void Attacher::stop()
{
	if (!thread_.joinable())
		return;
	{
		std::lock_guard<std::mutex> lk(mu_);
		quit_ = true;
	}
	cv_.notify_one();
	thread_.join();
	close(efd_);
	efd_ = -1;
}

void Attacher::loop()
{
	std::unique_lock<std::mutex> lk(mu_);
	for (;;) {
		cv_.wait(lk, [this] { return quit_ || !q_.empty(); });
		if (q_.empty())
			return; // quit, nothing left
		AttachJob j = std::move(q_.front());
		q_.pop_front();
		busy_++;
		lk.unlock();
		j.drain = Drain::create(j.fd, j.uuid, j.dir, j.clock, j.env, j.owner, j.err);
		j.fd = -1; // Drain::create closed it
		if (j.drain)
			j.drain->start();
		// Relaxed: nothing is published through the flag (the result is,
		// under mu_); a stale true costs one needless wake-up.
		const bool wake = j.awaited && j.awaited->load(std::memory_order_relaxed);
		lk.lock();
		busy_--;
		done_.push_back(std::move(j));
		idle_cv_.notify_all();
		if (wake) {
			const uint64_t one = 1;
			ssize_t w = write(efd_, &one, sizeof one); // wakes the event loop
			(void)w;
		}
	}
}

void Attacher::queue(AttachJob j)
{
	{
		std::lock_guard<std::mutex> lk(mu_);
		q_.push_back(std::move(j));
	}
	cv_.notify_one();
}

std::vector<AttachJob> Attacher::take(bool woken)
{
	std::vector<AttachJob> out;
	if (!thread_.joinable())
		return out;
	if (woken) {
		uint64_t n;
		ssize_t r = read(efd_, &n, sizeof n);
		(void)r;
	}
	std::lock_guard<std::mutex> lk(mu_);
	out.swap(done_);
	return out;
}

std::vector<AttachJob> Attacher::settle()
{
	if (!thread_.joinable())
		return {};
	{
		std::unique_lock<std::mutex> lk(mu_);
		idle_cv_.wait(lk, [this] { return q_.empty() && busy_ == 0; });
	}
	// Nothing new can be done now: only the main thread queues jobs.
	return take();
}

} // namespace daemon_impl
} // namespace strata
