/*
 * kmod_link.cpp - see kmod_link.h for the contract.
 */
#include "kmod_link.h"

#include <atomic>
#include <cerrno>
#include <initializer_list>
#include <sys/stat.h>
#include <unistd.h>

#include "strata_kmod.h"

namespace strata {
namespace {

// The registered fd, -1 when none.  Written in thread context before the
// signal handler can run a query that reads it (release; the handler's
// acquire loads pair with it); the signal number and kabi version likewise.
std::atomic<int> g_fd{-1};
std::atomic<int> g_signo{0};
std::atomic<int> g_kabi{0};
// The device file behind g_fd, to notice a program that closed it (a
// daemon-style "close every descriptor"): written before the release store
// of g_fd, read after its acquire load.
dev_t g_rdev;
ino_t g_ino;

void say(const char *what, int err)
{
	char buf[160];
	size_t n = 0;
	for (const char *s : {"strata: /dev/strata: ", what, err == -EBUSY ? " (busy)" : "", "\n"})
		for (; *s && n < sizeof(buf); s++)
			buf[n++] = *s;
	ssize_t w = write(2, buf, n);
	(void)w;
}

} // namespace

void kmod_link_register(int signo)
{
	if (signo < 0)
		return;
	int fd = g_fd.load(std::memory_order_acquire);
	if (fd >= 0) { // tp-sync's constructor registered first: set the signal
		int r = strata_kmod_register_v(fd, signo, nullptr);
		if (r >= 0)
			g_signo.store(signo, std::memory_order_relaxed);
		return;
	}
	fd = strata_kmod_open();
	if (fd < 0)
		return; // no module: the daemon answers alone
	int r = strata_kmod_register_v(fd, signo, nullptr);
	if (r < 0) {
		say("REGISTER failed; the daemon answers this process's state queries", r);
		close(fd);
		return;
	}
	struct stat st;
	if (fstat(fd, &st) != 0) {
		close(fd);
		return;
	}
	g_rdev = st.st_rdev;
	g_ino = st.st_ino;
	g_signo.store(signo, std::memory_order_relaxed);
	g_kabi.store(r, std::memory_order_relaxed);
	// Release: the registration is complete before a query uses the fd.
	g_fd.store(fd, std::memory_order_release);
}

void kmod_link_fork_child()
{
	int fd = g_fd.exchange(-1, std::memory_order_acq_rel);
	if (fd < 0)
		return;
	close(fd); // the parent's registration stays the parent's
	kmod_link_register(g_signo.load(std::memory_order_relaxed));
}

bool kmod_link_grants()
{
	// Acquire: pairs with the release store in kmod_link_register (g_kabi,
	// g_rdev, g_ino were stored before it).
	int fd = g_fd.load(std::memory_order_acquire);
	if (fd < 0 || g_kabi.load(std::memory_order_relaxed) < 2)
		return false;
	// The program closed our descriptor (the number may be another file's
	// now: never touch it again): the registration is gone with it, the
	// module no longer signals us, and the daemon, seeing no /dev/strata
	// among our descriptors, signals us itself.  The daemon's query from now on.
	struct stat st;
	if (fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode) || st.st_rdev != g_rdev || st.st_ino != g_ino) {
		// Relaxed: only the holder of the query token (g_busy of
		// sync_query.cpp, acquire/release) reads g_fd after registration.
		g_fd.store(-1, std::memory_order_relaxed);
		return false;
	}
	return true;
}

int kmod_link_query(void *buf, uint32_t *size, uint64_t *gen, uint32_t *n_entries)
{
	int fd = g_fd.load(std::memory_order_acquire); // pairs with kmod_link_register
	if (fd < 0)
		return -ENODEV;
	return strata_kmod_query_grants(fd, buf, size, gen, n_entries);
}

bool kmod_link_generation(uint64_t *gen)
{
	// Acquire: pairs with the release store in kmod_link_register.
	int fd = g_fd.load(std::memory_order_acquire);
	if (fd < 0)
		return false;
	// Only the generation is wanted: an empty buffer gets -EMSGSIZE (or 0
	// when no slot targets us), and the generation either way.
	uint32_t size = 0;
	int r = strata_kmod_query(fd, nullptr, &size, gen, nullptr);
	return r == 0 || r == -EMSGSIZE;
}

void kmod_link_ack(uint64_t gen)
{
	int fd = g_fd.load(std::memory_order_acquire); // pairs with kmod_link_register
	if (fd >= 0)
		strata_kmod_ack(fd, gen);
}

} // namespace strata
