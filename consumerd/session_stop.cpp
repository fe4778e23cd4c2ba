/*
 * session_stop.cpp - the session table's ending of sessions (session_table.h):
 * STOP in one phase or two (begin_stop tells the processes and the module,
 * finish_stop finishes the drains once they were told), DESTROY, the end
 * of the sessions a connection owned, and the daemon's own stop.  A stop
 * quiesces first (nothing new joins, the kernel probes stop), then
 * finishes every drain, so the trace is whole when STOP answers.
 */
#include <cerrno>
#include <string>
#include <unistd.h>

#include "log.h"
#include "session_table.h"
#include "strata_abi.h"

namespace strata {
namespace daemon_impl {

Answer SessionTable::stop(const Caller &c, const std::string &name)
{
	Answer a;
	Session *s = find(c, name, a);
	if (!s)
		return a;
	if (s->state != proto::SessionState::Active)
		return answer(-EALREADY, "session '" + s->name + "' is not started");
	stop_session(*s);
	return changed(*s, stopped_text(*s));
}

// STOP's answer, once the drains are finished.
std::string SessionTable::stopped_text(const Session &s) const
{
	// One line: the answer's own suffix follows (the acknowledgements).
	std::string problems;
	for (char ch : session_problems(s)) // lines, each ending in \n
		problems += ch == '\n' ? std::string("; ") : std::string(1, ch);
	if (!problems.empty())
		problems = "; problems: " + problems.substr(0, problems.size() - 2);
	std::string loss; // a disk trace tells its own (cli: trace_loss)
	if (s.relay) {
		uint64_t events = 0, packets = 0;
		s.relay->loss(events, packets);
		loss = events || packets ? "; " + std::to_string(events) + " event(s) and " +
						   std::to_string(packets) + " packet(s) discarded"
					 : "; nothing discarded";
	}
	return "session '" + s.name + "' stopped; trace in " + trace_place(s) + trigger_summary(s) + loss +
	       (s.serial ? "; " + s.serial->stats() : "") + problems;
}

Answer SessionTable::begin_stop(Session &s)
{
	host_.changed();
	if (s.state != proto::SessionState::Active || s.stopping)
		return Answer();
	uint64_t comp_kgen = 0;
	const Session *comp = quiesce(s, comp_kgen);
	if (s.state != proto::SessionState::Active)
		return Answer();
	INFO("session %s stopping: its processes are told first", s.name.c_str());
	Answer a = changed(s, "");
	if (comp) // its trigger's companion stops with it, in two phases too
		a.also.emplace_back(*comp, comp_kgen);
	return a;
}

Answer SessionTable::finish_stop(uint64_t id, bool destroy)
{
	Session *s = by_id(id);
	if (!s)
		return answer(-ENOENT, "the session is gone");
	if (destroy) {
		Answer a = destroy_session(*s);
		a.notify = false; // its processes were told at begin_stop
		return a;
	}
	if (s->state != proto::SessionState::Active)
		return answer(-EALREADY, "session '" + s->name + "' is not started");
	stop_session(*s);
	return answer(0, stopped_text(*s));
}

Answer SessionTable::destroy(const Caller &c, const std::string &name)
{
	Answer a;
	Session *s = find(c, name, a);
	return s ? destroy_session(*s) : a;
}

void SessionTable::stop_session(Session &s)
{
	host_.changed();
	if (s.state != proto::SessionState::Active)
		return;
	uint64_t comp_kgen = 0;
	if (s.stopping)
		host_.settle(); // BUFFERs sent while its processes were told join too
	else
		quiesce(s, comp_kgen); // one phase: nobody to wait for
	if (s.state != proto::SessionState::Active)
		return;
	if (s.trigger)
		stop_trigger(s); // its last look may still snapshot this session
	finish_drains(s);
}

// A stop's first part: what processes and the module see of the session,
// and of its trigger's companion, ends (their drains still run).  The
// companion (null: none) and the module generation of its end.
const Session *SessionTable::quiesce(Session &s, uint64_t &comp_kgen)
{
	host_.settle(); // BUFFERs already sent join before the drains finish
	if (s.state != proto::SessionState::Active)
		return nullptr;
	Session *comp = s.trigger && s.trigger->companion ? by_id(s.trigger->companion) : nullptr;
	if (comp && (comp->state != proto::SessionState::Active || comp->stopping))
		comp = nullptr;
	if (comp) {
		comp_kgen = kernel_stop(comp->slot);
		comp->stopping = true;
	}
	kgen_ = kernel_stop(s.slot); // kernel probes stop before the drains flush
	s.stopping = true;
	return comp;
}

void SessionTable::finish_drains(Session &s)
{
	for (auto &d : s.drains)
		d->finish(false);
	for (auto &d : s.drains)
		d->join();
	s.state = proto::SessionState::Stopped;
	s.stopping = false;
	save_active();
	uint64_t packets = 0;
	for (auto &d : s.drains)
		packets += d->counters().packets.load(std::memory_order_relaxed);
	INFO("session %s stopped: %zu buffer(s), %llu packet(s) written", s.name.c_str(), s.drains.size(),
	     static_cast<unsigned long long>(packets));
	if (s.serial) {
		INFO("session %s: %s", s.name.c_str(), s.serial->describe().c_str());
		host_.serial_stopped(s); // clocks.json and rewritten metadata on the line
	}
	if (s.relay && s.relay->broken())
		logf("session %s: the relay link broke (%s); packets it could not send are counted as errors",
		     s.name.c_str(), s.relay->why_broken().c_str());
}

// DESTROY: stop, complete the trace, forget the session; when it was
// active, its processes are told (they close their slot).
Answer SessionTable::destroy_session(Session &s)
{
	const bool was_active = s.state == proto::SessionState::Active;
	Audience gone = s; // who to signal: the processes its rules targeted
	stop_session(s);
	const std::string out = trace_place(s), name = s.name;
	erase(s);
	INFO("session %s destroyed", name.c_str());
	Answer a;
	a.text = "session '" + name + "' destroyed; trace in " + out;
	a.notify = was_active;
	a.who = std::move(gone);
	a.kgen = take_kgen();
	return a;
}

// A session's output directory that the session made and left empty (an
// aggregation, nothing recorded, a trigger's companion that never fired)
// goes with it, and a companion's "<out>-triggers" once empty: rmdir
// removes only an empty directory, so a trace is never touched.
namespace {

void remove_empty_output(const Session &s)
{
	if (s.out.empty() || s.streamed() || !(s.made_out || s.companion_of) || rmdir(s.out.c_str()) != 0)
		return;
	if (s.companion_of)
		rmdir(s.out.substr(0, s.out.rfind('/')).c_str());
}

} // namespace

// The session goes, and its drains with it.
void SessionTable::erase(Session &s)
{
	if (s.relay)
		host_.relay_ending(s);
	host_.forget_drains(s);
	remove_empty_output(s);
	sessions_.erase(std::find_if(sessions_.begin(), sessions_.end(),
				     [&](const std::unique_ptr<Session> &x) { return x.get() == &s; }));
}

std::vector<Answer> SessionTable::end_owned(uint64_t conn_id, pid_t peer)
{
	// Whatever ended the connection: its controller (`strata record`)
	// exited, was killed, or closed it.  (The Daemon stops them in two
	// phases instead: stopping.h.)
	std::vector<Answer> out;
	for (uint64_t id : disown(conn_id))
		if (Session *s = by_id(id)) {
			INFO("session %s: its owner (pid %d) closed its connection", s->name.c_str(), peer);
			out.push_back(destroy_session(*s));
		}
	return out;
}

void SessionTable::stop_all()
{
	// By index: stopping a session erases its trigger's companion, which
	// always comes after it (trigger.cpp).
	for (size_t i = 0; i < sessions_.size(); i++) {
		stop_session(*sessions_[i]);
		if (sessions_[i]->relay)
			host_.relay_ending(*sessions_[i]);
	}
	for (auto &s : sessions_)
		remove_empty_output(*s);
	sessions_.clear();
}

} // namespace daemon_impl
} // namespace strata
