/*
 * connections.h - the daemon's peers: the table of connected sockets
 * (Conn), what is read from them (framed and decoded), what is written to
 * them (corked per read), their HELLO, and their end (docs/consumerd.md,
 * "Connections").
 *
 * Roles: the Listener hands it what it accepts (it is the Listener's
 * Host), a test hands it a socketpair's end (take); it hands every decoded
 * message after a peer's HELLO to its Host (the Daemon, which routes it
 * through Commands, commands.h) and tells the Host when a connection has
 * ended.  Everyone who answers a peer does it through reply() and send().
 *
 * Contract:
 *   - main thread only: take, the read handlers it registers with the
 *     event loop, send, reply, drop;
 *   - it owns the table (fd -> Conn), every Conn and its socket, the
 *     descriptors a peer passed that no message took yet (at most
 *     kMaxQueuedFds), and the connection ids (never 0, never reused);
 *   - a connection is watched from take() on, or refused there and
 *     closed: too many (max_conns), no peer credentials, or the event loop
 *     cannot watch it (EventLoop::add; its client sees the end rather than
 *     waiting for good, and the log says why);
 *   - every byte read goes through the protocol decoder: a bad header, an
 *     oversized payload, a message that does not decode, or anything but
 *     HELLO first is answered with an error REPLY (-EPROTO) and the
 *     connection dropped; HELLO is answered here (version negotiated, a
 *     controller outside our pid namespace refused, access.h);
 *   - the answers to one read's messages are corked in Conn::out and leave
 *     in one send, after Host::before_answers; a descriptor leaves with its
 *     own message; a send never blocks longer than kReplyTimeoutMs; an
 *     answer to a controller is preceded by Host::before_controller_answer
 *     (persistence.h: kept before the controller hears it); a table join
 *     (Conn::table) is never answered;
 *   - drop(): what is corked goes out, the Conn is closed and erased, then
 *     Host::closed says what ended (its acknowledgement, its owned
 *     sessions).  A handler may drop any connection, its own included: a
 *     loop over connections looks each up again by fd.
 */
#ifndef STRATA_CONSUMERD_CONNECTIONS_H
#define STRATA_CONSUMERD_CONNECTIONS_H

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "event_loop.h"
#include "grant_tables.h"
#include "listener.h"
#include "proto/proto.h"
#include "session_table.h"

namespace strata {
namespace daemon_impl {

// Connections at once: every live traced process keeps one (with its
// pidfd, about 1.5 descriptors a process), so the bound follows the
// descriptors the daemon may open (main.cpp raises the soft limit to the
// hard one): two thirds of them, less a reserve for files and buffers, and
// never below 1,024 (the fixed bound before: 10,000 live processes were
// refused beyond it).
size_t max_conns();
constexpr size_t kMaxQueuedFds = 16;
constexpr int64_t kReplyTimeoutMs = 2000;

// A connected socket: role after HELLO, partial input, received fds, and
// for a process the slots granted to it.
struct Conn {
	uint64_t id = 0;
	uint64_t registered_at = 0;                // generation when it sent REGISTER
	uint16_t version = proto::kProcessVersion; // negotiated at HELLO
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
	bool kmod = false;  // REGISTER with kRegisterModule
	bool table = false; // REGISTER with kRegisterTable (grant_tables.h)
	bool quiet = false; // accepted from the quiet socket (listener.h)
	std::map<uint32_t, Grant> grants;
	// A round-trip REGISTER was answered and the process has sent nothing
	// since (asked), and that answer never reached it (answer_lost): the
	// send failed (it had closed), or its close found the answer unread
	// in its socket (ECONNRESET).  Its state query missed its deadline:
	// its close acknowledges nothing (Ended::answer_lost).
	bool asked = false;
	bool answer_lost = false;
	// Its BUFFERs at the attacher: true while this connection is open (an
	// answer may be awaited); see attacher.h.
	std::vector<std::shared_ptr<std::atomic<bool>>> attaching;
	Caller caller() const { return Caller{cred.uid, cred.gid, id, cred.pid}; }
	~Conn()
	{
		for (auto &a : attaching)
			a->store(false,
				 std::memory_order_relaxed); // attacher.h: only a wake-up depends on it
		for (int f : fds)
			close(f);
		if (fd >= 0)
			close(fd);
	}
};

class Connections : public Listener::Host {
public:
	// What a connection's traffic and end are handed to (the Daemon).
	class Host {
	public:
		virtual ~Host() = default;
		// A message of a connection that said HELLO, its answers corked.
		// False: close the connection.
		virtual bool dispatch(Conn &c, const proto::Message &m) = 0;
		// One read's messages handled, before their answers leave.
		virtual void before_answers() = 0;
		// An answer is about to leave for a controller.
		virtual void before_controller_answer() = 0;
		// A connection ended (its Conn closed and gone): what its close
		// means.  registered_at: a registered process's (else 0), kmod:
		// it answers to the module.
		struct Ended {
			uint64_t id = 0;
			pid_t pid = 0;
			bool registered = false, kmod = false;
			uint64_t registered_at = 0;
			// Conn::answer_lost, and the run ids its answer granted.
			bool answer_lost = false;
			std::vector<uint64_t> granted;
		};
		virtual void closed(const Ended &e) = 0;
		// A process could not connect (Listener::Host::knocked).
		virtual void knocked(pid_t pid, uid_t uid, const std::string &comm, int signo) = 0;
	};

	// `listener` may be made after this (only used once serving).
	Connections(EventLoop &loop, Listener &listener, Host &host)
	    : loop_(loop), listener_(listener), host_(host)
	{
	}
	Connections(const Connections &) = delete;
	Connections &operator=(const Connections &) = delete;

	// Listener::Host: `fd` served from now on (quiet: from the quiet
	// socket); false: refused and closed (logged).
	bool take_conn(int fd, bool quiet) override;
	// Listener::Host: every queued quiet connection taken and what it sent
	// read now, and every knock, so that a command or a stop sees the
	// processes that joined from the table, or could not connect, before it.
	void serve_quiet() override;
	// Listener::Host: to the host.
	void knocked(pid_t pid, uid_t uid, const std::string &comm, int signo) override
	{
		host_.knocked(pid, uid, comm, signo);
	}
	// Every process message already sent, read and handled now (before a
	// session stops: a process does not wait for BUFFER's answer).  Not
	// nested.
	void serve_pending();
	// What the connections of process `pid` sent, read now (before its
	// exit is handled); they may be dropped (EOF).
	void read_process(pid_t pid);

	Conn *by_id(uint64_t id);
	pid_t pid_of(uint64_t id); // 0: closed
	size_t size() const { return conns_.size(); }

	// An answer to `c` (corked while its read is handled; pass_fd travels
	// with its own message).
	void send(Conn &c, uint32_t seq, proto::Body body, int pass_fd = -1);
	void reply(Conn &c, uint32_t seq, int status, const std::string &text);
	// What is corked for `c` sent now; uncorked.
	void flush_out(Conn &c);
	// Every connection closed (the daemon's end; Host::closed not called).
	void clear() { conns_.clear(); }

private:
	void on_readable(Conn &c);
	bool frame(Conn &c, size_t &off); // one read's complete messages handled
	bool handle(Conn &c, const proto::Message &m);
	void hello(Conn &c, uint32_t seq, const proto::Hello &m);
	bool hello_from_process(const Conn &c);
	void drop(int fd);

	EventLoop &loop_;
	Listener &listener_;
	Host &host_;
	std::map<int, std::unique_ptr<Conn>> conns_; // by fd
	uint64_t next_id_ = 1;
	bool serving_pending_ = false; // serve_pending runs: no nesting
};

} // namespace daemon_impl
} // namespace strata
#endif
