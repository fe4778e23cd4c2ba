/*
 * commands.cpp - a controller's commands (daemon_impl.h): each decoded,
 * handed to the part that owns what it changes or reads, and answered.
 *
 * Contract: main thread only.  A command that changes what running
 * processes apply is answered through Daemon::answer (its processes are
 * signalled; ack_tracker.h).
 */
#include "daemon_impl.h"

#include <algorithm>

#include "drain_pool.h"
#include "strata_abi.h"

namespace strata {
namespace daemon_impl {

namespace {
// Who may send a message type: a process before or after its REGISTER, or
// a controller.
enum class From { Unregistered, Registered, Controller };
// What a controller's command does to the sessions the state file keeps
// (persistence.h): a question that only reads them leaves the file as it is.
enum class Effect { Reads, Changes };
} // namespace

// Connections::Host: a message after HELLO routed.  False: close the
// connection.
bool Daemon::dispatch(Conn &c, const proto::Message &m)
{
	using proto::Type;
	struct Route {
		Type type;
		From from;
		Effect effect; // a process's messages: what their handlers mark (procs.cpp)
		Command fn;
	};
	// WAIT and SNAPSHOT are counted as changes: they settle what processes
	// sent, and the file is rewritten after them as before.
	static const Route routes[] = {
		{Type::Register, From::Unregistered, Effect::Changes, &Daemon::do_register},
		{Type::Buffer, From::Registered, Effect::Changes, &Daemon::do_buffer},
		{Type::AggRegion, From::Registered, Effect::Changes, &Daemon::do_agg_region},
		{Type::AggFetch, From::Controller, Effect::Reads, &Daemon::do_agg_fetch},
		{Type::Create, From::Controller, Effect::Changes, &Daemon::do_create},
		{Type::EnableEvent, From::Controller, Effect::Changes, &Daemon::do_enable},
		{Type::DisableEvent, From::Controller, Effect::Changes, &Daemon::do_disable},
		{Type::TargetRule, From::Controller, Effect::Changes, &Daemon::do_target_rule},
		{Type::Start, From::Controller, Effect::Changes, &Daemon::do_start},
		{Type::Stop, From::Controller, Effect::Changes, &Daemon::do_stop},
		{Type::Destroy, From::Controller, Effect::Changes, &Daemon::do_destroy},
		{Type::List, From::Controller, Effect::Reads, &Daemon::do_list},
		{Type::Wait, From::Controller, Effect::Changes, &Daemon::do_wait},
		{Type::Snapshot, From::Controller, Effect::Changes, &Daemon::do_snapshot},
		{Type::SnapshotOn, From::Controller, Effect::Changes, &Daemon::do_snapshot_on},
		{Type::Status, From::Controller, Effect::Reads, &Daemon::do_status},
	};
	const bool ctl = c.role == proto::Role::Controller;
	const From from = ctl ? From::Controller : c.registered ? From::Registered : From::Unregistered;
	const Route *route = nullptr;
	for (const Route &r : routes)
		if (r.type == m.type() && r.from == from)
			route = &r;
	// persistence.h: sessions may change, except on a question that only
	// reads them (the table's Reads), whose answer then describes what
	// the state file already holds, or what serve_quiet/settle_attaches
	// below integrate, which marks the state dirty itself (procs.cpp).
	// Not rewriting the file there keeps `strata status` cheap with
	// thousands of live buffers (issue 38).  A command refused below
	// changes nothing.
	if (ctl && route && route->effect == Effect::Changes)
		persist_.changed();
	if (ctl) {
		conns_.serve_quiet(); // a command sees every process that joined from the table
		settle_attaches();    // a command sees every buffer already handed over
		tables_.dirty();      // it may change what a process is granted
	}
	sessions_.take_kgen(); // what a change makes is the change's (Answer::kgen)
	if (route) {
		(this->*route->fn)(c, m);
		return true;
	}
	conns_.reply(c, m.seq, -EPERM,
		     "message type " + std::to_string(static_cast<int>(m.type())) +
			     " not allowed here for this role");
	return true;
}

void Daemon::answer(Conn &c, uint32_t seq, const Answer &a)
{
	if (a.status != 0 || !a.notify) {
		conns_.reply(c, seq, a.status, a.text);
		return;
	}
	PendingReply p = acks_.signal(a.who, a.rule, a.kgen);
	p.conn_id = c.id;
	p.seq = seq;
	p.text = a.text;
	if (c.version >= 2) { // answered now; WAIT asks for the acknowledgements
		acks_.owe(c.id, p);
		conns_.reply(c, seq, 0,
			     a.text + " (generation " + std::to_string(acks_.generation()) + ", " +
				     std::to_string(p.signalled) + " running process(es) signalled)");
		return;
	}
	if (p.waiting.empty()) {
		conns_.reply(c, seq, 0, a.text);
		return;
	}
	acks_.hold(std::move(p));
}

void Daemon::deliver(const std::vector<DueReply> &due)
{
	for (const DueReply &d : due)
		if (d.gate)
			end_stop(d); // stopping.cpp
		else if (Conn *c = conns_.by_id(d.conn_id))
			conns_.reply(*c, d.seq, d.status, d.text);
}

// Connections::Host: a connection ended.  A process closes its connection
// after applying what it was granted (and quiescing): that is its
// acknowledgement.
void Daemon::closed(const Ended &e)
{
	Proc *p = e.registered ? procs_.find(e.pid) : nullptr;
	if (e.registered && !e.kmod) { // a module process acknowledges to the module
		if (p)
			p->acked = std::max(p->acked, e.registered_at);
		acks_.acknowledge(e.pid, e.registered_at);
	}
	const int gone_pidfd =
		p && p->gone ? p->pidfd : 0; // a process that exited before we read it: its exit is now
	acks_.forget(e.id);
	if (gone_pidfd)
		on_exit(gone_pidfd);
	// The sessions this connection owned (CREATE with kCreateOwned) end
	// with it, whatever ended it; nobody is left to answer.
	end_owned(e.id, e.pid);
}

void Daemon::do_create(Conn &c, const proto::Message &msg)
{
	const proto::Create &m = std::get<proto::Create>(msg.body);
	const Answer a = sessions_.create(c.caller(), m);
	answer(c, msg.seq, a);
	// After the reply: the controller goes on while a worker maps its
	// copy buffer for the session's first drain.
	if (a.status == 0 && m.channel.mode != STRATA_MODE_OVERWRITE)
		warm_drains(m.channel.subbuf_size ? m.channel.subbuf_size : proto::kDefaultSubbufSize);
}

void Daemon::do_enable(Conn &c, const proto::Message &msg)
{
	const proto::EnableEvent &m = std::get<proto::EnableEvent>(msg.body);
	answer(c, msg.seq, sessions_.rule(c.caller(), m.session, m.rule));
}

void Daemon::do_disable(Conn &c, const proto::Message &msg)
{
	const proto::DisableEvent &m = std::get<proto::DisableEvent>(msg.body);
	proto::Rule r = m.rule;
	r.enable = 0;
	answer(c, msg.seq, sessions_.rule(c.caller(), m.session, r));
}

void Daemon::do_target_rule(Conn &c, const proto::Message &msg)
{
	const proto::TargetRule &m = std::get<proto::TargetRule>(msg.body);
	answer(c, msg.seq, sessions_.rule(c.caller(), m.session, m.rule, Target{m.pids, m.names}));
}

void Daemon::do_start(Conn &c, const proto::Message &msg)
{
	answer(c, msg.seq, sessions_.start(c.caller(), std::get<proto::Start>(msg.body).session));
}

// STOP and DESTROY: in two phases (stopping.cpp), answered once complete.
void Daemon::do_stop(Conn &c, const proto::Message &msg)
{
	const std::string &name = std::get<proto::Stop>(msg.body).session;
	Answer err;
	const Session *s = sessions_.find(c.caller(), name, err);
	if (s && s->state == proto::SessionState::Active)
		stop_in_two(s->id, false, &c, msg.seq);
	else
		answer(c, msg.seq, sessions_.stop(c.caller(), name)); // its refusal
}

void Daemon::do_destroy(Conn &c, const proto::Message &msg)
{
	Answer err;
	const Session *s = sessions_.find(c.caller(), std::get<proto::Destroy>(msg.body).session, err);
	if (s)
		stop_in_two(s->id, true, &c, msg.seq);
	else
		answer(c, msg.seq, err);
}

void Daemon::do_snapshot(Conn &c, const proto::Message &msg)
{
	answer(c, msg.seq, sessions_.snapshot(c.caller(), std::get<proto::Snapshot>(msg.body)));
}

void Daemon::do_snapshot_on(Conn &c, const proto::Message &msg)
{
	answer(c, msg.seq, sessions_.snapshot_on(c.caller(), std::get<proto::SnapshotOn>(msg.body)));
}

void Daemon::do_status(Conn &c, const proto::Message &msg)
{
	proto::StatusReply sr;
	Answer err;
	if (sessions_.status(c.caller(), std::get<proto::Status>(msg.body).session, sr, err)) {
		const std::string clocks = sync_.status(); // the daemon's clock links, in every session's
		for (proto::SessionStatus &s : sr.sessions)
			s.clocks = clocks;
		conns_.send(c, msg.seq, sr);
	} else
		answer(c, msg.seq, err);
}

void Daemon::do_list(Conn &c, const proto::Message &msg)
{
	proto::ListReply lr;
	for (const auto &kv : procs_.all()) {
		const Proc &p = kv.second;
		if (c.cred.uid != 0 && p.uid != c.cred.uid)
			continue;
		const uint32_t probes = p.probes         ? proto::kProbesMarked
					: p.tells_probes ? proto::kProbesNone
							 : proto::kProbesUnknown;
		for (const auto &e : p.events)
			lr.entries.push_back(
				{static_cast<uint32_t>(p.pid), p.comm, e.name, e.loglevel, probes});
	}
	conns_.send(c, msg.seq, lr);
}

void Daemon::do_wait(Conn &c, const proto::Message &msg)
{
	acks_.wait(c.id, msg.seq, std::get<proto::Wait>(msg.body).timeout_ms);
	deliver(acks_.due(false));
}

} // namespace daemon_impl
} // namespace strata
