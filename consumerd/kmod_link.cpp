/*
 * kmod_link.cpp - the kernel module link (kernel_source.h).
 *
 * Contract: a module WAIT runs on a thread of its own that only calls
 * kernel_wait and hands its result over through kwait_done_ (kwait_mu_)
 * and kwait_efd_; everything else, grants and slots included, is main
 * thread.
 */
#include "daemon_impl.h"

namespace strata {
namespace daemon_impl {

// If `p` waits for processes the module signalled: WAIT on the module, on a
// thread of its own (the event loop goes on), until p's deadline.
void Daemon::start_kwait(PendingReply &p)
{
	bool kmod = false;
	for (auto &w : p.waiting) {
		auto it = pid_to_pidfd_.find(w.first);
		kmod = kmod || (it != pid_to_pidfd_.end() && procs_[it->second].kmod);
	}
	if (!kmod || p.kgens.empty() || kwait_efd_ < 0)
		return;
	std::vector<uint64_t> gens = p.kgens;
	std::sort(gens.begin(), gens.end());
	gens.erase(std::unique(gens.begin(), gens.end()), gens.end());
	const int64_t end = p.deadline;
	const uint64_t id = p.kwait_id = next_kwait_++;
	kwaiters_.emplace(id, std::thread([this, id, gens, end] {
		KWaitDone d;
		d.id = id;
		std::vector<uint32_t> missing;
		for (uint64_t g : gens) {
			int r;
			// In slices, so that the daemon's exit never waits long.
			for (;;) {
				const int64_t left = std::max<int64_t>(0, end - proto::now_ms());
				r = kernel_wait(g, static_cast<uint32_t>(std::min<int64_t>(left, 200)), missing);
				if (r != -ETIMEDOUT || left <= 200 || kwait_quit_.load(std::memory_order_relaxed))
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
			std::lock_guard<std::mutex> lk(kwait_mu_);
			kwait_done_.push_back(std::move(d));
		}
		const uint64_t one = 1;
		ssize_t w = write(kwait_efd_, &one, sizeof one); // wakes the event loop
		(void)w;
	}));
}

// Main thread: module WAITs that finished.  Their processes not reported
// missing acknowledged.
void Daemon::on_kwait_done()
{
	for (KWaitDone &d : take_results(kwait_efd_, kwait_mu_, kwait_done_)) {
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
							       auto it = pid_to_pidfd_.find(w.first);
							       return it != pid_to_pidfd_.end() &&
								      procs_[it->second].kmod &&
								      !missing.count(static_cast<uint32_t>(w.first));
						       }),
					p.waiting.end());
		}
	}
}

// A BUFFER from a process the module answers: the session is ours in that
// slot, active, visible to the peer and set in the module with its grant;
// the trace uuid is the buffer's own (each process draws its own, so that
// babeltrace2 never merges two processes' sub-traces).  The buffer header
// is hostile: Drain::create validates all of it.
bool Daemon::module_grant(const Conn &c, uint32_t slot, int fd, Grant &grant)
{
	for (auto &x : sessions_) {
		if (x->slot != slot || x->state != proto::SessionState::Active || !(x->uid == 0 || x->uid == c.cred.uid) ||
		    !kernel_grants(slot))
			continue;
		return grant_of_buffer(x->run_id, fd, grant);
	}
	return false;
}

bool grant_of_buffer(uint64_t run_id, int fd, Grant &grant)
{
	grant.session_id = run_id;
	strata_buffer_header h;
	if (fd >= 0) {
		if (pread(fd, &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h))
			return false;
		memcpy(grant.uuid, h.trace_uuid, 16);
	}
	return true;
}

// What the module hands a process with the session's rules (kernel_source.h).
KmodGrant Daemon::grant_of(const Session &s) const
{
	KmodGrant g;
	g.session_id = s.run_id;
	g.channel = s.channel;
	g.sock_path = path_;
	for (const Target &t : s.targets)
		g.targets.emplace_back(t.pids, t.names);
	return g;
}

// The session's rules into the module's slot (START, a rule change): a
// kernel buffer it creates is drained with the session's output (a relay
// session streams it, attach_output).
void Daemon::apply_kernel(Session &s)
{
	const KmodGrant g = grant_of(s);
	kernel_apply(s.slot, s.uid, s.rules, s.channel, s.out, s.clock, s.owner, hostname_, s.drains, &g, &kgen_,
		     [&](Drain &d) { attach_output(s, d); });
}

// START: a slot another daemon set in the module meanwhile would collide
// (-EBUSY): take one free in both.
void Daemon::move_off_busy_slot(Session &s)
{
	const uint32_t busy = kernel_busy_slots();
	if (!(busy & (1u << s.slot)))
		return;
	uint32_t used = busy;
	for (auto &x : sessions_)
		if (x.get() != &s)
			used |= 1u << x->slot;
	for (uint32_t slot = 0; slot < proto::kMaxSlots; slot++)
		if (!(used & (1u << slot))) {
			INFO("session %s: slot %u is taken in the kernel module, using slot %u", s.name.c_str(), s.slot,
			     slot);
			s.slot = slot;
			return;
		}
}

} // namespace daemon_impl
} // namespace strata
