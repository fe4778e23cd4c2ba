/*
 * commands.cpp - a controller's commands (daemon_impl.h): each decoded,
 * handed to the part that owns what it changes or reads, and answered.
 *
 * Contract: main thread only.  A command that changes what running
 * processes apply is answered through Daemon::answer (its processes are
 * signalled; ack_tracker.h).
 */
#include "daemon_impl.h"

#include "drain_pool.h"
#include "strata_abi.h"

namespace strata {
namespace daemon_impl {

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
		send(c, msg.seq, sr);
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
	send(c, msg.seq, lr);
}

void Daemon::do_wait(Conn &c, const proto::Message &msg)
{
	acks_.wait(c.id, msg.seq, std::get<proto::Wait>(msg.body).timeout_ms);
	deliver(acks_.due(false));
}

} // namespace daemon_impl
} // namespace strata
