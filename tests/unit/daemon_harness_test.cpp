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
#include <unistd.h>

#include "strata_abi.h"

namespace strata_test {
namespace {

namespace proto = strata::proto;

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

} // namespace
} // namespace strata_test
