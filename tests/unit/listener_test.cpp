// The daemon's listener (consumerd/listener.h) with a fake host: the socket
// and the quiet socket made and unlinked, a connection to the socket handed
// over at once, a burst on the quiet socket handed over in one batch when
// its delay passed, a refused connection closed, a second listener on the
// same path refused while the first lives.
#include <gtest/gtest.h>

#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <vector>

#include "event_loop.h"
#include "listener.h"
#include "log.h"
#include "proto/proto.h"
#include "proto/sock.h"
#include "temp_dir.h"

namespace strata {
namespace daemon_impl {
namespace {

// What the listener handed over.
struct FakeHost : Listener::Host {
	Listener *listener = nullptr;
	std::vector<std::pair<int, bool>> taken; // fd, quiet
	int batches = 0;                         // serve_quiet calls
	bool refuse = false;
	bool take_conn(int fd, bool quiet) override
	{
		if (refuse) {
			close(fd);
			return false;
		}
		taken.push_back({fd, quiet});
		return true;
	}
	void serve_quiet() override
	{
		batches++;
		listener->accept(true);
	}
	struct Knock {
		pid_t pid;
		std::string comm;
		int signo;
	};
	std::vector<Knock> knocks;
	void knocked(pid_t pid, uid_t uid, const std::string &comm, int signo) override
	{
		EXPECT_EQ(uid, geteuid());
		knocks.push_back({pid, comm, signo});
	}
	~FakeHost()
	{
		for (auto &t : taken)
			close(t.first);
	}
};

bool exists(const std::string &path)
{
	struct stat st;
	return lstat(path.c_str(), &st) == 0;
}

class ListenerTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		g_quiet = true;
		ASSERT_TRUE(dir_.ok());
		ASSERT_TRUE(loop_.ok());
		host_.listener = listener_.get();
	}
	void TearDown() override
	{
		listener_.reset();
		for (int fd : clients_)
			close(fd);
	}
	int connect_to(const std::string &path)
	{
		const int fd = proto::connect_unix(path, proto::now_ms() + 2000);
		if (fd >= 0)
			clients_.push_back(fd);
		return fd;
	}
	// Loop turns until `done` or 50 turns (of at most 100 ms) passed.
	template <typename F> bool turn_until(F done)
	{
		for (int i = 0; i < 50 && !done(); i++)
			EXPECT_EQ(loop_.turn(100), 0);
		return done();
	}

	strata_test::TempDir dir_{"listener"};
	const std::string path_ = dir_.path() + "/consumerd.sock";
	const std::string quiet_ = path_ + proto::kQuietSuffix;
	EventLoop loop_;
	FakeHost host_;
	std::unique_ptr<Listener> listener_ = std::make_unique<Listener>(loop_, host_, path_);
	std::vector<int> clients_;
};

TEST_F(ListenerTest, ItsFilesLiveFromOpenToClose)
{
	EXPECT_FALSE(listener_->listening());
	ASSERT_TRUE(listener_->open());
	EXPECT_TRUE(listener_->listening());
	EXPECT_TRUE(listener_->has_quiet());
	EXPECT_TRUE(exists(path_));
	EXPECT_TRUE(exists(quiet_));
	EXPECT_TRUE(exists(path_ + proto::kKnockSuffix));
	// A second daemon on the same path: refused, the first one's files kept.
	{
		EventLoop other_loop;
		FakeHost other_host;
		Listener other(other_loop, other_host, path_);
		EXPECT_FALSE(other.open());
		EXPECT_FALSE(other.listening());
	}
	EXPECT_TRUE(exists(path_));
	listener_->close();
	EXPECT_FALSE(listener_->listening());
	EXPECT_FALSE(exists(path_));
	EXPECT_FALSE(exists(quiet_));
	EXPECT_FALSE(exists(path_ + proto::kKnockSuffix));
	listener_->close(); // again: nothing
}

// A knock (proto.h, kKnockSuffix) names its sender by the kernel's
// credentials, its comm and update signal from the payload (the signal only
// with the flag that says it catches one: an older library sends the flag
// alone); a malformed one is dropped.
TEST_F(ListenerTest, TheKnockSocketNamesItsSenderByItsCredentials)
{
	ASSERT_TRUE(listener_->open());
	struct sockaddr_un sa = {};
	sa.sun_family = AF_UNIX;
	const std::string knock = path_ + proto::kKnockSuffix;
	ASSERT_LT(knock.size(), sizeof sa.sun_path);
	memcpy(sa.sun_path, knock.c_str(), knock.size() + 1);
	const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	ASSERT_GE(fd, 0);
	uint8_t msg[proto::kKnockSize] = {};
	for (unsigned b = 0; b < 4; b++)
		msg[b] = static_cast<uint8_t>(proto::kKnockMagic >> (8 * b));
	memcpy(msg + 8, "knocker\x01", 8);
	const auto to = reinterpret_cast<const struct sockaddr *>(&sa);
	ASSERT_EQ(sendto(fd, msg, sizeof msg - 1, 0, to, sizeof sa), (ssize_t)sizeof msg - 1); // short
	ASSERT_EQ(sendto(fd, msg, sizeof msg, 0, to, sizeof sa), (ssize_t)sizeof msg);
	const uint32_t flags[3] = {proto::kKnockAsync | 34u << proto::kKnockSignoShift, proto::kKnockAsync,
				   34u << proto::kKnockSignoShift};
	for (uint32_t f : flags) {
		for (unsigned b = 0; b < 4; b++)
			msg[4 + b] = static_cast<uint8_t>(f >> (8 * b));
		ASSERT_EQ(sendto(fd, msg, sizeof msg, 0, to, sizeof sa), (ssize_t)sizeof msg);
	}
	msg[0] ^= 1; // not the magic
	ASSERT_EQ(sendto(fd, msg, sizeof msg, 0, to, sizeof sa), (ssize_t)sizeof msg);
	close(fd);
	EXPECT_TRUE(turn_until([&] { return host_.knocks.size() == 4; }));
	listener_->read_knocks(); // what the loop has not read yet: the malformed ones
	ASSERT_EQ(host_.knocks.size(), 4u);
	for (const FakeHost::Knock &k : host_.knocks) {
		EXPECT_EQ(k.pid, getpid());
		EXPECT_EQ(k.comm, "knocker?"); // a control byte shown as '?'
	}
	EXPECT_EQ(host_.knocks[0].signo, 0);  // no flags
	EXPECT_EQ(host_.knocks[1].signo, 34); // catches signal 34
	EXPECT_EQ(host_.knocks[2].signo, 0);  // an older library: which one is not said
	EXPECT_EQ(host_.knocks[3].signo, 0);  // a number without the flag
}

TEST_F(ListenerTest, TheSocketHandsEachConnectionOverAtOnce)
{
	ASSERT_TRUE(listener_->open());
	ASSERT_GE(connect_to(path_), 0);
	ASSERT_TRUE(turn_until([&] { return host_.taken.size() == 1; }));
	EXPECT_FALSE(host_.taken[0].second);
	EXPECT_EQ(host_.batches, 0);
	// A refused one is the host's to close: its client sees the end.
	host_.refuse = true;
	const int c = connect_to(path_);
	ASSERT_GE(c, 0);
	char b;
	ASSERT_TRUE(turn_until([&] { return recv(c, &b, 1, MSG_DONTWAIT) == 0; }));
	EXPECT_EQ(host_.taken.size(), 1u);
}

TEST_F(ListenerTest, TheQuietSocketHandsABurstOverInOneBatch)
{
	ASSERT_TRUE(listener_->open());
	for (int i = 0; i < 3; i++)
		ASSERT_GE(connect_to(quiet_), 0);
	ASSERT_TRUE(turn_until([&] { return host_.batches > 0; }));
	EXPECT_EQ(host_.batches, 1);
	ASSERT_EQ(host_.taken.size(), 3u);
	for (auto &t : host_.taken)
		EXPECT_TRUE(t.second) << "from the quiet socket";
	// Armed again: the next burst is the next batch.
	ASSERT_GE(connect_to(quiet_), 0);
	ASSERT_TRUE(turn_until([&] { return host_.batches > 1; }));
	EXPECT_EQ(host_.batches, 2);
	EXPECT_EQ(host_.taken.size(), 4u);
	// The host may serve the queue before the delay (a command does).
	ASSERT_GE(connect_to(quiet_), 0);
	listener_->accept(true);
	EXPECT_EQ(host_.taken.size(), 5u);
}

} // namespace
} // namespace daemon_impl
} // namespace strata
