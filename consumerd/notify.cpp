/*
 * notify.cpp - acknowledged changes (docs/control-protocol.md).
 *
 * Contract: main thread only.  A change bumps change_ and signals the
 * processes it concerns; the controller's answer waits in pending_ until
 * they re-queried (acknowledge), exited, or the deadline passed.
 */
#include "daemon_impl.h"

namespace strata {
namespace daemon_impl {

// Does `pid` catch `signo` right now?  A process that exec'd since it
// registered has its handlers reset, and a real-time signal's default
// action would kill it: never send one it does not catch.
bool catches(pid_t pid, int signo)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", static_cast<int>(pid));
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	char line[256];
	unsigned long long mask = 0;
	bool found = false;
	while (!found && fgets(line, sizeof(line), f))
		found = sscanf(line, "SigCgt: %llx", &mask) == 1;
	fclose(f);
	return found && signo >= 1 && signo <= 64 && (mask >> (signo - 1)) & 1;
}

bool Daemon::targets(const Session &s, size_t rule, const Proc &p)
{
	if (!(s.uid == 0 || s.uid == p.uid))
		return false;
	if (rule >= s.targets.size())
		return true;
	const Target &t = s.targets[rule];
	if (t.pids.empty() && t.names.empty())
		return true;
	for (uint32_t pid : t.pids)
		if (static_cast<pid_t>(pid) == p.pid)
			return true;
	for (const std::string &n : t.names) // comm is cut at 15 bytes
		if (n == p.comm || (n.size() > 15 && p.comm.size() == 15 && n.compare(0, 15, p.comm) == 0))
			return true;
	return false;
}

std::vector<proto::Rule> Daemon::rules_for(const Session &s, const Proc &p)
{
	std::vector<proto::Rule> v;
	for (size_t i = 0; i < s.rules.size(); i++)
		if (targets(s, i, p))
			v.push_back(s.rules[i]);
	return v;
}

PendingReply Daemon::signal_concerned(const Session &s, int rule)
{
	PendingReply p;
	const uint64_t gen = ++change_;
	p.deadline = proto::now_ms() + 1000;
	for (auto &kv : procs_) {
		Proc &pr = kv.second;
		if (!pr.signo || kv.first < 0)
			continue;
		bool concerned = false;
		if (rule >= 0)
			concerned = targets(s, static_cast<size_t>(rule), pr);
		else if (s.rules.empty()) // a grant without rules: every process of the uid
			concerned = s.uid == 0 || s.uid == pr.uid;
		else
			for (size_t i = 0; i < s.rules.size() && !concerned; i++)
				concerned = targets(s, i, pr);
		if (!concerned)
			continue;
		if (pr.kmod && !kernel_registered(pr.pid)) {
			// It closed its registration: the module cannot reach it, it
			// falls back to our query (kmod_link.h), so we signal it.
			VLOG("pid %d no longer holds /dev/strata: signalled by us", pr.pid);
			pr.kmod = false;
		}
		if (pr.kmod) { // the module signalled it (kernel_apply/kernel_stop)
			if (kgen_)
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
	if (kgen_)
		p.kgens.push_back(kgen_);
	kgen_ = 0;
	return p;
}

void Daemon::notify_and_reply(Conn &c, uint32_t seq, const Session &s, const std::string &text, int rule)
{
	PendingReply p = signal_concerned(s, rule);
	const uint64_t gen = change_;
	p.conn_id = c.id;
	p.seq = seq;
	p.text = text;
	if (c.version >= 2) { // answered now; WAIT asks for the acknowledgements
		for (auto &w : p.waiting)
			c.unacked[w.first] = gen;
		c.kgens.insert(c.kgens.end(), p.kgens.begin(), p.kgens.end());
		reply(c, seq, 0,
		      text + " (generation " + std::to_string(gen) + ", " + std::to_string(p.signalled) +
			      " running process(es) signalled)");
		return;
	}
	if (p.waiting.empty()) {
		reply(c, seq, 0, text);
		return;
	}
	start_kwait(p);
	pending_.push_back(std::move(p));
}

void Daemon::do_wait(Conn &c, uint32_t seq, const proto::Wait &m)
{
	PendingReply p;
	p.conn_id = c.id;
	p.seq = seq;
	p.wait = true;
	p.deadline = proto::now_ms() + m.timeout_ms;
	for (auto &u : c.unacked) {
		auto it = pid_to_pidfd_.find(u.first);
		if (it == pid_to_pidfd_.end()) // exited: nothing left to apply
			continue;
		const Proc &pr = procs_[it->second];
		if (pr.kmod || pr.acked < u.second) // the module knows whether it acknowledged
			p.waiting.push_back(u);
	}
	p.signalled = c.unacked.size();
	c.unacked.clear();
	p.kgens.swap(c.kgens);
	start_kwait(p);
	pending_.push_back(std::move(p));
	answer_pending(false);
}

void Daemon::acknowledge(pid_t pid, uint64_t registered_at)
{
	for (PendingReply &p : pending_)
		p.waiting.erase(std::remove_if(p.waiting.begin(), p.waiting.end(),
					       [&](const std::pair<pid_t, uint64_t> &w) {
						       return w.first == pid && registered_at >= w.second;
					       }),
				p.waiting.end());
}

void Daemon::answer_pending(bool all)
{
	const int64_t now = proto::now_ms();
	for (size_t i = 0; i < pending_.size();) {
		PendingReply &p = pending_[i];
		if (!all && !p.waiting.empty() && (now < p.deadline || p.kwait_id)) {
			i++;
			continue;
		}
		for (auto &kv : conns_) {
			if (kv.second->id != p.conn_id)
				continue;
			size_t acked = p.signalled - p.waiting.size();
			if (!p.wait) {
				reply(*kv.second, p.seq, 0,
				      p.text + " (" + std::to_string(acked) + " of " + std::to_string(p.signalled) +
					      " running process(es) applied it)");
			} else if (p.waiting.empty()) {
				reply(*kv.second, p.seq, 0,
				      "acknowledged by " + std::to_string(acked) + " process(es)");
			} else {
				std::string t = "not acknowledged in time by " + std::to_string(p.waiting.size()) + " of " +
						std::to_string(p.signalled) + " process(es):";
				for (auto &w : p.waiting) {
					auto it = pid_to_pidfd_.find(w.first);
					t += " " + std::to_string(w.first) + " (" +
					     (it != pid_to_pidfd_.end() ? procs_[it->second].comm : std::string("?")) + ")";
				}
				reply(*kv.second, p.seq, -ETIMEDOUT, t);
			}
			break;
		}
		pending_.erase(pending_.begin() + static_cast<long>(i));
	}
}

int Daemon::pending_timeout_ms() const
{
	if (pending_.empty())
		return -1;
	int64_t first = INT64_MAX;
	for (const PendingReply &p : pending_)
		if (!p.kwait_id) // those are answered when their module WAIT ends
			first = std::min(first, p.deadline);
	if (first == INT64_MAX)
		return -1;
	int64_t left = first - proto::now_ms();
	return left < 0 ? 0 : static_cast<int>(left);
}

} // namespace daemon_impl
} // namespace strata
