/*
 * stopping.h - two-phase stops (docs/consumerd.md, "Stopping a session").
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
 * Roles: Commands asks for STOP and DESTROY (through its Host, the
 * Daemon), the Daemon for an owner's end (a connection closed,
 * Persistence's owner_exited) and for the daemon's exit (leave); the
 * AckTracker's gate, delivered by Commands::deliver, ends a stop (end).
 *
 * Contract:
 *   - main thread only;
 *   - it owns the stops under way (a StopCoordinator, stop_coordinator.h,
 *     by gate id); it changes sessions only through SessionTable
 *     (begin_stop, finish_stop, disown), signals processes and opens gates
 *     through the AckTracker, marks persistence changed at a stop's end,
 *     and answers controllers through Connections (by connection id: one
 *     that closed meanwhile is answered nowhere, the stop still completes);
 *   - a STOP or DESTROY of a session whose stop is under way joins it (its
 *     answer comes with the others);
 *   - its Host publishes the grant tables before processes are told (they
 *     read the tables without the session) and settles the attaches before
 *     the exit's stop.
 */
#ifndef STRATA_CONSUMERD_STOPPING_H
#define STRATA_CONSUMERD_STOPPING_H

#include <cstdint>
#include <string>
#include <sys/types.h>

#include "ack_tracker.h"
#include "connections.h"
#include "persistence.h"
#include "session_table.h"
#include "stop_coordinator.h"
#include "sync_link.h"

namespace strata {
namespace daemon_impl {

// How long a stop waits for its processes to apply it.
constexpr int64_t kStopWaitMs = 2000;
// kStopWaitMs, or STRATA_TEST_STOP_WAIT_MS (tests only, 1..60000): a test
// under a sanitizer on a loaded machine, where a process that does answer
// may take longer than 2 s to be scheduled (Traced.StopWaitsBounded...).
int64_t stop_wait_ms();

class Stopping {
public:
	// What a stop asks of the Daemon.
	class Host {
	public:
		virtual ~Host() = default;
		// The grant tables published now (grant_tables.h).
		virtual void publish_tables() = 0;
		// Every buffer already handed over joins its session (attacher.h).
		virtual void settle_attaches() = 0;
	};
	// The parts a stop reaches; hostname: a synced trace's (sync_link.h).
	struct Parts {
		Connections &conns;
		SessionTable &sessions;
		AckTracker &acks;
		SyncLinks &sync;
		Persistence &persist;
		const std::string &hostname;
	};

	Stopping(Host &host, Parts parts) : host_(host), p_(parts) {}
	Stopping(const Stopping &) = delete;
	Stopping &operator=(const Stopping &) = delete;

	// STOP (destroy false) or DESTROY of the session `id`, answered to `c`
	// (null: nobody, an owner's end) once complete.
	void stop(uint64_t id, bool destroy, Conn *c, uint32_t seq);
	// The gate of a stop under way opened (its processes applied it, or
	// kStopWaitMs passed): the stop completes.
	void end(const DueReply &d);
	// The sessions `owner` made with kCreateOwned end with it (its
	// connection closed, or it exited): stopped and destroyed, nobody
	// answered.
	void end_owned(uint64_t owner, pid_t peer);
	// The daemon exits: every active session's processes told, and ONE
	// bounded wait for all of them (a stop of session 0), with the stops
	// already under way.
	void leave();
	// No stop waits (the daemon's exit finishes every session only then).
	bool idle() const { return stops_.empty(); }

private:
	void tell(const Answer &a, PendingReply &into);
	void answer(const StopWait &w, const DueReply &d);

	Host &host_;
	Parts p_;
	StopCoordinator stops_; // the stops under way
};

} // namespace daemon_impl
} // namespace strata
#endif
