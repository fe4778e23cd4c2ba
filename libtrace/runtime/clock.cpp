/*
 * clock.cpp - the clock that stamps events, and the runtime's health
 * counters.  The clock is a switch on a process-wide id:
 *   STRATA_CLOCK_PAGE       the kernel module's clock page (TSC converted
 *                           with the kernel's own CLOCK_MONOTONIC parameters,
 *                           abi/strata_kclock.h): no system call;
 *   STRATA_CLOCK_CONSUMER_PAGE  strata-consumerd's page (same layout and
 *                           reader; TSC calibrated in user space against
 *                           CLOCK_MONOTONIC, consumerd/clock_page.h);
 *   STRATA_CLOCK_MONOTONIC  clock_gettime(CLOCK_MONOTONIC) through the vDSO.
 * All give CLOCK_MONOTONIC ns, so the CTF metadata is the same for all.
 *
 * Contract of the choice: made once, on the first strata_rt_clock_id()
 * call (slot open writes it into the buffer header, so it is decided before
 * any event of the process is stamped) and never changed afterwards: every
 * buffer of a process has one clock (an early buffer opened with no daemon
 * keeps the clock it started with, and so do later sessions).  It may run
 * in a signal handler (tp-async opens slots there): open + mmap + close
 * only.  Precedence: the module's page, else a consumer page offered
 * (strata_rt_clock_offer, from REGISTER_REPLY) before the choice, else
 * clock_gettime.  STRATA_CLOCK=monotonic forces clock_gettime,
 * STRATA_CLOCK=consumer-page the consumer's page, STRATA_CLOCK=page asks
 * for a page (all warn when there is none).  If the module's page later
 * turns invalid (the kernel switched clock source) a read falls back to
 * clock_gettime, which is the same clock.  The consumer's page differs from
 * clock_gettime by its calibration error (bounded, docs/design.md): a read
 * that finds it busy waits for the daemon to finish (it may have been
 * preempted mid-update); one that finds it invalid, or busy for 50 ms (the
 * daemon died while writing), falls back to clock_gettime and counts an
 * invariant error, because that fallback may step back by up to that error;
 * after one such wait, reads no longer wait (a dead writer costs 50 ms once).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "rt_internal.h"
#include "strata_kclock.h"

namespace strata {

std::atomic<uint64_t> g_rejected_tracepoints{0};
std::atomic<uint64_t> g_descriptor_table_full{0};
static std::atomic<uint64_t> g_invariant_errors{0};
static std::atomic<uint32_t> g_warnings{0};

// Which clock stamps events (enum strata_clock_id).  Chosen once, before
// any slot is open (a session's timestamps must come from one clock).
constexpr uint32_t kClockUndecided = 0xffffffffu;
static std::atomic<uint32_t> g_clock_id{kClockUndecided};
// The mapped clock page, set (at most once) before g_clock_id becomes
// STRATA_CLOCK_PAGE; never unmapped once published.
static std::atomic<const strata_kclock *> g_kclock{nullptr};
// Consumer pages: the latest one offered while the clock was undecided
// (replaced by a later offer from another daemon; the old mapping stays:
// a concurrent choice may be reading it), and the one chosen, set at most
// once (CAS from null) before g_clock_id becomes STRATA_CLOCK_CONSUMER_PAGE.
static std::atomic<const strata_kclock *> g_upage_offered{nullptr};
static std::atomic<const strata_kclock *> g_upage{nullptr};
// The chosen page (g_kclock or g_upage), for clock_now()'s inline first
// try (rt_internal.h); stored by the thread whose choice won, after it.
// Tagged kClockRdtscp where RDTSCP may be used (rt_internal.h).
// Null (not yet stored, or clock_gettime chosen): every read takes
// clock_now_slow(), which switches on g_clock_id, so both are correct.
std::atomic<const strata_kclock *> g_clock_page{nullptr};
// The file of the offered page (an unchanged daemon offers the same one at
// every query): offers are serialised by the caller (the state query).
static dev_t g_upage_dev;
static ino_t g_upage_ino;

// How long a read waits for strata-consumerd to finish writing its page
// (preempted in the middle: the next time slice) before it falls back.
constexpr uint64_t kUserPageMaxWaitNs = 50000000;
static std::atomic<bool> g_upage_stuck{false};

static bool env_is(const char *value)
{
	const char *e = getenv("STRATA_CLOCK"); // read-only walk of environ
	return e && strcmp(e, value) == 0;
}

// The consumer page offered, if it is valid; fixed (g_upage) by the
// first call that uses it.
static uint32_t choose_consumer_page()
{
	// Acquire: pairs with the release store in strata_rt_clock_offer.
	const strata_kclock *u = g_upage_offered.load(std::memory_order_acquire);
	uint64_t ns;
	if (!u || strata_kclock_now(u, &ns) != 0)
		return STRATA_CLOCK_MONOTONIC;
	const strata_kclock *expected = nullptr;
	// Release: pairs with the acquire loads in clock_now()'s chain, as for
	// g_kclock; a failed CAS means another thread fixed a page first.
	g_upage.compare_exchange_strong(expected, u, std::memory_order_release, std::memory_order_acquire);
	return STRATA_CLOCK_CONSUMER_PAGE;
}

// Map the page if /dev/strata has a valid one.  AS-safe (open, mmap, close).
static uint32_t choose_clock()
{
	if (env_is("monotonic"))
		return STRATA_CLOCK_MONOTONIC;
	if (env_is("consumer-page")) {
		uint32_t id = choose_consumer_page();
		if (id == STRATA_CLOCK_MONOTONIC)
			warn("STRATA_CLOCK=consumer-page but the consumer offered no valid clock page; using "
			     "CLOCK_MONOTONIC");
		return id;
	}
	// Acquire: pairs with the release CAS below (another thread's choice).
	if (g_kclock.load(std::memory_order_acquire))
		return STRATA_CLOCK_PAGE;
	int fd = open(STRATA_KABI_DEVICE, O_RDONLY | O_CLOEXEC);
	const strata_kclock *k = fd >= 0 ? strata_kclock_map(fd) : nullptr;
	if (fd >= 0)
		close(fd); // the mapping outlives the fd
	uint64_t ns;
	if (k && strata_kclock_now(k, &ns) != 0) { // not the TSC clock source
		munmap(const_cast<strata_kclock *>(k), 4096);
		k = nullptr;
	}
	if (!k) {
		if (choose_consumer_page() == STRATA_CLOCK_CONSUMER_PAGE)
			return STRATA_CLOCK_CONSUMER_PAGE;
		if (env_is("page"))
			warn("STRATA_CLOCK=page but there is no valid clock page; using CLOCK_MONOTONIC");
		return STRATA_CLOCK_MONOTONIC;
	}
	const strata_kclock *expected = nullptr;
	// Release: the page's mapping is complete before a reader sees the
	// pointer; pairs with the acquire loads above and in clock_now()'s
	// chain (g_clock_id acquire in strata_rt_clock_id, then g_slots).
	if (!g_kclock.compare_exchange_strong(expected, k, std::memory_order_release,
					      std::memory_order_acquire))
		munmap(const_cast<strata_kclock *>(k), 4096); // another thread won
	return STRATA_CLOCK_PAGE;
}

static uint64_t monotonic_now()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t clock_now_slow()
{
	uint64_t ns;
	// Relaxed: the id never changes once a slot is open, and slot open
	// decided it before publishing the slot (writers acquire g_slots).
	switch (g_clock_id.load(std::memory_order_relaxed)) {
	case STRATA_CLOCK_PAGE:
		// Relaxed: stored before the id (see choose_clock).
		if (strata_kclock_now(g_kclock.load(std::memory_order_relaxed), &ns) == 0)
			return ns;
		return monotonic_now(); // page no longer valid: the vDSO has the same clock
	case STRATA_CLOCK_CONSUMER_PAGE:
		// Relaxed: stored before the id (see choose_consumer_page); g_upage_stuck
		// is a hint only (once the page stayed busy that long, never wait again).
		if (__builtin_expect(strata_kclock_now_patient(g_upage.load(std::memory_order_relaxed), &ns,
							       g_upage_stuck.load(std::memory_order_relaxed)
								       ? 0
								       : kUserPageMaxWaitNs) == 0,
				     1))
			return ns;
		g_upage_stuck.store(true, std::memory_order_relaxed);
		count_invariant_error("the consumer's clock page is invalid or stuck; using CLOCK_MONOTONIC");
		return monotonic_now();
	case STRATA_CLOCK_MONOTONIC:
	default:
		return monotonic_now();
	}
}

// AS-safe: no stdio, one write(2) per message, at most 16 messages per
// process so that a hot broken invariant cannot flood the host's stderr.
void warn(const char *msg)
{
	// Relaxed: a counter only; no data is published through it.
	if (g_warnings.fetch_add(1, std::memory_order_relaxed) >= 16)
		return;
	char line[256];
	size_t n = 0;
	for (const char *p = "strata: "; *p && n < sizeof line - 1; p++)
		line[n++] = *p;
	for (const char *p = msg; *p && n < sizeof line - 1; p++)
		line[n++] = *p;
	line[n++] = '\n';
	ssize_t rc = write(2, line, n);
	(void)rc;
}

void count_invariant_error(const char *msg)
{
	// Relaxed: a statistic read by strata_rt_get_stats only.
	g_invariant_errors.fetch_add(1, std::memory_order_relaxed);
	warn(msg);
}

// The page a choice fixed (the kernel module's or the consumer's), or null.
static const strata_kclock *chosen_page(uint32_t id)
{
	// Relaxed: stored before the id, which the caller acquired (or chose).
	if (id == STRATA_CLOCK_PAGE)
		return g_kclock.load(std::memory_order_relaxed);
	if (id == STRATA_CLOCK_CONSUMER_PAGE)
		return g_upage.load(std::memory_order_relaxed);
	return nullptr;
}

} // namespace strata

extern "C" STRATA_EXPORT uint32_t strata_rt_clock_id(void)
{
	using namespace strata;
	// Acquire: pairs with the release CAS below, so g_kclock is visible.
	uint32_t id = g_clock_id.load(std::memory_order_acquire);
	if (id != kClockUndecided)
		return id;
	uint32_t chosen = choose_clock();
	// Release: publishes g_kclock with the id; on failure another thread
	// decided first and its choice stands (acquire: pairs with its CAS).
	if (!g_clock_id.compare_exchange_strong(id, chosen, std::memory_order_acq_rel,
						std::memory_order_acquire))
		return id;
	// Release: the page's mapping before the pointer; pairs with the
	// acquire load in clock_page_ref().  Tagged kClockRdtscp unless the CPU
	// lacks RDTSCP, by our CPUID or the page's writer's (valgrind's
	// CPUID claims it where it faults; STRATA_TEST_NO_RDTSCP=1, tests: as
	// on one).
	const char *no = getenv("STRATA_TEST_NO_RDTSCP");
	if (const strata_kclock *k = chosen_page(chosen)) {
		const bool rdtscp = strata_kclock_use_rdtscp(k) && !(no && strcmp(no, "1") == 0);
		g_clock_page.store(reinterpret_cast<const strata_kclock *>(reinterpret_cast<uintptr_t>(k) |
									   (rdtscp ? kClockRdtscp : 0)),
				   std::memory_order_release);
	}
	return chosen;
}

extern "C" STRATA_EXPORT int strata_rt_clock_offer(int fd)
{
	using namespace strata;
	// Acquire: pairs with the CAS in strata_rt_clock_id.
	if (g_clock_id.load(std::memory_order_acquire) != kClockUndecided)
		return -EALREADY; // the choice is made for the process's lifetime
	// The page is hostile: a regular file (memfd) of at least one page that
	// cannot shrink (a truncated mapping would SIGBUS us), mapped
	// read-only, with the consumer page's magic, version and flags.
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size < 4096)
		return -EINVAL;
	if (g_upage_offered.load(std::memory_order_relaxed) && st.st_dev == g_upage_dev &&
	    st.st_ino == g_upage_ino)
		return 0; // the same daemon's page, already mapped
	const int seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPERM;
	const strata_kclock *k = strata_kclock_map(fd);
	if (!k)
		return -EINVAL;
	const uint32_t want = STRATA_KCLOCK_VALID | STRATA_KCLOCK_USER;
	uint64_t ns;
	if ((__atomic_load_n(&k->flags, __ATOMIC_RELAXED) & want) != want || strata_kclock_now(k, &ns) != 0) {
		munmap(const_cast<strata_kclock *>(k), 4096);
		return -EINVAL;
	}
	g_upage_dev = st.st_dev;
	g_upage_ino = st.st_ino;
	// Release: the mapping is complete before a choice reads the pointer
	// (pairs with the acquire load in choose_consumer_page).
	g_upage_offered.store(k, std::memory_order_release);
	return 0;
}

extern "C" STRATA_EXPORT uint64_t strata_rt_clock_now(void)
{
	using namespace strata;
	uint64_t ns;
	// A page chosen: the clock is decided (its pointer is stored after the
	// choice), read it as the event path does, without the call to
	// strata_rt_clock_id (through the PLT: it is exported).  Acquire: as
	// clock_now()'s.
	const ClockPageRef p = clock_page_ref();
	if (__builtin_expect(p.k != nullptr, 1) &&
	    __builtin_expect(strata_kclock_try_how(p.k, &ns, p.rdtscp) == 0, 1))
		return ns;
	strata_rt_clock_id(); // decide the clock first if nobody has yet
	return clock_now();
}

extern "C" STRATA_EXPORT const strata_kclock *strata_rt_clock_page(void)
{
	// Untagged (g_clock_page carries kClockRdtscp); strata_rt_clock_id
	// acquires the id, after which the page's pointer and mapping are
	// visible (chosen_page).
	return strata::chosen_page(strata_rt_clock_id());
}

extern "C" STRATA_EXPORT void strata_rt_get_stats(struct strata_rt_stats *out)
{
	// Relaxed loads: statistics, no ordering with anything else.
	out->invariant_errors = strata::g_invariant_errors.load(std::memory_order_relaxed);
	out->rejected_tracepoints = strata::g_rejected_tracepoints.load(std::memory_order_relaxed);
	out->descriptor_table_full = strata::g_descriptor_table_full.load(std::memory_order_relaxed);
}
