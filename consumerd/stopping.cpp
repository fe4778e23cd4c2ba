/*
 * stopping.cpp - two-phase stops (stopping.h, whose contract this
 * follows; docs/consumerd.md, "Stopping a session").
 */
#include "stopping.h"

#include <algorithm>

#include "log.h"

namespace strata {
namespace daemon_impl {

int64_t stop_wait_ms()
{
	static const int64_t ms = [] {
		const long v = test_ms("STRATA_TEST_STOP_WAIT_MS");
		return v ? static_cast<int64_t>(v) : kStopWaitMs;
	}();
	return ms;
}

// STOP (destroy false) or DESTROY of the session `id`, answered to `c`
// (null: nobody, an owner's end) once complete.
void Stopping::stop(uint64_t id, bool destroy, Conn *c, uint32_t seq)
{
	const StopWait::To to{c ? c->id : 0, seq, destroy};
	if (stops_.join(id, destroy, c ? &to : nullptr)) // under way: this ends with it
		return;
	StopWait w;
	w.session_id = id;
	w.destroy = destroy;
	if (c)
		w.to.push_back(to);
	Session *s = p_.sessions.by_id(id);
	const Answer a = s ? p_.sessions.begin_stop(*s) : Answer();
	w.told = a.notify;
	if (a.notify) {
		tell(a, w.signalled);
		w.generation = p_.acks.generation();
	}
	if (w.signalled.waiting.empty()) { // nobody to wait for: complete now
		answer(w, DueReply());
		return;
	}
	PendingReply p = w.signalled;
	const uint64_t g = stops_.wait(std::move(w));
	p_.acks.gate(g, std::move(p), stop_wait_ms());
}

// The processes a stop concerns (`a`: the session's, its companion's)
// signalled, and added to `into` (one entry a process, its latest
// generation: its acknowledgement of that one is of every earlier one).
void Stopping::tell(const Answer &a, PendingReply &into)
{
	host_.publish_tables(); // a process told reads the tables without the session
	std::vector<PendingReply> told{p_.acks.signal(a.who, -1, a.kgen)};
	for (const auto &x : a.also)
		told.push_back(p_.acks.signal(x.first, -1, x.second));
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
void Stopping::end(const DueReply &d)
{
	StopWait w;
	if (!stops_.take(d.gate, w))
		return;
	p_.persist.changed(); // persistence.h: the session stopped (or went) since
	if (d.status)
		logf("stopping %s: %s; what they still held may miss the trace",
		     w.session_id ? ("session " + std::to_string(w.session_id)).c_str() : "at exit",
		     d.text.c_str());
	if (w.session_id) // else leave()'s wait: shut_down finishes every session
		answer(w, d);
}

// The drains finished, the session stopped (and destroyed), and every
// controller waiting for it answered: as a STOP or DESTROY was before,
// plus who did not apply it in time (d.status: -ETIMEDOUT).
void Stopping::answer(const StopWait &w, const DueReply &d)
{
	std::string out; // a disk session's: clocks.json and metadata clocks (sync_link.h)
	ClockInfo clock;
	if (const Session *s = p_.sessions.by_id(w.session_id); s && !s->streamed() && s->aggregate.empty())
		out = s->out, clock = s->clock;
	const Answer st = p_.sessions.finish_stop(w.session_id, false);
	const Answer de = w.destroy ? p_.sessions.finish_stop(w.session_id, true) : Answer();
	if (!out.empty() && st.status == 0)
		p_.sync.session_stopped(out, clock, p_.hostname);
	const size_t n = w.signalled.signalled; // of which d.unacked did not apply it
	for (const StopWait::To &t : w.to) {
		Conn *c = p_.conns.by_id(t.conn_id);
		if (!c)
			continue;
		const Answer &a = t.destroy ? de : st;
		if (a.status != 0 || !w.told || (c->version < 2 && w.signalled.waiting.empty())) {
			p_.conns.reply(*c, t.seq, a.status, a.text); // as answer() did
			continue;
		}
		const std::string late = d.status ? "; " + d.text : "";
		if (c->version < 2) {
			p_.conns.reply(*c, t.seq, 0,
				       a.text + " (" + std::to_string(n - d.unacked) + " of " +
					       std::to_string(n) + " running process(es) applied it" + late +
					       ")");
			continue;
		}
		p_.acks.owe(c->id, w.signalled); // a WAIT after it asks again
		p_.conns.reply(*c, t.seq, 0,
			       a.text + " (generation " + std::to_string(w.generation) + ", " +
				       std::to_string(n) + " running process(es) signalled" + late + ")");
	}
}

// The sessions `owner` made with kCreateOwned end with it (its connection
// closed, or it exited): stopped and destroyed, nobody answered.
void Stopping::end_owned(uint64_t owner, pid_t peer)
{
	for (uint64_t id : p_.sessions.disown(owner)) {
		if (const Session *s = p_.sessions.by_id(id))
			INFO("session %s: its owner (pid %d) ended", s->name.c_str(), peer);
		stop(id, true, nullptr, 0);
	}
}

// The daemon exits: every active session's processes are told, and ONE
// bounded wait for all of them (a stop of session 0) runs on the event
// loop, with the stops already under way; once idle(), the Daemon's
// shut_down finishes the drains (SessionTable::stop_all).
void Stopping::leave()
{
	p_.conns.serve_quiet();  // every process that joined from the table is known
	host_.settle_attaches(); // every buffer handed over joins its session
	PendingReply all;
	std::vector<uint64_t> ids;
	for (auto &s : p_.sessions.all())
		if (!s->companion_of)
			ids.push_back(s->id);
	for (uint64_t id : ids) {
		Session *s = p_.sessions.by_id(id); // a trigger's stop erases its companion
		const Answer a = s ? p_.sessions.begin_stop(*s) : Answer();
		if (a.notify)
			tell(a, all);
	}
	if (all.waiting.empty())
		return;
	INFO("exiting: waiting up to %lld ms for %zu process(es) to leave their sessions",
	     static_cast<long long>(stop_wait_ms()), all.waiting.size());
	p_.acks.gate(stops_.wait(StopWait()), std::move(all), stop_wait_ms());
}

} // namespace daemon_impl
} // namespace strata
