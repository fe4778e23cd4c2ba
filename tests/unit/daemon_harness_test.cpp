// strata-consumerd's dispatch driven in-process (daemon_harness.h): fake
// controllers and processes over socketpairs send real control messages
// (libtrace/proto) and read the answers, with no socket file.  Good
// commands of both roles, a malformed message (a clear error, the
// connection closed, the daemon serving on), an unknown message type and
// a type the role may not send, and a peer that disconnects in the middle
// of a message (its connection dropped: the session it owned ends).  The
// daemon over its real socket is tested by tests/control/.
#include "daemon_harness.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "strata_abi.h"

namespace strata_test {
namespace {

namespace proto = strata::proto;
using strata::daemon_impl::Answer;
using strata::daemon_impl::Caller;

proto::Hello hello(proto::Role role)
{
	proto::Hello h;
	h.role = static_cast<uint32_t>(role);
	h.client = "daemon_harness_test";
	return h;
}

// `p` said HELLO as `role` and was answered with the newest version.
void say_hello(InProcessDaemon &d, FakePeer &p, proto::Role role)
{
	const proto::Message m = d.ask(p, hello(role));
	ASSERT_EQ(m.type(), proto::Type::HelloReply);
	EXPECT_EQ(std::get<proto::HelloReply>(m.body).version, proto::kVersion);
	EXPECT_EQ(std::get<proto::HelloReply>(m.body).server_pid, static_cast<uint32_t>(getpid()));
}

// A new peer `p` that said HELLO as `role`.
void join(InProcessDaemon &d, FakePeer &p, proto::Role role)
{
	ASSERT_TRUE(d.connect(p));
	say_hello(d, p, role);
}

// A REPLY's status and text (status 1: not a REPLY).
std::pair<int, std::string> reply_of(const proto::Message &m)
{
	if (m.type() != proto::Type::Reply)
		return {1, "message type " + std::to_string(static_cast<int>(m.type()))};
	const auto &r = std::get<proto::Reply>(m.body);
	return {r.status, r.text};
}

proto::Create create(const InProcessDaemon &d, const std::string &name, uint32_t flags = 0)
{
	proto::Create c;
	c.session = name;
	c.output_dir = d.dir() + "/out-" + name;
	c.flags = flags;
	return c;
}

// The sessions STATUS shows to a new controller, by name.
std::vector<std::string> sessions(InProcessDaemon &d)
{
	FakePeer p;
	join(d, p, proto::Role::Controller);
	const proto::Message m = d.ask(p, proto::Status{});
	EXPECT_EQ(m.type(), proto::Type::StatusReply);
	std::vector<std::string> names;
	if (m.type() == proto::Type::StatusReply)
		for (const auto &s : std::get<proto::StatusReply>(m.body).sessions)
			names.push_back(s.name);
	return names;
}

proto::Register registration()
{
	proto::Register r;
	r.pid = static_cast<uint32_t>(getpid());
	r.uid = static_cast<uint32_t>(getuid());
	r.abi_major = STRATA_ABI_MAJOR;
	r.abi_minor = STRATA_ABI_MINOR;
	r.comm = "harness";
	r.events = {{"harness:tick", 13}};
	return r;
}

// One daemon per test, started.
class DaemonHarness : public ::testing::Test {
protected:
	void SetUp() override { ASSERT_TRUE(d.started()); }
	InProcessDaemon d{"harness"};
};

TEST_F(DaemonHarness, AControllersAndAProcesssCommandsAreAnswered)
{
	FakePeer ctl;
	join(d, ctl, proto::Role::Controller);
	EXPECT_EQ(reply_of(d.ask(ctl, create(d, "s1"))).first, 0);
	proto::EnableEvent en;
	en.session = "s1";
	en.rule.pattern = "harness:*";
	EXPECT_EQ(reply_of(d.ask(ctl, en)).first, 0);
	EXPECT_EQ(reply_of(d.ask(ctl, proto::Start{"s1"})).first, 0);

	// A traced process's state query: the active session granted, with
	// its rule; what it registered listed.
	FakePeer proc;
	join(d, proc, proto::Role::Process);
	proto::Message m = d.ask(proc, registration());
	ASSERT_EQ(m.type(), proto::Type::RegisterReply);
	const auto &grants = std::get<proto::RegisterReply>(m.body).sessions;
	ASSERT_EQ(grants.size(), 1u);
	ASSERT_EQ(grants[0].rules.size(), 1u);
	EXPECT_EQ(grants[0].rules[0].pattern, "harness:*");
	proc.hang_up(); // its acknowledgement (a process closes once applied)
	m = d.ask(ctl, proto::List{});
	ASSERT_EQ(m.type(), proto::Type::ListReply);
	const auto &entries = std::get<proto::ListReply>(m.body).entries;
	ASSERT_EQ(entries.size(), 1u);
	EXPECT_EQ(entries[0].pid, static_cast<uint32_t>(getpid()));
	EXPECT_EQ(entries[0].comm, "harness");
	EXPECT_EQ(entries[0].event, "harness:tick");

	m = d.ask(ctl, proto::Status{"s1"});
	ASSERT_EQ(m.type(), proto::Type::StatusReply);
	ASSERT_EQ(std::get<proto::StatusReply>(m.body).sessions.size(), 1u);
	EXPECT_EQ(std::get<proto::StatusReply>(m.body).sessions[0].state,
		  static_cast<uint32_t>(proto::SessionState::Active));
	EXPECT_EQ(reply_of(d.ask(ctl, proto::Stop{"s1"})).first, 0);
	EXPECT_EQ(reply_of(d.ask(ctl, proto::Destroy{"s1"})).first, 0);
	EXPECT_TRUE(sessions(d).empty());
	// A refusal is an answer too, with its reason.
	const auto r = reply_of(d.ask(ctl, proto::Start{"nosuch"}));
	EXPECT_EQ(r.first, -ENOENT);
	EXPECT_NE(r.second.find("nosuch"), std::string::npos) << r.second;
}

TEST_F(DaemonHarness, AMalformedMessageIsRefusedClearlyAndTheDaemonServesOn)
{
	const proto::Message status{7, proto::Status{}};
	// Bad magic, a payload that is not its type's, a payload over the
	// limit: each an -EPROTO answer that says what is wrong, then the
	// connection closed.
	struct Case {
		size_t at;
		uint32_t value;
		int width;
		const char *says;
	} cases[] = {
		{0, 0xdeadbeef, 4, "bad magic"},
		{8, 3, 4, "truncated"}, // the length prefix of STATUS's name cut
		{8, static_cast<uint32_t>(proto::kMaxPayload) + 1, 4, "exceeds"}, // too long
	};
	for (const Case &k : cases) {
		FakePeer p;
		ASSERT_TRUE(d.connect(p));
		say_hello(d, p, proto::Role::Controller);
		std::vector<uint8_t> b = proto::encode(status);
		for (int i = 0; i < k.width; i++)
			b[k.at + static_cast<size_t>(i)] = static_cast<uint8_t>(k.value >> (8 * i));
		b.resize(std::min<size_t>(b.size(), proto::kHeaderSize + 3));
		ASSERT_TRUE(p.send_bytes(b));
		proto::Message m;
		ASSERT_TRUE(d.await(p, m)) << k.says;
		const auto r = reply_of(m);
		EXPECT_EQ(r.first, -EPROTO) << k.says;
		EXPECT_NE(r.second.find(k.says), std::string::npos) << r.second;
		EXPECT_TRUE(d.closed(p)) << k.says;
	}
	// Anything before HELLO is refused the same way.
	FakePeer early;
	ASSERT_TRUE(d.connect(early));
	const auto r = reply_of(d.ask(early, proto::Status{}));
	EXPECT_EQ(r.first, -EPROTO);
	EXPECT_EQ(r.second, "HELLO expected first");
	EXPECT_TRUE(d.closed(early));
	// The daemon lives: a new controller is served.
	FakePeer next;
	join(d, next, proto::Role::Controller);
	EXPECT_EQ(reply_of(d.ask(next, create(d, "after"))).first, 0);
	EXPECT_EQ(sessions(d), std::vector<std::string>{"after"});
}

TEST_F(DaemonHarness, AnUnknownTypeClosesAndAForbiddenOneIsRefused)
{
	// A type no version of the protocol has: -EPROTO, closed.
	FakePeer p;
	join(d, p, proto::Role::Controller);
	std::vector<uint8_t> b = proto::encode(proto::Message{9, proto::List{}});
	b[6] = 99; // the header's type
	b[7] = 0;
	ASSERT_TRUE(p.send_bytes(b));
	proto::Message m;
	ASSERT_TRUE(d.await(p, m));
	EXPECT_EQ(m.seq, 9u);
	auto r = reply_of(m);
	EXPECT_EQ(r.first, -EPROTO);
	EXPECT_EQ(r.second, "unknown message type 99");
	EXPECT_TRUE(d.closed(p));
	// A type the route table has for another role only (REGISTER is a
	// process's, an answer type is nobody's): -EPERM, the connection kept.
	FakePeer ctl;
	join(d, ctl, proto::Role::Controller);
	r = reply_of(d.ask(ctl, registration()));
	EXPECT_EQ(r.first, -EPERM);
	EXPECT_EQ(r.second, "message type 3 not allowed here for this role");
	r = reply_of(d.ask(ctl, proto::Reply{0, "hi"}));
	EXPECT_EQ(r.first, -EPERM);
	EXPECT_EQ(r.second, "message type 16 not allowed here for this role");
	EXPECT_EQ(reply_of(d.ask(ctl, create(d, "kept"))).first, 0);
	// And a process may not command.
	FakePeer proc;
	join(d, proc, proto::Role::Process);
	r = reply_of(d.ask(proc, proto::Destroy{"kept"}));
	EXPECT_EQ(r.first, -EPERM);
	EXPECT_EQ(r.second, "message type 11 not allowed here for this role");
	EXPECT_EQ(sessions(d), std::vector<std::string>{"kept"});
}

TEST_F(DaemonHarness, APeerThatHangsUpMidMessageIsDropped)
{
	FakePeer ctl;
	join(d, ctl, proto::Role::Controller);
	EXPECT_EQ(reply_of(d.ask(ctl, create(d, "other"))).first, 0);
	// Half a header; a whole header and half its payload.  Each time the
	// peer owned a session (`strata record`'s way) and goes: nothing is
	// answered, the half-sent DESTROY is never handled, the connection is
	// dropped and the session it owned ends with it.
	const size_t whole = proto::encode(proto::Message{5, proto::Destroy{"other"}}).size();
	for (size_t cut : {proto::kHeaderSize / 2, whole - 2}) {
		FakePeer owner;
		join(d, owner, proto::Role::Controller);
		EXPECT_EQ(reply_of(d.ask(owner, create(d, "owned", proto::kCreateOwned))).first, 0);
		EXPECT_EQ(sessions(d).size(), 2u);
		std::vector<uint8_t> b = proto::encode(proto::Message{5, proto::Destroy{"other"}});
		b.resize(cut);
		ASSERT_TRUE(owner.send_bytes(b));
		d.turn(); // read: a partial message held
		owner.hang_up();
		EXPECT_EQ(sessions(d), std::vector<std::string>{"other"}) << "cut at " << cut;
	}
}

// The parts alone (PartsRig): Connections frames, says HELLO and hands on
// only what follows it; a malformed message ends the connection there;
// its end reaches the host after the Conn has gone.
TEST(Connections, FrameHelloAndEndBeforeTheHost)
{
	PartsRig rig("conns");
	rig.to_commands = false;
	FakePeer ctl;
	ASSERT_TRUE(rig.connect(ctl));
	EXPECT_EQ(rig.conns.size(), 1u);
	// HELLO and a command in one write: one read, both answers in order,
	// the command (not the HELLO) handed to the host.
	proto::Message hm{1, hello(proto::Role::Controller)};
	proto::Message st{2, proto::Status{}};
	std::vector<uint8_t> b = proto::encode(hm);
	const std::vector<uint8_t> b2 = proto::encode(st);
	b.insert(b.end(), b2.begin(), b2.end());
	ASSERT_TRUE(ctl.send_bytes(b));
	proto::Message m;
	ASSERT_TRUE(rig.await(ctl, m));
	EXPECT_EQ(m.type(), proto::Type::HelloReply);
	EXPECT_EQ(m.seq, 1u);
	ASSERT_TRUE(rig.await(ctl, m));
	EXPECT_EQ(reply_of(m), std::make_pair(0, std::string("seen")));
	EXPECT_EQ(m.seq, 2u);
	EXPECT_EQ(rig.dispatched, std::vector<proto::Type>{proto::Type::Status});
	EXPECT_EQ(rig.batches, 1);
	EXPECT_GE(rig.controller_answers, 1); // persistence's turn before a controller hears

	// A process's answers are not a controller's.
	FakePeer proc;
	ASSERT_TRUE(rig.connect(proc));
	const int before = rig.controller_answers;
	EXPECT_EQ(rig.ask(proc, hello(proto::Role::Process)).type(), proto::Type::HelloReply);
	EXPECT_EQ(reply_of(rig.ask(proc, proto::List{})).second, "seen");
	EXPECT_EQ(rig.controller_answers, before);

	// Malformed: bad magic after HELLO; -EPROTO with the reason, closed,
	// nothing handed on; its end told once the Conn left the table.
	b = proto::encode(st);
	b[0] ^= 0xff;
	ASSERT_TRUE(ctl.send_bytes(b));
	ASSERT_TRUE(rig.await(ctl, m));
	EXPECT_EQ(reply_of(m).first, -EPROTO);
	EXPECT_NE(reply_of(m).second.find("bad magic"), std::string::npos) << reply_of(m).second;
	EXPECT_TRUE(rig.closed(ctl));
	EXPECT_EQ(rig.dispatched.size(), 2u); // STATUS, LIST: the bad one not
	ASSERT_EQ(rig.ended.size(), 1u);
	EXPECT_EQ(rig.ended[0].id, 1u);
	EXPECT_EQ(rig.ended[0].pid, getpid());
	EXPECT_FALSE(rig.ended[0].registered);
	EXPECT_EQ(rig.ended_in_table, 0);
	EXPECT_EQ(rig.conns.size(), 1u);

	// Anything but HELLO first: refused there, closed.
	FakePeer early;
	ASSERT_TRUE(rig.connect(early));
	EXPECT_EQ(reply_of(rig.ask(early, proto::Status{})),
		  std::make_pair(-EPROTO, std::string("HELLO expected first")));
	EXPECT_TRUE(rig.closed(early));
	// A host that says false closes the connection after its answer.
	rig.close_on_dispatch = true;
	EXPECT_EQ(reply_of(rig.ask(proc, proto::List{})).second, "seen");
	EXPECT_TRUE(rig.closed(proc));
	EXPECT_EQ(rig.ended.size(), 3u);
	EXPECT_EQ(rig.conns.size(), 0u);
}

// EventLoop::add refused (here EEXIST: the descriptor is watched already):
// the peer is refused, its socket closed (its client sees the end rather
// than waiting for good), nothing kept, nothing told to the host.
TEST(Connections, APeerTheLoopCannotWatchIsRefusedAndClosed)
{
	PartsRig rig("refused");
	int sv[2];
	ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv), 0);
	FakePeer p;
	p.fd = sv[0];
	int runs = 0;
	ASSERT_TRUE(rig.loop.add(sv[1], EPOLLIN, [&] { runs++; }));
	EXPECT_FALSE(rig.conns.take_conn(sv[1], false));
	EXPECT_EQ(rig.conns.size(), 0u);
	EXPECT_EQ(fcntl(sv[1], F_GETFD), -1) << "the refused socket is closed";
	rig.loop.remove(sv[1]);
	EXPECT_TRUE(rig.closed(p));
	EXPECT_TRUE(rig.ended.empty());
	// Not a socket (no peer credentials): refused the same way.
	int pp[2];
	ASSERT_EQ(pipe2(pp, O_CLOEXEC | O_NONBLOCK), 0);
	EXPECT_FALSE(rig.conns.take_conn(pp[0], false));
	EXPECT_EQ(fcntl(pp[0], F_GETFD), -1);
	close(pp[1]);
	// The Connections serve on.
	FakePeer next;
	ASSERT_TRUE(rig.connect(next));
	EXPECT_EQ(rig.ask(next, hello(proto::Role::Controller)).type(), proto::Type::HelloReply);
	EXPECT_EQ(runs, 0);
}

// The route table: who may send what, and which commands change what
// persistence keeps (only LIST, STATUS and AGG_FETCH read).
TEST(Commands, TheRouteTableSaysWhoMaySendWhatAndWhatChangesState)
{
	using From = strata::daemon_impl::Commands::From;
	using Effect = strata::daemon_impl::Commands::Effect;
	using strata::daemon_impl::Commands;
	std::vector<proto::Type> reads, from_procs;
	int routes = 0;
	for (int t = 0; t < 64; t++)
		for (From f : {From::Unregistered, From::Registered, From::Controller})
			if (const Commands::Route *r = Commands::route(static_cast<proto::Type>(t), f)) {
				routes++;
				EXPECT_EQ(static_cast<int>(r->type), t);
				EXPECT_EQ(r->from, f);
				if (f != From::Controller)
					from_procs.push_back(r->type);
				else if (r->effect == Effect::Reads)
					reads.push_back(r->type);
			}
	EXPECT_EQ(routes, 16);
	EXPECT_EQ(reads,
		  (std::vector<proto::Type>{proto::Type::List, proto::Type::Status, proto::Type::AggFetch}));
	EXPECT_EQ(from_procs, (std::vector<proto::Type>{proto::Type::Register, proto::Type::Buffer,
							proto::Type::AggRegion}));
	EXPECT_EQ(Commands::route(proto::Type::Buffer, From::Unregistered), nullptr);
	EXPECT_EQ(Commands::route(proto::Type::Hello, From::Controller), nullptr); // Connections'
}

// Commands' dispatch over socketpairs: a controller's commands reach their
// parts and are answered; a process's messages and the two-phase stops go
// to the host; a refused type is answered -EPERM, the connection kept.
TEST(Commands, DispatchHandsEachMessageToItsPart)
{
	PartsRig rig("commands");
	FakePeer ctl, proc;
	ASSERT_TRUE(rig.connect(ctl));
	ASSERT_TRUE(rig.connect(proc));
	EXPECT_EQ(rig.ask(ctl, hello(proto::Role::Controller)).type(), proto::Type::HelloReply);
	EXPECT_EQ(rig.ask(proc, hello(proto::Role::Process)).type(), proto::Type::HelloReply);

	proto::Create c;
	c.session = "s";
	c.output_dir = rig.dir() + "/out-s";
	EXPECT_EQ(reply_of(rig.ask(ctl, c)).first, 0);
	EXPECT_EQ(rig.settles, 1); // before each controller's command
	EXPECT_EQ(reply_of(rig.ask(ctl, proto::Start{"s"})).first, 0);
	proto::Message m = rig.ask(ctl, proto::Status{"s"});
	ASSERT_EQ(m.type(), proto::Type::StatusReply);
	ASSERT_EQ(std::get<proto::StatusReply>(m.body).sessions.size(), 1u);
	EXPECT_EQ(std::get<proto::StatusReply>(m.body).sessions[0].state,
		  static_cast<uint32_t>(proto::SessionState::Active));
	// STATUS settles twice: as every command, then after it read what the
	// process connections hold (a BUFFER sent just before an exit).
	EXPECT_EQ(rig.settles, 4);

	// A process's BUFFER before its REGISTER: not its route; REGISTER
	// goes to the host (which marks it registered), then BUFFER does.
	EXPECT_EQ(reply_of(rig.ask(proc, proto::Buffer{})).first, -EPERM);
	EXPECT_EQ(reply_of(rig.ask(proc, registration())).second, "process");
	EXPECT_EQ(reply_of(rig.ask(proc, proto::Buffer{})).second, "process");
	EXPECT_EQ(rig.process_messages,
		  (std::vector<proto::Type>{proto::Type::Register, proto::Type::Buffer}));
	EXPECT_EQ(rig.settles, 4); // a process's messages settle nothing

	// STOP of the active session: the host's two-phase stop; of a
	// session that is not: the table's refusal, no stop.
	const uint32_t seq = ctl.seq + 1;
	EXPECT_EQ(reply_of(rig.ask(ctl, proto::Stop{"s"})).second, "stopping");
	ASSERT_EQ(rig.stops.size(), 1u);
	Answer none;
	const strata::daemon_impl::Session *s = rig.sessions.find(Caller{getuid(), getgid(), 0}, "s", none);
	ASSERT_NE(s, nullptr);
	EXPECT_EQ(rig.stops[0].session, s->id);
	EXPECT_FALSE(rig.stops[0].destroy);
	EXPECT_EQ(rig.stops[0].seq, seq);
	EXPECT_EQ(reply_of(rig.ask(ctl, proto::Destroy{"nosuch"})).first, -ENOENT);
	EXPECT_EQ(rig.stops.size(), 1u);
	// WAIT with nothing owed: answered at once through deliver.
	EXPECT_EQ(reply_of(rig.ask(ctl, proto::Wait{100})).first, 0);
	// A controller may not REGISTER: refused, kept.
	EXPECT_EQ(reply_of(rig.ask(ctl, registration())).first, -EPERM);
	EXPECT_EQ(reply_of(rig.ask(ctl, proto::List{})).first, 1); // a LIST_REPLY: still served
}

// Processes alone (PartsRig, to_processes): a REGISTER over a socketpair
// is answered with the active session granted and counted as a state
// query; malformed BUFFERs are refused with their reason, the connection
// kept; its end is its acknowledgement.
TEST(Processes, RegisterGrantsAndAMalformedBufferIsRefused)
{
	PartsRig rig("processes");
	rig.to_processes = true;
	FakePeer ctl, proc;
	ASSERT_TRUE(rig.connect(ctl));
	ASSERT_TRUE(rig.connect(proc));
	EXPECT_EQ(rig.ask(ctl, hello(proto::Role::Controller)).type(), proto::Type::HelloReply);
	EXPECT_EQ(rig.ask(proc, hello(proto::Role::Process)).type(), proto::Type::HelloReply);
	proto::Create c;
	c.session = "s";
	c.output_dir = rig.dir() + "/out-s";
	EXPECT_EQ(reply_of(rig.ask(ctl, c)).first, 0);
	EXPECT_EQ(reply_of(rig.ask(ctl, proto::Start{"s"})).first, 0);

	proto::Message m = rig.ask(proc, registration());
	ASSERT_EQ(m.type(), proto::Type::RegisterReply);
	const auto &grants = std::get<proto::RegisterReply>(m.body).sessions;
	ASSERT_EQ(grants.size(), 1u);
	EXPECT_EQ(rig.processes.queries(), 1u);
	EXPECT_EQ(rig.processes.handoffs(), 0u);
	const strata::daemon_impl::Proc *p = rig.procs.find(getpid());
	ASSERT_NE(p, nullptr);
	EXPECT_EQ(p->comm, "harness");
	EXPECT_EQ(p->events.size(), 1u);

	// The granted slot without its descriptor; a slot never granted.
	proto::Buffer b;
	b.slot = grants[0].slot;
	EXPECT_EQ(reply_of(rig.ask(proc, b)),
		  std::make_pair(-EBADF, std::string("BUFFER without its file descriptor")));
	b.slot = grants[0].slot + 1;
	b.status = -ENOMEM; // nothing to pass: the grant is checked first
	EXPECT_EQ(reply_of(rig.ask(proc, b)),
		  std::make_pair(-EINVAL, "slot " + std::to_string(b.slot) + " was not granted"));
	// An AGG_REGION without its descriptor: refused the same way.
	proto::AggRegion a;
	a.slot = grants[0].slot;
	EXPECT_EQ(reply_of(rig.ask(proc, a)),
		  std::make_pair(-EBADF, std::string("AGG_REGION without its file descriptor")));
	// Still served: a failed buffer open on the granted slot is noted.
	b.slot = grants[0].slot;
	EXPECT_EQ(reply_of(rig.ask(proc, b)), std::make_pair(0, std::string("noted")));
	EXPECT_EQ(rig.procs.find(getpid())->drains.size(), 0u);

	// Its end acknowledges what it was granted.
	proc.hang_up();
	for (int i = 0; i < Turner::kMaxTurns && rig.ended.empty(); i++)
		rig.turn();
	ASSERT_EQ(rig.ended.size(), 1u);
	EXPECT_TRUE(rig.ended[0].registered);
	ASSERT_NE(rig.procs.find(getpid()), nullptr);
	EXPECT_GT(rig.ended[0].registered_at, 0u); // CREATE and START changed the state
	EXPECT_EQ(rig.procs.find(getpid())->acked, rig.ended[0].registered_at);
	EXPECT_EQ(rig.processes.queries(), 1u);
}

} // namespace
} // namespace strata_test
