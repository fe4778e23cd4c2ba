/*
 * process_registry.cpp - the process registry (process_registry.h).
 */
#include "process_registry.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "session.h"

namespace strata {
namespace daemon_impl {

ProcessRegistry::~ProcessRegistry()
{
	for (auto &kv : procs_)
		if (kv.first >= 0)
			close(kv.first);
}

Proc &ProcessRegistry::get(pid_t pid, uid_t uid, bool *made)
{
	auto it = pid_to_pidfd_.find(pid);
	Proc *p = nullptr;
	if (made)
		*made = it == pid_to_pidfd_.end();
	if (it != pid_to_pidfd_.end()) {
		p = &procs_[it->second];
	} else {
		int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
		const bool gone = pidfd < 0 && errno == ESRCH;
		if (pidfd < 0) {
			// Without exit detection the drain still ends at STOP; a
			// process already gone ends its drains with its connection.
			if (gone)
				VLOG("pid %d exited before its REGISTER was read: its buffers are drained to "
				     "the end "
				     "when its connection closes",
				     pid);
			else
				logf("pid %d: pidfd_open: %s (exit detection off)", pid, strerror(errno));
			pidfd = next_fake_--;
		} else if (!watch_(pidfd)) {
			// Watched nowhere: as without a pidfd.
			logf("pid %d: cannot watch its exit: %s (exit detection off)", pid, strerror(errno));
			close(pidfd);
			pidfd = next_fake_--;
		}
		p = &procs_[pidfd];
		p->pidfd = pidfd;
		p->gone = gone;
		pid_to_pidfd_[pid] = pidfd;
	}
	p->pid = pid;
	p->uid = uid;
	return *p;
}

Proc *ProcessRegistry::find(pid_t pid)
{
	auto it = pid_to_pidfd_.find(pid);
	return it == pid_to_pidfd_.end() ? nullptr : &procs_[it->second];
}

const Proc *ProcessRegistry::find(pid_t pid) const
{
	auto it = pid_to_pidfd_.find(pid);
	if (it == pid_to_pidfd_.end())
		return nullptr;
	auto p = procs_.find(it->second);
	return p == procs_.end() ? nullptr : &p->second;
}

Proc *ProcessRegistry::by_pidfd(int pidfd)
{
	auto it = procs_.find(pidfd);
	return it == procs_.end() ? nullptr : &it->second;
}

void ProcessRegistry::erase(int pidfd)
{
	auto it = procs_.find(pidfd);
	if (it == procs_.end())
		return;
	pid_to_pidfd_.erase(it->second.pid);
	if (pidfd >= 0) { // not a stand-in for a process gone before its REGISTER was read
		unwatch_(pidfd);
		close(pidfd);
	}
	procs_.erase(it);
}

void ProcessRegistry::forget_drains(const Session &s)
{
	for (auto &p : procs_) {
		// A process-tree session's root may come back as another process
		// (a reused pid) that an old answer does not describe.
		auto &t = p.second.trees;
		if (s.tree > 0)
			t.erase(std::remove_if(t.begin(), t.end(),
					       [&](const auto &x) { return x.first == s.tree; }),
				t.end());
		auto &v = p.second.drains;
		v.erase(std::remove_if(v.begin(), v.end(),
				       [&](Drain *d) {
					       for (auto &x : s.drains)
						       if (x.get() == d)
							       return true;
					       return false;
				       }),
			v.end());
	}
}

namespace {

// The parent of `pid` (/proc/PID/stat's fourth field, after the comm,
// which may hold spaces and parentheses); 0 if it is gone.
pid_t parent_of(pid_t pid)
{
	char path[64], buf[512];
	snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
	FILE *f = fopen(path, "re");
	if (!f)
		return 0;
	const size_t n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = 0;
	const char *e = strrchr(buf, ')');
	int ppid = 0;
	if (!e || sscanf(e + 1, " %*c %d", &ppid) != 1)
		return 0;
	return ppid;
}

// Whether `pid` is `root` or descends from it: its parent chain, read as
// the daemon sees it (both pids are SO_PEERCRED's, in the daemon's pid
// namespace).  A process gone before it was looked at is outside.
bool descends_from(pid_t pid, pid_t root)
{
	// An ancestor may exit while the chain is read (a daemon's fork, setsid,
	// fork: its parents exit at once).  Its children were reparented (to the
	// nearest subreaper, as `strata record` is) before it could be reaped,
	// so a chain that breaks at a vanished process is read again from the
	// start, where it now leads past it.
	for (int attempt = 0; attempt < 16; attempt++) {
		pid_t p = pid;
		bool broken = false;
		for (int depth = 0; p > 1 && depth < 4096; depth++) {
			if (p == root)
				return true;
			const pid_t up = parent_of(p);
			if (up <= 0) {
				broken = p != pid; // the process itself gone: outside
				break;
			}
			p = up;
		}
		if (!broken)
			return false;
	}
	return false;
}

} // namespace

// Rules (session.h): here, beside the Proc they are matched against.
bool reaches(const Audience &a, const Proc &p)
{
	if (!(a.uid == 0 || a.uid == p.uid))
		return false;
	if (a.tree <= 0)
		return true;
	for (const auto &t : p.trees)
		if (t.first == a.tree)
			return t.second;
	const bool in = descends_from(p.pid, a.tree);
	p.trees.emplace_back(a.tree, in);
	return in;
}

bool targets(const Audience &a, size_t rule, const Proc &p)
{
	if (!reaches(a, p))
		return false;
	if (rule >= a.targets.size())
		return true;
	const Target &t = a.targets[rule];
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

std::vector<proto::Rule> rules_for(const Audience &a, const Proc &p)
{
	std::vector<proto::Rule> v;
	for (size_t i = 0; i < a.rules.size(); i++)
		if (targets(a, i, p))
			v.push_back(a.rules[i]);
	return v;
}

} // namespace daemon_impl
} // namespace strata
