/*
 * clock_page.h - strata-consumerd's clock page: the TSC mapped to
 * CLOCK_MONOTONIC ns, calibrated in user space, published in a sealed memfd
 * with the layout of the kernel module's page (struct strata_kclock,
 * abi/strata_kabi.h; flags VALID | USER), so that traced processes
 * read it with the module page's reader (abi/strata_kclock.h) and
 * stamp events without a system call when the module is not loaded.
 *
 * Contract:
 *   - one writer: the daemon's main thread (create, then refresh() on its
 *     timer).  Readers: any thread of any process that received the fd
 *     (REGISTER_REPLY), also in signal handlers, and the daemon's drain
 *     threads (now()).  Readers never block the writer and the writer never
 *     waits for readers (seqcount: seq odd while the page is written).
 *   - published only when the TSC is usable: constant_tsc and nonstop_tsc
 *     in /proc/cpuinfo and the kernel's current clock source is "tsc"
 *     (so the kernel itself trusts the TSCs to be synchronised).
 *   - the mapping never steps back.  Each refresh switches at a TSC value
 *     T read after the page turned odd; the new mapping starts at the old
 *     one's value at T plus 1 ns, includes its sub-ns fraction, and its rate
 *     is the measured rate slewed by at most kMaxSlewPpm to absorb the error
 *     against clock_gettime within one period.  Why no reader sees time go
 *     back: docs/design.md, "The consumer's clock page".
 */
#ifndef STRATA_CONSUMERD_CLOCK_PAGE_H
#define STRATA_CONSUMERD_CLOCK_PAGE_H

#include <cstdint>
#include <memory>
#include <string>

struct strata_kclock;

namespace strata {

// ---- the calibration and refresh arithmetic (pure, unit-tested) -------------

// One TSC -> ns mapping, in the page's terms: for tsc >= cycle_last,
// ns = base_ns + ((tsc - cycle_last) * mult + xtime_nsec) >> shift; before
// cycle_last, base_ns + (xtime_nsec >> shift) (strata_kclock_convert).
struct TscMapping {
	uint64_t cycle_last = 0;
	uint64_t xtime_nsec = 0; // < 1 << shift: the sub-ns fraction at cycle_last
	uint64_t base_ns = 0;
	uint32_t mult = 0;
	uint32_t shift = 0;
};

// A (tsc, CLOCK_MONOTONIC ns) pair: the tightest of several
// (rdtsc, clock_gettime, rdtsc) triples, tsc the midpoint of the two reads.
struct TscSample {
	uint64_t tsc = 0;
	uint64_t ns = 0;
	uint64_t width = 0; // cycles between the two rdtsc: the sample's uncertainty
};

constexpr uint32_t kMaxSlewPpm = 500;
// Behind the truth by more than this: step forward rather than slew (a
// forward step cannot break ordering; a backward one would).
constexpr int64_t kStepForwardNs = 1000000;

uint64_t tsc_map_eval(const TscMapping &m, uint64_t tsc);
// The rate between two samples as mult/shift (shift: the largest <= 32
// leaving mult room for the slew).  False if the samples cannot give one.
bool tsc_rate(const TscSample &a, const TscSample &b, uint32_t *mult, uint32_t *shift);
// The first mapping: through sample s at the given rate.
TscMapping tsc_map_first(const TscSample &s, uint32_t mult, uint32_t shift);
// The mapping that takes over at TSC value t: starts at old's value at t plus
// 1 ns (sub-ns fraction kept); rate `mult` (same shift as old) minus the
// slew that absorbs (old(t) + 1 - truth_ns) over period_cycles, bounded by
// kMaxSlewPpm; a mapping behind the truth by more than kStepForwardNs
// steps forward to it instead (*stepped).
TscMapping tsc_map_next(const TscMapping &old, uint64_t t, uint64_t truth_ns, uint32_t mult,
			uint64_t period_cycles, bool *stepped = nullptr);
// Its parts: the mapping that continues old at t (+1 ns) with rate mult,
// and the rate that absorbs err ns (> 0: ahead) over period_cycles.
TscMapping tsc_map_switch(const TscMapping &old, uint64_t t, uint32_t mult);
uint32_t tsc_slew(uint32_t mult, uint32_t shift, int64_t err, uint64_t period_cycles);

// ---- the page -------------------------------------------------------------------

// Why the TSC cannot back a page (empty: usable).  Reads /proc/cpuinfo and
// /sys/devices/system/clocksource/clocksource0/current_clocksource (tsc, or
// kvm-clock over the TSC), and checks that every CPU's TSC is one clock
// (tsc_cpus_disagree, a few ms).
std::string tsc_unusable_reason();
std::string tsc_cpus_disagree();

class ClockPage {
public:
	// nullptr (with *why) when the TSC is unusable or the memfd fails.
	// Calibrates for ~2 ms (first rate), then refresh() improves it.
	static std::unique_ptr<ClockPage> create(std::string *why);
	~ClockPage();
	ClockPage(const ClockPage &) = delete;
	ClockPage &operator=(const ClockPage &) = delete;

	// A read-only descriptor of the page (the daemon keeps it; pass it with
	// SCM_RIGHTS).  Its mapping cannot be made writable and the file cannot
	// shrink or grow (seals).
	int fd() const { return ro_fd_; }
	// Measure again and publish the next mapping (main thread only).
	// `last`: no slew (the daemon exits; processes keep the page).
	void refresh(bool last = false);
	uint64_t refreshes() const { return refreshes_; }
	// Nanoseconds to the next refresh: STRATA_CLOCK_REFRESH_MS (1..60000),
	// default 1000; the first comes after 100 ms.
	uint64_t period_ns() const { return period_ns_; }

private:
	ClockPage() = default;
	void publish_first(const TscMapping &m);

	struct strata_kclock *page_ = nullptr; // our writable mapping
	int ro_fd_ = -1;
	uint64_t period_ns_ = 1000000000;
	uint64_t refreshes_ = 0;
	TscMapping cur_;
	TscSample anchors_[16]; // a ring of past samples: the rate's baseline
	unsigned n_anchors_ = 0;
};

// CLOCK_MONOTONIC ns read through the daemon's page when there is one (the
// producers' clock for buffers stamped with STRATA_CLOCK_CONSUMER_PAGE),
// else clock_gettime.  Any thread.  Reader::set_clock takes it.
uint64_t consumer_page_now();
// The daemon's page's mapping now, as a line: at TSC value *tsc0 the page
// reads *ns0, and it advances *ns_per_cycle ns a cycle.  False without a
// page.  Any thread.  (The clock link sends it to the host, which checks
// KVM's facts with it: sync_kvm.h.)
bool consumer_page_line(uint64_t *tsc0, int64_t *ns0, double *ns_per_cycle);

} // namespace strata
#endif
