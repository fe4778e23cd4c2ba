/*
 * futex_waitv.cpp - see futex_waitv.h for the contract.  Raw system calls:
 * futex_waitv(2) has no glibc wrapper (Debian 12's headers have its
 * number and struct).
 */
#include "futex_waitv.h"

#include <cerrno>
#include <climits>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <system_error>
#include <thread>
#include <unistd.h>

namespace strata {

namespace {
long waitv(struct futex_waitv *v, unsigned n)
{
	const long r = syscall(SYS_futex_waitv, v, n, 0, nullptr, 0);
	return r < 0 ? -errno : r;
}
} // namespace

bool FutexWaitv::open(unsigned waiters)
{
	// The probe: a word that does not hold the value ends the call at
	// once with EAGAIN; ENOSYS before Linux 5.16, EPERM under seccomp.
	uint32_t probe = 1;
	struct futex_waitv v = {};
	v.val = 0;
	v.uaddr = reinterpret_cast<uintptr_t>(&probe);
	v.flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
	if (waitv(&v, 1) != -EAGAIN)
		return false;
	if (waiters < 1)
		waiters = 1;
	if (waiters > kMaxWaiters)
		waiters = kMaxWaiters;
	std::lock_guard<std::mutex> g(mu_);
	for (unsigned i = 0; i < waiters; i++) {
		Waiter *w = &waiters_[i];
		w->slots.reserve(kSlots);
		try {
			std::thread([this, w] { waiter(w); }).detach();
		} catch (const std::system_error &) {
			break;
		}
		n_++;
	}
	return n_ > 0;
}

unsigned FutexWaitv::capacity()
{
	std::lock_guard<std::mutex> g(mu_);
	return n_ * kSlots;
}

void FutexWaitv::poke(Waiter *w)
{
	// Relaxed: the waiter reads ctl under mu_ with its set (the mutex
	// orders the two); the kernel compares the live word at its call.
	__atomic_add_fetch(&w->ctl, 1, __ATOMIC_RELAXED);
	syscall(SYS_futex, &w->ctl, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

bool FutexWaitv::submit_wait(const uint32_t *word, uint32_t val, uint64_t tag)
{
	std::lock_guard<std::mutex> g(mu_);
	Waiter *best = nullptr; // the least loaded waiter with room
	for (unsigned i = 0; i < n_; i++)
		if (waiters_[i].slots.size() < kSlots &&
		    (!best || waiters_[i].slots.size() < best->slots.size()))
			best = &waiters_[i];
	if (!best)
		return false; // every slot taken: the caller polls this one
	best->slots.push_back(Slot{word, val, tag, false});
	poke(best);
	return true;
}

bool FutexWaitv::submit_cancel(uint64_t tag)
{
	std::lock_guard<std::mutex> g(mu_);
	for (unsigned i = 0; i < n_; i++)
		for (Slot &s : waiters_[i].slots)
			if (s.tag == tag && !s.cancel) {
				s.cancel = true; // completed by its waiter, once back
				poke(&waiters_[i]);
				return true;
			}
	return true; // completed already (its completion reaped or on its way)
}

void FutexWaitv::reap(std::vector<Done> &out)
{
	std::unique_lock<std::mutex> lk(mu_);
	done_cv_.wait(lk, [this] { return !done_.empty(); });
	out.insert(out.end(), done_.begin(), done_.end());
	done_.clear();
}

namespace {
// The current values of `n` words that may be unmapped (a drain ending
// unmaps its buffer before it cancels its wait): read by the kernel, one
// call for all, a fault ending that word only.  ok[i]: word i was read.
void read_words(const FutexWaitv::Word *words, unsigned n, uint32_t *vals, bool *ok)
{
	struct iovec local[FutexWaitv::kSlots], remote[FutexWaitv::kSlots];
	for (unsigned i = 0; i < n; i++) {
		local[i] = {&vals[i], sizeof(uint32_t)};
		remote[i] = {const_cast<uint32_t *>(words[i]), sizeof(uint32_t)};
		ok[i] = false;
	}
	const pid_t self = getpid();
	for (unsigned i = 0; i < n;) {
		const ssize_t r = process_vm_readv(self, local + i, n - i, remote + i, n - i, 0);
		if (r < 0 && errno != EFAULT)
			return; // refused (seccomp): none read, every slot completes
		const unsigned got = r > 0 ? static_cast<unsigned>(r) / sizeof(uint32_t) : 0;
		for (unsigned j = 0; j < got; j++)
			ok[i + j] = true;
		i += got + 1; // past the word that faulted (or the last one)
	}
}
} // namespace

void FutexWaitv::settle(Waiter *w, unsigned n, long r)
{
	// After EAGAIN (a word other than the one asked for moved: a wake
	// lost while this thread was not in the call, or the control word)
	// or an error: which words moved, read safely.  After a wake-up the
	// words are not read: one that moved unseen ends the next call at
	// once with EAGAIN.
	uint32_t vals[kSlots];
	bool ok[kSlots] = {};
	const bool scan = r < 0 && r != -EINTR && r != -ETIMEDOUT;
	if (scan) {
		Word words[kSlots];
		for (unsigned i = 0; i < n; i++)
			words[i] = w->slots[i].word;
		read_words(words, n, vals, ok);
	}
	size_t kept = 0;
	const size_t before = done_.size();
	for (size_t i = 0; i < w->slots.size(); i++) {
		const Slot &s = w->slots[i];
		int32_t res = 1; // 1: kept
		if (s.cancel)
			res = -ECANCELED;
		else if (r >= 1 && static_cast<size_t>(r) == i + 1)
			res = 0; // the word futex_waitv says woke it
		else if (scan && i < n && !ok[i])
			res = r == -EAGAIN ? -EFAULT
					   : static_cast<int32_t>(r); // unreadable: its turn decides
		else if (scan && i < n && vals[i] != s.val)
			res = -EAGAIN; // moved: a writer's wake lost, or before the call
		if (res == 1)
			w->slots[kept++] = s;
		else
			done_.push_back(Done{s.tag, res});
	}
	w->slots.resize(kept);
	if (done_.size() != before)
		done_cv_.notify_one();
}

void FutexWaitv::waiter(Waiter *w)
{
	struct futex_waitv v[1 + kSlots];
	std::unique_lock<std::mutex> lk(mu_);
	for (;;) {
		// Cancels that came before this thread first ran (or while it
		// was out of the call) complete now: their pokes bumped the
		// control word before the value read below, so the call would
		// not end for them (unit.futex_waits_test hung that way, a
		// cancel submitted before the waiter thread had started).
		settle(w, 0, -EINTR);
		// The set as it is now; the control word's value read with it
		// (under mu_, as every change bumps it): a change after this
		// ends the call below at once.
		const unsigned n = static_cast<unsigned>(w->slots.size());
		v[0] = {};
		v[0].val = __atomic_load_n(&w->ctl, __ATOMIC_RELAXED);
		v[0].uaddr = reinterpret_cast<uintptr_t>(&w->ctl);
		v[0].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
		for (unsigned i = 0; i < n; i++) {
			v[1 + i] = {};
			v[1 + i].val = w->slots[i].val;
			v[1 + i].uaddr = reinterpret_cast<uintptr_t>(w->slots[i].word);
			v[1 + i].flags = FUTEX_32; // shared: the writers are other processes
		}
		lk.unlock();
		const long r = waitv(v, 1 + n);
		lk.lock();
		settle(w, n, r);
	}
}

} // namespace strata
