/*
 * probe_report.cpp - the process's probe report (abi/strata_probe_report.h):
 * which probes are registered, for `strata list` in another process.
 *
 * Contract.  Roles: any thread that registers or unregisters a probe calls
 * probe_report_sync() after it (probe.cpp), outside the runtime's control
 * lock; nothing here runs in a signal handler or on the event path.
 * probe_report_sync takes a snapshot of the probes under the control lock
 * (probe_snapshot, probe.cpp: no symbol lookup there, dladdr takes the
 * loader's lock, which a dlopen'ed library's constructor holds while it
 * waits for the control lock), then resolves the callbacks' names and
 * writes the report under g_report_mu, only if its snapshot is newer than
 * the one written (two threads may finish in either order).  The reader is
 * another process (docs/probes.md, "Who is on a tracepoint"); the seqlock
 * on `seq` is in the ABI header.  The call that makes the report runs the
 * control plane's report hook (strata_rt_set_probe_report_hook) after it
 * released g_report_mu: once per pid, since the report is made once per pid.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "probe_internal.h"
#include "strata_probe_report.h"

namespace strata {
namespace {

pthread_mutex_t g_report_mu = PTHREAD_MUTEX_INITIALIZER;
strata_probe_report *g_report; // under g_report_mu
pid_t g_report_pid;            // the process that made g_report
uint64_t g_written_gen;        // the snapshot generation in it
// The control plane's hook, and the pid that made its report (0: none).
// Not under g_report_mu: setting the hook (every process, at start-up) must
// not install the fork handlers a process without probes never needed (a
// preloaded pthread library would trace them in every fork child).  The
// two seq_cst pairs (hook stored then pid loaded, pid stored then hook
// loaded) make sure that a report made while the hook is set is either
// seen by the setter or reported through the hook, or both.
std::atomic<strata_rt_report_hook> g_hook;
std::atomic<pid_t> g_made_pid;

// The report's memfd, mapped; in a forked child a new one (the inherited
// mapping is its parent's).  nullptr if it cannot be made (then no report:
// `strata list` shows no probe for the process).
strata_probe_report *report_region()
{
	if (g_report && g_report_pid == getpid())
		return g_report;
	int fd = (int)syscall(SYS_memfd_create, STRATA_PROBE_REPORT_NAME, MFD_CLOEXEC);
	if (fd < 0)
		return nullptr;
	void *m = MAP_FAILED;
	if (ftruncate(fd, sizeof(strata_probe_report)) == 0)
		m = mmap(nullptr, sizeof(strata_probe_report), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	// The descriptor stays open: it is how the reader finds the report.
	if (m == MAP_FAILED) {
		close(fd);
		return nullptr;
	}
	g_report = static_cast<strata_probe_report *>(m);
	g_report_pid = getpid();
	g_written_gen = 0;
	g_report->magic = STRATA_PROBE_REPORT_MAGIC;
	g_report->version = STRATA_PROBE_REPORT_VERSION;
	g_report->entry_size = sizeof(strata_probe_report_entry);
	g_report->pid = static_cast<uint32_t>(g_report_pid);
	return g_report;
}

// A fork while another thread writes the report must not leave the
// child's copy of g_report_mu locked.
void lock_report()
{
	const RtInside inside; // not the program's lock (runtime.h)
	pthread_mutex_lock(&g_report_mu);
}
void unlock_report()
{
	const RtInside inside;
	pthread_mutex_unlock(&g_report_mu);
}
pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
void install_atfork()
{
	pthread_atfork(lock_report, unlock_report, unlock_report);
}

void copy_str(char *dst, size_t cap, const char *src)
{
	size_t n = src ? strnlen(src, cap - 1) : 0;
	memcpy(dst, src, n);
	memset(dst + n, 0, cap - n);
}

} // namespace

void probe_report_sync()
{
	ProbeSnapshot snap[STRATA_PROBE_REPORT_MAX];
	uint32_t total = 0;
	uint64_t gen = 0;
	const uint32_t n = probe_snapshot(snap, STRATA_PROBE_REPORT_MAX, &total, &gen);
	if (!gen)
		return; // the control lock was not available (inside a control call)
	strata_probe_report_entry e[STRATA_PROBE_REPORT_MAX];
	for (uint32_t i = 0; i < n; i++) {
		Dl_info info{};
		const bool named = dladdr(reinterpret_cast<void *>(snap[i].fn), &info) != 0 &&
				   info.dli_sname && info.dli_saddr == reinterpret_cast<void *>(snap[i].fn);
		static_assert(sizeof e[i].pattern >= sizeof snap[i].pattern, "a pattern fits the report");
		copy_str(e[i].pattern, sizeof e[i].pattern, snap[i].pattern);
		copy_str(e[i].symbol, sizeof e[i].symbol, named ? info.dli_sname : "");
		e[i].loglevel_max = snap[i].loglevel_max;
		e[i].kind = snap[i].runtime ? STRATA_PROBE_AGGREGATE : STRATA_PROBE_USER;
		e[i].fn = reinterpret_cast<uintptr_t>(snap[i].fn);
		memset(e[i].reserved, 0, sizeof e[i].reserved);
	}
	pthread_once(&g_atfork_once, install_atfork);
	const RtInside inside; // g_report_mu is not the program's lock (runtime.h)
	pthread_mutex_lock(&g_report_mu);
	const bool existed = g_report && g_report_pid == getpid();
	strata_probe_report *r = report_region();
	strata_rt_report_hook hook = nullptr;
	if (!existed && r) {
		g_made_pid.store(getpid(), std::memory_order_seq_cst); // pairs: see g_hook
		hook = g_hook.load(std::memory_order_seq_cst);
	}
	if (r && gen > g_written_gen) {
		g_written_gen = gen;
		const uint32_t seq = __atomic_load_n(&r->seq, __ATOMIC_RELAXED); // only we write it
		__atomic_store_n(&r->seq, seq + 1, __ATOMIC_RELAXED);
		// Release fence: the odd seq is visible before any entry write
		// (pairs with the reader's acquire fence before its second load).
		std::atomic_thread_fence(std::memory_order_release);
		r->n = n;
		r->total = total;
		memcpy(r->entries, e, n * sizeof e[0]);
		// Release: the entries before the even seq (pairs with the
		// reader's acquire load of seq).
		__atomic_store_n(&r->seq, seq + 2, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&g_report_mu);
	if (hook) // the report is readable now: `strata list` finds what it was told of
		hook();
}

} // namespace strata

int strata_rt_set_probe_report_hook(strata_rt_report_hook hook)
{
	using namespace strata;
	g_hook.store(hook, std::memory_order_seq_cst); // pairs: see g_hook
	return g_made_pid.load(std::memory_order_seq_cst) == getpid() ? 1 : 0;
}
