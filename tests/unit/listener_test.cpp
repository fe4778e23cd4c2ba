// The daemon's listener (consumerd/listener.h) with a fake host: the socket
// and the quiet socket made and unlinked, a connection to the socket handed
// over at once, a burst on the quiet socket handed over in one batch when
// its delay passed, a refused connection closed, a second listener on the
// same path refused while the first lives.
#include <gtest/gtest.h>

#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
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
	listener_->close(); // again: nothing
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
