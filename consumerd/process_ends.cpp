/*
 * process_ends.cpp - how a process's part ends (processes.h): its
 * connection's end (its acknowledgement, or a state query's answer it never
 * read), a knock from one that could not connect at all, and its exit,
 * which ends its drains.  Split from processes.cpp by role.
 *
 * Contract: processes.h's.  Main thread only.
 */
#include "processes.h"

#include <cstring>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"

namespace strata {
namespace daemon_impl {

// Connections::Host: a connection ended.  A process closes its connection
// after applying what it was granted (and quiescing): that is its
// acknowledgement.
void Processes::closed(const Connections::Host::Ended &e)
{
	Proc *p = e.registered ? p_.procs.find(e.pid) : nullptr;
	if (e.answer_lost && p)
		missed_answer(e, *p);
	else if (e.registered && !e.kmod) { // a module process acknowledges to the module
		if (p) {
			p->acked = std::max(p->acked, e.registered_at);
			p->retries = 0;
		}
		p_.acks.acknowledge(e.pid, e.registered_at);
		// A round trip's join hands its buffer over at once (attach:
		// joined); an aggregation may be joined with no buffer at all.
		for (uint64_t run : e.granted)
			if (Session *s = p_.sessions.by_run(run); s && !s->aggregate.empty())
				note_rejoined(*s, e.pid);
	}
	const int gone_pidfd =
		p && p->gone ? p->pidfd : 0; // a process that exited before we read it: its exit is now
	p_.acks.forget(e.id);
	if (gone_pidfd)
		on_exit(gone_pidfd);
	// The sessions this connection owned (CREATE with kCreateOwned) end
	// with it, whatever ended it; nobody is left to answer.
	host_.end_owned(e.id, e.pid);
}

// A round trip whose answer never reached the process (Conn::answer_lost):
// its state query missed its deadline (STRATA_REGISTER_TIMEOUT_MS, a
// loaded machine) and it gave up, having applied nothing.  Its close
// acknowledges nothing; the sessions it was granted name it until it
// joins; a process that catches its update signal is asked again, up to
// kMaxRetries times in a row (each try is bounded by its own deadline).
void Processes::missed_answer(const Connections::Host::Ended &e, Proc &p)
{
	// A process killed or exiting in the middle of its query also leaves
	// its answer unread: it is named for what it is.
	const bool alive = p.pidfd >= 0 && syscall(SYS_pidfd_send_signal, p.pidfd, 0, nullptr, 0) == 0;
	const bool retry = alive && may_ask_again(p);
	std::string why = "it exited during its state query";
	if (alive)
		why = std::string("its state query missed its deadline (") +
		      (retry     ? "asked again"
		       : p.signo ? "asked again, in vain"
				 : "a tp-sync process asks at its start only: none of its events are "
				   "recorded") +
		      ")";
	for (uint64_t run : e.granted)
		if (Session *s = p_.sessions.by_run(run))
			if (s->state == proto::SessionState::Active && !s->stopping)
				note_unjoined(*s, p.pid, p.comm, why);
	logf("pid %d (%s): %s: the answer went unread%s", p.pid, p.comm.c_str(),
	     alive ? "its state query missed its deadline" : "it exited during its state query",
	     retry ? "; signalled to ask again" : "");
	if (retry)
		ask_again(p);
}

// Whether `p` may be signalled to ask again: it catches its update signal
// now (an exec resets it), with a pidfd to send it to, and has not been
// asked kMaxRetries times in a row in vain (its acknowledgement, closed(),
// resets the count).
bool Processes::may_ask_again(const Proc &p) const
{
	return p.pidfd >= 0 && p.signo && p.retries < kMaxRetries && catches(p.pid, p.signo);
}

void Processes::ask_again(Proc &p)
{
	p.retries++;
	if (syscall(SYS_pidfd_send_signal, p.pidfd, p.signo, nullptr, 0) != 0)
		VLOG("pid %d: cannot signal: %s", p.pid, strerror(errno));
}

// A knock (proto.h, kKnockSuffix): the process's connect() timed out, our
// socket's queue full until its deadline.  It joined nothing and never asks
// again by itself; each session that would have granted it names it, as a
// missed answer does, and one that catches its update signal (said by the
// knock, or by an earlier REGISTER) is signalled to ask again, as a missed
// answer is, up to kMaxRetries times in a row.  A forged comm costs only a
// wrong name, a forged signal one the sender catches sent to itself: the
// pid and uid are the kernel's.
void Processes::knocked(pid_t pid, uid_t uid, const std::string &comm, int signo)
{
	Proc probe;
	probe.pid = pid;
	probe.uid = uid;
	probe.comm = comm;
	const std::string why = "it could not connect to the daemon within its deadline "
				"(STRATA_REGISTER_TIMEOUT_MS: the daemon's queue was full)";
	unsigned named = 0;
	for (auto &s : p_.sessions.all())
		if (s->state == proto::SessionState::Active && !s->stopping &&
		    (s->uid == 0 || s->uid == uid) && reaches(*s, probe) &&
		    (s->rules.empty() || !rules_for(*s, probe).empty())) {
			note_unjoined(*s, pid, comm, why);
			named++;
		}
	// Its record counts the tries and holds the pidfd the signal goes to
	// (made here if it never registered: gone already, none is kept).
	Proc *p = p_.procs.find(pid);
	if (!p && signo > 0 && signo <= 64) {
		p = &proc_for(pid, uid);
		if (p->comm.empty())
			p->comm = comm;
		if (p->gone) {
			p_.procs.erase(p->pidfd);
			p = nullptr;
		}
	}
	if (p && !p->signo && signo > 0 && signo <= 64)
		p->signo = signo; // only ever set, as at REGISTER
	const bool retry = p && may_ask_again(*p);
	logf("pid %d (%s): %s; named in %u session(s)%s", pid, comm.c_str(), why.c_str(), named,
	     retry ? "; signalled to ask again" : "");
	if (retry)
		ask_again(*p);
}

void Processes::on_exit(int pidfd)
{
	Proc *p = p_.procs.by_pidfd(pidfd);
	if (!p)
		return;
	// What the process sent before it died comes first: a BUFFER still
	// unread on its connection (epoll may list the pidfd first) is adopted
	// and drained with the rest, and needs its Proc to be found.
	const pid_t pid = p->pid;
	p_.conns.read_process(pid);
	settle_attaches(); // its drains, all of them, before they are told it died
	p = p_.procs.by_pidfd(pidfd);
	if (!p)
		return;
	VLOG("pid %d (%s) exited", p->pid, p->comm.c_str());
	p_.acks.acknowledge(p->pid, UINT64_MAX); // nothing left to apply
	for (auto &s : p_.sessions.all())        // its regions keep their last values
		for (auto &r : s->regions)
			if (r->pid == p->pid)
				r->alive = false;
	for (Drain *d : p->drains)
		d->finish(true); // the drain flushes and closes on its own thread
	p_.procs.erase(pidfd);
	p_.persist.owner_exited(pid); // a restored session's owner; the books changed
}

} // namespace daemon_impl
} // namespace strata
