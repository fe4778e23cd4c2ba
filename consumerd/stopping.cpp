/*
 * stopping.cpp - two-phase stops (daemon_impl.h; docs/consumerd.md,
 * "Stopping a session").
 *
 * A stop that finished a session's drains before telling its processes
 * would lose what they write when told: the pthread preload's counting
 * mode writes the pairs it counted then (docs/pthread.md, "Counting
 * mode"), and records made until a process applies the change would go to
 * a buffer nobody reads any more.  So a STOP, a DESTROY of an active
 * session, the end of an owned session and the daemon's exit first make
 * the session look stopped to processes (SessionTable::begin_stop) and
 * signal them, then wait for their acknowledgements through an
 * AckTracker gate, on the event loop (the acknowledgements arrive on it),
 * bounded by kStopWaitMs; only then are the drains finished and the
 * controllers answered.  A stop that signals nobody (no running process
 * to tell, or none that catches the signal) finishes at once, as before.
 *
 * Contract: main thread only.  stops_ (stop_coordinator.h) holds the stops
 * under way, by gate id; a command on a session whose stop is under way
 * joins it (its answer comes with the others); a controller that closes
 * meanwhile is answered nowhere, the stop still completes.
 */
#include "daemon_impl.h"

#include <algorithm>

namespace strata {
namespace daemon_impl {

// STOP (destroy false) or DESTROY of the session `id`, answered to `c`
// (null: nobody, an owner's end) once complete.
void Daemon::stop_in_two(uint64_t id, bool destroy, Conn *c, uint32_t seq)
{
	const StopWait::To to{c ? c->id : 0, seq, destroy};
	if (stops_.join(id, destroy, c ? &to : nullptr)) // under way: this ends with it
		return;
	StopWait w;
	w.session_id = id;
	w.destroy = destroy;
	if (c)
		w.to.push_back(to);
	Session *s = sessions_.by_id(id);
	const Answer a = s ? sessions_.begin_stop(*s) : Answer();
	w.told = a.notify;
	if (a.notify) {
		tell(a, w.signalled);
		w.generation = acks_.generation();
	}
	if (w.signalled.waiting.empty()) { // nobody to wait for: complete now
		answer_stop(w, DueReply());
		return;
	}
	PendingReply p = w.signalled;
	const uint64_t g = stops_.wait(std::move(w));
	acks_.gate(g, std::move(p), kStopWaitMs);
}

// The processes a stop concerns (`a`: the session's, its companion's)
// signalled, and added to `into` (one entry a process, its latest
// generation: its acknowledgement of that one is of every earlier one).
void Daemon::tell(const Answer &a, PendingReply &into)
{
	publish_tables(); // a process told reads the tables without the session
	std::vector<PendingReply> told{acks_.signal(a.who, -1, a.kgen)};
	for (const auto &x : a.also)
		told.push_back(acks_.signal(x.first, -1, x.second));
	for (const PendingReply &p : told) {
		for (const auto &w : p.waiting) {
			auto it = std::find_if(
				into.waiting.begin(), into.waiting.end(),
				[&](const std::pair<pid_t, uint64_t> &x) { return x.first == w.first; });
			if (it == into.waiting.end())
				into.waiting.push_back(w);
			else
				it->second = std::max(it->second, w.second);
		}
		into.kgens.insert(into.kgens.end(), p.kgens.begin(), p.kgens.end());
	}
	into.signalled = into.waiting.size();
}

// The gate of a stop under way opened (deliver): its processes applied it,
// or kStopWaitMs passed.
void Daemon::end_stop(const DueReply &d)
{
	StopWait w;
	if (!stops_.take(d.gate, w))
		return;
	persist_.changed(); // persistence.h: the session stopped (or went) since
	if (d.status)
		logf("stopping %s: %s; what they still held may miss the trace",
		     w.session_id ? ("session " + std::to_string(w.session_id)).c_str() : "at exit",
		     d.text.c_str());
	if (w.session_id) // else leave()'s wait: shut_down finishes every session
		answer_stop(w, d);
}

// The drains finished, the session stopped (and destroyed), and every
// controller waiting for it answered: as a STOP or DESTROY was before,
// plus who did not apply it in time (d.status: -ETIMEDOUT).
void Daemon::answer_stop(const StopWait &w, const DueReply &d)
{
	std::string out; // a disk session's: clocks.json and metadata clocks (sync_link.h)
	ClockInfo clock;
	if (const Session *s = sessions_.by_id(w.session_id); s && !s->streamed() && s->aggregate.empty())
		out = s->out, clock = s->clock;
	const Answer st = sessions_.finish_stop(w.session_id, false);
	const Answer de = w.destroy ? sessions_.finish_stop(w.session_id, true) : Answer();
	if (!out.empty() && st.status == 0)
		sync_.session_stopped(out, clock, hostname_);
	const size_t n = w.signalled.signalled; // of which d.unacked did not apply it
	for (const StopWait::To &t : w.to) {
		Conn *c = conns_.by_id(t.conn_id);
		if (!c)
			continue;
		const Answer &a = t.destroy ? de : st;
		if (a.status != 0 || !w.told || (c->version < 2 && w.signalled.waiting.empty())) {
			conns_.reply(*c, t.seq, a.status, a.text); // as answer() did
			continue;
		}
		const std::string late = d.status ? "; " + d.text : "";
		if (c->version < 2) {
			conns_.reply(*c, t.seq, 0,
				     a.text + " (" + std::to_string(n - d.unacked) + " of " +
					     std::to_string(n) + " running process(es) applied it" + late +
					     ")");
			continue;
		}
		acks_.owe(c->id, w.signalled); // a WAIT after it asks again
		conns_.reply(*c, t.seq, 0,
			     a.text + " (generation " + std::to_string(w.generation) + ", " +
				     std::to_string(n) + " running process(es) signalled" + late + ")");
	}
}

// The sessions `owner` made with kCreateOwned end with it (its connection
// closed, or it exited): stopped and destroyed, nobody answered.
void Daemon::end_owned(uint64_t owner, pid_t peer)
{
	for (uint64_t id : sessions_.disown(owner)) {
		if (const Session *s = sessions_.by_id(id))
			INFO("session %s: its owner (pid %d) ended", s->name.c_str(), peer);
		stop_in_two(id, true, nullptr, 0);
	}
}

// The daemon exits (quit_): every active session's processes are told, and
// ONE bounded wait for all of them (a stop of session 0) runs on the event
// loop, with the stops already under way; once stops_ is empty, shut_down
// finishes the drains (SessionTable::stop_all).
void Daemon::leave()
{
	leaving_ = true;
	conns_.serve_quiet(); // every process that joined from the table is known
	settle_attaches();    // every buffer handed over joins its session
	PendingReply all;
	std::vector<uint64_t> ids;
	for (auto &s : sessions_.all())
		if (!s->companion_of)
			ids.push_back(s->id);
	for (uint64_t id : ids) {
		Session *s = sessions_.by_id(id); // a trigger's stop erases its companion
		const Answer a = s ? sessions_.begin_stop(*s) : Answer();
		if (a.notify)
			tell(a, all);
	}
	if (all.waiting.empty())
		return;
	INFO("exiting: waiting up to %lld ms for %zu process(es) to leave their sessions",
	     static_cast<long long>(kStopWaitMs), all.waiting.size());
	acks_.gate(stops_.wait(StopWait()), std::move(all), kStopWaitMs);
}

} // namespace daemon_impl
} // namespace strata
