// Buffers in the module's crash descriptor: see crash_reg.h.
#include "crash_reg.h"

#include <cerrno>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "strata_crash.h"
#include "strata_kabi.h"

namespace strata {
namespace {

// Both under the control lock (crash_reg.h): no atomics needed.
int g_crash_fd = -1;
pid_t g_crash_pid = 0;    // the process that opened g_crash_fd
bool g_crash_off = false; // the module said no for good (absent, too old, turned off)

int crash_fd()
{
	const pid_t me = getpid();
	if (g_crash_pid != me) { // first call, or a forked child: its own file
		g_crash_pid = me;
		g_crash_fd = open(STRATA_KABI_DEVICE, O_RDWR | O_CLOEXEC);
		g_crash_off = g_crash_fd < 0;
	}
	return g_crash_off ? -1 : g_crash_fd;
}

// Both may run inside a signal handler (a buffer made at the first event,
// which a handler can fire): the caller's errno is kept, whatever the
// open or the ioctl say (TSan: "signal handler spoils errno").
struct KeepErrno {
	int saved = errno;
	~KeepErrno() { errno = saved; }
};

} // namespace

bool crash_register(unsigned slot, void *base, uint64_t size)
{
	KeepErrno keep;
	const int fd = crash_fd();
	if (fd < 0)
		return false;
	strata_crash_reg r = {};
	r.size = sizeof r;
	r.slot = slot;
	r.addr = (uint64_t)(uintptr_t)base;
	r.len = size;
	if (ioctl(fd, STRATA_IOC_CRASH_REG, &r) == 0)
		return true;
	// An older module (ENOTTY) or one told not to (EOPNOTSUPP) never will:
	// stop asking.  Other refusals (full, too large) are per buffer.
	if (errno == ENOTTY || errno == EOPNOTSUPP) {
		close(fd);
		g_crash_fd = -1;
		g_crash_off = true;
	}
	return false;
}

void crash_unregister(void *base)
{
	if (g_crash_pid != getpid() || g_crash_off || g_crash_fd < 0)
		return; // a forked child's inherited buffers are its parent's
	KeepErrno keep;
	strata_crash_reg r = {};
	r.size = sizeof r;
	r.addr = (uint64_t)(uintptr_t)base;
	ioctl(g_crash_fd, STRATA_IOC_CRASH_UNREG, &r); // ENOENT: was never registered
}

} // namespace strata
