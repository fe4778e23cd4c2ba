/*
 * stop_coordinator.h - the two-phase stops under way (stopping.h;
 * docs/consumerd.md, "Stopping a session").
 *
 * A stop first tells a session's processes, then waits (an AckTracker gate)
 * for them to apply it before its drains finish and its controllers are
 * answered.  This part keeps what waits; Stopping (stopping.h) does the telling,
 * finishing and answering.
 *
 * Contract:
 *   - main thread only (the gates open on the event loop);
 *   - at most one stop of a session at a time: a STOP or DESTROY of a
 *     session whose stop is under way joins it (join: DESTROY wins, and
 *     its controller is answered with the others once it completes);
 *   - the daemon's exit is one stop of session 0 (every session at once),
 *     which nothing joins;
 *   - a stop that waits gets a gate id, never 0, never reused; it is taken
 *     once when its gate opens (take of an unknown or taken id: false);
 *   - empty(): no stop waits (the daemon's exit finishes every session
 *     only then).
 */
#ifndef STRATA_CONSUMERD_STOP_COORDINATOR_H
#define STRATA_CONSUMERD_STOP_COORDINATOR_H

#include <cstdint>
#include <map>
#include <vector>

#include "ack_tracker.h"

namespace strata {
namespace daemon_impl {

// A stop under way: the session (0: the daemon's exit), whether it is
// destroyed at the end, the controllers to answer (each a STOP or a
// DESTROY) and what was signalled.
struct StopWait {
	struct To {
		uint64_t conn_id = 0;
		uint32_t seq = 0;
		bool destroy = false;
	};
	uint64_t session_id = 0;
	bool destroy = false;
	std::vector<To> to;
	bool told = false; // the session was active: its processes were signalled
	PendingReply signalled;
	uint64_t generation = 0;
};

class StopCoordinator {
public:
	// The stop of `session` under way, if any, joined: `destroy` or-ed,
	// `to` (null: nobody to answer, an owner's end) added.  False: none.
	bool join(uint64_t session, bool destroy, const StopWait::To *to)
	{
		if (session == 0)
			return false;
		for (auto &kv : stops_)
			if (kv.second.session_id == session) {
				kv.second.destroy |= destroy;
				if (to)
					kv.second.to.push_back(*to);
				return true;
			}
		return false;
	}
	// A stop that waits for its gate: the gate's id.
	uint64_t wait(StopWait w)
	{
		const uint64_t g = next_gate_++;
		stops_.emplace(g, std::move(w));
		return g;
	}
	// The stop whose gate `gate` opened, out of the set into `w`.
	bool take(uint64_t gate, StopWait &w)
	{
		auto it = stops_.find(gate);
		if (it == stops_.end())
			return false;
		w = std::move(it->second);
		stops_.erase(it);
		return true;
	}
	bool empty() const { return stops_.empty(); }

private:
	std::map<uint64_t, StopWait> stops_; // by gate id (PendingReply::gate)
	uint64_t next_gate_ = 1;
};

} // namespace daemon_impl
} // namespace strata
#endif
