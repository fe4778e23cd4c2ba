/*
 * daemon_impl.h - the daemon's parts, internal to strata-consumerd.
 *
 * The threading contract is daemon.h's.  The one class Daemon is defined
 * by role across files, each with its own contract at its top:
 *   daemon.cpp     the event loop: listening socket, signals, clock page,
 *                  run() and shutdown;
 *   conn.cpp       the control connection: accept, read, decode, dispatch
 *                  (handle), answer (send/reply), drop;
 *   notify.cpp     acknowledged changes: signalling processes about a
 *                  change and holding the controller's answer (WAIT);
 *   kmod_link.cpp  the kernel module link: module WAITs on their threads,
 *                  grants and slots shared with the module;
 *   procs.cpp      the process registry: REGISTER, BUFFER hand-over, early
 *                  adoption, process exit;
 *   sessions.cpp   sessions and their outputs: CREATE, rules, START/STOP
 *                  bookkeeping, STATUS/LIST, crash repair, SNAPSHOT;
 *   trigger.cpp    snapshots on an event: SNAPSHOT_ON, the companion
 *                  session, the watch timer;
 *   attach.cpp     the attacher thread: a BUFFER validated, mapped and
 *                  its drain started off the main thread (its contract);
 *   grant_table.cpp the grant table: what REGISTER would grant, published
 *                  per uid so that a process starts with no round trip.
 *
 * Objects, all owned by the main thread:
 *   Session  a named recording: slot 0..15, owner uid, output directory,
 *            one channel configuration, rules, state, clock (measured once
 *            at CREATE and written identically into every sub-trace), and
 *            the drains of the buffers attached to it.
 *   Proc     a registered traced process: peer pid/uid (SO_PEERCRED), comm,
 *            tracepoint names (for LIST), pidfd (exit detection: the
 *            process does not keep its socket open).
 *   Conn     a connected socket: role after HELLO, partial input, received
 *            fds, and for a process the slots granted to it.
 *
 * Generations (docs/control-protocol.md, "Acknowledged changes"): every
 * change that reaches running processes bumps change_; a process's state
 * query stamps its connection with the generation current at REGISTER, and
 * that connection's close acknowledges every generation up to the stamp.
 *
 * With the kernel module answering (kabi 2, kernel_source.h): a process
 * that registered with it (Proc::kmod, REGISTER flag kRegisterModule) is
 * signalled by the module, not by us, and acknowledges to the module; its
 * connections here only announce events or hand a buffer over.  A WAIT or
 * a version-1 answer that waits for such processes runs the module's WAIT
 * on a thread of its own (KWait): the thread only calls kernel_wait and
 * hands its result to the main thread through kwait_done_ (mutex) and an
 * eventfd; everything else stays on the main thread.
 */
#ifndef STRATA_CONSUMERD_DAEMON_IMPL_H
#define STRATA_CONSUMERD_DAEMON_IMPL_H

#include "daemon.h"

#include <algorithm>
#include <condition_variable>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <deque>
#include <dirent.h>
#include <map>
#include <memory>
#include <fcntl.h>
#include <mutex>
#include <set>
#include <thread>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <unistd.h>

#include "strata_abi.h"
#include "clock_page.h"
#include "control/names.h"
#include "drain.h"
#include "kernel_source.h"
#include "metadata.h"
#include "proto/proto.h"
#include "relay.h"
#include "serial.h"
#include "proto/sock.h"
#include "repair.h"
#include "state_store.h"


namespace strata {
namespace daemon_impl {


// Logging (daemon.cpp): verbose and quiet are set once by run() before any
// other thread exists.
extern bool g_verbose;
extern bool g_quiet;
void logf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define VLOG(...) do { if (g_verbose) logf(__VA_ARGS__); } while (0)
#define INFO(...) do { if (!g_quiet) logf(__VA_ARGS__); } while (0)

constexpr size_t kMaxConns = 1024;
constexpr size_t kMaxQueuedFds = 16;
constexpr int64_t kReplyTimeoutMs = 2000;
constexpr uint32_t kLiveTimerUs = 1000000; // relay sessions: beacon period of quiet streams (docs/relay.md)

std::string hostname();

// Which processes a rule applies to: everyone of the session's user when
// both lists are empty, else the listed pids and process names (comm).
struct Target {
	std::vector<uint32_t> pids;
	std::vector<std::string> names;
};

// A session's snapshot trigger (trigger.cpp).
struct Trigger {
	std::string pattern;
	uint32_t holdoff_ms = 0;
	uint64_t companion = 0;   // its companion session's id while active, else 0
	uint64_t seen = 0;        // the companion's activity at the last look
	int64_t last_ms = 0;      // when the last trigger snapshot was taken (0: never)
	uint64_t taken = 0;       // trigger snapshots written
	uint64_t held = 0;        // looks that found the trigger fired within the hold-off
	uint64_t failed = 0;      // trigger snapshots that failed or were incomplete
};

struct Session {
	uint64_t id = 0;
	uint64_t run_id = 0; // new at each START: what grants name (SessionGrant.session_id)
	std::string name;
	uint32_t slot = 0;
	uid_t uid = 0;
	std::string out;
	proto::ChannelConfig channel;
	std::vector<proto::Rule> rules;
	std::vector<Target> targets; // one per rule
	proto::SessionState state = proto::SessionState::Created;
	ClockInfo clock;
	Owner owner;         // set when a root daemon works for another user
	// Streaming to lttng-relayd (relay.h): the link, shared with the relay
	// outputs of the drains; null for a disk session.
	std::shared_ptr<RelayLink> relay;
	uint32_t live_timer_us = 0;
	// The sub-trace paths given to the relay (attach_output): each once.
	std::set<std::string> relay_paths;
	// Streaming over a serial line (serial.h, docs/serial.md): like relay,
	// null for a disk session; the relay_paths above name its sub-traces.
	std::shared_ptr<SerialLink> serial;
	bool streamed() const { return relay || serial; }
	std::vector<std::unique_ptr<Drain>> drains;
	// Snapshots on an event (trigger.cpp): set on the session that
	// snapshots.  companion_of: this session is such a session's hidden
	// companion (its id), never named by a controller.
	std::unique_ptr<Trigger> trigger;
	uint64_t companion_of = 0;
	// CREATE with kCreateOwned: the id of the connection that made it
	// (Conn::id); when that connection closes the session is stopped and
	// destroyed (drop, destroy_session).  0: it lives until DESTROY.
	uint64_t owner_conn = 0;
	// Processes that registered while it was active and that its rules
	// target, and the events they declared (STATUS_REPLY version 5).
	uint32_t joined = 0;
	std::set<std::string> declared;
};

// Where a session's trace goes, for answers and logs: its directory, or
// "lttng-relayd HOST:CTRL:DATA, trace HOSTNAME/SESSION-DATE".
std::string trace_place(const Session &s);
// What went wrong with the session's sub-traces, one line each (STATUS,
// STOP): malformed producers, output failures.  "" if nothing.
std::string session_problems(const Session &s);

struct Proc {
	pid_t pid = 0;
	uid_t uid = 0;
	std::string comm;
	std::string date;
	std::vector<proto::EventName> events;
	int pidfd = -1;
	int signo = 0;        // asynchronous enablement: signal it on changes
	bool kmod = false;    // signalled by the module, acknowledges to it
	uint64_t acked = 0;   // highest generation it acknowledged
	// It exited before its REGISTER was read (pidfd_open: ESRCH; it waits
	// for no answer): its drains end when its connection does (drop).
	bool gone = false;
	std::vector<Drain *> drains;
};

// A controller's answer held back until the processes signalled about a
// change have re-queried (or exited), or until its deadline.  Version 1:
// the answer to the change itself (1 s hold); version 2: the answer to WAIT.
struct PendingReply {
	uint64_t conn_id = 0;
	uint32_t seq = 0;
	std::string text;
	bool wait = false;            // a WAIT: -ETIMEDOUT at the deadline
	// (pid, generation it must acknowledge): acknowledgements must come
	// from queries that registered at or after that generation
	std::vector<std::pair<pid_t, uint64_t>> waiting;
	size_t signalled = 0;
	int64_t deadline = 0;
	// Module generations to WAIT for (the changes' kernel_apply/kernel_stop)
	// and whether that WAIT still runs (kwait_id != 0: answer after it).
	std::vector<uint64_t> kgens;
	uint64_t kwait_id = 0;
};

// A module WAIT's result, from its thread to the main thread.
struct KWaitDone {
	uint64_t id = 0;
	int status = 0;                 // 0 or -errno of the last WAIT
	std::vector<uint32_t> missing;  // with -ETIMEDOUT
};

// Main thread, after a helper thread's eventfd fired: the eventfd read
// (cleared) and the results the helper left in `done` under `mu`.
template <class T> std::vector<T> take_results(int efd, std::mutex &mu, std::vector<T> &done)
{
	uint64_t n;
	ssize_t r = read(efd, &n, sizeof n);
	(void)r;
	std::vector<T> out;
	std::lock_guard<std::mutex> lk(mu);
	out.swap(done);
	return out;
}

// A BUFFER handed to the attacher thread (attach.cpp): what Drain::create
// needs, made on the main thread, and its result.
struct AttachJob {
	uint64_t conn_id = 0; // the connection to answer, if still open
	uint32_t seq = 0;
	pid_t pid = 0;
	uint64_t run_id = 0; // the session's
	int fd = -1;         // the memfd; Drain::create closes it
	uint8_t uuid[16] = {};
	std::string dir;
	ClockInfo clock;
	TraceEnv env;
	Owner owner;
	std::unique_ptr<Drain> drain; // the result, or null with err
	std::string err;
	std::shared_ptr<std::atomic<bool>> awaited; // Conn::attaching's flag
};

// Does `pid` catch `signo` right now (notify.cpp)?
bool catches(pid_t pid, int signo);

struct Grant {
	uint64_t session_id = 0;
	uint8_t uuid[16] = {};
};
// A grant the process made itself (the module's, the grant table's): the
// session's run id and the trace uuid in the buffer's header (kmod_link.cpp).
bool grant_of_buffer(uint64_t run_id, int fd, Grant &grant);

struct Conn {
	uint64_t id = 0;
	uint64_t registered_at = 0; // change counter when it sent REGISTER
	uint16_t version = proto::kProcessVersion; // negotiated at HELLO
	// Version 2 controller: processes signalled about this connection's
	// changes since its last WAIT, with the generation each must ack.
	std::map<pid_t, uint64_t> unacked;
	int fd = -1;
	struct ucred cred = {};
	bool hello = false;
	proto::Role role = proto::Role::Process;
	std::vector<uint8_t> in;
	// While the messages of one read are handled, their answers collect
	// here and leave in one send (flush_out): a process that sent HELLO and
	// REGISTER together wakes once for both answers.
	std::vector<uint8_t> out;
	bool corked = false;
	std::deque<int> fds;
	bool registered = false;
	bool kmod = false;             // REGISTER with kRegisterModule
	bool table = false;            // REGISTER with kRegisterTable (grant_table.cpp)
	bool quiet = false;            // accepted from the quiet socket (serve_quiet)
	std::vector<uint64_t> kgens;   // module generations of this controller's changes since its WAIT
	std::map<uint32_t, Grant> grants;
	// Its BUFFERs at the attacher: true while this connection is open (an
	// answer may be awaited); see attach.cpp.
	std::vector<std::shared_ptr<std::atomic<bool>>> attaching;
	~Conn()
	{
		for (auto &a : attaching)
			a->store(false, std::memory_order_relaxed); // attach.cpp: only a wake-up depends on it

		for (int f : fds)
			close(f);
		if (fd >= 0)
			close(fd);
	}
};

class Daemon {
public:
	int run(const DaemonOptions &opt);

private:
	int listen_on(const std::string &path, int backlog = 128);
	void accept_conns(int lfd = -1, std::vector<int> *accepted = nullptr);
	void serve_quiet();    // accept and read every queued quiet connection
	void arm_quiet(bool on_socket);
	void on_readable(Conn &c);
	// Every process message already sent, read and handled now (before a
	// session stops: a process does not wait for BUFFER's answer).
	void serve_pending();
	bool hello_from_process(const Conn &c);
	bool handle(Conn &c, const proto::Message &m);
	void send(Conn &c, uint32_t seq, proto::Body body, int pass_fd = -1);
	void reply(Conn &c, uint32_t seq, int status, const std::string &text);
	void flush_out(Conn &c);
	void drop(int fd);
	void on_exit(int pidfd);
	// Asynchronous enablement: signal the processes a change of `s`
	// concerns, answer `c` once they acknowledged (or at the deadline).
	// `rule` >= 0: only the processes that rule targets, else those any
	// rule of `s` targets.
	void notify_and_reply(Conn &c, uint32_t seq, const Session &s, const std::string &text, int rule = -1);
	// Its first half: signal those processes (a new generation, change_);
	// the answer's waiting list and module generations.
	PendingReply signal_concerned(const Session &s, int rule);
	void do_wait(Conn &c, uint32_t seq, const proto::Wait &m);
	static bool targets(const Session &s, size_t rule, const Proc &p);
	static std::vector<proto::Rule> rules_for(const Session &s, const Proc &p);
	void acknowledge(pid_t pid, uint64_t registered_at);
	void start_attacher();
	void stop_attacher();
	bool attacher_running() const;
	void attacher_loop();
	void queue_attach(AttachJob j);
	void attach_done();
	void collect_attaches();
	void settle_attaches();
	void integrate(AttachJob &j);
	void drop_attach(AttachJob &j);
	void start_kwait(PendingReply &p);
	void on_kwait_done();
	void answer_pending(bool all);
	int pending_timeout_ms() const;
	void start_clock_page();
	int add_timer(uint64_t first_ns, uint64_t period_ns);

	bool visible(const Conn &c, const Session &s) const { return c.cred.uid == 0 || c.cred.uid == s.uid; }
	Session *find(const Conn &c, const std::string &name, uint32_t seq, bool &answered);
	void stop_session(Session &s);
	// DESTROY: stop, complete the trace, forget the session, tell its
	// processes; answer `c` (null: its owner connection closed, nobody to
	// answer).
	void destroy_session(Session &s, Conn *c, uint32_t seq);
	void attach_output(Session &s, Drain &d);
	void apply_kernel(Session &s);

	void do_hello(Conn &c, uint32_t seq, const proto::Hello &m);
	void do_register(Conn &c, uint32_t seq, const proto::Register &m);
	void do_buffer(Conn &c, uint32_t seq, const proto::Buffer &m);
	bool module_grant(const Conn &c, uint32_t slot, int fd, Grant &grant);
	// The grant table (grant_table.cpp).
	std::string table_path(uid_t uid) const;
	std::vector<uint8_t> table_content(uid_t uid) const;
	void publish_tables();
	void remove_tables();
	void table_registered(Conn &c, Proc &p, uint64_t gen);
	bool table_grant(const Conn &c, const proto::Buffer &m, int fd, Grant &grant);
	KmodGrant grant_of(const Session &s) const;
	void move_off_busy_slot(Session &s);
	Proc &proc_for(pid_t pid, uid_t uid);
	void note_joined(const Proc &p); // Session::joined, declared
	void adopt_early(Session &s);
	void adopt_early_buffer(Session &s, int buf, pid_t holder, uid_t uid, std::set<std::pair<dev_t, ino_t>> &seen);
	void save_active();
	void repair_after_crash();
	// Sessions kept across a crash of the daemon (restart.cpp's contract).
	void persist_sessions();
	void restore_sessions();
	bool restore_buffer(Session &s, const BufferRecord &b);
	void owner_exited(pid_t pid);
	void do_create(Conn &c, uint32_t seq, const proto::Create &m);
	void do_rule(Conn &c, uint32_t seq, const std::string &name, proto::Rule r, Target t = {});
	void do_status(Conn &c, uint32_t seq, const proto::Status &m);
	void do_list(Conn &c, uint32_t seq);
	void do_snapshot(Conn &c, uint32_t seq, const proto::Snapshot &m);
	// A snapshot of `s` into `root` (empty: named by time); 0, or -errno
	// with `text` saying why; `text` is the directory on success.
	int take_snapshot(Session &s, std::string root, std::string &text);
	// The session's drains leave the process registry (before the session
	// is erased).
	void forget_drains(const Session &s);
	void do_snapshot_on(Conn &c, uint32_t seq, const proto::SnapshotOn &m);
	Session *start_trigger(Session &s, std::string &err);
	void stop_trigger(Session &s);
	void check_triggers();
	std::string trigger_summary(const Session &s) const;

	int epfd_ = -1, lfd_ = -1, sigfd_ = -1;
	// The quiet socket (proto.h, kQuietSuffix): in epoll one-shot; its first
	// connection arms quiet_tfd_ (one-shot, kQuietDelayNs), whose expiry
	// serves the queue and re-arms the socket.
	int qfd_ = -1, quiet_tfd_ = -1;
	std::string path_;
	std::map<int, std::unique_ptr<Conn>> conns_;
	std::map<int, Proc> procs_;  // by pidfd
	std::map<pid_t, int> pid_to_pidfd_;
	std::vector<std::unique_ptr<Session>> sessions_;
	uint64_t next_session_id_ = 1;
	uint64_t next_run_id_ = 1;
	uint64_t next_conn_id_ = 1;
	uint64_t change_ = 0; // counts notified changes
	uint64_t kgen_ = 0;   // the module generation of the change being notified (0: none)
	std::vector<PendingReply> pending_;
	// Module WAITs (see the file comment).
	int kwait_efd_ = -1;
	uint64_t next_kwait_ = 1;
	std::map<uint64_t, std::thread> kwaiters_; // by KWaitDone::id
	std::mutex kwait_mu_;
	std::vector<KWaitDone> kwait_done_; // guarded by kwait_mu_
	// Set once at exit (relaxed: a stop request polled between WAIT slices;
	// the join that follows is the synchronisation).
	std::atomic<bool> kwait_quit_{false};
	// State queries answered here (REGISTER without kRegisterModule), and
	// module processes' hand-offs and announcements: logged at exit.
	uint64_t n_queries_ = 0, n_handoffs_ = 0;
	std::string hostname_;
	bool adopt_early_ = false; // DaemonOptions::adopt_early
	bool quit_ = false;
	bool serving_pending_ = false; // serve_pending runs: no nesting
	// The attacher thread (attach.cpp's contract).
	std::thread attacher_;
	int attach_efd_ = -1;
	std::mutex attach_mu_;
	std::condition_variable attach_cv_;      // a job queued, or quit
	std::condition_variable attach_idle_cv_; // a job finished
	std::deque<AttachJob> attach_q_;         // guarded by attach_mu_
	std::vector<AttachJob> attach_done_;     // guarded by attach_mu_
	unsigned attach_busy_ = 0;               // guarded: jobs being run
	bool attach_quit_ = false;               // guarded
	// The grant table's files by uid: content (flags + message) and
	// generation as last written; dirty: something they derive from changed.
	struct Table {
		std::vector<uint8_t> content;
		uint64_t gen = 0;
		bool written = false;
	};
	std::map<uid_t, Table> tables_;
	uint64_t table_gen_ = 0;
	bool tables_dirty_ = true;
	uint64_t n_table_joins_ = 0;
	uint64_t n_quiet_joins_ = 0; // of those, sent to the quiet socket
	// restart.cpp: the state store, whether it may be out of date, the
	// start times of the processes it names, and the owners (strata
	// record's pid) of restored owned sessions.
	std::unique_ptr<StateStore> store_;
	bool state_dirty_ = false;
	std::map<pid_t, uint64_t> start_times_;
	std::map<std::string, uint32_t> owner_pids_;
	std::unique_ptr<ClockPage> clock_page_; // null: TSC unusable
	int clock_tfd_ = -1;                    // its refresh timer
	int trigger_tfd_ = -1;                  // trigger.cpp's watch timer
};

} // namespace daemon_impl
} // namespace strata
#endif
