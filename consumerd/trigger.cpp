/*
 * trigger.cpp - snapshots on an event (SNAPSHOT_ON, `strata snapshot --on`).
 *
 * An overwrite-mode session S takes a snapshot by itself (as SNAPSHOT with
 * no directory: "<out>-snapshot-<UTC time>") when an event matching the
 * trigger's pattern is recorded, at most one per hold-off.
 *
 * How the event is seen: while S is active, a hidden companion session C
 * records only the trigger's pattern, in overwrite mode with the smallest
 * buffers (2 x 4 KiB per lane), in a slot above S's.  A writer's record of
 * C moves a lane's `head` of C's buffer; the main thread looks at the sum
 * of C's lane positions and discards (Drain::activity) every kTriggerLookMs and
 * takes a snapshot of S when it changed.  Nothing changes in the writers'
 * fast path and nothing is decoded: any record in C is a trigger.
 *
 * Why the snapshot holds the trigger event: the emitter writes an event's
 * slots in increasing order (tracepoint.h, __builtin_ctz), each reserve,
 * write and commit finished before the next slot's reserve; C's slot is
 * above S's.  The writer's acq_rel CAS of C's head comes after its commit
 * in S's buffer; our acquire load of C's head (Reader::lane_position)
 * that sees it comes before the snapshot's consumer-side close of S's
 * lanes, which therefore includes the committed record.  (A process that
 * joined S's rules but not yet C's, or the reverse, after a START: the
 * record is in S without a trigger, or triggers a snapshot without it.)
 *
 * Contract: the session table's (session_table.h): main thread only.
 * C is a Session in sessions_ (so that processes and the module get its
 * rules and hand over its buffers like any session's), marked
 * companion_of, never found by name, never in STATUS; it always comes after
 * S in sessions_ (made at S's start, erased at S's stop).
 *
 * C's own trace (the trigger events themselves) is written when C stops
 * (S's stop, or the trigger replaced) to "<out>-triggers/<C's id>".
 */
#include "session_table.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "log.h"
#include "proto/sock.h"
#include "strata_abi.h"

namespace strata {
namespace daemon_impl {

Answer SessionTable::snapshot_on(const Caller &c, const proto::SnapshotOn &m)
{
	Answer a;
	Session *s = find(c, m.session, a);
	if (!s)
		return a;
	a = Answer();
	if (s->channel.mode != STRATA_MODE_OVERWRITE) {
		a.status = -EINVAL;
		a.text = "session '" + s->name + "' is not in overwrite mode: its trace is on disk already";
		return a;
	}
	const bool active = s->state == proto::SessionState::Active && !s->stopping;
	if (active && s->trigger)
		stop_trigger(*s);
	if (m.off) {
		const bool had = s->trigger != nullptr;
		s->trigger.reset();
		a.text = had ? "session '" + s->name + "' takes no more snapshots on an event"
			     : "session '" + s->name + "' had no snapshot trigger";
		return a;
	}
	s->trigger = std::make_unique<Trigger>();
	s->trigger->pattern = m.pattern;
	s->trigger->holdoff_ms = m.holdoff_ms;
	a.text = "session '" + s->name + "' takes a snapshot when " + m.pattern +
		 " is recorded (at most one per " + std::to_string(m.holdoff_ms) + " ms) in " + s->out +
		 "-snapshot-<UTC time>";
	if (!active) {
		a.text += ", once started";
		return a;
	}
	std::string err;
	Session *comp = start_trigger(*s, err);
	if (!comp) {
		s->trigger.reset();
		a.status = -ENOSPC;
		a.text = "no snapshots on " + m.pattern + ": " + err;
		return a;
	}
	save_active();
	return changed(*comp, a.text);
}

// S is active and has a trigger: its companion, started, or nullptr and err.
Session *SessionTable::start_trigger(Session &s, std::string &err)
{
	if (share(s.uid, err) < 0) // the companion takes a slot of the user's share
		return nullptr;
	const uint32_t slot = free_slot(s.slot + 1);
	if (slot >= proto::kMaxSlots) {
		err = "no free session slot above the session's (" + std::to_string(s.slot) +
		      "): the trigger's events must be written after the session's";
		return nullptr;
	}
	auto c = std::make_unique<Session>();
	c->id = next_session_id_++;
	c->run_id = next_run_id_++;
	c->name = s.name + "/trigger";
	c->slot = slot;
	c->uid = s.uid;
	c->out = s.out + "-triggers/" + std::to_string(c->id); // one per companion: never shared
	c->channel = s.channel;
	c->channel.mode = STRATA_MODE_OVERWRITE;
	c->channel.n_subbuf = 2;
	c->channel.subbuf_size = STRATA_MIN_SUBBUF_SIZE;
	proto::Rule r;
	r.pattern = s.trigger->pattern;
	c->rules.push_back(r);
	c->targets.emplace_back();
	c->clock = s.clock;
	c->owner = s.owner;
	c->companion_of = s.id;
	c->state = proto::SessionState::Active;
	const int md = make_dirs(c->out, 0750, c->owner);
	if (md < 0) {
		err = "cannot create " + c->out + ": " + strerror(-md);
		return nullptr;
	}
	apply_kernel(*c);
	Trigger &t = *s.trigger;
	t.companion = c->id;
	t.seen = 0; // the counts below are this run's (the STOP answer reports them)
	t.last_ms = 0;
	t.taken = t.held = t.failed = 0;
	if (!watching_) {
		watching_ = host_.watch_triggers(true);
		if (!watching_)
			logf("snapshot trigger timer: %s (triggers are looked at only at stop)",
			     strerror(errno));
	}
	INFO("session %s: snapshots on %s (companion slot %u, hold-off %u ms)", s.name.c_str(),
	     t.pattern.c_str(), slot, t.holdoff_ms);
	Session *raw = c.get();
	sessions_.push_back(std::move(c));
	return raw;
}

// S stops (or its trigger changes): a last look, so that a trigger event
// recorded since the previous one still snapshots S, then the companion
// stops, writes its trace and goes away.
void SessionTable::stop_trigger(Session &s)
{
	Trigger &t = *s.trigger;
	if (!t.companion)
		return;
	check_triggers();
	auto it = std::find_if(sessions_.begin(), sessions_.end(),
			       [&](const std::unique_ptr<Session> &x) { return x->id == t.companion; });
	t.companion = 0;
	if (it == sessions_.end())
		return;
	Session &c = **it;
	stop_session(c);
	erase(c);
}

void SessionTable::check_triggers()
{
	host_.collect(); // a companion's new drains count from their first packets
	bool any = false;
	for (size_t i = 0; i < sessions_.size(); i++) {
		Session &s = *sessions_[i];
		if (!s.trigger || !s.trigger->companion || s.state != proto::SessionState::Active)
			continue;
		Trigger &t = *s.trigger;
		any = true;
		uint64_t a = 0;
		for (auto &x : sessions_)
			if (x->id == t.companion)
				for (auto &d : x->drains)
					a += d->activity();
		if (a == t.seen)
			continue;
		t.seen = a;
		const int64_t now = proto::now_ms();
		if (t.last_ms && now - t.last_ms < static_cast<int64_t>(t.holdoff_ms)) {
			t.held++;
			VLOG("session %s: %s recorded within the hold-off: no snapshot", s.name.c_str(),
			     t.pattern.c_str());
			continue;
		}
		t.last_ms = now;
		std::string text;
		if (take_snapshot(s, "", text) < 0) {
			t.failed++;
			logf("session %s: snapshot on %s: %s", s.name.c_str(), t.pattern.c_str(),
			     text.c_str());
		} else {
			t.taken++;
			INFO("session %s: snapshot on %s in %s", s.name.c_str(), t.pattern.c_str(),
			     text.c_str());
		}
	}
	if (!any && watching_) { // nothing to watch: the timer goes until the next trigger
		host_.watch_triggers(false);
		watching_ = false;
	}
}

std::string SessionTable::trigger_summary(const Session &s) const
{
	if (!s.trigger)
		return "";
	const Trigger &t = *s.trigger;
	std::string r = "; snapshots on " + t.pattern + ": " + std::to_string(t.taken) + " taken";
	if (t.held)
		r += ", " + std::to_string(t.held) + " time(s) within the hold-off (none taken)";
	if (t.failed)
		r += ", " + std::to_string(t.failed) + " failed";
	return r;
}

} // namespace daemon_impl
} // namespace strata
