/*
 * commands.cpp - the route table and a controller's commands
 * (commands.h, whose contract this follows).
 */
#include "commands.h"

#include "drain_pool.h"
#include "strata_abi.h"

namespace strata {
namespace daemon_impl {

// WAIT and SNAPSHOT are counted as changes: they settle what processes
// sent, and the file is rewritten after them as before.
const Commands::Route *Commands::route(proto::Type type, From from)
{
	using proto::Type;
	static const Route routes[] = {
		{Type::Register, From::Unregistered, Effect::Changes, &Commands::do_register},
		{Type::Buffer, From::Registered, Effect::Changes, &Commands::do_buffer},
		{Type::AggRegion, From::Registered, Effect::Changes, &Commands::do_agg_region},
		{Type::AggFetch, From::Controller, Effect::Reads, &Commands::do_agg_fetch},
		{Type::Create, From::Controller, Effect::Changes, &Commands::do_create},
		{Type::EnableEvent, From::Controller, Effect::Changes, &Commands::do_enable},
		{Type::DisableEvent, From::Controller, Effect::Changes, &Commands::do_disable},
		{Type::TargetRule, From::Controller, Effect::Changes, &Commands::do_target_rule},
		{Type::Start, From::Controller, Effect::Changes, &Commands::do_start},
		{Type::Stop, From::Controller, Effect::Changes, &Commands::do_stop},
		{Type::Destroy, From::Controller, Effect::Changes, &Commands::do_destroy},
		{Type::List, From::Controller, Effect::Reads, &Commands::do_list},
		{Type::Wait, From::Controller, Effect::Changes, &Commands::do_wait},
		{Type::Snapshot, From::Controller, Effect::Changes, &Commands::do_snapshot},
		{Type::SnapshotOn, From::Controller, Effect::Changes, &Commands::do_snapshot_on},
		{Type::Status, From::Controller, Effect::Reads, &Commands::do_status},
	};
	for (const Route &r : routes)
		if (r.type == type && r.from == from)
			return &r;
	return nullptr;
}

bool Commands::dispatch(Conn &c, const proto::Message &m)
{
	const bool ctl = c.role == proto::Role::Controller;
	const From from = ctl ? From::Controller : c.registered ? From::Registered : From::Unregistered;
	const Route *r = route(m.type(), from);
	// persistence.h: sessions may change, except on a question that only
	// reads them (the table's Reads), whose answer then describes what
	// the state file already holds, or what serve_quiet/settle_attaches
	// below integrate, which marks the state dirty itself (processes.cpp).
	// Not rewriting the file there keeps `strata status` cheap with
	// thousands of live buffers (issue 38).  A command refused below
	// changes nothing.
	if (ctl && r && r->effect == Effect::Changes)
		p_.persist.changed();
	if (ctl) {
		p_.conns.serve_quiet();  // a command sees every process that joined from the table
		host_.settle_attaches(); // a command sees every buffer already handed over
		p_.tables.dirty();       // it may change what a process is granted
	}
	p_.sessions.take_kgen(); // what a change makes is the change's (Answer::kgen)
	if (r) {
		(this->*r->fn)(c, m);
		return true;
	}
	p_.conns.reply(c, m.seq, -EPERM,
		       "message type " + std::to_string(static_cast<int>(m.type())) +
			       " not allowed here for this role");
	return true;
}

void Commands::answer(Conn &c, uint32_t seq, const Answer &a)
{
	if (a.status != 0 || !a.notify) {
		p_.conns.reply(c, seq, a.status, a.text);
		return;
	}
	PendingReply p = p_.acks.signal(a.who, a.rule, a.kgen);
	if (Session *s = a.started_run ? p_.sessions.by_run(a.started_run) : nullptr)
		for (auto &w : p.waiting) { // joined when its buffer comes (the module's: at its first event)
			const Proc *pr = p_.procs.find(w.first);
			if (pr && !pr->kmod)
				note_unjoined(*s, w.first, pr->comm,
					      "signalled when the session started, it has not applied it");
		}
	p.conn_id = c.id;
	p.seq = seq;
	p.text = a.text;
	if (c.version >= 2) { // answered now; WAIT asks for the acknowledgements
		p_.acks.owe(c.id, p);
		p_.conns.reply(c, seq, 0,
			       a.text + " (generation " + std::to_string(p_.acks.generation()) + ", " +
				       std::to_string(p.signalled) + " running process(es) signalled)");
		return;
	}
	if (p.waiting.empty()) {
		p_.conns.reply(c, seq, 0, a.text);
		return;
	}
	p_.acks.hold(std::move(p));
}

void Commands::deliver(const std::vector<DueReply> &due)
{
	for (const DueReply &d : due)
		if (d.gate)
			host_.end_stop(d); // stopping.h
		else if (Conn *c = p_.conns.by_id(d.conn_id))
			p_.conns.reply(*c, d.seq, d.status, d.text);
}

void Commands::do_create(Conn &c, const proto::Message &msg)
{
	const proto::Create &m = std::get<proto::Create>(msg.body);
	const Answer a = p_.sessions.create(c.caller(), m);
	answer(c, msg.seq, a);
	// After the reply: the controller goes on while a worker maps its
	// copy buffer for the session's first drain.
	if (a.status == 0 && m.channel.mode != STRATA_MODE_OVERWRITE)
		warm_drains(m.channel.subbuf_size ? m.channel.subbuf_size : proto::kDefaultSubbufSize);
}

void Commands::do_enable(Conn &c, const proto::Message &msg)
{
	const proto::EnableEvent &m = std::get<proto::EnableEvent>(msg.body);
	answer(c, msg.seq, p_.sessions.rule(c.caller(), m.session, m.rule));
}

void Commands::do_disable(Conn &c, const proto::Message &msg)
{
	const proto::DisableEvent &m = std::get<proto::DisableEvent>(msg.body);
	proto::Rule r = m.rule;
	r.enable = 0;
	answer(c, msg.seq, p_.sessions.rule(c.caller(), m.session, r));
}

void Commands::do_target_rule(Conn &c, const proto::Message &msg)
{
	const proto::TargetRule &m = std::get<proto::TargetRule>(msg.body);
	answer(c, msg.seq, p_.sessions.rule(c.caller(), m.session, m.rule, Target{m.pids, m.names}));
}

void Commands::do_start(Conn &c, const proto::Message &msg)
{
	answer(c, msg.seq, p_.sessions.start(c.caller(), std::get<proto::Start>(msg.body).session));
}

// STOP and DESTROY: in two phases (stopping.h), answered once complete.
void Commands::do_stop(Conn &c, const proto::Message &msg)
{
	const std::string &name = std::get<proto::Stop>(msg.body).session;
	Answer err;
	const Session *s = p_.sessions.find(c.caller(), name, err);
	if (s && s->state == proto::SessionState::Active)
		host_.stop_in_two(s->id, false, &c, msg.seq);
	else
		answer(c, msg.seq, p_.sessions.stop(c.caller(), name)); // its refusal
}

void Commands::do_destroy(Conn &c, const proto::Message &msg)
{
	Answer err;
	const Session *s = p_.sessions.find(c.caller(), std::get<proto::Destroy>(msg.body).session, err);
	if (s)
		host_.stop_in_two(s->id, true, &c, msg.seq);
	else
		answer(c, msg.seq, err);
}

void Commands::do_snapshot(Conn &c, const proto::Message &msg)
{
	answer(c, msg.seq, p_.sessions.snapshot(c.caller(), std::get<proto::Snapshot>(msg.body)));
}

void Commands::do_snapshot_on(Conn &c, const proto::Message &msg)
{
	answer(c, msg.seq, p_.sessions.snapshot_on(c.caller(), std::get<proto::SnapshotOn>(msg.body)));
}

void Commands::do_status(Conn &c, const proto::Message &msg)
{
	// What processes already sent counts too: a program that sent its
	// BUFFER and exited at once (before the daemon read its connection)
	// holds a buffer of the session, and `strata record`, asking right
	// after it exited, must not say that nothing was recorded.  One read
	// per process connection (EAGAIN for the idle): cheap with thousands.
	p_.conns.serve_pending();
	host_.settle_attaches();
	proto::StatusReply sr;
	Answer err;
	if (p_.sessions.status(c.caller(), std::get<proto::Status>(msg.body).session, sr, err)) {
		sr.clocks = p_.sync.status(); // the daemon's clock links, also in every session's (version 9)
		for (proto::SessionStatus &s : sr.sessions)
			s.clocks = sr.clocks;
		p_.conns.send(c, msg.seq, sr);
	} else
		answer(c, msg.seq, err);
}

void Commands::do_list(Conn &c, const proto::Message &msg)
{
	proto::ListReply lr;
	for (const auto &kv : p_.procs.all()) {
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
	p_.conns.send(c, msg.seq, lr);
}

void Commands::do_wait(Conn &c, const proto::Message &msg)
{
	p_.acks.wait(c.id, msg.seq, std::get<proto::Wait>(msg.body).timeout_ms);
	deliver(p_.acks.due(false));
}

// AGG_FETCH: the index-th region of a session the caller may see, with a
// read-only descriptor of it, or -ENODATA past the last.
void Commands::do_agg_fetch(Conn &c, const proto::Message &msg)
{
	const proto::AggFetch &m = std::get<proto::AggFetch>(msg.body);
	Answer err;
	Session *s = p_.sessions.find(c.caller(), m.session, err);
	if (!s) {
		answer(c, msg.seq, err);
		return;
	}
	if (s->aggregate.empty()) {
		p_.conns.reply(c, msg.seq, -EINVAL,
			       "session '" + s->name + "' does not aggregate (strata create --aggregate)");
		return;
	}
	if (m.index >= s->regions.size()) {
		p_.conns.reply(c, msg.seq, -ENODATA, std::to_string(s->regions.size()) + " region(s)");
		return;
	}
	const AggRegionRec &r = *s->regions[m.index];
	p_.conns.send(c, msg.seq,
		      proto::Reply{0, std::to_string(r.pid) + " " + (r.alive ? "1" : "0") + " " + r.comm},
		      r.fd);
}

} // namespace daemon_impl
} // namespace strata
