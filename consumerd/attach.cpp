/*
 * attach.cpp - the attacher thread: a process's BUFFER validated, mapped
 * and given its drain thread off the main thread (daemon_impl.h).
 *
 * Why: a Unix socket's wake-up is synchronous, so the scheduler runs the
 * woken main thread on the sending process's CPU.  A process does not wait
 * for BUFFER's answer (docs/control-protocol.md), but the main thread's
 * work on it (validate and map the buffer: ~0.2 ms on a VM; start a
 * thread: ~0.2 ms) preempted the process while its start-up was still
 * running, and another CPU sat idle (docs/benchmarks.md).  The main thread
 * now only reads BUFFER and queues it; the attacher, woken by a futex
 * (not a synchronous wake-up: the scheduler prefers its idle previous
 * CPU), does the rest.
 *
 * Contract:
 *   - roles: the main thread queues jobs (queue_attach), integrates their
 *     results (attach_done, settle_attaches) and owns everything it
 *     integrates into (sessions, processes, connections, answers); the
 *     attacher thread only runs Drain::create and Drain::start on the job
 *     it took, touching nothing of the daemon's but attach_*;
 *   - attach_q_, attach_done_, attach_busy_ and attach_quit_ are guarded
 *     by attach_mu_; a job moves queue -> attacher -> done under it, so
 *     the Drain the attacher made is complete before the main thread sees
 *     it (the mutex orders both);
 *   - settle_attaches() waits until no job is queued or running and
 *     integrates them all: the main thread calls it before anything that
 *     looks at or ends a session's or a process's drains (a stop, an exit,
 *     a controller's command, a snapshot, shutdown), so an attach in
 *     flight is never missed.  Between those, collect_attaches() takes
 *     what is done at every turn of the event loop;
 *   - the attacher wakes the event loop (attach_efd_) only while the
 *     job's connection is open (AttachJob::awaited), because someone may
 *     wait for BUFFER's answer.  A process that closed has not waited:
 *     waking the main thread then would only preempt it again on its CPU
 *     (the wake-up lands there), so its drain joins the books at the next
 *     turn of the loop, at the latest at its exit (pidfd);
 *   - a relay session's BUFFER stays on the main thread (its output is
 *     the session's, made before the drain starts).
 */
#include "daemon_impl.h"

namespace strata {
namespace daemon_impl {

void Daemon::start_attacher()
{
	attach_efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (attach_efd_ < 0)
		return; // BUFFERs are then attached on the main thread
	struct epoll_event ev = {};
	ev.events = EPOLLIN;
	ev.data.fd = attach_efd_;
	epoll_ctl(epfd_, EPOLL_CTL_ADD, attach_efd_, &ev);
	try {
		attacher_ = std::thread([this] { attacher_loop(); });
	} catch (const std::system_error &e) {
		logf("cannot start the attacher thread (%s): BUFFERs are attached on the main thread", e.what());
		close(attach_efd_);
		attach_efd_ = -1;
	}
}

void Daemon::stop_attacher()
{
	if (!attacher_.joinable())
		return;
	settle_attaches();
	{
		std::lock_guard<std::mutex> lk(attach_mu_);
		attach_quit_ = true;
	}
	attach_cv_.notify_one();
	attacher_.join();
	close(attach_efd_);
	attach_efd_ = -1;
}

bool Daemon::attacher_running() const
{
	return attacher_.joinable();
}

void Daemon::attacher_loop()
{
	std::unique_lock<std::mutex> lk(attach_mu_);
	for (;;) {
		attach_cv_.wait(lk, [this] { return attach_quit_ || !attach_q_.empty(); });
		if (attach_q_.empty())
			return; // quit, nothing left
		AttachJob j = std::move(attach_q_.front());
		attach_q_.pop_front();
		attach_busy_++;
		lk.unlock();
		j.drain = Drain::create(j.fd, j.uuid, j.dir, j.clock, j.env, j.owner, j.err);
		j.fd = -1; // Drain::create closed it
		if (j.drain)
			j.drain->start();
		// Relaxed: nothing is published through the flag (the result is,
		// under attach_mu_); a stale true costs one needless wake-up.
		const bool wake = j.awaited && j.awaited->load(std::memory_order_relaxed);
		lk.lock();
		attach_busy_--;
		attach_done_.push_back(std::move(j));
		attach_idle_cv_.notify_all();
		if (wake) {
			const uint64_t one = 1;
			ssize_t w = write(attach_efd_, &one, sizeof one); // wakes the event loop
			(void)w;
		}
	}
}

void Daemon::queue_attach(AttachJob j)
{
	{
		std::lock_guard<std::mutex> lk(attach_mu_);
		attach_q_.push_back(std::move(j));
	}
	attach_cv_.notify_one();
}

// Main thread: the attacher's eventfd fired.  Results so far, no waiting.
void Daemon::attach_done()
{
	for (AttachJob &j : take_results(attach_efd_, attach_mu_, attach_done_))
		integrate(j);
}

// Main thread, every turn of the event loop: results so far, no waiting.
void Daemon::collect_attaches()
{
	if (!attacher_.joinable())
		return;
	std::vector<AttachJob> done;
	{
		std::lock_guard<std::mutex> lk(attach_mu_);
		done.swap(attach_done_);
	}
	for (AttachJob &j : done)
		integrate(j);
}

void Daemon::settle_attaches()
{
	if (!attacher_.joinable())
		return;
	{
		std::unique_lock<std::mutex> lk(attach_mu_);
		attach_idle_cv_.wait(lk, [this] { return attach_q_.empty() && attach_busy_ == 0; });
	}
	// Nothing new can be done now: only this thread queues jobs.
	collect_attaches();
}

// Main thread: one job's result joins its session and process, and its
// connection (if still open) gets the answer BUFFER used to get at once.
void Daemon::integrate(AttachJob &j)
{
	Conn *c = nullptr;
	for (auto &kv : conns_)
		if (kv.second->id == j.conn_id)
			c = kv.second.get();
	if (!j.drain) {
		logf("pid %d: buffer rejected: %s", static_cast<int>(j.pid), j.err.c_str());
		if (c) {
			reply(*c, j.seq, -EINVAL, "buffer rejected: " + j.err);
			flush_out(*c);
		}
		return;
	}
	Session *s = nullptr;
	for (auto &x : sessions_)
		if (x->run_id == j.run_id && x->state == proto::SessionState::Active)
			s = x.get();
	auto pit = pid_to_pidfd_.find(j.pid);
	if (!s || pit == pid_to_pidfd_.end()) {
		// Not expected: whatever ends a session or a process settles first.
		drop_attach(j);
		return;
	}
	if (c) {
		reply(*c, j.seq, 0, "ok");
		flush_out(*c);
	}
	Proc &p = procs_[pit->second];
	p.drains.push_back(j.drain.get());
	state_dirty_ = true; // restart.cpp: a buffer to keep
	VLOG("pid %d: draining into %s", static_cast<int>(j.pid), j.drain->dir().c_str());
	s->drains.push_back(std::move(j.drain));
}

void Daemon::drop_attach(AttachJob &j)
{
	logf("pid %d: its session or its record went away while its buffer was attached; "
	     "what it recorded is flushed to %s",
	     static_cast<int>(j.pid), j.drain->dir().c_str());
	j.drain->finish(true);
	j.drain->join();
}

} // namespace daemon_impl
} // namespace strata
