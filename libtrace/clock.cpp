/*
 * clock.cpp - the clock that stamps events, and the runtime's health
 * counters.  The clock is a switch on a process-wide id so that the kernel
 * module's clock page (STRATA_CLOCK_PAGE) can slot in without touching the
 * writer; today only CLOCK_MONOTONIC through the vDSO exists.
 */
#include <time.h>
#include <unistd.h>

#include "rt_internal.h"

namespace strata {

std::atomic<uint64_t> g_rejected_tracepoints{0};
std::atomic<uint64_t> g_descriptor_table_full{0};
static std::atomic<uint64_t> g_invariant_errors{0};
static std::atomic<uint32_t> g_warnings{0};

// Which clock stamps events (enum strata_clock_id).  Chosen once, before
// any slot is open (a session's timestamps must come from one clock).
static std::atomic<uint32_t> g_clock_id{STRATA_CLOCK_MONOTONIC};

uint64_t clock_now()
{
	// Relaxed: the id never changes while slots are open.
	switch (g_clock_id.load(std::memory_order_relaxed)) {
	case STRATA_CLOCK_PAGE: // the kernel module's clock page: a later issue
	case STRATA_CLOCK_MONOTONIC:
	default: {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	}
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

} // namespace strata

extern "C" STRATA_EXPORT uint32_t strata_rt_clock_id(void)
{
	return strata::g_clock_id.load(std::memory_order_relaxed); // see clock_now
}

extern "C" STRATA_EXPORT uint64_t strata_rt_clock_now(void)
{
	return strata::clock_now();
}

extern "C" STRATA_EXPORT void strata_rt_get_stats(struct strata_rt_stats *out)
{
	// Relaxed loads: statistics, no ordering with anything else.
	out->invariant_errors = strata::g_invariant_errors.load(std::memory_order_relaxed);
	out->rejected_tracepoints = strata::g_rejected_tracepoints.load(std::memory_order_relaxed);
	out->descriptor_table_full = strata::g_descriptor_table_full.load(std::memory_order_relaxed);
}
