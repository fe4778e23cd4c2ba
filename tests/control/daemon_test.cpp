/*
 * daemon_test.cpp - strata-consumerd over a real socket: session
 * lifecycle and its errors, ownership by uid, hostile peers (garbage,
 * wrong role, fake buffers), the 16-slot limit, clean SIGTERM shutdown, and
 * the torn-file repair (--repair), the probe marks LIST gives.
 */
#include "daemon_fixture.h"

#include <random>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "strata_abi.h"

using namespace strata;
using strata_test::Daemon;

namespace {

int cmd(CtlClient &c, proto::Body b, std::string *text = nullptr)
{
	std::string t;
	int r = c.command(std::move(b), t);
	if (text)
		*text = t;
	return r;
}

proto::Create create_msg(const Daemon &d, const std::string &name)
{
	proto::Create c;
	c.session = name;
	c.output_dir = d.dir + "/out-" + name;
	return c;
}

std::vector<proto::SessionStatus> status(CtlClient &c)
{
	proto::Message ans;
	std::string err;
	if (c.call(proto::Status{""}, ans, err) < 0 || ans.type() != proto::Type::StatusReply)
		return {};
	return std::get<proto::StatusReply>(ans.body).sessions;
}

} // namespace

TEST(Daemon, SessionLifecycle)
{
	Daemon d;
	ASSERT_TRUE(d.start(STRATA_CONSUMERD_EXE));
	CtlClient c;
	std::string err;
	ASSERT_EQ(c.open("", err), 0) << err;
	std::string text;
	ASSERT_EQ(cmd(c, create_msg(d, "s1"), &text), 0) << text;
	EXPECT_EQ(text, d.dir + "/out-s1");
	struct stat st;
	EXPECT_EQ(stat((d.dir + "/out-s1").c_str(), &st), 0);
	EXPECT_EQ(cmd(c, create_msg(d, "s1")), -EEXIST);
	EXPECT_EQ(cmd(c, proto::EnableEvent{"s1", {"demo:*", -1, 1, ""}}), 0);
	EXPECT_EQ(cmd(c, proto::DisableEvent{"s1", {"demo:noisy", -1, 1, ""}}), 0);
	EXPECT_EQ(cmd(c, proto::EnableEvent{"nope", {"*", -1, 1, ""}}), -ENOENT);

	auto ss = status(c);
	ASSERT_EQ(ss.size(), 1u);
	EXPECT_EQ(ss[0].name, "s1");
	EXPECT_EQ(ss[0].slot, 0u);
	EXPECT_EQ(ss[0].state, static_cast<uint32_t>(proto::SessionState::Created));
	ASSERT_EQ(ss[0].rules.size(), 2u);
	EXPECT_EQ(ss[0].rules[1].pattern, "demo:noisy");
	EXPECT_EQ(ss[0].rules[1].enable, 0u); // DISABLE_EVENT forces enable = 0

	EXPECT_EQ(cmd(c, proto::Stop{"s1"}), -EALREADY);
	EXPECT_EQ(cmd(c, proto::Start{"s1"}), 0);
	EXPECT_EQ(cmd(c, proto::Start{"s1"}), -EALREADY);
	EXPECT_EQ(status(c)[0].state, static_cast<uint32_t>(proto::SessionState::Active));
	EXPECT_EQ(cmd(c, proto::Stop{"s1"}), 0);
	EXPECT_EQ(status(c)[0].state, static_cast<uint32_t>(proto::SessionState::Stopped));
	EXPECT_EQ(cmd(c, proto::Start{"s1"}), 0); // restart after stop

	// A second session takes the next slot; destroying frees the first.
	ASSERT_EQ(cmd(c, create_msg(d, "s2")), 0);
	ss = status(c);
	ASSERT_EQ(ss.size(), 2u);
	EXPECT_EQ(ss[1].slot, 1u);
	EXPECT_EQ(cmd(c, proto::Destroy{"s1"}), 0); // stops it first
	EXPECT_EQ(cmd(c, proto::Destroy{"s1"}), -ENOENT);
	ASSERT_EQ(cmd(c, create_msg(d, "s3")), 0);
	ss = status(c);
	ASSERT_EQ(ss.size(), 2u);
	EXPECT_EQ(ss[1].name, "s3");
	EXPECT_EQ(ss[1].slot, 0u);

	proto::Message ans;
	ASSERT_EQ(c.call(proto::Status{"nope"}, ans, err), 0);
	ASSERT_EQ(ans.type(), proto::Type::Reply);
	EXPECT_EQ(std::get<proto::Reply>(ans.body).status, -ENOENT);
	EXPECT_EQ(d.stop(), 0);
}

TEST(Daemon, SixteenSlotsAtMost)
{
	Daemon d;
	ASSERT_TRUE(d.start(STRATA_CONSUMERD_EXE));
	CtlClient c;
	std::string err;
	ASSERT_EQ(c.open("", err), 0) << err;
	for (int i = 0; i < 16; i++)
		ASSERT_EQ(cmd(c, create_msg(d, "s" + std::to_string(i))), 0) << i;
	EXPECT_EQ(cmd(c, create_msg(d, "s16")), -ENOSPC);
	EXPECT_EQ(cmd(c, proto::Destroy{"s7"}), 0);
	ASSERT_EQ(cmd(c, create_msg(d, "s16")), 0);
	for (auto &s : status(c)) {
		if (s.name == "s16") {
			EXPECT_EQ(s.slot, 7u);
		}
	}
}

TEST(Daemon, OtherUsersSessionsAreOffLimits)
{
	if (geteuid() != 0)
		GTEST_SKIP() << "needs root to act as another uid";
	Daemon d;
	ASSERT_TRUE(d.start(STRATA_CONSUMERD_EXE));
	chmod(d.dir.c_str(), 0755);
	chmod(d.socket.c_str(), 0777);
	CtlClient c;
	std::string err;
	ASSERT_EQ(c.open("", err), 0) << err;
	ASSERT_EQ(cmd(c, create_msg(d, "roots")), 0);
	const std::string mine = d.dir + "/nobody";
	ASSERT_EQ(mkdir(mine.c_str(), 0755), 0);
	ASSERT_EQ(chown(mine.c_str(), 65534, 65534), 0);

	int p[2];
	ASSERT_EQ(pipe(p), 0);
	pid_t child = fork();
	if (child == 0) {
		// As nobody: root's session is invisible and untouchable.
		int fail = 0;
		if (setgid(65534) < 0 || setuid(65534) < 0)
			_exit(100);
		CtlClient u;
		std::string e;
		if (u.open("", e) < 0)
			_exit(101);
		// Its name is not revealed: answered as a missing name.
		fail |= (cmd(u, proto::Stop{"roots"}) != -ENOENT) << 0;
		fail |= (cmd(u, proto::Destroy{"roots"}) != -ENOENT) << 1;
		fail |= (cmd(u, proto::EnableEvent{"roots", {"*", -1, 1, ""}}) != -ENOENT) << 2;
		fail |= (!status(u).empty()) << 3;
		// Names are per user: nobody may have a "roots" of its own.
		fail |= (cmd(u, proto::Create{"roots", mine + "/r", {}}) != 0) << 4;
		// The root daemon creates for nobody only under nobody's own dirs.
		fail |= (cmd(u, proto::Create{"nob1", d.dir + "/not-mine", {}}) != -EACCES) << 5;
		fail |= (cmd(u, proto::Create{"nob2", "/etc/strata-evil", {}}) != -EACCES) << 6;
		fail |= (cmd(u, proto::Create{"nob3", mine + "/a/trace", {}}) != 0) << 7;
		_exit(fail);
	}
	close(p[0]);
	close(p[1]);
	EXPECT_EQ(strata_test::wait_child(child, 20000), 0);
	EXPECT_EQ(status(c).size(), 3u); // roots, nobody's roots and nob3
	struct stat st;
	ASSERT_EQ(stat((mine + "/a/trace").c_str(), &st), 0);
	EXPECT_EQ(st.st_uid, 65534u) << "directories created for nobody belong to nobody";
	ASSERT_EQ(stat((mine + "/a").c_str(), &st), 0);
	EXPECT_EQ(st.st_uid, 65534u);
	EXPECT_NE(stat((d.dir + "/not-mine").c_str(), &st), 0);
}

namespace {

// A connection that sends garbage instead of a header: an error reply, then EOF.
void expect_garbage_refused(const std::string &socket)
{
	std::string err;
	int fd = proto::connect_unix(socket, proto::now_ms() + 2000);
	ASSERT_GE(fd, 0);
	const char junk[] = "GET / HTTP/1.0\r\n\r\n";
	ASSERT_EQ(write(fd, junk, sizeof(junk)), static_cast<ssize_t>(sizeof(junk)));
	proto::Message m;
	ASSERT_EQ(proto::recv_message(fd, m, nullptr, proto::now_ms() + 2000, err), 0) << err;
	ASSERT_EQ(m.type(), proto::Type::Reply);
	EXPECT_EQ(std::get<proto::Reply>(m.body).status, -EPROTO);
	EXPECT_EQ(proto::recv_message(fd, m, nullptr, proto::now_ms() + 2000, err), -ECONNRESET);
	close(fd);
}

// `req` as a new connection's first message: a REPLY of `status`.
void expect_answer(const std::string &socket, const proto::Message &req, int status)
{
	std::string err;
	int fd = proto::connect_unix(socket, proto::now_ms() + 2000);
	ASSERT_GE(fd, 0);
	proto::Message ans;
	ASSERT_EQ(proto::request(fd, req, ans, proto::now_ms() + 2000, err), 0) << err;
	EXPECT_EQ(std::get<proto::Reply>(ans.body).status, status);
	close(fd);
}

} // namespace

TEST(Daemon, HostilePeersAreAnsweredAndDropped)
{
	Daemon d;
	ASSERT_TRUE(d.start(STRATA_CONSUMERD_EXE));
	std::string err;
	// 1. garbage instead of a header: an error reply, then EOF.
	ASSERT_NO_FATAL_FAILURE(expect_garbage_refused(d.socket));
	// 2. a command before HELLO.
	ASSERT_NO_FATAL_FAILURE(expect_answer(d.socket, {1, proto::Start{"x"}}, -EPROTO));
	// 3. no common version.
	ASSERT_NO_FATAL_FAILURE(expect_answer(
		d.socket, {1, proto::Hello{proto::kVersion + 1, proto::kVersion + 3, 2, "future"}},
		-EPROTONOSUPPORT));
	// 4. a process: controller messages refused; BUFFER without fd, for a
	//    slot not granted, and with a memfd that is not a strata buffer.
	CtlClient ctl;
	ASSERT_EQ(ctl.open(d.socket, err), 0) << err;
	ASSERT_EQ(cmd(ctl, create_msg(d, "s")), 0);
	ASSERT_EQ(cmd(ctl, proto::Start{"s"}), 0);
	{
		int fd = proto::connect_unix(d.socket, proto::now_ms() + 2000);
		ASSERT_GE(fd, 0);
		int64_t dl = proto::now_ms() + 5000;
		proto::Message ans;
		ASSERT_EQ(proto::request(fd, {1, proto::Hello{1, 1, 1, "fake"}}, ans, dl, err), 0) << err;
		EXPECT_EQ(ans.type(), proto::Type::HelloReply);
		ASSERT_EQ(proto::request(fd, {2, proto::Create{"x", "/tmp/x", {}}}, ans, dl, err), 0);
		EXPECT_EQ(std::get<proto::Reply>(ans.body).status, -EPERM);
		proto::Register reg;
		reg.abi_major = STRATA_ABI_MAJOR;
		reg.comm = "fake";
		reg.events = {{"fake:one", 6}};
		ASSERT_EQ(proto::request(fd, {3, reg}, ans, dl, err), 0) << err;
		ASSERT_EQ(ans.type(), proto::Type::RegisterReply);
		const auto &grants = std::get<proto::RegisterReply>(ans.body).sessions;
		ASSERT_EQ(grants.size(), 1u);
		EXPECT_EQ(grants[0].slot, 0u);
		ASSERT_EQ(proto::request(fd, {4, proto::Buffer{0, 0}}, ans, dl, err), 0);
		EXPECT_EQ(std::get<proto::Reply>(ans.body).status, -EBADF);
		// The grant is still there: now a memfd full of garbage.
		int mfd = memfd_create("garbage", MFD_CLOEXEC);
		ASSERT_GE(mfd, 0);
		ASSERT_EQ(ftruncate(mfd, 1 << 20), 0);
		ASSERT_EQ(proto::send_message(fd, {5, proto::Buffer{0, 0}}, mfd, dl), 0);
		ASSERT_EQ(proto::recv_message(fd, ans, nullptr, dl, err), 0) << err;
		EXPECT_EQ(std::get<proto::Reply>(ans.body).status, -EINVAL);
		EXPECT_NE(std::get<proto::Reply>(ans.body).text.find("rejected"), std::string::npos);
		// Refused before it is even mapped: it could shrink under the
		// daemon's mapping (SIGBUS).
		EXPECT_NE(std::get<proto::Reply>(ans.body).text.find("not sealed"), std::string::npos)
			<< std::get<proto::Reply>(ans.body).text;
		// The grant is used up.
		ASSERT_EQ(proto::send_message(fd, {6, proto::Buffer{0, 0}}, mfd, dl), 0);
		ASSERT_EQ(proto::recv_message(fd, ans, nullptr, dl, err), 0) << err;
		EXPECT_EQ(std::get<proto::Reply>(ans.body).status, -EINVAL);
		close(mfd);

		// While its connection is open, LIST shows the fake process.
		proto::Message lst;
		ASSERT_EQ(ctl.call(proto::List{}, lst, err), 0);
		const auto &e = std::get<proto::ListReply>(lst.body).entries;
		ASSERT_EQ(e.size(), 1u);
		EXPECT_EQ(e[0].event, "fake:one");
		EXPECT_EQ(e[0].pid, static_cast<uint32_t>(getpid()));
		close(fd);
	}
	// The daemon survived all of it.
	EXPECT_EQ(status(ctl).size(), 1u);
	EXPECT_TRUE(d.alive());
	EXPECT_EQ(d.stop(), 0);
	struct stat st;
	EXPECT_NE(stat(d.socket.c_str(), &st), 0) << "socket left behind";
}

TEST(Daemon, SurvivesFuzzedConnections)
{
	// For two seconds: connections that say HELLO (either role) and then
	// send valid messages with random bytes flipped, truncated messages and
	// random bytes.  Oracle: the daemon is alive afterwards, answers a
	// fresh STATUS, and its own session is intact.  The seeds name another
	// session ("fz"): a flipped type bit turns STOP into DESTROY, which a
	// controller may send, and no bit flip turns "fz" into "keep".
	Daemon d;
	ASSERT_TRUE(d.start(STRATA_CONSUMERD_EXE));
	CtlClient ctl;
	std::string err;
	ASSERT_EQ(ctl.open("", err), 0) << err;
	ASSERT_EQ(cmd(ctl, create_msg(d, "keep")), 0);
	std::vector<std::vector<uint8_t>> seeds;
	for (proto::Body b :
	     std::vector<proto::Body>{proto::Start{"fz"}, proto::Stop{"fz"}, proto::Status{""}, proto::List{},
				      proto::EnableEvent{"fz", {"*", -1, 1, ""}}, proto::Buffer{0, 0},
				      proto::Register{}, proto::Create{"fz", d.dir + "/fz", {}}})
		seeds.push_back(proto::encode(proto::Message{9, b}));
	std::mt19937_64 rng(777);
	int conns = 0;
	for (int64_t end = proto::now_ms() + 2000; proto::now_ms() < end; conns++) {
		int fd = proto::connect_unix(d.socket, proto::now_ms() + 2000);
		ASSERT_GE(fd, 0) << "the daemon stopped accepting after " << conns << " connections";
		proto::Message hello{1, proto::Hello{1, 1, 1 + static_cast<uint32_t>(rng() % 2), "fuzz"}};
		std::vector<uint8_t> bytes = proto::encode(hello);
		for (int k = 0; k < 4; k++) {
			std::vector<uint8_t> m = seeds[rng() % seeds.size()];
			int mode = static_cast<int>(rng() % 3);
			if (mode == 0)
				m[rng() % m.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
			else if (mode == 1)
				m.resize(rng() % m.size());
			else
				for (auto &x : m)
					x = static_cast<uint8_t>(rng());
			bytes.insert(bytes.end(), m.begin(), m.end());
		}
		ssize_t w = send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
		(void)w;
		if (rng() % 2) { // read whatever comes back, bounded
			proto::Message ans;
			for (int k = 0; k < 5; k++)
				if (proto::recv_message(fd, ans, nullptr, proto::now_ms() + 50, err) < 0)
					break;
		}
		close(fd);
	}
	EXPECT_TRUE(d.alive());
	bool keep = false;
	CtlClient fresh;
	ASSERT_EQ(fresh.open("", err), 0) << err;
	for (auto &s : status(fresh))
		keep |= s.name == "keep";
	EXPECT_TRUE(keep);
	printf("%d fuzzed connections\n", conns);
	EXPECT_EQ(d.stop(), 0);
}

TEST(Daemon, RefusesASecondDaemonOnTheSameSocket)
{
	Daemon d;
	ASSERT_TRUE(d.start(STRATA_CONSUMERD_EXE));
	pid_t child = fork();
	if (child == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 2);
		execl(STRATA_CONSUMERD_EXE, STRATA_CONSUMERD_EXE, "--socket", d.socket.c_str(),
		      static_cast<char *>(nullptr));
		_exit(127);
	}
	EXPECT_EQ(strata_test::wait_child(child, 20000), 1);
	EXPECT_TRUE(d.alive());
}

namespace {
void put_packet(std::string &file, uint32_t bytes, uint32_t content_bytes)
{
	std::string pkt(bytes, '\0');
	strata_packet_header h = {};
	h.magic = STRATA_CTF_MAGIC;
	h.packet_size = 8ull * bytes;
	h.content_size = 8ull * content_bytes;
	memcpy(&pkt[0], &h, sizeof(h));
	file += pkt;
}
size_t file_size(const std::string &p)
{
	struct stat st;
	return stat(p.c_str(), &st) == 0 ? static_cast<size_t>(st.st_size) : 0;
}
} // namespace

TEST(Daemon, RepairCutsTornStreamFiles)
{
	std::string dir = strata_test::make_temp_dir("repair");
	std::string trace = dir + "/ust/pid/x-1-20260101-000000";
	ASSERT_EQ(system(("mkdir -p " + trace).c_str()), 0);
	auto write_file = [](const std::string &p, const std::string &data) {
		FILE *f = fopen(p.c_str(), "w");
		fwrite(data.data(), 1, data.size(), f);
		fclose(f);
	};
	write_file(trace + "/metadata", "/* CTF 1.8 */\n");
	std::string whole, torn, badmagic, tiny;
	put_packet(whole, 4096, 200);
	put_packet(whole, 512, 512);
	put_packet(whole, 88, 84); // header-only trailing-loss packet: kept
	torn = whole;
	put_packet(torn, 4096, 100);
	torn.resize(torn.size() - 1000); // killed mid-write
	badmagic = whole;
	badmagic += std::string(200, 'x');
	tiny = whole + std::string(40, '\0'); // shorter than a header
	write_file(trace + "/channel0_0", whole);
	write_file(trace + "/channel0_1", torn);
	write_file(trace + "/channel0_2", badmagic);
	write_file(trace + "/channel0_3", tiny);
	write_file(dir + "/not_in_a_trace", "garbage");

	pid_t child = fork();
	if (child == 0) {
		int devnull = open("/dev/null", O_WRONLY);
		dup2(devnull, 1);
		dup2(devnull, 2);
		execl(STRATA_CONSUMERD_EXE, STRATA_CONSUMERD_EXE, "--repair", dir.c_str(),
		      static_cast<char *>(nullptr));
		_exit(127);
	}
	ASSERT_EQ(strata_test::wait_child(child, 20000), 0);
	EXPECT_EQ(file_size(trace + "/channel0_0"), 4096u + 512u + 88u);
	EXPECT_EQ(file_size(trace + "/channel0_1"), 4096u + 512u + 88u);
	EXPECT_EQ(file_size(trace + "/channel0_2"), 4096u + 512u + 88u);
	EXPECT_EQ(file_size(trace + "/channel0_3"), 4096u + 512u + 88u);
	EXPECT_EQ(file_size(trace + "/metadata"), 14u);
	EXPECT_EQ(file_size(dir + "/not_in_a_trace"), 7u); // not a stream: untouched
	strata_test::remove_tree(dir);
}

// Aggregation sessions (protocol version 6, docs/probes.md): granted, with
// their spec, only to a process whose HELLO reached version 6; its region
// taken only with its descriptor and for the session's slot; given back to
// a controller read-only, one per AGG_FETCH, -ENODATA past the last.
TEST(Daemon, AggregationSessionsAndTheirRegions)
{
	Daemon d;
	ASSERT_TRUE(d.start(STRATA_CONSUMERD_EXE));
	std::string err, text;
	CtlClient ctl;
	ASSERT_EQ(ctl.open(d.socket, err), 0) << err;
	proto::Create c = create_msg(d, "a");
	c.aggregate = "fake:one:v by k";
	c.agg_filter = "v > 1";
	ASSERT_EQ(cmd(ctl, c), 0);
	ASSERT_EQ(cmd(ctl, proto::Start{"a"}), 0);
	proto::Register reg;
	reg.abi_major = STRATA_ABI_MAJOR;
	reg.comm = "fake";
	const int64_t dl = proto::now_ms() + 5000;
	auto join = [&](uint16_t max_version, proto::Message &ans) {
		int fd = proto::connect_unix(d.socket, dl);
		EXPECT_GE(fd, 0);
		EXPECT_EQ(proto::request(fd, {1, proto::Hello{1, max_version, 1, "fake"}, 1}, ans, dl, err),
			  0)
			<< err;
		EXPECT_EQ(std::get<proto::HelloReply>(ans.body).version, max_version);
		EXPECT_EQ(proto::request(fd, {2, reg, 1}, ans, dl, err), 0) << err; // a version 1 REGISTER
		EXPECT_EQ(ans.type(), proto::Type::RegisterReply);
		return fd;
	};
	proto::Message ans;
	int old = join(1, ans); // an older libstrata: not granted the session
	EXPECT_TRUE(std::get<proto::RegisterReply>(ans.body).sessions.empty());
	close(old);
	int fd = join(proto::kAggVersion, ans);
	const auto &grants = std::get<proto::RegisterReply>(ans.body).sessions;
	ASSERT_EQ(grants.size(), 1u);
	EXPECT_EQ(grants[0].aggregate, c.aggregate);
	EXPECT_EQ(grants[0].agg_filter, c.agg_filter);
	const uint32_t slot = grants[0].slot;
	const uint64_t run = grants[0].session_id;
	int memfd = static_cast<int>(syscall(SYS_memfd_create, "strata-agg", MFD_CLOEXEC));
	ASSERT_GE(memfd, 0);
	ASSERT_EQ(ftruncate(memfd, 4096), 0);
	ASSERT_EQ(pwrite(memfd, "region", 6, 0), 6);
	auto hand = [&](uint32_t s, int with) {
		proto::Message m{3, proto::AggRegion{s, run}}, r;
		EXPECT_EQ(proto::send_message(fd, m, with, dl), 0);
		EXPECT_EQ(proto::recv_message(fd, r, nullptr, dl, err), 0) << err;
		return std::get<proto::Reply>(r.body).status;
	};
	EXPECT_EQ(hand(slot, -1), -EBADF);
	EXPECT_EQ(hand((slot + 1) % proto::kMaxSlots, memfd), -ESTALE);
	EXPECT_EQ(hand(slot, memfd), 0);
	close(memfd);
	int got = -1;
	ASSERT_EQ(ctl.command_fd(proto::AggFetch{"a", 0}, text, &got), 0) << text;
	EXPECT_EQ(text, std::to_string(getpid()) + " 1 fake");
	ASSERT_GE(got, 0);
	char b[6] = {};
	EXPECT_EQ(pread(got, b, 6, 0), 6);
	EXPECT_EQ(std::string(b, 6), "region");
	EXPECT_LT(pwrite(got, "x", 1, 0), 0); // read-only
	close(got);
	EXPECT_EQ(ctl.command_fd(proto::AggFetch{"a", 1}, text, &got), -ENODATA);
	EXPECT_EQ(text, "1 region(s)");
	EXPECT_EQ(ctl.command_fd(proto::AggFetch{"nosuch", 0}, text, &got), -ENOENT);
	auto st = status(ctl);
	ASSERT_EQ(st.size(), 1u);
	EXPECT_EQ(st[0].aggregate, c.aggregate);
	EXPECT_EQ(st[0].agg_regions, 1u);
	close(fd);
}

namespace {
// The probes mark LIST gives the entries of `pid` (-1: not listed).
int mark_of(CtlClient &ctl, pid_t pid)
{
	proto::Message lst;
	std::string err;
	if (ctl.call(proto::List{}, lst, err) != 0 || lst.type() != proto::Type::ListReply)
		return -2;
	int mark = -1;
	for (const proto::ListEntry &e : std::get<proto::ListReply>(lst.body).entries)
		if (e.pid == static_cast<uint32_t>(pid))
			mark = static_cast<int>(e.probes);
	return mark;
}

// HELLO(min..max) and REGISTER(flags, events) in a `header` version header
// on `sock`, sent; the REGISTER's answer awaited when one comes (not for a
// note, whose connection the daemon closes after reading it: EOF).
void say(const std::string &sock, uint16_t min, uint16_t max, uint16_t header, uint32_t flags,
	 std::vector<proto::EventName> events)
{
	const int64_t dl = proto::now_ms() + 5000;
	std::string err;
	int fd = proto::connect_unix(sock, dl);
	ASSERT_GE(fd, 0);
	proto::Register reg;
	reg.abi_major = STRATA_ABI_MAJOR;
	reg.comm = "fake";
	reg.flags = flags;
	reg.events = std::move(events);
	proto::Message ans;
	ASSERT_EQ(proto::request(fd, {1, proto::Hello{min, max, 1, "fake"}, 1}, ans, dl, err), 0) << err;
	ASSERT_EQ(ans.type(), proto::Type::HelloReply);
	if (flags & (proto::kRegisterNote | proto::kRegisterTable)) { // no answer
		EXPECT_EQ(proto::send_message(fd, {2, reg, header}, -1, dl), 0);
	} else {
		ASSERT_EQ(proto::request(fd, {2, reg, header}, ans, dl, err), 0) << err;
		EXPECT_EQ(ans.type(), proto::Type::RegisterReply);
	}
	close(fd);
}

// A note (kRegisterNote | kRegisterProbes) in a version 6 header: refused
// with -EPROTO.
void expect_old_note_refused(const std::string &sock)
{
	const uint16_t v7 = proto::kMarksVersion;
	const int64_t dl = proto::now_ms() + 5000;
	std::string err;
	int fd = proto::connect_unix(sock, dl);
	ASSERT_GE(fd, 0);
	proto::Message ans;
	ASSERT_EQ(proto::request(fd, {1, proto::Hello{1, v7, 1, "fake"}, 1}, ans, dl, err), 0) << err;
	proto::Register reg;
	reg.abi_major = STRATA_ABI_MAJOR;
	reg.comm = "fake";
	reg.flags = proto::kRegisterNote | proto::kRegisterProbes;
	ASSERT_EQ(proto::request(fd, {2, reg, uint16_t(v7 - 1)}, ans, dl, err), 0) << err;
	ASSERT_EQ(ans.type(), proto::Type::Reply);
	EXPECT_EQ(std::get<proto::Reply>(ans.body).status, -EPROTO);
	close(fd);
}

// A version 6 controller's LIST: every entry's mark unknown.
void expect_old_controller_unmarked(const std::string &sock)
{
	const int64_t dl = proto::now_ms() + 5000;
	std::string err;
	int fd = proto::connect_unix(sock, dl);
	ASSERT_GE(fd, 0);
	proto::Message ans;
	ASSERT_EQ(proto::request(fd, {1, proto::Hello{1, 6, 2, "old"}, 1}, ans, dl, err), 0) << err;
	ASSERT_EQ(proto::request(fd, {2, proto::List{}, 6}, ans, dl, err), 0) << err;
	ASSERT_EQ(ans.version, 6);
	for (const proto::ListEntry &e : std::get<proto::ListReply>(ans.body).entries)
		EXPECT_EQ(e.probes, proto::kProbesUnknown);
	close(fd);
}
} // namespace

// Protocol version 7 (docs/control-protocol.md, "Probe marks"): LIST says
// per process whether it has a probe report (1), has none (0: it
// registered its events over a version 7 connection and never said it has
// one), or is unknown (2: an older libstrata).  A mark is only ever set; a
// note names the peer itself, makes its record if it came first, and is
// refused in an older header; a version 6 controller gets no mark.
TEST(Daemon, ProbeMarksFollowWhatEachProcessSays)
{
	Daemon d;
	ASSERT_TRUE(d.start(STRATA_CONSUMERD_EXE));
	std::string err;
	CtlClient ctl;
	ASSERT_EQ(ctl.open(d.socket, err), 0) << err;
	const std::string quiet = d.socket + proto::kQuietSuffix;
	const pid_t me = getpid();
	const uint16_t v7 = proto::kMarksVersion;
	EXPECT_EQ(mark_of(ctl, me), -1);
	say(d.socket, 1, 6, 1, 0, {{"fake:one", 6}}); // an older libstrata
	EXPECT_EQ(mark_of(ctl, me), static_cast<int>(proto::kProbesUnknown));
	say(d.socket, 1, v7, 1, 0, {{"fake:one", 6}}); // a version 7 round trip, no report
	EXPECT_EQ(mark_of(ctl, me), static_cast<int>(proto::kProbesNone));
	say(d.socket, 1, v7, 1, 0, {}); // a re-query lists no events: nothing changes
	EXPECT_EQ(mark_of(ctl, me), static_cast<int>(proto::kProbesNone));
	say(quiet, v7, v7, v7, proto::kRegisterNote | proto::kRegisterProbes, {});
	EXPECT_EQ(mark_of(ctl, me), static_cast<int>(proto::kProbesMarked));
	say(d.socket, 1, 6, 1, 0, {{"fake:one", 6}}); // an exec'd older image: the mark stays
	EXPECT_EQ(mark_of(ctl, me), static_cast<int>(proto::kProbesMarked));

	// A note in a version 6 header: refused, the connection closed.
	ASSERT_NO_FATAL_FAILURE(expect_old_note_refused(d.socket));

	// Another process: its note read before its REGISTER (its record made
	// by the note, not listed: no events), then a join from a version 7
	// table with the flag; a third one joins with no flag.
	int go[2][2], done[2];
	ASSERT_EQ(pipe(go[0]), 0);
	ASSERT_EQ(pipe(go[1]), 0);
	ASSERT_EQ(pipe(done), 0);
	pid_t kids[2];
	for (int k = 0; k < 2; k++) {
		kids[k] = fork();
		ASSERT_GE(kids[k], 0);
		if (kids[k] == 0) {
			char b;
			if (k == 0) {
				say(quiet, v7, v7, v7, proto::kRegisterNote | proto::kRegisterProbes, {});
				(void)!write(done[1], "n", 1);
				(void)!read(go[k][0], &b, 1);
				say(quiet, v7, v7, v7, proto::kRegisterTable | proto::kRegisterProbes,
				    {{"fake:two", 3}});
			} else {
				say(quiet, v7, v7, v7, proto::kRegisterTable, {{"fake:two", 3}});
			}
			(void)!write(done[1], "r", 1);
			(void)!read(go[k][0], &b, 1); // alive until the parent looked
			_exit(0);
		}
	}
	char b[2];
	ASSERT_EQ(read(done[0], b, 1), 1); // the first child's note, the second's flagless join
	ASSERT_EQ(read(done[0], b + 1, 1), 1);
	EXPECT_EQ(mark_of(ctl, kids[0]), -1); // a record, no events: not listed
	EXPECT_EQ(mark_of(ctl, kids[1]), static_cast<int>(proto::kProbesNone));
	ASSERT_EQ(write(go[0][1], "g", 1), 1); // the first child's join
	ASSERT_EQ(read(done[0], b, 1), 1);
	EXPECT_EQ(mark_of(ctl, kids[0]), static_cast<int>(proto::kProbesMarked));
	// A version 6 controller gets no mark: every entry reads as unknown.
	ASSERT_NO_FATAL_FAILURE(expect_old_controller_unmarked(d.socket));
	ASSERT_EQ(write(go[0][1], "g", 1), 1);
	ASSERT_EQ(write(go[1][1], "g", 1), 1);
	for (pid_t k : kids) {
		int st = 0;
		EXPECT_EQ(waitpid(k, &st, 0), k);
		EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	EXPECT_TRUE(d.alive());
	EXPECT_EQ(d.stop(), 0);
}
