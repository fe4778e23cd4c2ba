/*
 * processes.cpp - a process's messages and life (processes.h): REGISTER
 * answers its state query, BUFFER attaches its ring to a session's drain
 * (on the attacher thread, attacher.h, whose results join here), its exit
 * ends its drains (process_ends.cpp, with its connection's end); and early
 * adoption at START.
 *
 * Contract: processes.h's.  Main thread only.  A process is known by its
 * pidfd (process_registry.h); the buffer is hostile (Drain::create
 * validates it).
 */
#include "processes.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <dirent.h>
#include <fcntl.h>
#include <memory>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agg_layout.h"
#include "control/names.h"
#include "kernel_source.h"
#include "log.h"
#include "strata_abi.h"

namespace strata {
namespace daemon_impl {

namespace {
// A process's sub-trace in a session: ust/pid/COMM-PID-DATE, with ".1",
// ".2"... when that directory exists already (an exec'd image, a reused pid).
std::string sub_trace_dir(const Session &s, const Proc &p)
{
	const std::string base =
		s.out + "/ust/pid/" + file_safe(p.comm) + "-" + std::to_string(p.pid) + "-" + p.date;
	std::string dir = base;
	for (int n = 1; access(dir.c_str(), F_OK) == 0; n++)
		dir = base + "." + std::to_string(n);
	return dir;
}

// env.vpid the pid the process sees (REGISTER's), env.pid the daemon's when
// they differ (a container, docs/security.md).
TraceEnv trace_env(const Proc &p, const std::string &hostname)
{
	TraceEnv env;
	env.procname = p.comm;
	env.pid = p.vpid > 0 ? p.vpid : p.pid;
	env.host_pid = p.pid;
	env.hostname = hostname;
	return env;
}

// A process of the session's user that the module's tree grant vouches for
// (kernel_tree_grants) and that is gone: its parent chain was the module's
// to look at, while it lived.
bool tree_vouched(const Conn &c, const Session &s, const Proc &p)
{
	return p.kmod && kernel_tree_grants(s.slot) && c.cred.uid == s.uid && kill(c.cred.pid, 0) != 0 &&
	       errno == ESRCH;
}
// STRATA_TEST_ANSWER_DELAY_MS (tests only): the main thread sleeps that
// long before each state query's answer, a daemon that read the query and
// answers late, as on a loaded machine (Traced.StateQueryReadLate...).
void answer_late_for_tests()
{
	delay_for_tests("STRATA_TEST_ANSWER_DELAY_MS");
}
} // namespace

void Processes::do_register(Conn &c, const proto::Message &msg)
{
	const proto::Register &m = std::get<proto::Register>(msg.body);
	const uint32_t seq = msg.seq;
	if (m.abi_major != STRATA_ABI_MAJOR) {
		p_.conns.reply(c, seq, -EPROTONOSUPPORT,
			       "buffer ABI " + std::to_string(m.abi_major) +
				       " not supported (daemon: " + std::to_string(STRATA_ABI_MAJOR) + ")");
		return;
	}
	if (m.flags & proto::kRegisterNote) {
		note_probes(c, m);
		return;
	}
	c.registered = true;
	const pid_t pid = c.cred.pid;
	// The peer's credentials, not the payload's, decide (the payload's pid
	// is in the process's own pid namespace and is only informational).
	Proc *p = &proc_for(pid, c.cred.uid);
	p->comm = m.comm;
	p->vpid = static_cast<pid_t>(m.pid);
	if (p->date.empty())
		p->date = local_timestamp();
	if (!m.events.empty() || p->events.empty()) { // a re-query from a signal handler lists none
		p->events = m.events;
		// What LIST shows and whether its probes mark can be believed
		// come from the same REGISTER: an exec'd older image tells nothing.
		p->tells_probes = c.version >= proto::kMarksVersion;
	}
	if (m.flags & proto::kRegisterProbes)
		p->probes = true;
	// Only ever set: REGISTERs of one process may be read out of order (a
	// table join's, queued on the quiet socket, after the round trip tp-async
	// made next on the socket itself), and a process never stops catching
	// its signal (an exec that drops it is caught by catches()).
	if (m.flags & proto::kRegisterAsync)
		p->signo = static_cast<int>(m.signo);
	p->kmod = (m.flags & proto::kRegisterModule) != 0;
	c.registered_at = p_.acks.generation();
	if (!(m.flags & proto::kRegisterHandoff))
		p_.sessions.note_joined(*p);
	if (m.flags & proto::kRegisterHandoff) { // a buffer made at a first event follows
		c.table = true;
		c.registered_at = 0; // its close acknowledges no change
		VLOG("pid %d (%s) hands over a buffer made at its first event", pid, m.comm.c_str());
		return;
	}
	VLOG("pid %d (%s) registered, %zu tracepoints%s", pid, m.comm.c_str(), m.events.size(),
	     p->kmod                             ? " (the module answers its state queries)"
	     : (m.flags & proto::kRegisterTable) ? " (joined from the grant table)"
						 : "");
	if (m.flags & proto::kRegisterTable) { // grant_tables.h: nothing to answer
		table_registered(c, *p, m.table_gen);
		return;
	}
	if (p->kmod) { // an announcement or a hand-off: no grant from us
		c.kmod = true;
		n_handoffs_++;
		p_.conns.send(c, seq, proto::RegisterReply{});
		return;
	}
	n_queries_++;
	proto::RegisterReply rr;
	grant_sessions(c, *p, rr);
	answer_late_for_tests();
	c.asked = true; // until it sends more: did the answer reach it (Conn::answer_lost)?
	// The clock page travels with the answer (SCM_RIGHTS), read-only.
	p_.conns.send(c, seq, rr, host_.clock_page_fd());
}

// REGISTER(kRegisterNote | kRegisterProbes): the process made its probe
// report after it registered (libtrace/control/sync_marks.cpp).
// The peer's credentials name the process, which only marks itself; its
// record is made if this note was read before its REGISTER (they travel on
// different connections), and nothing else is answered, joined or counted.
void Processes::note_probes(Conn &c, const proto::Register &m)
{
	Proc &p = proc_for(c.cred.pid, c.cred.uid);
	if (p.gone && p.drains.empty() && p.events.empty()) {
		p_.procs.erase(p.pidfd); // exited already: nothing to list
		return;
	}
	if (p.comm.empty())
		p.comm = m.comm;
	p.probes = true;
	VLOG("pid %d (%s) has a probe report", c.cred.pid, p.comm.c_str());
}

// A state query's answer: the active sessions open to the process, with the
// rules that target it, each with a new trace uuid (remembered for BUFFER).
void Processes::grant_sessions(Conn &c, const Proc &p, proto::RegisterReply &rr)
{
	for (auto &s : p_.sessions.all()) {
		// A stopping session (Session::stopping) is granted no more.
		if (s->state != proto::SessionState::Active || s->stopping ||
		    !(s->uid == 0 || s->uid == c.cred.uid) || !reaches(*s, p))
			continue;
		// Only the rules that target this process; none (in a session
		// that has rules): no buffer.
		std::vector<proto::Rule> rules = rules_for(*s, p);
		if (rules.empty() && !s->rules.empty())
			continue;
		// An aggregation reaches only a process that asked in version 6
		// (an older libstrata could not aggregate: it is not granted the
		// session at all, rather than a grant it would take for recording).
		if (!s->aggregate.empty() && c.version < proto::kAggVersion)
			continue;
		proto::SessionGrant g;
		g.slot = s->slot;
		g.session_id = s->run_id;
		g.channel = s->channel;
		g.rules = std::move(rules);
		g.aggregate = s->aggregate;
		g.agg_filter = s->agg_filter;
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
}

// REGISTER(kRegisterTable): the process joined from its uid's table at
// generation `gen`, armed and quiesced before it sent this; its BUFFERs
// follow on this connection and nothing is answered.  From a stale table,
// an asynchronous process is signalled to ask again.
void Processes::table_registered(Conn &c, Proc &p, uint64_t gen)
{
	c.table = true;
	const bool fresh = p_.tables.joined(c.cred.uid, gen, c.quiet);
	// Its close acknowledges what it applied: the state at `gen`, i.e.
	// every change so far when nothing changed since.
	c.registered_at = fresh ? p_.acks.generation() : 0;
	if (fresh)
		return;
	VLOG("pid %d joined from a stale grant table (generation %llu)%s", p.pid,
	     static_cast<unsigned long long>(gen), p.signo ? ": signalled to ask again" : "");
	if (p.signo && p.pidfd >= 0 && catches(p.pid, p.signo) &&
	    syscall(SYS_pidfd_send_signal, p.pidfd, p.signo, nullptr, 0) != 0)
		VLOG("pid %d: cannot signal: %s", p.pid, strerror(errno));
}

// The process record of `pid` (process_registry.h); a uid not seen yet
// gets its grant table.
Proc &Processes::proc_for(pid_t pid, uid_t uid)
{
	bool made = false;
	Proc &p = p_.procs.get(pid, uid, &made);
	if (made)
		p_.tables.saw_uid(uid);
	return p;
}

// Early buffers: a process that found no daemon at start and had
// STRATA_EARLY set records into a buffer of its own (slot 15, memfd
// "strata-slot-15", see libtrace/control/sync_join.cpp).  With
// --adopt-early, a session that starts adopts the early buffers of the
// processes it may trace (its owner's, or all for root) that no drain reads
// yet: the buffer is opened through
// /proc/PID/fd and drained like any other, from its first event.  The
// buffer is hostile like any other: Drain validates it.
void Processes::adopt_early(Session &s)
{
	// A process-tree session's processes start after it: no early buffer
	// (they are other programs') is its.
	if (p_.adopt_early && s.tree <= 0)
		adopt_early_buffers(s);
}

void Processes::adopt_early_buffers(Session &s)
{
	// The module's kernel events from boot, when it recorded some (root
	// sessions only: kernel events show every process).
	if (s.uid == 0)
		kernel_adopt_boot(s.out, s.clock, s.owner, p_.hostname, s.drains,
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
		const Proc *known = p_.procs.find(static_cast<pid_t>(pid));
		if (known && !known->drains.empty())
			continue; // already drained by a session of ours
		DIR *fds = opendir((base + "/fd").c_str());
		if (!fds)
			continue;
		// Every early buffer the process holds: its own, and those it keeps
		// for its forked children (libtrace/runtime/slots.cpp; the child may have
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
void Processes::adopt_early_buffer(Session &s, int buf, pid_t holder, uid_t uid,
				   std::set<std::pair<dev_t, ino_t>> &seen)
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
		const long pid = hdr.pid > 0 && static_cast<pid_t>(hdr.pid) != holder
					 ? static_cast<long>(hdr.pid)
					 : holder;
		if (pid != holder) {
			const Proc *known = p_.procs.find(static_cast<pid_t>(pid));
			if (known && !known->drains.empty()) {
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
		const std::string dir = sub_trace_dir(s, p);
		const TraceEnv env = trace_env(p, p_.hostname);
		std::string err;
		std::unique_ptr<Drain> d =
			Drain::create(buf, hdr.trace_uuid, dir, s.clock, env, s.owner, err);
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
		INFO("pid %ld (%s): adopted its early buffer into session %s%s", pid, p.comm.c_str(),
		     s.name.c_str(), streamed ? " (flight recorder until now)" : "");
	}
}

void Processes::do_buffer(Conn &c, const proto::Message &msg)
{
	const proto::Buffer &m = std::get<proto::Buffer>(msg.body);
	const uint32_t seq = msg.seq;
	int fd = -1;
	if (m.status == 0) {
		if (c.fds.empty()) {
			p_.conns.reply(c, seq, -EBADF, "BUFFER without its file descriptor");
			return;
		}
		fd = c.fds.front();
		c.fds.pop_front();
	}
	Grant grant;
	if (!find_grant(c, seq, m, fd, grant)) {
		if (fd >= 0)
			close(fd);
		return;
	}
	if (m.status != 0) {
		logf("pid %d could not open its buffer for slot %u: %s", c.cred.pid, m.slot,
		     strerror(-m.status));
		p_.conns.reply(c, seq, 0, "noted");
		return;
	}
	Session *s = p_.sessions.by_run(grant.session_id);
	if (!s || s->state != proto::SessionState::Active) {
		close(fd);
		p_.conns.reply(c, seq, -ESTALE, "the session is no longer active");
		return;
	}
	Proc *p = p_.procs.find(c.cred.pid);
	if (!p) { // exit already handled (on_exit reads first: not expected)
		close(fd);
		p_.conns.reply(c, seq, -ESRCH, "the process has exited");
		return;
	}
	// A process-tree session takes no buffer from outside its tree, however
	// the process learnt of it.  A process reaped before its hand-off was
	// read has no parent chain left to look at: its buffer is taken when
	// the module granted the session to the tree alone (it looked while
	// the process lived) and the process is the session user's.
	if (!reaches(*s, *p) && !tree_vouched(c, *s, *p)) {
		close(fd);
		VLOG("pid %d (%s): not in session %s's process tree: its buffer refused", c.cred.pid,
		     p->comm.c_str(), s->name.c_str());
		p_.conns.reply(c, seq, -EPERM, "not in the session's process tree");
		return;
	}
	attach(c, seq, *s, *p, fd, grant, m.slot);
}

AggRegionRec::~AggRegionRec()
{
	if (fd >= 0)
		close(fd);
}

// AGG_REGION: the process's region for the aggregation session it was
// granted at `slot`.  Kept read-only (a descriptor reopened O_RDONLY from
// the memfd: what a controller gets cannot write it); its content is read
// as hostile by whoever maps it (agg_reader.h), the daemon itself never
// maps it.  Answered, though the process does not wait for the answer.
void Processes::do_agg_region(Conn &c, const proto::Message &msg)
{
	const proto::AggRegion &m = std::get<proto::AggRegion>(msg.body);
	if (c.fds.empty()) {
		p_.conns.reply(c, msg.seq, -EBADF, "AGG_REGION without its file descriptor");
		return;
	}
	const int fd = c.fds.front();
	c.fds.pop_front();
	Session *s = p_.sessions.by_run(m.session_id);
	Proc *p = p_.procs.find(c.cred.pid);
	struct stat st;
	std::string why;
	if (!s || s->state != proto::SessionState::Active || s->slot != m.slot || s->aggregate.empty())
		why = "no aggregation session of this run is active in slot " + std::to_string(m.slot);
	else if (!(s->uid == 0 || s->uid == c.cred.uid))
		why = "the session is another user's";
	else if (!p)
		why = "the process has exited";
	else if (!reaches(*s, *p))
		why = "not in the session's process tree";
	else if (s->regions.size() >= kMaxAggRegions)
		why = "the session holds " + std::to_string(kMaxAggRegions) + " regions already";
	else if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
		 st.st_size < static_cast<off_t>(sizeof(strata_agg_header)) || st.st_size > (64 << 20))
		why = "not an aggregation region (a regular memfd of a region's size)";
	int ro = -1;
	if (why.empty()) {
		const std::string self = "/proc/self/fd/" + std::to_string(fd);
		ro = open(self.c_str(), O_RDONLY | O_CLOEXEC);
		if (ro < 0)
			why = std::string("cannot reopen it read-only: ") + strerror(errno);
	}
	close(fd);
	if (!why.empty()) {
		logf("pid %d: aggregation region refused: %s", c.cred.pid, why.c_str());
		p_.conns.reply(c, msg.seq, -ESTALE, why);
		return;
	}
	auto r = std::make_unique<AggRegionRec>();
	r->pid = c.cred.pid;
	r->comm = p->comm;
	r->fd = ro;
	s->regions.push_back(std::move(r));
	VLOG("pid %d (%s): aggregation region %zu of session %s", c.cred.pid, p->comm.c_str(),
	     s->regions.size(), s->name.c_str());
	p_.conns.reply(c, msg.seq, 0, "ok");
}

// The grant a BUFFER claims: the module's (our session in that slot, the
// buffer's own uuid), the grant table's (the session it names, if still
// active), or the one REGISTER answered.  False: answered (refused).
bool Processes::find_grant(Conn &c, uint32_t seq, const proto::Buffer &m, int fd, Grant &grant)
{
	if (c.kmod) {
		Session *s = p_.sessions.active_in_slot(m.slot, c.cred.uid);
		if (!s || !grant_of_buffer(s->run_id, fd, grant)) {
			p_.conns.reply(c, seq, -ESTALE,
				       "no session of yours is active in slot " + std::to_string(m.slot));
			return false;
		}
		return true;
	}
	if (c.table) {
		if (!GrantTables::grant(p_.sessions, c.cred.uid, m, fd, grant)) {
			logf("pid %d: its buffer for slot %u names a session that is not active (any more): "
			     "dropped",
			     c.cred.pid, m.slot);
			p_.conns.reply(c, seq, -ESTALE,
				       "no session of yours is active in slot " + std::to_string(m.slot));
			return false;
		}
		return true;
	}
	auto g = c.grants.find(m.slot);
	if (g == c.grants.end()) {
		p_.conns.reply(c, seq, -EINVAL, "slot " + std::to_string(m.slot) + " was not granted");
		return false;
	}
	grant = g->second;
	c.grants.erase(g);
	return true;
}

// The buffer `fd` (owned here) of process `p` gets its drain in session
// `s`: on the attacher thread, answered from there, or (a streamed session,
// no attacher) here.
void Processes::attach(Conn &c, uint32_t seq, Session &s, Proc &p, int fd, const Grant &grant, uint32_t slot)
{
	const std::string dir = sub_trace_dir(s, p);
	const TraceEnv env = trace_env(p, p_.hostname);
	if (!s.streamed() && p_.attacher.running()) {
		AttachJob j;
		j.conn_id = c.id;
		j.seq = seq;
		j.pid = c.cred.pid;
		j.run_id = s.run_id;
		j.fd = fd;
		memcpy(j.uuid, grant.uuid, 16);
		j.dir = dir;
		j.clock = s.clock;
		j.env = env;
		j.owner = s.owner;
		j.awaited = std::make_shared<std::atomic<bool>>(true);
		c.attaching.push_back(j.awaited);
		p_.attacher.queue(std::move(j));
		return;
	}
	std::string err;
	std::unique_ptr<Drain> d = Drain::create(fd, grant.uuid, dir, s.clock, env, s.owner, err);
	if (!d) {
		logf("pid %d slot %u: buffer rejected: %s", c.cred.pid, slot, err.c_str());
		p_.conns.reply(c, seq, -EINVAL, "buffer rejected: " + err);
		return;
	}
	// Validated and mapped: answer now, the process is waiting in its
	// constructor.  The thread start and all file work (directories,
	// metadata) come after; a failure there is logged by the drain thread
	// and costs the process only its bounded buffer.
	p_.conns.reply(c, seq, 0, "ok");
	p_.conns.flush_out(c); // out of the cork: the thread start below takes a while
	c.corked = true;
	attach_output(s, *d);
	d->start();
	p.drains.push_back(d.get());
	s.drains.push_back(std::move(d));
	note_rejoined(s, p.pid);
	p_.persist.changed(); // persistence.h: a buffer to keep
	VLOG("pid %d: draining slot %u into %s", p.pid, slot, dir.c_str());
}

// SessionTable::Host: buffers already sent, or being attached, join now.
void Processes::settle()
{
	serve_pending();
	settle_attaches();
}

void Processes::serve_pending()
{
	p_.conns.serve_pending();
}

// Main thread: the attacher's results so far (woken: its eventfd fired).
void Processes::collect_attaches(bool woken)
{
	for (AttachJob &j : p_.attacher.take(woken))
		integrate(j);
}

void Processes::settle_attaches()
{
	for (AttachJob &j : p_.attacher.settle())
		integrate(j);
}

// Main thread: one job's result joins its session and process, and its
// connection (if still open) gets the answer BUFFER used to get at once.
void Processes::integrate(AttachJob &j)
{
	Conn *c = p_.conns.by_id(j.conn_id);
	if (!j.drain) {
		logf("pid %d: buffer rejected: %s", static_cast<int>(j.pid), j.err.c_str());
		if (c) {
			p_.conns.reply(*c, j.seq, -EINVAL, "buffer rejected: " + j.err);
			p_.conns.flush_out(*c);
		}
		return;
	}
	Session *s = p_.sessions.by_run(j.run_id);
	Proc *p = p_.procs.find(j.pid);
	if (!s || s->state != proto::SessionState::Active || !p) {
		// Not expected: whatever ends a session or a process settles first.
		drop_attach(j);
		return;
	}
	if (c) {
		p_.conns.reply(*c, j.seq, 0, "ok");
		p_.conns.flush_out(*c);
	}
	p->drains.push_back(j.drain.get());
	note_rejoined(*s, p->pid);
	p_.persist.changed(); // persistence.h: a buffer to keep
	VLOG("pid %d: draining into %s", static_cast<int>(j.pid), j.drain->dir().c_str());
	s->drains.push_back(std::move(j.drain));
}

void Processes::drop_attach(AttachJob &j)
{
	logf("pid %d: its session or its record went away while its buffer was attached; "
	     "what it recorded is flushed to %s",
	     static_cast<int>(j.pid), j.drain->dir().c_str());
	j.drain->finish(true);
	j.drain->join();
}

} // namespace daemon_impl
} // namespace strata
