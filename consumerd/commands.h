/*
 * commands.h - the daemon's dispatch: the route table (message type, who
 * may send it, whether it changes what persistence keeps, handler) and a
 * controller's commands, each handed to the part that owns what it
 * changes or reads, and answered (docs/consumerd.md, "Commands").
 *
 * Roles: Connections hands every message after HELLO to the Daemon, which
 * hands it to dispatch(); a controller's command is decoded here and
 * given to its part (SessionTable, ProcessRegistry, AckTracker, SyncLinks),
 * whose Answer goes back through answer(); a process's messages (REGISTER,
 * BUFFER, AGG_REGION) and the two-phase stops are the Host's (the Daemon,
 * which hands them to Processes, processes.h, and Stopping, stopping.h).  The AckTracker's answers that fall due are
 * delivered here (deliver, each event-loop turn and at a WAIT).
 *
 * Contract:
 *   - main thread only; it owns nothing but the route table: it reads and
 *     changes its parts through the references it was made with, and
 *     answers only through Connections (reply, send);
 *   - a message whose route is not in the table for the sender's role
 *     (a process before or after its REGISTER, a controller) is refused
 *     with -EPERM, and the connection kept;
 *   - before a controller's command: the quiet socket's queue is served,
 *     the attacher's results settled (Host::settle_attaches: the command
 *     sees every process and buffer already handed over) and the grant
 *     tables marked dirty (STATUS also reads what every process
 *     connection holds first: a BUFFER sent just before its process
 *     exited counts); a command whose route says Changes marks
 *     persistence changed (persistence.h), one that Reads does not (STATUS
 *     stays cheap with thousands of live buffers, issue 38);
 *   - a change that reaches running processes is answered through
 *     answer(): they are signalled (ack_tracker.h) and the controller is
 *     told how many (version 2) or answered once they applied it
 *     (version 1); STOP and DESTROY of an active session are the Host's
 *     two-phase stops, answered when they end.
 */
#ifndef STRATA_CONSUMERD_COMMANDS_H
#define STRATA_CONSUMERD_COMMANDS_H

#include <cstdint>
#include <vector>

#include "ack_tracker.h"
#include "connections.h"
#include "grant_tables.h"
#include "persistence.h"
#include "process_registry.h"
#include "proto/proto.h"
#include "session_table.h"
#include "sync_link.h"

namespace strata {
namespace daemon_impl {

class Commands {
public:
	// What dispatch hands back to the Daemon.
	class Host {
	public:
		virtual ~Host() = default;
		// A process's messages (processes.h), answered there.
		virtual void do_register(Conn &c, const proto::Message &m) = 0;
		virtual void do_buffer(Conn &c, const proto::Message &m) = 0;
		virtual void do_agg_region(Conn &c, const proto::Message &m) = 0;
		// STOP (destroy false) or DESTROY of session `id` in two phases,
		// answered to `c` (stopping.h) once complete.
		virtual void stop_in_two(uint64_t id, bool destroy, Conn *c, uint32_t seq) = 0;
		// A stop's gate opened (an AckTracker answer with a gate).
		virtual void end_stop(const DueReply &d) = 0;
		// Every buffer already handed over joins its session (attacher.h).
		virtual void settle_attaches() = 0;
	};
	// The parts a command reaches.
	struct Parts {
		Connections &conns;
		SessionTable &sessions;
		ProcessRegistry &procs;
		AckTracker &acks;
		GrantTables &tables;
		Persistence &persist;
		SyncLinks &sync;
	};

	// Who may send a message type: a process before or after its REGISTER,
	// or a controller.
	enum class From { Unregistered, Registered, Controller };
	// What a controller's command does to the sessions the state file
	// keeps (persistence.h): a question that only reads them leaves the
	// file as it is.
	enum class Effect { Reads, Changes };
	using Handler = void (Commands::*)(Conn &, const proto::Message &);
	struct Route {
		proto::Type type;
		From from;
		Effect effect; // a process's messages: what their handlers mark (processes.cpp)
		Handler fn;
	};
	// The route of `type` from `from`, null: not allowed.
	static const Route *route(proto::Type type, From from);

	Commands(Host &host, Parts parts) : host_(host), p_(parts) {}
	Commands(const Commands &) = delete;
	Commands &operator=(const Commands &) = delete;

	// A message of a connection that said HELLO routed and answered.
	// False: close the connection (no route closes it: refused, kept).
	bool dispatch(Conn &c, const proto::Message &m);
	// A part's answer to `c`: sent, or when the change reaches running
	// processes, they are signalled and the answer says so (version 2) or
	// waits for their acknowledgements (version 1).
	void answer(Conn &c, uint32_t seq, const Answer &a);
	// The tracker's answers due: to their controllers, a stop's gate to
	// Host::end_stop.
	void deliver(const std::vector<DueReply> &due);

private:
	void do_create(Conn &c, const proto::Message &m);
	void do_enable(Conn &c, const proto::Message &m);
	void do_disable(Conn &c, const proto::Message &m);
	void do_target_rule(Conn &c, const proto::Message &m);
	void do_start(Conn &c, const proto::Message &m);
	void do_stop(Conn &c, const proto::Message &m);
	void do_destroy(Conn &c, const proto::Message &m);
	void do_list(Conn &c, const proto::Message &m);
	void do_wait(Conn &c, const proto::Message &m);
	void do_snapshot(Conn &c, const proto::Message &m);
	void do_snapshot_on(Conn &c, const proto::Message &m);
	void do_status(Conn &c, const proto::Message &m);
	void do_agg_fetch(Conn &c, const proto::Message &m);
	// A process's messages, to the Host.
	void do_register(Conn &c, const proto::Message &m) { host_.do_register(c, m); }
	void do_buffer(Conn &c, const proto::Message &m) { host_.do_buffer(c, m); }
	void do_agg_region(Conn &c, const proto::Message &m) { host_.do_agg_region(c, m); }

	Host &host_;
	Parts p_;
};

} // namespace daemon_impl
} // namespace strata
#endif
