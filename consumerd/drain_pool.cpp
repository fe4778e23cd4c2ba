/*
 * drain_pool.cpp - the pool of drain threads and their copy buffers
 * (drain_pool.h).
 */
#include "drain_pool.h"
#include "output.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <string>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <system_error>
#include <thread>
#include <unistd.h>

#include "huge_chunks.h"
#include "log.h"
#include "madv_populate.h"
#include "sched_policy.h"
#include "strata_abi.h"

namespace strata {

size_t batch_pad()
{
	return direct_io_asked() ? 16 * kMaxPacketAlign : 0;
}

namespace {
// The copy buffer a thread keeps from one drain to the next: a pooled
// worker runs drains one after another, and a fresh buffer per drain would
// cost each traced process's drain about 1 MiB of page population beside
// the starting processes.  Kept while the worker lives; remade when a
// drain needs more, or much less (sub-buffers of another size).  Drain
// thread only (thread_local).
struct FreeAligned {
	void operator()(uint8_t *p) const { free(p); }
};
struct BatchCache {
	std::unique_ptr<uint8_t, FreeAligned> buf;
	size_t cap = 0;
	bool populated = false;
};
thread_local BatchCache t_batch;
constexpr size_t kBatchSlack = 4u << 20; // kept up to this much above the need

// A copy buffer's size and alignment: whole 2 MiB pages (transparent huge
// pages, asked for by MADV_HUGEPAGE: Debian's default THP mode is
// madvise) when rounding the need up to them adds at most a quarter, else
// whole 4 KiB pages.  Populating 2 MiB of small pages took the worker 2.5
// ms on the PVM guest (a hypervisor trap a page, 5 us), in the kernel at
// nice -10 on the CPU beside a writer's first lap: a writer's collapse
// (collapse_ahead, writer_lane.h) waited that long for the lru drain's
// work item queued there (a short run 48 ns an event against 29).  One
// huge page is made in one fault.
constexpr size_t kHugeBatch = 2u << 20;
bool huge_batch(size_t need)
{
	const size_t up = (need + kHugeBatch - 1) & ~(kHugeBatch - 1);
	return need >= kHugeBatch / 2 && up - need <= need / 4 && !huge_pages_off();
}
} // namespace

CopyBuffer ready_batch(size_t need, bool populate, bool may_shrink)
{
	BatchCache &c = t_batch;
	if (c.cap < need || (may_shrink && c.cap - need > kBatchSlack)) {
		c.buf.reset();
		// Never zeroed: every byte is copied in (or zeroed as a
		// packet's padding) before it is written out.  Whole pages:
		// aligned_alloc's size is a multiple of its alignment.
		const bool huge = huge_batch(need);
		const size_t align = huge ? kHugeBatch : 4096;
		const size_t cap = (need + align - 1) & ~(align - 1);
		c.buf.reset(static_cast<uint8_t *>(aligned_alloc(align, cap)));
		c.cap = 0;
		if (!c.buf)
			throw std::bad_alloc(); // as new[] did
		// A hint: refused (THP off), small pages as before.
		if (huge)
			(void)madvise(c.buf.get(), cap, MADV_HUGEPAGE);
		c.cap = cap;
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
	if (d->multiplexable() && mux_on()) {
		d->idle_turns_ = 0;
		// A new buffer: its writer starts now.  The worker woken for
		// its first turn may be placed on that writer's CPU: quick
		// before the wake (mux_sched_apply), or the turn waited there
		// for the writer's slice (3.3 ms measured, its first lap's
		// pages all made by the writer).  Counted until a worker takes
		// it (mux_worker).
		d->first_lap_ = true;
		first_laps_++;
		lk.unlock();
		mux_sched_apply();
		lk.lock();
		mux_ready(d);
		return true;
	}
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
	if (mux_on()) // its workers are there already
		return;
	if (idle_ > jobs_.size() || warming_)
		return;
	warming_ = true;
	const size_t need = batch_need(subbuf_size);
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

// ---- Multiplexing ----------------------------------------------------
//
// A fixed set of workers (as many as CPUs, at least 2) runs every
// multiplexable drain turn by turn (PoolJob::step), and one reaper thread
// collects the futex waits of the idle ones from an io_uring (futex_ring.h).
// A job is in exactly one place at a time (PoolJob::Mux, under mu_):
// ready_, a worker, or armed (a timer in timers_ and at most one futex
// wait in the ring).  Whatever makes an armed job runnable first (its
// futex wait completing, its timer, finish()) moves it to ready_, and the
// others then find it no longer armed: one thread runs a drain at a time.
// A futex wait still in the ring when its job ends is cancelled, and the
// job released only when that wait completed: a completion never names a
// Drain that is gone.  A wait already queued for an older wake_seq is
// kept rather than doubled: if the word moved since, the kernel completes
// it (value changed at submission, or the writer's FUTEX_WAKE after it).

namespace {
uint64_t steady_ns()
{
	return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
					     std::chrono::steady_clock::now().time_since_epoch())
					     .count());
}

// The safety net of an idle buffer backs off from the drain's wait (50 ms)
// to kMaxIdleWaitMs after a few quiet turns: 10,000 idle processes then
// cost 10,000 cheap turns a second, not 200,000.  A writer's wake-up, not
// the timer, is what ends a wait with data.
constexpr int kMaxIdleWaitMs = 1000;
constexpr uint64_t kIdleGridNs = 50000000;
constexpr unsigned kCqEntries = 16384; // completions beyond it wait in the kernel's overflow list

// STRATA_CONSUMERD_DRAIN_THREADS=1: one thread per drain, as before the
// multiplexer (comparisons, kernels without io_uring futex waits).
bool threads_asked()
{
	const char *v = getenv("STRATA_CONSUMERD_DRAIN_THREADS");
	return v && *v && strcmp(v, "0") != 0;
}
} // namespace

// STRATA_CONSUMERD_FUTEX: "uring" (io_uring futex waits or none),
// "waitv" or "waitv:N" (futex_waitv on N waiter threads, 1-4; tests of the
// Linux 6.1 path on newer kernels), else the first that the kernel has.
bool DrainPool::open_waits()
{
	const char *v = getenv("STRATA_CONSUMERD_FUTEX");
	const std::string how = v ? v : "";
	const bool waitv_only = how.compare(0, 5, "waitv") == 0;
	if (!waitv_only && ring_.open(kCqEntries)) {
		waits_ = &ring_;
		return true;
	}
	if (how == "uring")
		return false;
	// As many waiters as CPUs, 2 to 4 (254 to 508 buffers): the daemon's
	// threads stay within 4 per CPU and a few.
	unsigned n = std::min(FutexWaitv::kMaxWaiters, std::max(2u, std::thread::hardware_concurrency()));
	if (how.size() > 6 && how[5] == ':')
		n = static_cast<unsigned>(strtoul(how.c_str() + 6, nullptr, 10));
	if (!waitv_.open(n))
		return false;
	waits_ = &waitv_;
	// In the daemon's log (not with -q: `strata record`'s terminal has
	// nothing to do with it); said with -q too when a buffer is first
	// polled, where it matters (mux_after).
	if (!daemon_impl::g_quiet)
		daemon_impl::logf(
			"drains: futex waits on %u buffers at most (futex_waitv threads; io_uring "
			"futex waits need Linux >= 6.7): more are polled at the drains' wait, 50 ms",
			waitv_.capacity());
	return true;
}

bool DrainPool::mux_on()
{
	if (mux_state_ != MuxState::kUnknown)
		return mux_state_ == MuxState::kOn;
	mux_state_ = MuxState::kOff;
	if (threads_asked())
		return false;
	if (!open_waits()) {
		// Said once, even with -q: the daemon's threads now grow with
		// the number of live traced processes (docs/consumerd.md).
		daemon_impl::logf("drains: one thread per live traced process: neither io_uring futex waits "
				  "(Linux >= 6.7) nor futex_waitv (Linux >= 5.16) to multiplex them on");
		return false;
	}
	const size_t n = std::max<size_t>(2, std::thread::hardware_concurrency());
	try {
		std::thread([this] { mux_reaper(); }).detach();
		for (size_t i = 0; i < n; i++) {
			std::thread([this] { mux_worker(); }).detach();
			mux_threads_++;
		}
	} catch (const std::system_error &) {
		if (mux_threads_ == 0) // the reaper alone: its ring stays idle
			return false;
	}
	mux_state_ = MuxState::kOn;
	return true;
}

size_t DrainPool::mux_workers()
{
	std::lock_guard<std::mutex> g(mu_);
	return mux_state_ == MuxState::kOn ? mux_threads_ : 0;
}

void DrainPool::mux_ready(PoolJob *d, bool notify)
{
	d->mux_ = PoolJob::Mux::kReady;
	ready_.push_back(d);
	if (notify)
		mux_cv_.notify_one();
}

void DrainPool::mux_disarm(PoolJob *d)
{
	if (d->first_lap_) {
		d->first_lap_ = false;
		first_laps_--;
	}
	if (d->timer_at_)
		timers_.erase({d->timer_at_, d});
	d->timer_at_ = 0;
}

void DrainPool::mux_after(PoolJob *d, StepResult r, const StepWait &w)
{
	if (r == StepResult::kWait && d->kick_)
		r = StepResult::kAgain; // finish() came during the turn
	d->kick_ = false;
	if (r == StepResult::kDone) {
		if (d->wait_out_ && waits_->submit_cancel(reinterpret_cast<uintptr_t>(d))) {
			d->mux_ = PoolJob::Mux::kEnding; // released at its wait's completion
			return;
		}
		// Not in the ring, or the cancel could not be queued: a wait
		// left behind would name a freed Drain; only a broken ring can
		// get here, and then no completion comes at all.
		d->release(); // the last touch of d (join may free it now)
		done_cv_.notify_all();
		return;
	}
	if (r == StepResult::kAgain) {
		d->idle_turns_ = 0;
		// No worker woken: this one, back in mux_worker's loop under mu_,
		// takes the front of ready_ next.  Woken, an idle worker took the
		// busy drain's next turn as often as not, or found ready_ empty and
		// slept again: a wake-up and a move to the other CPU per turn (the
		// daemon's wake-ups per 1000 events 0.078 against 0.064, a 1 MiB
		// sub-buffer ints record on 2 CPUs).  Whatever else is ready was
		// notified when it was queued.
		mux_ready(d, false);
		return;
	}
	d->mux_ = PoolJob::Mux::kArmed;
	if (w.first_lap) { // until it leaves kArmed (mux_disarm)
		d->first_lap_ = true;
		first_laps_++;
	}
	// False (FutexWaitv's slots all taken): no wait, the timer below at
	// the drain's own step, never backed off, polls it; the next turn
	// asks again.
	if (!d->wait_out_ && w.word) {
		d->wait_out_ = waits_->submit_wait(w.word, w.val, reinterpret_cast<uintptr_t>(d));
		// Said once, even with -q: from now on a burst of a polled
		// buffer may wait 50 ms for its drain (docs/ring-buffer.md,
		// "Linux 6.1"), which a newer kernel avoids.
		if (!d->wait_out_ && waits_ == &waitv_ && !polled_said_) {
			polled_said_ = true;
			daemon_impl::logf(
				"drains: more live buffers than the %u futex waits of this kernel: the "
				"others are polled every 50 ms, and a burst that fills one faster loses "
				"events (counted); Linux >= 6.7 waits on every buffer",
				waitv_.capacity());
		}
	}
	if (w.first_poll_us) { // a first lap's look: its own wait, not backed off
		d->timer_at_ = steady_ns() + static_cast<uint64_t>(w.first_poll_us) * 1000u;
		timers_.insert({d->timer_at_, d});
		return;
	}
	int ms = w.timeout_ms;
	if (d->wait_out_) { // woken by its writers: the timer is only a safety net
		for (unsigned i = 0; i < d->idle_turns_ && ms < kMaxIdleWaitMs; i++)
			ms *= 2;
		ms = std::max(w.timeout_ms, std::min(ms, kMaxIdleWaitMs));
		if (d->idle_turns_ < 16)
			d->idle_turns_++;
	}
	// Distinct keys: two jobs armed in the same nanosecond differ by
	// their pointer, the pair's second half.  A backed-off timer is
	// rounded up to kIdleGridNs: the idle buffers' turns then come in
	// batches, one worker wake-up for many, not one each.
	uint64_t at = steady_ns() + static_cast<uint64_t>(ms) * 1000000u;
	if (ms > w.timeout_ms)
		at = (at / kIdleGridNs + 1) * kIdleGridNs;
	d->timer_at_ = at;
	timers_.insert({d->timer_at_, d});
}

void DrainPool::mux_completed(PoolJob *d)
{
	d->wait_out_ = false;
	switch (d->mux_) {
	case PoolJob::Mux::kArmed:
		mux_disarm(d);
		mux_ready(d);
		break;
	case PoolJob::Mux::kEnding:
		d->release();
		done_cv_.notify_all();
		break;
	default: // ready or running: that turn re-arms it (with a new wait)
		break;
	}
}

void DrainPool::wake(PoolJob *d)
{
	std::lock_guard<std::mutex> g(mu_);
	if (d->mux_ == PoolJob::Mux::kArmed) {
		mux_disarm(d);
		mux_ready(d);
	} else if (d->mux_ == PoolJob::Mux::kRunning) {
		d->kick_ = true;
	}
}

void DrainPool::mux_worker()
{
	const size_t slot = mux_sched_join(true); // batch or quick until a streaming turn
	std::unique_lock<std::mutex> lk(mu_);
	StepWait w;
	SchedChange sched; // what this worker took for a streaming job
	bool streaming = false;
	RecentWriters recent; // where this worker's turns' writers ran lately
	for (;;) {
		if (!ready_.empty()) {
			PoolJob *d = ready_.front();
			ready_.pop_front();
			d->mux_ = PoolJob::Mux::kRunning;
			if (d->first_lap_) { // a new job's first turn (run)
				d->first_lap_ = false;
				first_laps_--;
			}
			lk.unlock();
			// The job's turns are this thread's now (mu_ ordered them
			// after its previous turn): its flag is ours to read.
			if (d->streaming() != streaming) {
				streaming = !streaming;
				if (streaming) {
					mux_sched_streaming(slot, true);
					sched = stream_scheduling();
				} else {
					default_scheduling(sched);
					mux_sched_streaming(slot, false);
				}
			}
			// A turn on a CPU where the job's writer runs stops that
			// writer for the turn while another CPU may idle: the wake-up
			// placed us there (docs/consumerd.md, "The daemon beside
			// its writers").  Off the CPUs of the writers of this
			// worker's recent turns, not this job's alone: no move at
			// each turn between two drains' writers on two CPUs.
			cpu_set_t busy;
			if (d->writer_cpus(&busy))
				(void)recent.before_turn(busy, steady_ns());
			w = StepWait();
			const StepResult r = d->step(&w);
			lk.lock();
			mux_after(d, r, w);
			continue;
		}
		// Before sleeping: a first lap's wait armed or ended since the
		// pool threads' policy was set?  Set it now, before the wake.
		if ((first_laps_ != 0) != quick_seen_) {
			lk.unlock();
			mux_sched_apply();
			lk.lock();
			continue;
		}
		if (timers_.empty()) {
			mux_cv_.wait(lk);
			continue;
		}
		const auto first = *timers_.begin();
		const uint64_t now = steady_ns();
		if (first.first > now) {
			mux_cv_.wait_for(lk, std::chrono::nanoseconds(first.first - now));
			continue;
		}
		PoolJob *d = first.second;
		mux_disarm(d); // armed: only armed jobs have timers
		mux_ready(d);
	}
}

void DrainPool::mux_reaper()
{
	(void)mux_sched_join(false); // quick, or the kernel's slice: never batch
	std::vector<FutexWaits::Done> done;
	for (;;) {
		done.clear();
		waits_->reap(done); // waits_ is set before this thread starts
		std::lock_guard<std::mutex> g(mu_);
		for (const FutexWaits::Done &c : done)
			mux_completed(reinterpret_cast<PoolJob *>(static_cast<uintptr_t>(c.tag)));
	}
}

size_t DrainPool::mux_sched_join(bool may_batch)
{
	std::lock_guard<std::mutex> s(sched_mu_);
	sched_slots_.push_back({static_cast<pid_t>(syscall(SYS_gettid)), may_batch, false});
	(void)between_turns(0, sched_quick_, may_batch);
	return sched_slots_.size() - 1;
}

void DrainPool::mux_sched_streaming(size_t slot, bool streaming)
{
	std::lock_guard<std::mutex> s(sched_mu_);
	SchedSlot &t = sched_slots_[slot];
	t.streaming = streaming;
	// Streaming: SCHED_OTHER with the kernel's slice, which
	// stream_scheduling then shortens; back: what the others have.
	(void)between_turns(0, !streaming && sched_quick_, t.may_batch && !streaming);
}

void DrainPool::mux_sched_apply()
{
	std::lock_guard<std::mutex> s(sched_mu_);
	bool want;
	{
		// Read and marked under mu_: a worker that changes first_laps_
		// after this sees quick_seen_ differ and applies again.
		std::lock_guard<std::mutex> g(mu_);
		want = first_laps_ != 0;
		quick_seen_ = want;
	}
	if (want == sched_quick_)
		return;
	sched_quick_ = want;
	for (const SchedSlot &t : sched_slots_)
		if (!t.streaming)
			(void)between_turns(t.tid, want, t.may_batch);
}

void warm_drains(uint64_t subbuf_size)
{
	if (subbuf_size >= STRATA_MIN_SUBBUF_SIZE && subbuf_size <= STRATA_MAX_SUBBUF_SIZE)
		DrainPool::get().warm(subbuf_size);
}

} // namespace strata
