/*
 * daemon_harness.h - strata-consumerd in-process (consumerd/daemon_impl.h),
 * its peers faked over socketpair(2), as Perfetto tests its tracing
 * service with mock producers and consumers.
 *
 * The Daemon is made with a socket path in a temporary directory, but
 * never listens there (no socket file, no signals): Daemon::start() starts
 * its parts, Daemon::serve() takes one end of a socketpair as a peer the
 * listener accepted, and the test turns its event loop (Daemon::turn) on
 * the test's own thread.  A peer's message is handled in the turn that
 * reads it, so await() needs no sleep: it turns the loop until the answer
 * is whole, the peer's end is closed, or a bounded number of turns passed
 * (a failure, not a wait).
 *
 * PartsRig makes the dispatch's parts alone (Connections and Commands,
 * with the parts a command reaches, and Processes) and fakes the Daemon
 * around them, so a test sees what each part hands back.
 *
 * Everything here runs on the test's thread, which is the daemon's main
 * thread; the daemon's own threads (attacher, drain pool) are its own.
 */
#ifndef STRATA_TESTS_UNIT_DAEMON_HARNESS_H
#define STRATA_TESTS_UNIT_DAEMON_HARNESS_H

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "commands.h"
#include "connections.h"
#include "daemon_impl.h"
#include "processes.h"
#include "proto/proto.h"
#include "proto/sock.h"
#include "temp_dir.h"

namespace strata_test {

// One side of a socketpair: what a client or a traced process holds.
struct FakePeer {
	int fd = -1;
	std::vector<uint8_t> in; // bytes read, not yet a whole message
	bool eof = false;        // the daemon closed its end
	uint32_t seq = 0;

	FakePeer() = default;
	FakePeer(const FakePeer &) = delete;
	FakePeer &operator=(const FakePeer &) = delete;
	~FakePeer() { hang_up(); }
	void hang_up()
	{
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	bool send_bytes(const std::vector<uint8_t> &b)
	{
		return strata::proto::send_all(fd, b.data(), b.size(), -1, strata::proto::now_ms() + 2000) ==
		       0;
	}
	// A message encoded as libstrata or `strata` encode it; its seq.
	uint32_t send(strata::proto::Body body, uint16_t version = strata::proto::kVersion)
	{
		strata::proto::Message m;
		m.seq = ++seq;
		m.version = version;
		m.body = std::move(body);
		EXPECT_TRUE(send_bytes(strata::proto::encode(m)));
		return m.seq;
	}
	// What the daemon sent so far read (descriptors passed with it
	// closed); a whole message taken out of it into `m`.
	bool take(strata::proto::Message &m)
	{
		uint8_t buf[65536];
		std::vector<int> fds;
		for (;;) {
			const long r = strata::proto::recv_some(fd, buf, sizeof buf, &fds);
			if (r <= 0) {
				eof = eof || r == 0;
				break;
			}
			in.insert(in.end(), buf, buf + r);
		}
		for (int f : fds)
			close(f);
		strata::proto::Header h;
		if (in.size() < strata::proto::kHeaderSize ||
		    !strata::proto::decode_header(in.data(), strata::proto::kHeaderSize, h) ||
		    in.size() - strata::proto::kHeaderSize < h.length)
			return false;
		const size_t n = strata::proto::kHeaderSize + h.length;
		const bool ok = static_cast<bool>(strata::proto::decode(in.data(), n, m));
		in.erase(in.begin(), in.begin() + static_cast<long>(n));
		return ok;
	}
};

// What turns a daemon's loop on the test's thread, and the peer's side of
// a conversation with it.
class Turner {
public:
	virtual ~Turner() = default;
	// One turn of the loop: up to 100 ms when nothing is ready.
	virtual void turn() = 0;

	// The daemon's next message to `p`, turning the loop until it is
	// whole.  False: the daemon closed the connection first, or it did
	// not answer within kMaxTurns turns.
	bool await(FakePeer &p, strata::proto::Message &m)
	{
		for (int i = 0; i < kMaxTurns; i++) {
			if (p.take(m))
				return true;
			if (p.eof)
				return false;
			turn();
		}
		return false;
	}
	// Whether the daemon closed `p`'s connection (turning the loop until
	// it has, or kMaxTurns turns passed).
	bool closed(FakePeer &p)
	{
		strata::proto::Message m;
		for (int i = 0; i < kMaxTurns && !p.eof; i++) {
			turn();
			p.take(m);
		}
		return p.eof;
	}
	// A request from `p` and its answer.
	strata::proto::Message ask(FakePeer &p, strata::proto::Body body)
	{
		const uint32_t seq = p.send(std::move(body));
		strata::proto::Message m;
		EXPECT_TRUE(await(p, m)) << "no answer";
		EXPECT_EQ(m.seq, seq);
		return m;
	}

	static constexpr int kMaxTurns = 50;
};

class InProcessDaemon : public Turner {
public:
	explicit InProcessDaemon(const char *tag) : dir_(tag)
	{
		strata::DaemonOptions opt;
		opt.socket_path = dir_.path() + "/consumerd.sock";
		opt.quiet = true; // its refusals are the test's oracle, not its log
		d_ = std::make_unique<strata::daemon_impl::Daemon>(opt);
		started_ = dir_.ok() && d_->start();
	}
	~InProcessDaemon()
	{
		if (started_)
			d_->shut_down();
	}
	bool started() const { return started_; }
	const std::string &dir() const { return dir_.path(); }
	strata::daemon_impl::Daemon &daemon() { return *d_; }

	// A new peer: a socketpair whose other end the daemon serves.
	bool connect(FakePeer &p)
	{
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
			return false;
		p.fd = sv[0];
		return d_->serve(sv[1]);
	}
	void turn() override { EXPECT_EQ(d_->turn(100), 0); }

private:
	TempDir dir_; // goes after the daemon
	std::unique_ptr<strata::daemon_impl::Daemon> d_;
	bool started_ = false;
};

// The dispatch's parts made alone (consumerd/connections.h, commands.h),
// with the parts a command reaches and Processes (processes.h, its
// Attacher never started: BUFFERs attach on the main thread), never
// listening; the rest of the Daemon faked: what the parts hand back to it
// is recorded here.  With to_commands false, Connections' messages stop
// here (recorded, each answered "seen"); with it, they go through Commands'
// route table.  With to_processes, a process's messages and a connection's
// end go on to Processes; without, a process's messages are answered
// "process" here.
class PartsRig : public Turner,
		 private strata::daemon_impl::SessionTable::Host,
		 private strata::daemon_impl::Connections::Host,
		 private strata::daemon_impl::Commands::Host,
		 private strata::daemon_impl::Persistence::Host,
		 private strata::daemon_impl::Processes::Host {
public:
	using Conn = strata::daemon_impl::Conn;
	using Ended = strata::daemon_impl::Connections::Host::Ended;
	struct Stop {
		uint64_t session = 0;
		bool destroy = false;
		uint32_t seq = 0;
	};

	using Turner::closed;

	explicit PartsRig(const char *tag) : dir_(tag) { strata::daemon_impl::g_quiet = true; }
	const std::string &dir() const { return dir_.path(); }
	void turn() override { EXPECT_EQ(loop.turn(100), 0); }
	// A new peer served by the Connections.
	bool connect(FakePeer &p)
	{
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) != 0)
			return false;
		p.fd = sv[0];
		return conns.take_conn(sv[1], false);
	}

	// What the parts handed back.
	bool to_commands = true;
	bool to_processes = false;
	bool close_on_dispatch = false;                    // to_commands false: dispatch says false
	std::vector<strata::proto::Type> dispatched;       // to_commands false
	std::vector<Ended> ended;                          // Connections::Host::closed
	int ended_in_table = 0;                            // of which the Conn was still in the table
	int batches = 0;                                   // Connections::Host::before_answers: one a read
	int controller_answers = 0;                        // Connections::Host::before_controller_answer
	int settles = 0;                                   // Commands::Host::settle_attaches
	std::vector<strata::proto::Type> process_messages; // Commands::Host's
	std::vector<Stop> stops;                           // Commands::Host::stop_in_two

private:
	// Connections::Host
	bool dispatch(Conn &c, const strata::proto::Message &m) override
	{
		if (to_commands)
			return commands.dispatch(c, m);
		dispatched.push_back(m.type());
		conns.reply(c, m.seq, 0, "seen");
		return !close_on_dispatch;
	}
	void before_answers() override { batches++; }
	void before_controller_answer() override { controller_answers++; }
	void closed(const Ended &e) override
	{
		ended.push_back(e);
		ended_in_table += conns.by_id(e.id) != nullptr;
		if (to_processes)
			processes.closed(e);
	}
	void knocked(pid_t pid, uid_t uid, const std::string &comm, int signo) override
	{
		processes.knocked(pid, uid, comm, signo);
	}
	// Commands::Host: a process's messages answered "process", a stop
	// "stopping" at once.
	void do_register(Conn &c, const strata::proto::Message &m) override { process(c, m); }
	void do_buffer(Conn &c, const strata::proto::Message &m) override { process(c, m); }
	void do_agg_region(Conn &c, const strata::proto::Message &m) override { process(c, m); }
	void process(Conn &c, const strata::proto::Message &m)
	{
		process_messages.push_back(m.type());
		if (to_processes) {
			using P = strata::proto::Type;
			if (m.type() == P::Register)
				processes.do_register(c, m);
			else if (m.type() == P::Buffer)
				processes.do_buffer(c, m);
			else
				processes.do_agg_region(c, m);
			return;
		}
		c.registered = true;
		conns.reply(c, m.seq, 0, "process");
	}
	void stop_in_two(uint64_t id, bool destroy, Conn *c, uint32_t seq) override
	{
		stops.push_back({id, destroy, seq});
		if (c)
			conns.reply(*c, seq, 0, "stopping");
	}
	void end_stop(const strata::daemon_impl::DueReply &) override {}
	void settle_attaches() override
	{
		settles++;
		if (to_processes)
			processes.settle_attaches();
	}
	// SessionTable::Host: nothing attached, no trigger timer.
	void settle() override {}
	void collect() override {}
	void forget_drains(const strata::daemon_impl::Session &) override {}
	void changed() override {}
	void adopt_early(strata::daemon_impl::Session &) override {}
	bool watch_triggers(bool) override { return false; }
	// Persistence::Host
	pid_t conn_pid(uint64_t id) override { return conns.pid_of(id); }
	void end_owned(uint64_t, pid_t) override {} // and Processes::Host's
	// Processes::Host: no clock page.
	int clock_page_fd() override { return -1; }

	TempDir dir_;
	const std::string path_ = dir_.path() + "/consumerd.sock"; // never listened on

public:
	strata::daemon_impl::EventLoop loop;
	strata::daemon_impl::Listener listener{loop, conns, path_};
	strata::daemon_impl::Connections conns{loop, listener, *this};
	strata::daemon_impl::ProcessRegistry procs{[](int) { return false; }, [](int) {}};
	strata::daemon_impl::AckTracker acks{procs};
	strata::daemon_impl::GrantTables tables{path_};
	strata::daemon_impl::SessionTable sessions{*this, {path_, "rig", 1 << 16 | 1}};
	strata::daemon_impl::SyncLinks sync;
	strata::daemon_impl::Persistence persist{*this, loop, sessions, procs, {path_, "rig"}};
	strata::daemon_impl::Commands commands{
		*this,
		strata::daemon_impl::Commands::Parts{conns, sessions, procs, acks, tables, persist, sync}};
	strata::daemon_impl::Attacher attacher; // never started
	const std::string hostname = "rig";
	strata::daemon_impl::Processes processes{
		*this, strata::daemon_impl::Processes::Parts{conns, sessions, procs, acks, attacher, tables,
							     persist, hostname, false}};
};

} // namespace strata_test
#endif
