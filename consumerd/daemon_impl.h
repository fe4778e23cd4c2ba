/*
 * daemon_impl.h - the Daemon: the parts of strata-consumerd wired
 * together, and the messages dispatched to them (docs/consumerd.md).
 *
 * The threading contract is daemon.h's.  Each part owns its state and
 * opens with its own contract:
 *   event_loop.h        descriptors -> handlers (epoll), timers;
 *   session_table.h     sessions, slots, rules, triggers, outputs and the
 *                       commands on them (session.h: what a session is);
 *   process_registry.h  the traced processes, by pidfd and pid;
 *   ack_tracker.h       generations, held answers, the module's WAITs;
 *   attacher.h          the attacher thread (BUFFER -> drain);
 *   grant_tables.h      the grant table files, per uid;
 *   clock_page.h        the clock page and its refresh;
 *   listener.h          the socket and the quiet socket: accepts;
 *   persistence.h       the sessions kept across a crash of the daemon;
 *   stop_coordinator.h  the two-phase stops under way.
 * The Daemon owns the parts, the signals and the connections, and is the
 * only one that talks to a peer:
 *   daemon.cpp    its life: options, signals, the parts started, the loop
 *                 (run, or turn by turn in-process: start, serve, turn),
 *                 shutdown;
 *   conn.cpp      connections: take (from the listener, or a test's
 *                 socketpair), read, frame, route (handle), answer, drop
 *                 (the sessions a connection owns end with it);
 *   commands.cpp  a controller's commands, each handed to its part;
 *   procs.cpp     a process's messages: REGISTER, BUFFER hand-over (and
 *                 the attacher's results), exit, early adoption;
 *   stopping.cpp  two-phase stops: a session's processes told and waited
 *                 for (bounded) before its drains finish (STOP, DESTROY,
 *                 an owner's end, the daemon's exit).
 *
 * Objects, all owned by the main thread:
 *   Conn     a connected socket: role after HELLO, partial input, received
 *            fds, and for a process the slots granted to it.
 *   Session  (session.h) and Proc (process_registry.h), owned by their
 *            parts.
 */
#ifndef STRATA_CONSUMERD_DAEMON_IMPL_H
#define STRATA_CONSUMERD_DAEMON_IMPL_H

#include "daemon.h"

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "access.h"
#include "ack_tracker.h"
#include "attacher.h"
#include "clock_page.h"
#include "connections.h"
#include "event_loop.h"
#include "grant_tables.h"
#include "listener.h"
#include "log.h"
#include "persistence.h"
#include "process_registry.h"
#include "proto/proto.h"
#include "session_table.h"
#include "stop_coordinator.h"
#include "sync_link.h"

namespace strata {
namespace daemon_impl {

// How long a stop waits for its processes to apply it (stopping.cpp).
constexpr int64_t kStopWaitMs = 2000;

std::string hostname();

class Daemon : private SessionTable::Host, private Connections::Host, private Persistence::Host {
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
	void publish_tables();

	// conn.cpp: Connections::Host, and the route table.
	bool dispatch(Conn &c, const proto::Message &m) override;
	void before_answers() override { publish_tables(); }
	void before_controller_answer() override { persist_.save_if_changed(); }
	void closed(const Ended &e) override;
	pid_t conn_pid(uint64_t id) override { return conns_.pid_of(id); } // Persistence::Host
	// A part's answer to `c`: sent, or when the change reaches running
	// processes, they are signalled and the answer says so (version 2) or
	// waits for their acknowledgements (version 1).
	void answer(Conn &c, uint32_t seq, const Answer &a);
	void deliver(const std::vector<DueReply> &due); // the tracker's answers due

	// commands.cpp: a controller's commands.
	using Command = void (Daemon::*)(Conn &, const proto::Message &);
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

	// procs.cpp: a process's messages.
	void do_register(Conn &c, const proto::Message &m);
	void note_probes(Conn &c, const proto::Register &m);
	void grant_sessions(Conn &c, const Proc &p, proto::RegisterReply &rr);
	void table_registered(Conn &c, Proc &p, uint64_t gen);
	void do_buffer(Conn &c, const proto::Message &m);
	void do_agg_region(Conn &c, const proto::Message &m);
	void do_agg_fetch(Conn &c, const proto::Message &m);
	bool find_grant(Conn &c, uint32_t seq, const proto::Buffer &m, int fd, Grant &grant);
	void attach(Conn &c, uint32_t seq, Session &s, Proc &p, int fd, const Grant &grant, uint32_t slot);
	Proc &proc_for(pid_t pid, uid_t uid);
	void on_exit(int pidfd);
	void collect_attaches(bool woken = false);
	void settle_attaches();
	void integrate(AttachJob &j);
	void drop_attach(AttachJob &j);
	void adopt_early_buffers(Session &s);
	void adopt_early_buffer(Session &s, int buf, pid_t holder, uid_t uid,
				std::set<std::pair<dev_t, ino_t>> &seen);

	// stopping.cpp: two-phase stops (what waits: stop_coordinator.h).
	void stop_in_two(uint64_t id, bool destroy, Conn *c, uint32_t seq);
	void tell(const Answer &a, PendingReply &into);
	void end_stop(const DueReply &d);
	void answer_stop(const StopWait &w, const DueReply &d);
	void end_owned(uint64_t owner, pid_t peer) override; // also Persistence::Host
	void leave();

	// SessionTable::Host (procs.cpp, daemon.cpp).
	void settle() override;
	void collect() override { collect_attaches(); }
	void forget_drains(const Session &s) override { procs_.forget_drains(s); }
	void changed() override { tables_.dirty(); }
	void adopt_early(Session &s) override;
	bool watch_triggers(bool on) override;
	void relay_opened(Session &s) override;
	void relay_ending(Session &s) override;

	DaemonOptions opt_;
	std::string path_;
	std::string hostname_;
	EventLoop loop_;
	Connections conns_; // the peers (made before listener_, which it hosts)
	ProcessRegistry procs_;
	AckTracker acks_;
	Attacher attacher_;
	GrantTables tables_;
	SessionTable sessions_;
	std::unique_ptr<ClockPage> clock_page_; // null: TSC unusable
	SyncLinks sync_;                        // clock links to other machines
	Listener listener_;                     // the socket and the quiet socket
	Persistence persist_;                   // the sessions kept across a crash
	int sigfd_ = -1;
	int trigger_tfd_ = -1; // the session table's trigger timer (loop_'s)
	// State queries answered here (REGISTER without kRegisterModule), and
	// module processes' hand-offs and announcements: logged at exit.
	uint64_t n_queries_ = 0, n_handoffs_ = 0;
	bool quit_ = false;
	bool leaving_ = false;  // quit_ seen: leave() told every session's processes
	StopCoordinator stops_; // the stops under way (stop_coordinator.h)
};

} // namespace daemon_impl
} // namespace strata
#endif
