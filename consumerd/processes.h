/*
 * processes.h - a traced process's messages and life in the daemon
 * (docs/consumerd.md, "The parts"): REGISTER answers its state query (or
 * notes a table join, a hand-off, a probe report), BUFFER attaches its ring
 * to a session's drain (on the attacher thread, attacher.h, whose results
 * join here), AGG_REGION keeps its aggregation region, its exit ends its
 * drains, its connection's end is its acknowledgement; and early adoption
 * at START (--adopt-early).
 *
 * Roles: Commands hands it a process's messages (through its Host, the
 * Daemon: do_register, do_buffer, do_agg_region); Connections tells it a
 * connection ended (through the Daemon: closed); the process registry's
 * pidfd watch tells it a process exited (on_exit); the SessionTable asks
 * it, through the Daemon, to settle and collect the attacher's results and
 * to adopt early buffers; Stopping and Commands ask it to settle them.
 *
 * Contract:
 *   - main thread only;
 *   - it owns the counts of state queries answered and of module
 *     processes' hand-offs and announcements (logged at the daemon's exit)
 *     and nothing else: it makes and erases process records in the
 *     ProcessRegistry, records grants and flags in a connection's Conn,
 *     adds drains and regions to Sessions (found through the SessionTable),
 *     queues jobs on and takes results from the Attacher, acknowledges
 *     through the AckTracker, marks the GrantTables (a uid seen, a join)
 *     and Persistence (a buffer to keep, an owner gone), and answers only
 *     through Connections (reply, send);
 *   - a process is known by its peer credentials and its pidfd, never by
 *     what its payload says; its buffer and its region are hostile
 *     (Drain::create validates the buffer; a region is only checked for
 *     its kind and size and kept read-only, never mapped here); a
 *     malformed message is refused with a reason, the connection kept;
 *   - its Host gives the clock page's descriptor (sent with a state
 *     query's answer) and ends the sessions a closed connection owned
 *     (Stopping::end_owned).
 */
#ifndef STRATA_CONSUMERD_PROCESSES_H
#define STRATA_CONSUMERD_PROCESSES_H

#include <cstdint>
#include <set>
#include <string>
#include <sys/types.h>
#include <utility>

#include "ack_tracker.h"
#include "attacher.h"
#include "connections.h"
#include "grant_tables.h"
#include "persistence.h"
#include "process_registry.h"
#include "proto/proto.h"
#include "session_table.h"

namespace strata {
namespace daemon_impl {

class Processes {
public:
	// What a process's messages ask of the Daemon.
	class Host {
	public:
		virtual ~Host() = default;
		// The clock page's descriptor (clock_page.h), -1: none.
		virtual int clock_page_fd() = 0;
		// The sessions `owner` made with kCreateOwned end with it
		// (stopping.h).
		virtual void end_owned(uint64_t owner, pid_t peer) = 0;
	};
	// The parts a process's messages reach; hostname: its sub-traces'
	// env.hostname; adopt_early: --adopt-early.
	struct Parts {
		Connections &conns;
		SessionTable &sessions;
		ProcessRegistry &procs;
		AckTracker &acks;
		Attacher &attacher;
		GrantTables &tables;
		Persistence &persist;
		const std::string &hostname;
		bool adopt_early;
	};

	Processes(Host &host, Parts parts) : host_(host), p_(parts) {}
	Processes(const Processes &) = delete;
	Processes &operator=(const Processes &) = delete;

	// A process's messages (Commands::Host), answered here.
	void do_register(Conn &c, const proto::Message &m);
	void do_buffer(Conn &c, const proto::Message &m);
	void do_agg_region(Conn &c, const proto::Message &m);
	// A connection ended (Connections::Host): its acknowledgement, a
	// process gone meanwhile, the sessions it owned.
	void closed(const Connections::Host::Ended &e);
	// The process of `pidfd` exited: its drains finish.
	void on_exit(int pidfd);
	// A process knocked: its connect() timed out, so it joined nothing;
	// every active session it would have joined names it, and one that
	// catches its update signal `signo` is signalled to ask again.
	void knocked(pid_t pid, uid_t uid, const std::string &comm, int signo);
	// The attacher's results so far (woken: its eventfd fired), or all of
	// them, waited for (settle_attaches).
	void collect_attaches(bool woken = false);
	void settle_attaches();
	// Buffers already sent, or being attached, join now (SessionTable::Host).
	void settle();
	// The messages already in the processes' sockets, read and answered:
	// a streamed session's buffers attach here, on this thread (attach), so
	// its outputs are made by the return; a disk session's queue on the
	// attacher, not waited for (the live gate's barrier, Daemon::gate_barrier).
	void serve_pending();
	// A session starts: with --adopt-early, the early buffers it may
	// trace are adopted (SessionTable::Host).
	void adopt_early(Session &s);

	// State queries answered, hand-offs and announcements (REGISTER).
	uint64_t queries() const { return n_queries_; }
	uint64_t handoffs() const { return n_handoffs_; }

private:
	void note_probes(Conn &c, const proto::Register &m);
	void missed_answer(const Connections::Host::Ended &e, Proc &p);
	bool may_ask_again(const Proc &p) const;
	void ask_again(Proc &p);
	void grant_sessions(Conn &c, const Proc &p, proto::RegisterReply &rr);
	void table_registered(Conn &c, Proc &p, uint64_t gen);
	bool find_grant(Conn &c, uint32_t seq, const proto::Buffer &m, int fd, Grant &grant);
	void attach(Conn &c, uint32_t seq, Session &s, Proc &p, int fd, const Grant &grant, uint32_t slot);
	Proc &proc_for(pid_t pid, uid_t uid);
	void integrate(AttachJob &j);
	void drop_attach(AttachJob &j);
	void adopt_early_buffers(Session &s);
	void adopt_early_buffer(Session &s, int buf, pid_t holder, uid_t uid,
				std::set<std::pair<dev_t, ino_t>> &seen);

	Host &host_;
	Parts p_;
	// State queries answered here (REGISTER without kRegisterModule), and
	// module processes' hand-offs and announcements.
	uint64_t n_queries_ = 0, n_handoffs_ = 0;
};

} // namespace daemon_impl
} // namespace strata
#endif
