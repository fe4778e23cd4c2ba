// sync_agg.cpp - aggregation sessions: the regions a grant asks for and
// the helper thread that applies them (sync_shared.h).
#include "control.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstddef>
#include <cstring>
#include <sys/prctl.h>
#include <fcntl.h>
#include <pthread.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "agg.h"
#include "strata_kmod.h"
#include "kmod_link.h"
#include "proto/proc_codec.h"
#include "proto/sock.h"
#include "runtime.h"
#include "sync_shared.h"

namespace strata {
namespace syncq {

// ---- Aggregation sessions (docs/probes.md, "Aggregation sessions") ----
//
// A grant that carries an aggregation (protocol version 6) asks for a region
// (libtrace/runtime/agg.h) counting its events, handed to the daemon with
// AGG_REGION on the query's connection.  Opening and closing one registers
// and unregisters a probe (allocation, a grace period): thread context only.
// So a query in tp-async's handler that finds the aggregations changed
// keeps its connection open (g_ack_fd: the acknowledgement is its close)
// and wakes the helper thread, which takes g_busy, queries again in thread
// context (applying them), and only then closes the handler's connection:
// `--wait` returns once the region counts.  The helper exists in tp-async
// processes that met a daemon speaking version 6 (agg_helper_start).
// Everything below is touched by the holder of g_busy only.
AggSlot g_agg[proto::kMaxSlots];
bool g_thread_ctx; // the query runs in thread context, not in the handler
// A daemon answered in version 6 (aggregations may come): only ever set,
// by a query, and read by agg_helper_start outside g_busy (relaxed: a late
// true only means no helper this time).
std::atomic<bool> g_daemon_agg{false};
int g_ack_fd = -1; // a handler query's connection, closed by the helper
// The helper's eventfd's identity, set before g_agg_wake publishes it
// (release store there, acquire load in agg_settle).
ino_t g_agg_wake_ino = 0;
dev_t g_agg_wake_dev = 0;
bool g_agg_warned;
// The helper's eventfd, -1: no helper.  Set once in thread context outside
// g_busy (agg_helper_start) while a handler's query may read it: the
// release store pairs with the handler's acquire load (an fd seen is open).
std::atomic<int> g_agg_wake{-1};

// The session id whose aggregation the grants want at `slot`, 0: none.
uint64_t agg_wanted(unsigned slot, const proto::pc::Grant **grant)
{
	const State &s = g_state;
	for (uint32_t i = 0; i < s.grants.n; i++)
		if (s.grants.g[i].slot == slot && s.grants.g[i].aggregate[0]) {
			*grant = &s.grants.g[i];
			return s.grants.g[i].session_id;
		}
	*grant = nullptr;
	return 0;
}

// Is slot i's aggregation what the grants want?  (A fork child's inherited
// ones have session id 0 and are closed: agg.cpp renewed their regions,
// which no daemon knows.)
bool agg_settled(unsigned i, const proto::pc::Grant **g)
{
	const uint64_t want = agg_wanted(i, g);
	return g_agg[i].session_id == want && (want || !g_agg[i].agg);
}

bool agg_pending()
{
	const proto::pc::Grant *g;
	for (unsigned i = 0; i < proto::kMaxSlots; i++)
		if (!agg_settled(i, &g))
			return true;
	return false;
}

// Open `g`'s aggregation and hand its region to the daemon on `fd`.
void agg_open(int fd, const proto::pc::Grant &g, int64_t dl)
{
	struct strata_agg_spec spec;
	char why[128];
	if (strata_rt_agg_parse(g.aggregate, &spec, why, sizeof why) != 0) {
		say_as("aggregation refused: ", g.aggregate, ": ", why);
		return;
	}
	memcpy(spec.filter, g.agg_filter, sizeof spec.filter);
	strata_rt_agg *ag = nullptr;
	int r = strata_rt_agg_open(&spec, &ag);
	if (r != 0) {
		say_as("aggregation not opened: ", g.aggregate, ": ", err_text(r));
		return;
	}
	State &s = g_state;
	Writer w(s.out, sizeof(s.out));
	proto::pc::encode_agg_region(w, ++s.seq, g.slot, g.session_id);
	r = w.ok ? proto::send_all(fd, s.out, w.len, strata_rt_agg_fd(ag), dl) : -EMSGSIZE;
	if (r < 0) // the region counts; nobody reads it until the next query
		say_as("cannot hand an aggregation to the consumer daemon: ", err_text(r));
	g_agg[g.slot] = AggSlot{g.session_id, ag};
}

// Thread context: open and close aggregations until they are what the
// grants want.
void agg_apply(int fd, int64_t dl)
{
	for (unsigned i = 0; i < proto::kMaxSlots; i++) {
		const proto::pc::Grant *g;
		if (agg_settled(i, &g))
			continue;
		if (g_agg[i].agg)
			strata_rt_agg_close(g_agg[i].agg);
		g_agg[i] = AggSlot{0, nullptr};
		if (g)
			agg_open(fd, *g, dl);
	}
}

// At the end of a round-trip query: apply the aggregations, or leave them
// to the helper.  Returns the connection to close (-1: kept for the helper).
int agg_settle(int fd, int64_t dl)
{
	if (!agg_pending())
		return fd;
	if (g_thread_ctx) {
		agg_apply(fd, dl);
		return fd;
	}
	const int wake = g_agg_wake.load(std::memory_order_acquire);
	// Still our eventfd?  A program that closed every descriptor (a daemon
	// detaching) may have the number back for a file of its own, which
	// must never receive our 8 bytes (fstat: async-signal-safe).
	struct stat wst;
	if (wake >= 0 &&
	    (fstat(wake, &wst) != 0 || wst.st_ino != g_agg_wake_ino || wst.st_dev != g_agg_wake_dev)) {
		g_agg_wake.store(-1, std::memory_order_relaxed); // the helper is gone for us
	} else if (wake >= 0) {
		g_ack_fd = fd;
		const uint64_t one = 1;
		if (write(wake, &one, sizeof one) == sizeof one)
			return -1;
		g_ack_fd = -1;
	}
	if (!g_agg_warned) {
		g_agg_warned = true;
		say_as("an aggregation session started after this process cannot reach it (no helper "
		       "thread: ",
		       "tp-async and a daemon at its start are needed)");
	}
	return fd;
}

int run_queries(bool list_events, bool thread_ctx);

// The helper: blocked on its eventfd with every signal blocked (the
// handler never runs on it, so waiting for g_busy cannot wait for itself).
// It says it runs (`started`, the starter's word) before its first read:
// from then on it holds no lock, of libc or of a sanitizer's runtime, that
// a fork could leave locked in the child.  A raw futex, not a semaphore:
// the pthread preload would record ours among the program's.
void *agg_helper(void *started)
{
	auto *word = static_cast<uint32_t *>(started);
	// Release: pairs with the starter's acquire load.  Not touched after.
	__atomic_store_n(word, 1u, __ATOMIC_RELEASE);
	syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
	for (;;) {
		uint64_t n; // the descriptor was set before this thread was made
		if (read(g_agg_wake.load(std::memory_order_relaxed), &n, sizeof n) != sizeof n) {
			if (errno == EINTR)
				continue;
			return nullptr;
		}
		const struct timespec ms = {0, 1000000};
		while (run_queries(false, true) == -EBUSY)
			nanosleep(&ms, nullptr); // a handler's query: short
	}
}

// Thread context, once: the helper, when a daemon speaking version 6 was met
// (the thread is the cost of sessions that aggregate reaching a running
// process; a program that never meets such a daemon gets none).
void agg_helper_start()
{
	// g_daemon_agg: written by this thread's query (held g_busy), or by a
	// handler's on another thread after it, which only makes it true.
	if (!g_daemon_agg.load(std::memory_order_relaxed) ||
	    g_agg_wake.load(std::memory_order_relaxed) >= 0 || !g_state.signo)
		return;
	const int efd = eventfd(0, EFD_CLOEXEC);
	if (efd < 0)
		return;
	struct stat est;
	if (fstat(efd, &est) != 0) {
		close(efd);
		return;
	}
	g_agg_wake_ino = est.st_ino; // before any handler can see efd (published below)
	g_agg_wake_dev = est.st_dev;
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	uint32_t started = 0;
	g_agg_wake.store(efd, std::memory_order_relaxed); // the thread reads it (ordered by its creation)
	if (pthread_create(&t, &attr, agg_helper, &started) != 0) {
		g_agg_wake.store(-1, std::memory_order_relaxed);
		close(efd);
	} else {
		pthread_setname_np(t, "strata-agg");
		// Until the thread runs its own code: a program that forks right
		// after start (the constructor made the thread) must not fork
		// while the thread's start-up holds a runtime lock (the likely
		// cause, unconfirmed, of a child hung under ASan in a CI run).
		// Acquire: pairs with the helper's release store.
		while (__atomic_load_n(&started, __ATOMIC_ACQUIRE) == 0)
			syscall(SYS_futex, &started, FUTEX_WAIT_PRIVATE, 0, nullptr, nullptr, 0);
		// Published to handlers only now that a thread reads it.
		g_agg_wake.store(efd, std::memory_order_release);
	}
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

} // namespace syncq
} // namespace strata
