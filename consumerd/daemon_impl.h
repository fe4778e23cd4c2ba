/*
 * daemon_impl.h - the Daemon: the parts of strata-consumerd made and wired
 * together, the event loop, and the daemon's life (docs/consumerd.md).
 *
 * The threading contract is daemon.h's.  Each part owns its state and
 * opens with its own contract:
 *   event_loop.h        descriptors -> handlers (epoll), timers;
 *   listener.h          the socket and the quiet socket: accepts;
 *   connections.h       the peers: the connection table (Conn), reading,
 *                       framing, HELLO, answers, a connection's end;
 *   commands.h          the route table and a controller's commands;
 *   session_table.h     sessions, slots, rules, triggers, outputs and the
 *                       commands on them (session.h: what a session is);
 *   process_registry.h  the traced processes, by pidfd and pid;
 *   ack_tracker.h       generations, held answers, the module's WAITs;
 *   attacher.h          the attacher thread (BUFFER -> drain);
 *   grant_tables.h      the grant table files, per uid;
 *   clock_page.h        the clock page and its refresh;
 *   persistence.h       the sessions kept across a crash of the daemon;
 *   stopping.h          two-phase stops: a session's processes told and
 *                       waited for (bounded) before its drains finish
 *                       (STOP, DESTROY, an owner's end, the daemon's exit),
 *                       over stop_coordinator.h, the stops under way;
 *   processes.h         a process's messages (REGISTER, BUFFER and the
 *                       attacher's results, AGG_REGION), its exit, a
 *                       connection's end, early adoption.
 * The Daemon owns the parts, the signals, the clock page and the clock
 * links, and is the host the parts call back (SessionTable::Host,
 * Connections::Host, Commands::Host, Stopping::Host, Persistence::Host,
 * Processes::Host), handing each call to the part that does it; its life
 * is daemon.cpp's: options, signals, the parts started, the loop (run, or
 * turn by turn in-process: start, serve, turn), shutdown.
 *
 * Objects, all owned by the main thread: Conn (connections.h), Session
 * (session.h) and Proc (process_registry.h), owned by their parts.
 */
#ifndef STRATA_CONSUMERD_DAEMON_IMPL_H
#define STRATA_CONSUMERD_DAEMON_IMPL_H

#include "daemon.h"

#include <map>
#include <memory>
#include <string>
#include <unistd.h>
#include <vector>

#include "access.h"
#include "ack_tracker.h"
#include "attacher.h"
#include "clock_page.h"
#include "commands.h"
#include "connections.h"
#include "event_loop.h"
#include "grant_tables.h"
#include "listener.h"
#include "log.h"
#include "persistence.h"
#include "process_registry.h"
#include "processes.h"
#include "proto/proto.h"
#include "session_table.h"
#include "stopping.h"
#include "sync_link.h"

namespace strata {
namespace daemon_impl {

std::string hostname();

class Daemon : private SessionTable::Host,
	       private Connections::Host,
	       private Commands::Host,
	       private Stopping::Host,
	       private Persistence::Host,
	       private Processes::Host {
public:
	explicit Daemon(const DaemonOptions &opt);
	// Listens, starts, serves until SIGTERM or SIGINT, shuts down: the
	// process's exit code.
	int run();

	// In-process, without a socket file or signals (tests/unit/
	// daemon_harness_test.cpp), main thread only: start() once (false:
	// said in the log), then serve() peers and turn() the loop, then
	// shut_down() once.
	bool start();
	// A connected socket (a socketpair's end, owned from now on) served as
	// a peer the listener accepted.  False: refused (closed).
	bool serve(int fd) { return conns_.take_conn(fd, false); }
	// One event-loop turn (waiting up to timeout_ms) and the work that
	// follows each: 0, or -errno of epoll_wait (logged).
	int turn(int timeout_ms);
	void shut_down();

private:
	// daemon.cpp: life.
	bool open_signals();
	void start_clock_page();
	bool start_sync_links(); // sync_link.h: the --sync and --sync-guest links
	void on_signal();
	void publish_tables() override; // Stopping::Host

	// Connections::Host: messages to the route table (commands.h), a
	// connection's end (processes.h: its acknowledgement, its owned sessions).
	bool dispatch(Conn &c, const proto::Message &m) override { return commands_.dispatch(c, m); }
	void before_answers() override { publish_tables(); }
	void before_controller_answer() override { persist_.save_if_changed(); }
	void closed(const Ended &e) override { processes_.closed(e); }
	void knocked(pid_t pid, uid_t uid, const std::string &comm, int signo) override
	{
		processes_.knocked(pid, uid, comm, signo);
	}
	pid_t conn_pid(uint64_t id) override { return conns_.pid_of(id); } // Persistence::Host

	// Commands::Host: a process's messages (processes.h).
	void do_register(Conn &c, const proto::Message &m) override { processes_.do_register(c, m); }
	void do_buffer(Conn &c, const proto::Message &m) override { processes_.do_buffer(c, m); }
	void do_agg_region(Conn &c, const proto::Message &m) override { processes_.do_agg_region(c, m); }
	// Commands::Host, Stopping::Host.
	void settle_attaches() override { processes_.settle_attaches(); }
	// Processes::Host.
	int clock_page_fd() override { return clock_page_ ? clock_page_->fd() : -1; }

	// Commands::Host, Persistence::Host, Processes::Host: the stops
	// (stopping.h).
	void stop_in_two(uint64_t id, bool destroy, Conn *c, uint32_t seq) override
	{
		stopping_.stop(id, destroy, c, seq);
	}
	void end_stop(const DueReply &d) override { stopping_.end(d); }
	void end_owned(uint64_t owner, pid_t peer) override { stopping_.end_owned(owner, peer); }

	// SessionTable::Host (processes.h, daemon.cpp).
	void settle() override { processes_.settle(); }
	void collect() override { processes_.collect_attaches(); }
	void forget_drains(const Session &s) override { procs_.forget_drains(s); }
	void changed() override { tables_.dirty(); }
	void adopt_early(Session &s) override { processes_.adopt_early(s); }
	bool watch_triggers(bool on) override;
	void relay_opened(Session &s) override;
	void open_gate(Session &s);
	void gate_barrier();
	static uint64_t gate_now();
	static constexpr uint64_t kGateMs = 100;           // barriers of the live gates
	static constexpr uint64_t kGateMarginNs = 1000000; // as the live beacons' (docs/relay.md)
	void relay_ending(Session &s) override;
	void serial_opened(Session &s) override;
	void serial_stopped(Session &s) override;

	DaemonOptions opt_;
	std::string path_;
	std::string hostname_;
	EventLoop loop_;
	Connections conns_; // the peers (listener_ hands them over)
	ProcessRegistry procs_;
	AckTracker acks_;
	Attacher attacher_;
	GrantTables tables_;
	SessionTable sessions_;
	std::unique_ptr<ClockPage> clock_page_; // null: TSC unusable
	SyncLinks sync_;                        // clock links to other machines
	Listener listener_;                     // the socket and the quiet socket
	Persistence persist_;                   // the sessions kept across a crash
	Commands commands_;                     // the route table, a controller's commands
	Stopping stopping_;                     // the two-phase stops under way
	Processes processes_;                   // a process's messages, its exit
	int sigfd_ = -1;
	int trigger_tfd_ = -1; // the session table's trigger timer (loop_'s)
	int gate_tfd_ = -1;    // the live gates' barrier timer (loop_'s)
	bool quit_ = false;
	bool leaving_ = false; // quit_ seen: Stopping::leave told every session's processes
};

} // namespace daemon_impl
} // namespace strata
#endif
