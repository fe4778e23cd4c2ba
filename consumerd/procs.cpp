/*
 * procs.cpp - the process registry.
 *
 * Contract: main thread only.  A process is known by its pidfd (exit
 * detection); REGISTER answers its state query, BUFFER attaches its ring
 * to a session's drain; the buffer is hostile (Drain::create validates it).
 */
#include "daemon_impl.h"

namespace strata {
namespace daemon_impl {

void Daemon::do_register(Conn &c, uint32_t seq, const proto::Register &m)
{
	if (m.abi_major != STRATA_ABI_MAJOR) {
		reply(c, seq, -EPROTONOSUPPORT,
		      "buffer ABI " + std::to_string(m.abi_major) + " not supported (daemon: " +
			      std::to_string(STRATA_ABI_MAJOR) + ")");
		return;
	}
	c.registered = true;
	const pid_t pid = c.cred.pid;
	// The peer's credentials, not the payload's, decide (the payload's pid
	// is in the process's own pid namespace and is only informational).
	Proc *p = &proc_for(pid, c.cred.uid);
	p->comm = m.comm;
	if (p->date.empty())
		p->date = local_timestamp();
	if (!m.events.empty() || p->events.empty()) // a re-query from a signal handler lists none
		p->events = m.events;
	// Only ever set: REGISTERs of one process may be read out of order (a
	// table join's, queued on the quiet socket, after the round trip tp-async
	// made next on the socket itself), and a process never stops catching
	// its signal (an exec that drops it is caught by catches()).
	if (m.flags & proto::kRegisterAsync)
		p->signo = static_cast<int>(m.signo);
	p->kmod = (m.flags & proto::kRegisterModule) != 0;
	c.registered_at = change_;
	if (!(m.flags & proto::kRegisterHandoff))
		note_joined(*p);
	if (m.flags & proto::kRegisterHandoff) { // a buffer made at a first event follows
		c.table = true;
		c.registered_at = 0; // its close acknowledges no change
		VLOG("pid %d (%s) hands over a buffer made at its first event", pid, m.comm.c_str());
		return;
	}
	VLOG("pid %d (%s) registered, %zu tracepoints%s", pid, m.comm.c_str(), m.events.size(),
	     p->kmod ? " (the module answers its state queries)"
		     : (m.flags & proto::kRegisterTable) ? " (joined from the grant table)" : "");
	if (m.flags & proto::kRegisterTable) { // grant_table.cpp: nothing to answer
		table_registered(c, *p, m.table_gen);
		return;
	}
	if (p->kmod) { // an announcement or a hand-off: no grant from us
		c.kmod = true;
		n_handoffs_++;
		send(c, seq, proto::RegisterReply{});
		return;
	}
	n_queries_++;

	proto::RegisterReply rr;
	for (auto &s : sessions_) {
		if (s->state != proto::SessionState::Active || !(s->uid == 0 || s->uid == c.cred.uid))
			continue;
		// Only the rules that target this process; none (in a session
		// that has rules): no buffer.
		std::vector<proto::Rule> rules = rules_for(*s, *p);
		if (rules.empty() && !s->rules.empty())
			continue;
		proto::SessionGrant g;
		g.slot = s->slot;
		g.session_id = s->run_id;
		g.channel = s->channel;
		g.rules = std::move(rules);
		if (getrandom(g.trace_uuid, sizeof(g.trace_uuid), 0) != sizeof(g.trace_uuid))
			for (auto &b : g.trace_uuid)
				b = static_cast<uint8_t>(rand());
		g.trace_uuid[6] = static_cast<uint8_t>((g.trace_uuid[6] & 0x0f) | 0x40); // v4
		g.trace_uuid[8] = static_cast<uint8_t>((g.trace_uuid[8] & 0x3f) | 0x80);
		Grant &gr = c.grants[s->slot];
		gr.session_id = s->run_id;
		memcpy(gr.uuid, g.trace_uuid, 16);
		rr.sessions.push_back(std::move(g));
	}
	// The clock page travels with the answer (SCM_RIGHTS), read-only.
	send(c, seq, rr, clock_page_ ? clock_page_->fd() : -1);
}

void Daemon::note_joined(const Proc &p)
{
	for (auto &s : sessions_) {
		if (s->state != proto::SessionState::Active || s->companion_of || !(s->uid == 0 || s->uid == p.uid) ||
		    (!s->rules.empty() && rules_for(*s, p).empty()))
			continue;
		s->joined++;
		for (const proto::EventName &e : p.events)
			if (s->declared.size() < proto::kMaxDeclared)
				s->declared.insert(e.name);
	}
}

// The process record of `pid`, made (with a pidfd for exit detection) on
// first sight.
Proc &Daemon::proc_for(pid_t pid, uid_t uid)
{
	auto it = pid_to_pidfd_.find(pid);
	Proc *p = nullptr;
	if (it != pid_to_pidfd_.end()) {
		p = &procs_[it->second];
	} else {
		int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
		const bool gone = pidfd < 0 && errno == ESRCH;
		if (pidfd < 0) {
			// Without exit detection the drain still ends at STOP; a
			// process already gone ends its drains with its connection.
			if (gone)
				VLOG("pid %d exited before its REGISTER was read: its buffers are drained to the end "
				     "when its connection closes", pid);
			else
				logf("pid %d: pidfd_open: %s (exit detection off)", pid, strerror(errno));
			static int fake = -2;
			pidfd = fake--;
		} else {
			struct epoll_event ev = {};
			ev.events = EPOLLIN;
			ev.data.fd = pidfd;
			epoll_ctl(epfd_, EPOLL_CTL_ADD, pidfd, &ev);
		}
		p = &procs_[pidfd];
		p->pidfd = pidfd;
		p->gone = gone;
		if (!tables_.count(uid))
			tables_dirty_ = true; // a uid with no table yet: publish one
		pid_to_pidfd_[pid] = pidfd;
	}
	p->pid = pid;
	p->uid = uid;
	return *p;
}

// Early buffers: a process that found no daemon at start and had
// STRATA_EARLY set records into a buffer of its own (slot 15, memfd
// "strata-slot-15", see libtrace/control/sync_query.cpp).  With
// --adopt-early, a session that starts adopts the early buffers of the
// processes it may trace (its owner's, or all for root) that no drain reads
// yet: the buffer is opened through
// /proc/PID/fd and drained like any other, from its first event.  The
// buffer is hostile like any other: Drain validates it.
void Daemon::adopt_early(Session &s)
{
	// The module's kernel events from boot, when it recorded some (root
	// sessions only: kernel events show every process).
	if (s.uid == 0)
		kernel_adopt_boot(s.out, s.clock, s.owner, hostname_, s.drains,
				  [&](Drain &d) { attach_output(s, d); });
	DIR *proc = opendir("/proc");
	if (!proc)
		return;
	std::set<std::pair<dev_t, ino_t>> seen; // buffers adopted by this call
	while (struct dirent *de = readdir(proc)) {
		char *end = nullptr;
		const long pid = strtol(de->d_name, &end, 10);
		if (pid <= 0 || *end || pid == getpid())
			continue;
		const std::string base = std::string("/proc/") + de->d_name;
		struct stat st;
		if (stat(base.c_str(), &st) != 0 || !(s.uid == 0 || st.st_uid == s.uid))
			continue;
		auto known = pid_to_pidfd_.find(static_cast<pid_t>(pid));
		if (known != pid_to_pidfd_.end() && !procs_[known->second].drains.empty())
			continue; // already drained by a session of ours
		DIR *fds = opendir((base + "/fd").c_str());
		if (!fds)
			continue;
		// Every early buffer the process holds: its own, and those it keeps
		// for its forked children (libtrace/slots.cpp; the child may have
		// exited).  The header names the producer; a buffer seen through
		// several processes (a child inherits its siblings') is adopted once.
		while (struct dirent *fe = readdir(fds)) {
			char target[128];
			const std::string link = base + "/fd/" + fe->d_name;
			ssize_t n = readlink(link.c_str(), target, sizeof(target) - 1);
			if (n <= 0)
				continue;
			target[n] = 0;
			if (strncmp(target, "/memfd:strata-slot-15", 21) != 0)
				continue;
			int buf = open(link.c_str(), O_RDWR | O_CLOEXEC);
			if (buf < 0)
				continue;
			adopt_early_buffer(s, buf, static_cast<pid_t>(pid), st.st_uid, seen);
		}
		closedir(fds);
	}
	closedir(proc);
}

// One early buffer `buf` (owned here) found in process `holder`.
void Daemon::adopt_early_buffer(Session &s, int buf, pid_t holder, uid_t uid, std::set<std::pair<dev_t, ino_t>> &seen)
{
	struct stat bst;
	if (fstat(buf, &bst) != 0 || !seen.insert({bst.st_dev, bst.st_ino}).second) {
		close(buf);
		return;
	}
	{
		strata_buffer_header hdr;
		if (pread(buf, &hdr, sizeof hdr, 0) != static_cast<ssize_t>(sizeof hdr) ||
		    hdr.magic != STRATA_ABI_MAGIC) {
			close(buf);
			return; // not made yet (a child that never opened it), or not ours
		}
		// The producer: the holder itself, or a child it keeps the buffer of.
		const long pid = hdr.pid > 0 && static_cast<pid_t>(hdr.pid) != holder ? static_cast<long>(hdr.pid) : holder;
		if (pid != holder) {
			auto known = pid_to_pidfd_.find(static_cast<pid_t>(pid));
			if (known != pid_to_pidfd_.end() && !procs_[known->second].drains.empty()) {
				close(buf);
				return; // already drained by a session of ours
			}
		}
		std::string comm(hdr.comm, strnlen(hdr.comm, sizeof hdr.comm));
		Proc &p = proc_for(static_cast<pid_t>(pid), uid);
		if (p.comm.empty())
			p.comm = comm.empty() ? std::string("pid") : comm;
		if (p.date.empty())
			p.date = local_timestamp();
		std::string dir = s.out + "/ust/pid/" + file_safe(p.comm) + "-" + std::to_string(p.pid) + "-" + p.date;
		for (int k = 1; access(dir.c_str(), F_OK) == 0; k++)
			dir = s.out + "/ust/pid/" + file_safe(p.comm) + "-" + std::to_string(p.pid) + "-" + p.date + "." +
			      std::to_string(k);
		TraceEnv env;
		env.procname = p.comm;
		env.pid = p.pid;
		env.hostname = hostname_;
		std::string err;
		std::unique_ptr<Drain> d = Drain::create(buf, hdr.trace_uuid, dir, s.clock, env, s.owner, err);
		if (!d) {
			logf("pid %ld: early buffer rejected: %s", pid, err.c_str());
			return;
		}
		// A flight recorder until now: its history first, then everything
		// as it comes (docs/ring-buffer.md, "Streaming a flight recorder").
		const bool dead = kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
		const bool streamed = d->stream_overwrite(dead);
		attach_output(s, *d);
		d->start();
		p.drains.push_back(d.get());
		s.drains.push_back(std::move(d));
		INFO("pid %ld (%s): adopted its early buffer into session %s%s", pid, p.comm.c_str(), s.name.c_str(),
		     streamed ? " (flight recorder until now)" : "");
	}
}

void Daemon::do_buffer(Conn &c, uint32_t seq, const proto::Buffer &m)
{
	state_dirty_ = true; // restart.cpp: a buffer to keep
	int fd = -1;
	if (m.status == 0) {
		if (c.fds.empty()) {
			reply(c, seq, -EBADF, "BUFFER without its file descriptor");
			return;
		}
		fd = c.fds.front();
		c.fds.pop_front();
	}
	Grant grant;
	if (c.kmod) { // granted by the module: our session in that slot, the buffer's own uuid
		if (!module_grant(c, m.slot, fd, grant)) {
			if (fd >= 0)
				close(fd);
			reply(c, seq, -ESTALE, "no session of yours is active in slot " + std::to_string(m.slot));
			return;
		}
	} else if (c.table) { // from the grant table: the session it names, if still active
		if (!table_grant(c, m, fd, grant)) {
			if (fd >= 0)
				close(fd);
			logf("pid %d: its buffer for slot %u names a session that is not active (any more): dropped",
			     c.cred.pid, m.slot);
			reply(c, seq, -ESTALE, "no session of yours is active in slot " + std::to_string(m.slot));
			return;
		}
	} else {
		auto g = c.grants.find(m.slot);
		if (g == c.grants.end()) {
			if (fd >= 0)
				close(fd);
			reply(c, seq, -EINVAL, "slot " + std::to_string(m.slot) + " was not granted");
			return;
		}
		grant = g->second;
		c.grants.erase(g);
	}
	if (m.status != 0) {
		logf("pid %d could not open its buffer for slot %u: %s", c.cred.pid, m.slot, strerror(-m.status));
		reply(c, seq, 0, "noted");
		return;
	}
	Session *s = nullptr;
	for (auto &x : sessions_)
		if (x->run_id == grant.session_id)
			s = x.get();
	if (!s || s->state != proto::SessionState::Active) {
		close(fd);
		reply(c, seq, -ESTALE, "the session is no longer active");
		return;
	}
	auto pit = pid_to_pidfd_.find(c.cred.pid);
	if (pit == pid_to_pidfd_.end()) { // exit already handled (on_exit reads first: not expected)
		close(fd);
		reply(c, seq, -ESRCH, "the process has exited");
		return;
	}
	Proc &p = procs_[pit->second];
	std::string dir = s->out + "/ust/pid/" + file_safe(p.comm) + "-" + std::to_string(p.pid) + "-" + p.date;
	for (int n = 1; access(dir.c_str(), F_OK) == 0; n++)
		dir = s->out + "/ust/pid/" + file_safe(p.comm) + "-" + std::to_string(p.pid) + "-" + p.date +
		      "." + std::to_string(n);
	TraceEnv env;
	env.procname = p.comm;
	env.pid = p.pid;
	env.hostname = hostname_;
	if (!s->streamed() && attacher_running()) { // attach.cpp: off this thread, answered from there
		AttachJob j;
		j.conn_id = c.id;
		j.seq = seq;
		j.pid = c.cred.pid;
		j.run_id = s->run_id;
		j.fd = fd;
		memcpy(j.uuid, grant.uuid, 16);
		j.dir = dir;
		j.clock = s->clock;
		j.env = env;
		j.owner = s->owner;
		j.awaited = std::make_shared<std::atomic<bool>>(true);
		c.attaching.push_back(j.awaited);
		queue_attach(std::move(j));
		return;
	}
	std::string err;
	std::unique_ptr<Drain> d = Drain::create(fd, grant.uuid, dir, s->clock, env, s->owner, err);
	if (!d) {
		logf("pid %d slot %u: buffer rejected: %s", c.cred.pid, m.slot, err.c_str());
		reply(c, seq, -EINVAL, "buffer rejected: " + err);
		return;
	}
	// Validated and mapped: answer now, the process is waiting in its
	// constructor.  The thread start and all file work (directories,
	// metadata) come after; a failure there is logged by the drain thread
	// and costs the process only its bounded buffer.
	reply(c, seq, 0, "ok");
	flush_out(c); // out of the cork: the thread start below is 0.1-0.3 ms here
	c.corked = true;
	attach_output(*s, *d);
	d->start();
	p.drains.push_back(d.get());
	s->drains.push_back(std::move(d));
	VLOG("pid %d: draining slot %u into %s", p.pid, m.slot, dir.c_str());
}

void Daemon::on_exit(int pidfd)
{
	auto it = procs_.find(pidfd);
	if (it == procs_.end())
		return;
	// What the process sent before it died comes first: a BUFFER still
	// unread on its connection (epoll may list the pidfd first) is adopted
	// and drained with the rest, and needs its Proc to be found.
	const pid_t pid = it->second.pid;
	std::vector<int> mine;
	for (auto &c : conns_)
		if (c.second->cred.pid == pid && c.second->role == proto::Role::Process)
			mine.push_back(c.first);
	for (int fd : mine) {
		auto c = conns_.find(fd);
		if (c != conns_.end())
			on_readable(*c->second); // may drop it (EOF)
	}
	settle_attaches(); // its drains, all of them, before they are told it died
	it = procs_.find(pidfd);
	if (it == procs_.end())
		return;
	VLOG("pid %d (%s) exited", it->second.pid, it->second.comm.c_str());
	acknowledge(it->second.pid, UINT64_MAX); // nothing left to apply
	for (Drain *d : it->second.drains)
		d->finish(true); // the drain flushes and closes on its own thread
	pid_to_pidfd_.erase(it->second.pid);
	if (pidfd >= 0) { // not a stand-in for a process gone before its REGISTER was read
		epoll_ctl(epfd_, EPOLL_CTL_DEL, pidfd, nullptr);
		close(pidfd);
	}
	procs_.erase(it);
	owner_exited(pid); // restart.cpp: a restored session's owner; the books changed
}

} // namespace daemon_impl
} // namespace strata
