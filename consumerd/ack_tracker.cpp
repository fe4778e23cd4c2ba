/*
 * ack_tracker.cpp - acknowledged changes (ack_tracker.h).
 */
#include "ack_tracker.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <set>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernel_source.h"
#include "log.h"
#include "process_registry.h"
#include "proto/sock.h"

namespace strata {
namespace daemon_impl {

namespace {
// The bit of `signo` in the mask `key` ("SigCgt:", "ShdPnd:") of
// /proc/PID/status; false if the process is gone.
bool status_bit(pid_t pid, const char *key, int signo)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", static_cast<int>(pid));
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	char line[256];
	char fmt[32];
	snprintf(fmt, sizeof(fmt), "%s %%llx", key);
	unsigned long long mask = 0;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, fmt, &mask) == 1;
	fclose(f);
	return found && signo >= 1 && signo <= 64 && (mask >> (signo - 1)) & 1;
}
} // namespace

// Does `pid` catch `signo` right now?  A process that exec'd since it
// registered has its handlers reset, and a real-time signal's default
// action would kill it: never send one it does not catch.
bool catches(pid_t pid, int signo)
{
	return status_bit(pid, "SigCgt:", signo);
}

bool pending(pid_t pid, int signo)
{
	return status_bit(pid, "ShdPnd:", signo);
}

bool AckTracker::start()
{
	efd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return efd_ >= 0;
}

void AckTracker::stop()
{
	quit_.store(true, std::memory_order_relaxed); // their next slice ends them
	for (auto &t : kwaiters_)
		t.second.join();
	kwaiters_.clear();
	if (efd_ >= 0)
		close(efd_);
	efd_ = -1;
}

namespace {
bool concerns(const Audience &a, int rule, const Proc &pr)
{
	if (rule >= 0)
		return targets(a, static_cast<size_t>(rule), pr);
	if (a.rules.empty()) // a grant without rules: every process of the uid
		return a.uid == 0 || a.uid == pr.uid;
	for (size_t i = 0; i < a.rules.size(); i++)
		if (targets(a, i, pr))
			return true;
	return false;
}
} // namespace

PendingReply AckTracker::signal(const Audience &a, int rule, uint64_t kgen)
{
	PendingReply p;
	const uint64_t gen = ++change_;
	p.deadline = proto::now_ms() + 1000;
	for (auto &kv : procs_.all()) {
		Proc &pr = kv.second;
		if (!pr.signo || kv.first < 0 || !concerns(a, rule, pr))
			continue;
		if (pr.kmod && !kernel_registered(pr.pid)) {
			// It closed its registration: the module cannot reach it, it
			// falls back to our query (kmod_link.h), so we signal it.
			VLOG("pid %d no longer holds /dev/strata: signalled by us", pr.pid);
			pr.kmod = false;
		}
		if (pr.kmod) { // the module signalled it (kernel_apply/kernel_stop)
			if (kgen)
				p.waiting.emplace_back(pr.pid, gen);
			continue;
		}
		if (!catches(pr.pid, pr.signo)) {
			VLOG("pid %d no longer catches signal %d (exec?): not signalled", pr.pid, pr.signo);
			continue;
		}
		if (syscall(SYS_pidfd_send_signal, kv.first, pr.signo, nullptr, 0) == 0)
			p.waiting.emplace_back(pr.pid, gen);
		else
			VLOG("pid %d: cannot signal: %s", pr.pid, strerror(errno));
	}
	p.signalled = p.waiting.size();
	if (kgen)
		p.kgens.push_back(kgen);
	return p;
}

void AckTracker::hold(PendingReply p)
{
	p.resignal_at = proto::now_ms() + kResignalMs;
	start_kwait(p);
	pending_.push_back(std::move(p));
}

void AckTracker::gate(uint64_t id, PendingReply p, int64_t timeout_ms)
{
	p.conn_id = 0;
	p.gate = id;
	p.deadline = proto::now_ms() + timeout_ms;
	hold(std::move(p));
}

void AckTracker::owe(uint64_t conn_id, const PendingReply &p)
{
	Owed &o = owed_[conn_id];
	for (auto &w : p.waiting)
		o.unacked[w.first] = change_;
	o.kgens.insert(o.kgens.end(), p.kgens.begin(), p.kgens.end());
}

void AckTracker::wait(uint64_t conn_id, uint32_t seq, int64_t timeout_ms)
{
	PendingReply p;
	p.conn_id = conn_id;
	p.seq = seq;
	p.wait = true;
	p.deadline = proto::now_ms() + timeout_ms;
	Owed o;
	auto it = owed_.find(conn_id);
	if (it != owed_.end()) {
		o = std::move(it->second);
		owed_.erase(it);
	}
	for (auto &u : o.unacked) {
		const Proc *pr = procs_.find(u.first);
		if (!pr) // exited: nothing left to apply
			continue;
		if (pr->kmod || pr->acked < u.second) // the module knows whether it acknowledged
			p.waiting.push_back(u);
	}
	p.signalled = o.unacked.size();
	p.kgens.swap(o.kgens);
	hold(std::move(p));
}

void AckTracker::forget(uint64_t conn_id)
{
	owed_.erase(conn_id);
	// Its WAIT has nobody to answer (nor to carry its laggards over to).
	pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
				      [&](const PendingReply &p) { return p.wait && p.conn_id == conn_id; }),
		       pending_.end());
}

// A WAIT that timed out: the processes it still waited for are owed to the
// connection's next WAIT, so that a second WAIT does not answer "acknowledged"
// while one of them has not applied the change yet (a stopped process).
void AckTracker::carry_over(const PendingReply &p)
{
	if (!p.wait || !p.conn_id || p.waiting.empty())
		return;
	Owed &o = owed_[p.conn_id];
	bool kmod = false;
	for (auto &w : p.waiting) {
		uint64_t &g = o.unacked[w.first];
		g = std::max(g, w.second);
		const Proc *pr = procs_.find(w.first);
		kmod = kmod || (pr && pr->kmod);
	}
	if (kmod)
		o.kgens.insert(o.kgens.end(), p.kgens.begin(), p.kgens.end());
}

void AckTracker::acknowledge(pid_t pid, uint64_t registered_at)
{
	for (PendingReply &p : pending_)
		p.waiting.erase(std::remove_if(p.waiting.begin(), p.waiting.end(),
					       [&](const std::pair<pid_t, uint64_t> &w) {
						       return w.first == pid && registered_at >= w.second;
					       }),
				p.waiting.end());
}

namespace {
DueReply answer(const PendingReply &p, const ProcessRegistry &procs)
{
	DueReply d;
	d.conn_id = p.conn_id;
	d.seq = p.seq;
	d.gate = p.gate;
	d.unacked = p.waiting.size();
	const size_t acked = p.signalled - p.waiting.size();
	if (!p.wait && !p.gate) {
		d.text = p.text + " (" + std::to_string(acked) + " of " + std::to_string(p.signalled) +
			 " running process(es) applied it)";
	} else if (p.waiting.empty()) {
		d.text = "acknowledged by " + std::to_string(acked) + " process(es)";
	} else {
		d.status = -ETIMEDOUT;
		d.text = "not acknowledged in time by " + std::to_string(p.waiting.size()) + " of " +
			 std::to_string(p.signalled) + " process(es):";
		for (auto &w : p.waiting) {
			const Proc *pr = procs.find(w.first);
			d.text += " " + std::to_string(w.first) + " (" + (pr ? pr->comm : std::string("?")) +
				  ")";
		}
	}
	return d;
}
} // namespace

std::vector<DueReply> AckTracker::due(bool all)
{
	std::vector<DueReply> out;
	const int64_t now = proto::now_ms();
	if (!all)
		resignal(now);
	for (size_t i = 0; i < pending_.size();) {
		PendingReply &p = pending_[i];
		if (!all && !p.waiting.empty() && (now < p.deadline || p.kwait_id)) {
			i++;
			continue;
		}
		out.push_back(answer(p, procs_));
		if (!all)
			carry_over(p);
		pending_.erase(pending_.begin() + static_cast<long>(i));
	}
	return out;
}

int AckTracker::timeout_ms() const
{
	if (pending_.empty())
		return -1;
	int64_t first = INT64_MAX;
	for (const PendingReply &p : pending_)
		if (!p.kwait_id) // those are answered when their module WAIT ends
			first = std::min({first, p.deadline, p.waiting.empty() ? INT64_MAX : p.resignal_at});
	if (first == INT64_MAX)
		return -1;
	int64_t left = first - proto::now_ms();
	return left < 0 ? 0 : static_cast<int>(left);
}

// The processes the held answers have waited for kResignalMs since their
// last signal, signalled again (ack_tracker.h): each once, those we signal
// (not the module's), that still catch the signal and have none pending.
void AckTracker::resignal(int64_t now)
{
	std::set<pid_t> done;
	for (PendingReply &p : pending_) {
		if (p.waiting.empty() || now < p.resignal_at)
			continue;
		p.resignal_at = now + kResignalMs;
		for (const auto &w : p.waiting) {
			Proc *pr = procs_.find(w.first);
			if (!pr || pr->kmod || !pr->signo || pr->pidfd < 0 || pr->acked >= w.second ||
			    !done.insert(w.first).second)
				continue;
			if (pending(pr->pid, pr->signo) || !catches(pr->pid, pr->signo))
				continue; // on its way (a stopped process), or it cannot take one
			if (syscall(SYS_pidfd_send_signal, pr->pidfd, pr->signo, nullptr, 0) == 0)
				logf("pid %d (%s): change %llu not acknowledged after %lld ms of waiting, "
				     "and no signal pending: signalled again",
				     pr->pid, pr->comm.c_str(), static_cast<unsigned long long>(w.second),
				     static_cast<long long>(kResignalMs));
			else
				VLOG("pid %d: cannot signal: %s", pr->pid, strerror(errno));
		}
	}
}

// If `p` waits for processes the module signalled: WAIT on the module, on a
// thread of its own (the event loop goes on), until p's deadline.
void AckTracker::start_kwait(PendingReply &p)
{
	bool kmod = false;
	for (auto &w : p.waiting) {
		const Proc *pr = procs_.find(w.first);
		kmod = kmod || (pr && pr->kmod);
	}
	if (!kmod || p.kgens.empty() || efd_ < 0)
		return;
	std::vector<uint64_t> gens = p.kgens;
	std::sort(gens.begin(), gens.end());
	gens.erase(std::unique(gens.begin(), gens.end()), gens.end());
	const int64_t end = p.deadline;
	const uint64_t id = p.kwait_id = next_kwait_++;
	kwaiters_.emplace(
		id, std::thread([this, id, gens, end] {
			KWaitDone d;
			d.id = id;
			std::vector<uint32_t> missing;
			for (uint64_t g : gens) {
				int r;
				// In slices, so that the daemon's exit never waits long.
				for (;;) {
					const int64_t left = std::max<int64_t>(0, end - proto::now_ms());
					r = kernel_wait(g,
							static_cast<uint32_t>(std::min<int64_t>(left, 200)),
							missing);
					if (r != -ETIMEDOUT || left <= 200 ||
					    quit_.load(std::memory_order_relaxed))
						break;
				}
				if (r == 0)
					continue;
				if (d.status == 0 || d.status == -ETIMEDOUT)
					d.status = r;
				d.missing.insert(d.missing.end(), missing.begin(), missing.end());
				if (r != -ETIMEDOUT)
					break;
			}
			{
				std::lock_guard<std::mutex> lk(mu_);
				done_.push_back(std::move(d));
			}
			const uint64_t one = 1;
			ssize_t w = write(efd_, &one, sizeof one); // wakes the event loop
			(void)w;
		}));
}

// Main thread: module WAITs that finished.  Their processes not reported
// missing acknowledged.
void AckTracker::on_wait_done()
{
	uint64_t n;
	ssize_t r = read(efd_, &n, sizeof n);
	(void)r;
	std::vector<KWaitDone> done;
	{
		std::lock_guard<std::mutex> lk(mu_);
		done.swap(done_);
	}
	for (KWaitDone &d : done) {
		auto t = kwaiters_.find(d.id);
		if (t != kwaiters_.end()) { // it has finished but for returning
			t->second.join();
			kwaiters_.erase(t);
		}
		const std::set<uint32_t> missing(d.missing.begin(), d.missing.end());
		for (PendingReply &p : pending_) {
			if (p.kwait_id != d.id)
				continue;
			p.kwait_id = 0;
			if (d.status != 0 && d.status != -ETIMEDOUT)
				continue; // the module could not tell: nobody counts as acknowledged
			p.waiting.erase(std::remove_if(p.waiting.begin(), p.waiting.end(),
						       [&](const std::pair<pid_t, uint64_t> &w) {
							       const Proc *pr = procs_.find(w.first);
							       return pr && pr->kmod &&
								      !missing.count(
									      static_cast<uint32_t>(w.first));
						       }),
					p.waiting.end());
		}
	}
}

} // namespace daemon_impl
} // namespace strata
