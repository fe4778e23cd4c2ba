// A descriptor the daemon's event loop cannot watch is said, never kept
// unwatched (issue 52): EventLoop::add says false and keeps no handler, and
// the process registry keeps a process whose pidfd it cannot watch without
// exit detection (no descriptor left open for it), as without a pidfd.
#include <gtest/gtest.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "event_loop.h"
#include "process_registry.h"

using strata::daemon_impl::EventLoop;
using strata::daemon_impl::ProcessRegistry;

namespace {

size_t open_fds()
{
	size_t n = 0;
	DIR *d = opendir("/proc/self/fd");
	if (!d)
		return 0;
	while (struct dirent *e = readdir(d))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

TEST(EventLoop, ADescriptorItCannotWatchIsRefusedAndNeverRun)
{
	EventLoop loop;
	ASSERT_TRUE(loop.ok());
	int runs = 0;
	// epoll takes no regular file (EPERM) and no closed descriptor (EBADF).
	const int file = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	ASSERT_GE(file, 0);
	EXPECT_FALSE(loop.add(file, EPOLLIN, [&] { runs++; }));
	EXPECT_EQ(errno, EPERM);
	EXPECT_FALSE(loop.add(-1, EPOLLIN, [&] { runs++; }));
	EXPECT_EQ(errno, EBADF);
	close(file);
	// A descriptor it can watch runs its handler; the refused ones never.
	const int efd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
	ASSERT_GE(efd, 0);
	int ready = 0;
	ASSERT_TRUE(loop.add(efd, EPOLLIN, [&] {
		uint64_t v;
		ready += read(efd, &v, sizeof v) == sizeof v;
	}));
	EXPECT_EQ(loop.turn(1000), 0);
	EXPECT_EQ(ready, 1);
	EXPECT_EQ(runs, 0);
	loop.remove(efd);
	close(efd);
}

// A descriptor closed by an earlier handler of a batch, its number given
// to a new watch in the same batch (a pidfd made for the next process): the
// old descriptor's event of that batch is not the new watch's, whose
// handler (a process's exit) must not run for it.  Ready in the order
// written: epoll lists descriptors in the order they became ready.
TEST(EventLoop, AnEventOfAClosedDescriptorDoesNotRunTheWatchThatReusedItsNumber)
{
	EventLoop loop;
	ASSERT_TRUE(loop.ok());
	const int first = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
	const int old = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
	ASSERT_GE(first, 0);
	ASSERT_GE(old, 0);
	int old_runs = 0, new_runs = 0, reused = -1;
	ASSERT_TRUE(loop.add(first, EPOLLIN, [&] {
		uint64_t v;
		(void)!read(first, &v, sizeof v);
		loop.remove(old);
		close(old);
		reused = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); // not ready: nothing of its own
		ASSERT_TRUE(loop.add(reused, EPOLLIN, [&] { new_runs++; }));
	}));
	ASSERT_TRUE(loop.add(old, EPOLLIN, [&] { old_runs++; }));
	// Ready in this order: `first`, then `old` (both counters at 1 since
	// their creation; EPOLL_CTL_ADD of a ready descriptor queues it).
	EXPECT_EQ(loop.turn(1000), 0);
	ASSERT_EQ(reused, old) << "the lowest free number is the one just closed";
	EXPECT_EQ(old_runs, 0);
	EXPECT_EQ(new_runs, 0) << "the closed descriptor's event ran the new watch's handler";
	// The new watch still runs for its own events.
	const uint64_t one = 1;
	ASSERT_EQ(write(reused, &one, sizeof one), (ssize_t)sizeof one);
	EXPECT_EQ(loop.turn(1000), 0);
	EXPECT_EQ(new_runs, 1);
	loop.remove(first);
	loop.remove(reused);
	close(first);
	close(reused);
}

// One turn runs every descriptor ready when it began, not the first batch
// of epoll's 32: the daemon judges the acknowledgements a stop waits for
// after each turn (Daemon::turn), and a daemon that woke late with many
// processes' connections closed would call the unread ones silent.  A
// handler that leaves its descriptor ready (level-triggered) does not hold
// the turn forever.
TEST(EventLoop, ATurnRunsEveryReadyDescriptorNotOnlyTheFirstBatch)
{
	EventLoop loop;
	ASSERT_TRUE(loop.ok());
	constexpr int kReady = 200; // six batches and more
	std::vector<int> fds, runs(kReady, 0);
	for (int i = 0; i < kReady; i++) {
		const int fd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
		ASSERT_GE(fd, 0);
		fds.push_back(fd);
		ASSERT_TRUE(loop.add(fd, EPOLLIN, [&runs, fd, i] {
			uint64_t v;
			runs[i] += read(fd, &v, sizeof v) == sizeof v;
		}));
	}
	EXPECT_EQ(loop.turn(0), 0);
	int once = 0;
	for (int r : runs)
		once += r == 1;
	EXPECT_EQ(once, kReady) << "a turn ran only part of the ready descriptors, or one twice";
	// Never read: ready at every look.  The turn ends all the same, each
	// handler having run a bounded number of times.
	int sticky_runs = 0;
	std::vector<int> sticky;
	for (int i = 0; i < 40; i++) {
		const int fd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
		ASSERT_GE(fd, 0);
		sticky.push_back(fd);
		ASSERT_TRUE(loop.add(fd, EPOLLIN, [&sticky_runs] { sticky_runs++; }));
	}
	EXPECT_EQ(loop.turn(0), 0);
	EXPECT_GE(sticky_runs, 40);
	EXPECT_LE(sticky_runs, 64 * 32);
	for (int fd : fds) {
		loop.remove(fd);
		close(fd);
	}
	for (int fd : sticky) {
		loop.remove(fd);
		close(fd);
	}
}

TEST(ProcessRegistry, AProcessWhosePidfdCannotBeWatchedHasNoExitDetection)
{
	std::vector<int> watched, unwatched;
	const size_t before = open_fds();
	{
		ProcessRegistry refused([&](int fd) { return watched.push_back(fd), false; },
					[&](int fd) { unwatched.push_back(fd); });
		bool made = false;
		auto &p = refused.get(getpid(), getuid(), &made);
		EXPECT_TRUE(made);
		ASSERT_EQ(watched.size(), 1u); // asked once, with a real pidfd
		EXPECT_GE(watched[0], 0);
		EXPECT_LT(p.pidfd, 0); // a stand-in: its exit is not watched
		EXPECT_EQ(open_fds(), before) << "the pidfd nobody watches is closed";
		EXPECT_EQ(&refused.get(getpid(), getuid()), &p);
		refused.erase(p.pidfd);
		EXPECT_TRUE(unwatched.empty());
	}
	watched.clear();
	{
		ProcessRegistry accepted([&](int fd) { return watched.push_back(fd), true; },
					 [&](int fd) { unwatched.push_back(fd); });
		auto &p = accepted.get(getpid(), getuid());
		ASSERT_EQ(watched.size(), 1u);
		EXPECT_EQ(p.pidfd, watched[0]);
		EXPECT_TRUE(accepted.watches(p.pidfd));
		const int fd = p.pidfd;
		accepted.erase(fd);
		EXPECT_EQ(unwatched, std::vector<int>{fd});
	}
	EXPECT_EQ(open_fds(), before);
}

} // namespace
