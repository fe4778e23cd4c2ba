/*
 * clock_page.cpp - see clock_page.h for the contract.
 *
 * The page's seqcount, writer side (pairs with strata_kclock_now()):
 *   seq := odd (relaxed store), then a seq_cst fence: the odd value is
 *     ordered before every field store below (a reader that sees any new
 *     field sees the odd seq, or a later one, at its re-check), and
 *     globally visible before the rdtsc that picks the switch point;
 *   fields (relaxed atomic stores);
 *   seq := even (release store): a reader whose first (acquire) load sees
 *     it sees every field stored before it.
 */
#include "clock_page.h"

#include <atomic>
#include <mutex>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <fstream>
#include <sched.h>
#include <string>
#include <thread>
#include <vector>
#include <sstream>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "strata_kclock.h"

namespace strata {

namespace {

constexpr size_t kPageSize = 4096;

// The daemon's page for consumer_page_now(): set once (release) after the
// first mapping is published; pairs with the acquire load there.
std::atomic<const strata_kclock *> g_page{nullptr};

uint64_t real_mono_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// Tests only: STRATA_TEST_CLOCK_SKEW="OFFSET_NS[,PPM]" makes this daemon's
// clock (its page, and so its processes' stamps, and its clock links) run
// OFFSET_NS ahead and PPM faster than CLOCK_MONOTONIC from its first read:
// a second machine's clock on this one (docs/clocks.md, tests/e2e
// check_clock_link.py).  Read once, before any other thread.
struct Skew {
	int64_t offset = 0;
	double ppm = 0;
	uint64_t t0 = 0;
	bool on = false;
};
const Skew &skew()
{
	static const Skew s = [] {
		Skew k;
		const char *e = getenv("STRATA_TEST_CLOCK_SKEW");
		if (!e || !*e)
			return k;
		char *end;
		k.offset = strtoll(e, &end, 10);
		if (*end == ',')
			k.ppm = strtod(end + 1, &end);
		if (*end || k.ppm < -400 || k.ppm > 400) {
			fprintf(stderr,
				"strata-consumerd: STRATA_TEST_CLOCK_SKEW '%s' ignored (OFFSET_NS[,PPM], "
				"|PPM| <= 400)\n",
				e);
			return Skew();
		}
		k.t0 = real_mono_ns();
		k.on = true;
		return k;
	}();
	return s;
}

// Tests only: STRATA_TEST_CLOCK_STEP="STEP_NS:PATH" makes this daemon's
// clock jump STEP_NS (> 0) ahead once PATH exists: a step in the middle of
// a run (a TSC written in a guest; its page steps forward at its next
// refresh), for check_clock_link.py's `step`.  Read once, like the skew.
struct Step {
	int64_t ns = 0;
	std::string path;
	bool on = false;
};
const Step &step()
{
	static const Step s = [] {
		Step k;
		const char *e = getenv("STRATA_TEST_CLOCK_STEP");
		if (!e || !*e)
			return k;
		char *end;
		k.ns = strtoll(e, &end, 10);
		if (*end != ':' || !end[1] || k.ns <= 0) {
			fprintf(stderr,
				"strata-consumerd: STRATA_TEST_CLOCK_STEP '%s' ignored (STEP_NS:PATH, "
				"STEP_NS > 0)\n",
				e);
			return Step();
		}
		k.path = end + 1;
		k.on = true;
		return k;
	}();
	return s;
}
// Set once the page's refresh saw PATH (relaxed: only the refresh thread
// sets it, and it moves the page's anchors with it; another thread's
// mono_ns() only matters where there is no page).
std::atomic<bool> g_stepped{false};

uint64_t mono_ns()
{
	const uint64_t t = real_mono_ns();
	int64_t extra = 0;
	const Step &st = step();
	if (st.on && g_stepped.load(std::memory_order_relaxed))
		extra = st.ns;
	const Skew &k = skew();
	if (!k.on)
		return t + static_cast<uint64_t>(extra);
	const double drift = static_cast<double>(t - k.t0) * k.ppm * 1e-6;
	return static_cast<uint64_t>(static_cast<int64_t>(t) + k.offset + extra +
				     static_cast<int64_t>(drift));
}

// The tightest of 16 (rdtsc, clock_gettime, rdtsc) triples.
TscSample sample()
{
	TscSample best;
	best.width = UINT64_MAX;
	for (int i = 0; i < 16; i++) {
		const uint64_t t0 = strata_kclock_rdtsc();
		const uint64_t ns = mono_ns();
		const uint64_t t1 = strata_kclock_rdtsc();
		if (t1 < t0 || t1 - t0 >= best.width)
			continue;
		best.width = t1 - t0;
		best.tsc = t0 + (t1 - t0) / 2;
		best.ns = ns;
	}
	return best;
}

bool has_words(const std::string &line, std::initializer_list<const char *> words)
{
	std::istringstream in(line);
	std::string w;
	size_t found = 0;
	while (in >> w)
		for (const char *x : words)
			found += w == x;
	return found == words.size();
}

} // namespace

uint64_t tsc_map_eval(const TscMapping &m, uint64_t tsc)
{
	return strata_kclock_convert(tsc, m.cycle_last, ~0ull, m.xtime_nsec, m.base_ns, m.mult, m.shift);
}

bool tsc_rate(const TscSample &a, const TscSample &b, uint32_t *mult, uint32_t *shift)
{
	if (b.tsc <= a.tsc || b.ns <= a.ns)
		return false;
	const long double r = static_cast<long double>(b.ns - a.ns) / static_cast<long double>(b.tsc - a.tsc);
	uint32_t s = *shift;
	if (s == 0) // the largest shift that leaves mult room for the slew
		for (s = 32; s > 0 && r * std::ldexp(1.0L, static_cast<int>(s)) * 1.01L >= 4294967295.0L; s--)
			;
	if (s < 8 || s > 32)
		return false;
	const long double m = std::round(r * std::ldexp(1.0L, static_cast<int>(s)));
	if (m < 1.0L || m * 1.01L >= 4294967295.0L)
		return false;
	*mult = static_cast<uint32_t>(m);
	*shift = s;
	return true;
}

TscMapping tsc_map_first(const TscSample &s, uint32_t mult, uint32_t shift)
{
	TscMapping m;
	m.cycle_last = s.tsc;
	m.base_ns = s.ns;
	m.mult = mult;
	m.shift = shift;
	return m;
}

TscMapping tsc_map_switch(const TscMapping &old, uint64_t t, uint32_t mult)
{
	// old(t) in shifted ns, exactly as the reader computes it (a TSC value
	// before old.cycle_last reads as old.cycle_last).
	const uint64_t delta = static_cast<int64_t>(t - old.cycle_last) > 0 ? t - old.cycle_last : 0;
	const unsigned __int128 v = static_cast<unsigned __int128>(delta) * old.mult + old.xtime_nsec;
	TscMapping m;
	m.cycle_last = t;
	m.shift = old.shift;
	m.mult = mult;
	m.base_ns = old.base_ns + static_cast<uint64_t>(v >> old.shift) + 1; // +1: see clock_page.h
	m.xtime_nsec = static_cast<uint64_t>(v & ((static_cast<unsigned __int128>(1) << old.shift) - 1));
	return m;
}

uint32_t tsc_slew(uint32_t mult, uint32_t shift, int64_t err, uint64_t period_cycles)
{
	// rate - err / period, the slew bounded by kMaxSlewPpm.
	long double adj = period_cycles ? static_cast<long double>(err) *
						  std::ldexp(1.0L, static_cast<int>(shift)) /
						  static_cast<long double>(period_cycles)
					: 0.0L;
	const long double lim = static_cast<long double>(mult) * kMaxSlewPpm / 1e6L;
	adj = adj > lim ? lim : adj < -lim ? -lim : adj;
	const long double nm = std::round(static_cast<long double>(mult) - adj);
	return nm < 1.0L ? 1u : nm > 4294967295.0L ? 4294967295u : static_cast<uint32_t>(nm);
}

TscMapping tsc_map_next(const TscMapping &old, uint64_t t, uint64_t truth_ns, uint32_t mult,
			uint64_t period_cycles, bool *stepped)
{
	TscMapping m = tsc_map_switch(old, t, mult);
	int64_t err = static_cast<int64_t>(m.base_ns - truth_ns); // > 0: ahead of the truth
	if (stepped)
		*stepped = err < -kStepForwardNs;
	if (err < -kStepForwardNs) {
		m.base_ns = truth_ns; // forward: later than anything the old mapping gave
		m.xtime_nsec = 0;
		err = 0;
	}
	m.mult = tsc_slew(mult, old.shift, err, period_cycles);
	return m;
}

// The TSC of every CPU this process may run on against CLOCK_MONOTONIC,
// each sampled pinned to its CPU (in a thread of its own: the caller's
// affinity is left alone), framed by two samples of the first CPU that
// give the reference line.  "" when every CPU's offset from that line is
// within kMaxCpuSkewNs plus the samples' own width; else the reason.
// The kernel checks this itself when the TSC is the clock source; with
// kvm-clock over the TSC (tsc=unstable) nobody has, so we do.
std::string tsc_cpus_disagree()
{
	constexpr long double kMaxCpuSkewNs = 1000;
	cpu_set_t allowed;
	if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
		return std::string("sched_getaffinity: ") + strerror(errno);
	std::vector<int> cpus;
	for (int c = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &allowed))
			cpus.push_back(c);
	if (cpus.size() < 2)
		return "";
	std::vector<int> order(cpus);
	order.push_back(cpus[0]);
	std::vector<TscSample> got(order.size());
	std::string err;
	std::thread t([&] {
		for (size_t i = 0; i < order.size() && err.empty(); i++) {
			cpu_set_t one;
			CPU_ZERO(&one);
			CPU_SET(order[i], &one);
			if (sched_setaffinity(0, sizeof one, &one) != 0) {
				err = std::string("sched_setaffinity: ") + strerror(errno);
				break;
			}
			got[i] = sample();
		}
	});
	t.join();
	if (!err.empty())
		return err;
	for (size_t i = 0; i < got.size(); i++)
		if (got[i].width == UINT64_MAX)
			return "no clean TSC sample on CPU " + std::to_string(order[i]);
	const TscSample &a = got.front(), &b = got.back();
	if (b.tsc <= a.tsc || b.ns <= a.ns)
		return "the TSC of CPU " + std::to_string(cpus[0]) + " did not advance";
	const long double r = static_cast<long double>(b.ns - a.ns) / static_cast<long double>(b.tsc - a.tsc);
	for (size_t i = 1; i + 1 < order.size(); i++) {
		const TscSample &s = got[i];
		const long double predicted =
			static_cast<long double>(a.ns) +
			(static_cast<long double>(s.tsc) - static_cast<long double>(a.tsc)) * r;
		const long double off = static_cast<long double>(s.ns) - predicted;
		const long double slack = kMaxCpuSkewNs + static_cast<long double>(s.width + a.width) * r;
		if (std::fabs(off) > slack) {
			char buf[160];
			snprintf(buf, sizeof buf,
				 "the TSC of CPU %d is %.0Lf ns off CPU %d's (more than %.0Lf)", order[i],
				 off, cpus[0], slack);
			return buf;
		}
	}
	return "";
}

std::string tsc_unusable_reason()
{
	std::ifstream cpu("/proc/cpuinfo");
	std::string line;
	bool flags_seen = false, ok = true;
	while (std::getline(cpu, line))
		if (line.compare(0, 5, "flags") == 0) { // every CPU must have both
			flags_seen = true;
			ok = ok && has_words(line, {"constant_tsc", "nonstop_tsc"});
		}
	if (!flags_seen || !ok)
		return "the CPU lacks constant_tsc or nonstop_tsc";
	std::ifstream cs("/sys/devices/system/clocksource/clocksource0/current_clocksource");
	std::string src;
	cs >> src;
	// kvm-clock is the TSC scaled by the hypervisor's parameters; the
	// vDSO (and so we) may read the TSC directly where the CPUs' TSCs are
	// one clock, which tsc_cpus_disagree() measures.  Other sources (hpet,
	// acpi_pm, xen) are not the TSC: the page would be a second clock.
	if (src != "tsc" && src != "kvm-clock")
		return "the clock source is '" + src + "', not tsc or kvm-clock";
	return tsc_cpus_disagree();
}

std::unique_ptr<ClockPage> ClockPage::create(std::string *why)
{
#if !defined(__x86_64__)
	*why = "no TSC on this architecture";
	return nullptr;
#else
	*why = tsc_unusable_reason();
	if (!why->empty())
		return nullptr;
	std::unique_ptr<ClockPage> p(new ClockPage());
	const char *e = getenv("STRATA_CLOCK_REFRESH_MS");
	if (e && *e) {
		long v = strtol(e, nullptr, 10);
		if (v >= 1 && v <= 60000)
			p->period_ns_ = static_cast<uint64_t>(v) * 1000000u;
	}
	int fd = memfd_create("strata-clock", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, kPageSize) < 0) {
		*why = std::string("memfd: ") + strerror(errno);
		if (fd >= 0)
			close(fd);
		return nullptr;
	}
	void *m = mmap(nullptr, kPageSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	// The descriptor handed out is read-only: a process cannot map it
	// writable (nor mprotect its mapping to writable).
	char self[64];
	snprintf(self, sizeof self, "/proc/self/fd/%d", fd);
	p->ro_fd_ = open(self, O_RDONLY | O_CLOEXEC);
	const bool sealed = fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0;
	const int err = errno;
	close(fd); // the mapping and ro_fd_ keep the file
	if (m == MAP_FAILED || p->ro_fd_ < 0 || !sealed) {
		*why = std::string("memfd mapping, read-only reopen or seals: ") + strerror(err);
		if (m != MAP_FAILED)
			munmap(m, kPageSize);
		return nullptr; // ~ClockPage closes ro_fd_
	}
	p->page_ = static_cast<strata_kclock *>(m);
	// A first rate over ~2 ms; refresh() lengthens the baseline.
	const TscSample a = sample();
	struct timespec nap = {0, 2000000};
	while (nanosleep(&nap, &nap) < 0 && errno == EINTR)
		;
	const TscSample b = sample();
	uint32_t mult = 0, shift = 0;
	if (!tsc_rate(a, b, &mult, &shift)) {
		*why = "TSC calibration failed";
		return nullptr;
	}
	p->anchors_[0] = a;
	p->anchors_[1] = b;
	p->n_anchors_ = 2;
	p->publish_first(tsc_map_first(b, mult, shift));
	return p;
#endif
}

ClockPage::~ClockPage()
{
	// Processes keep reading the page after we exit: leave it on the
	// measured rate, without the slew of the current period.
	if (page_)
		refresh(true);
	// The page stays mapped: drain threads may still read it through
	// consumer_page_now() until the process exits.
	if (ro_fd_ >= 0)
		close(ro_fd_);
}

void ClockPage::publish_first(const TscMapping &m)
{
	strata_kclock *k = page_;
	// Nobody has the descriptor yet: plain stores, published by the
	// release store of g_page and, for processes, by the fd passing.
	k->magic = STRATA_KCLOCK_MAGIC;
	k->version = 1;
	k->seq = 0;
	// NO_RDTSCP: our CPUID is native; a process's may not be (valgrind's).
	k->flags = STRATA_KCLOCK_VALID | STRATA_KCLOCK_USER |
		   (strata_kclock_has_rdtscp() ? 0 : STRATA_KCLOCK_NO_RDTSCP);
	k->cycle_last = m.cycle_last;
	k->mask = ~0ull;
	k->xtime_nsec = m.xtime_nsec;
	k->base_ns = m.base_ns;
	k->mult = m.mult;
	k->shift = m.shift;
	k->updates = 0;
	cur_ = m;
	// Release: the fields above before the pointer (consumer_page_now).
	g_page.store(k, std::memory_order_release);
}

void ClockPage::refresh(bool last)
{
#if defined(__x86_64__)
	// The test step (STRATA_TEST_CLOCK_STEP): the anchors move with the
	// clock, so that the rate stays the measured one and the page steps.
	const Step &st = step();
	if (st.on && !g_stepped.load(std::memory_order_relaxed) && access(st.path.c_str(), F_OK) == 0) {
		g_stepped.store(true, std::memory_order_relaxed);
		for (unsigned i = 0; i < n_anchors_ && i < 16; i++)
			anchors_[i].ns += static_cast<uint64_t>(st.ns);
	}
	const TscSample s = sample();
	if (s.width == UINT64_MAX)
		return;
	// The rate over the longest baseline kept (up to 16 refreshes back).
	const TscSample &a = anchors_[n_anchors_ < 16 ? 0 : n_anchors_ % 16];
	uint32_t mult = 0, shift = cur_.shift;
	if (!tsc_rate(a, s, &mult, &shift))
		return;
	const long double r = static_cast<long double>(s.ns - a.ns) / static_cast<long double>(s.tsc - a.tsc);
	anchors_[n_anchors_ % 16] = s;
	n_anchors_++;
	// The last refresh does not slew: the page may outlive us in processes.
	const uint64_t period_cycles =
		last ? 0 : static_cast<uint64_t>(static_cast<long double>(period_ns_) / r);

	// The next rate (and whether to step forward) from the error now; the
	// switch itself, below, is a few integer operations, so that readers
	// seldom find the page busy.
	const uint64_t t0 = strata_kclock_rdtsc();
	bool step = false;
	const TscMapping est =
		tsc_map_next(cur_, t0, s.ns + static_cast<uint64_t>(static_cast<long double>(t0 - s.tsc) * r),
			     mult, period_cycles, &step);

	strata_kclock *k = page_;
	const uint32_t seq = k->seq; // only this thread writes it
	__atomic_store_n(&k->seq, seq + 1, __ATOMIC_RELAXED);
	// Seq_cst fence: the odd seq is ordered before the field stores below
	// (pairs with the reader's acquire fence before its re-check) and is
	// globally visible before the rdtsc that picks the switch point.
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	// A forward step keeps its switch point t0: more than 1 ms ahead of
	// anything the old mapping gives until well after now.
	const TscMapping m = step ? est : tsc_map_switch(cur_, strata_kclock_rdtsc(), est.mult);
	__atomic_store_n(&k->cycle_last, m.cycle_last, __ATOMIC_RELAXED);
	__atomic_store_n(&k->xtime_nsec, m.xtime_nsec, __ATOMIC_RELAXED);
	__atomic_store_n(&k->base_ns, m.base_ns, __ATOMIC_RELAXED);
	__atomic_store_n(&k->mult, m.mult, __ATOMIC_RELAXED);
	__atomic_store_n(&k->updates, ++refreshes_, __ATOMIC_RELAXED);
	// Release: the fields before the even seq; pairs with the reader's
	// acquire load of seq.
	__atomic_store_n(&k->seq, seq + 2, __ATOMIC_RELEASE);
	cur_ = m;
#endif
}

uint64_t consumer_page_now()
{
	// Acquire: pairs with the release store in publish_first.
	const strata_kclock *k = g_page.load(std::memory_order_acquire);
	uint64_t ns;
	if (k && strata_kclock_now_patient(k, &ns, 50000000) == 0)
		return ns;
	return mono_ns();
}

namespace {
// One (TSC, page ns) reading of the daemon's page, with its rate now.
bool page_sample(const strata_kclock *k, uint64_t *tsc, uint64_t *ns, double *ns_per_cycle)
{
	for (int tries = 0; tries < 1000; tries++) {
		// Acquire: pairs with the writer's release of the even seq; the
		// rate read below is at least that new, and the re-checks (in
		// strata_kclock_try_tsc and below) throw a torn one away.
		const uint32_t seq = __atomic_load_n(&k->seq, __ATOMIC_ACQUIRE);
		if (seq & 1)
			continue;
		const uint32_t mult = __atomic_load_n(&k->mult, __ATOMIC_RELAXED);
		const uint32_t shift = __atomic_load_n(&k->shift, __ATOMIC_RELAXED);
		if (strata_kclock_try_tsc(k, ns, tsc) != 0)
			continue;
		// Acquire fence: the loads above before the re-check; pairs
		// with the writer's fence after its odd seq store.
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&k->seq, __ATOMIC_RELAXED) != seq || shift > 63)
			continue;
		*ns_per_cycle = static_cast<double>(mult) / static_cast<double>(uint64_t{1} << shift);
		return true;
	}
	return false;
}
} // namespace

bool consumer_page_line(uint64_t *tsc0, int64_t *ns0, double *ns_per_cycle)
{
	// Acquire: pairs with the release store in publish_first.
	const strata_kclock *k = g_page.load(std::memory_order_acquire);
	uint64_t tsc, ns;
	double rate;
	if (!k || !page_sample(k, &tsc, &ns, &rate))
		return false;
	// The page's rate now includes its slew (up to kMaxSlewPpm for one
	// period): a line drawn back seconds with it would be off by
	// milliseconds.  The page stays within microseconds of its clock, so
	// the line through the first reading and this one is the true rate
	// to a few ppm once they are 100 ms apart.
	static std::mutex mu;
	static uint64_t first_tsc = 0, first_ns = 0;
	std::lock_guard<std::mutex> g(mu);
	if (!first_tsc) {
		first_tsc = tsc;
		first_ns = ns;
	} else if (ns - first_ns >= 100000000 && tsc > first_tsc) {
		rate = static_cast<double>(ns - first_ns) / static_cast<double>(tsc - first_tsc);
	}
	*tsc0 = tsc;
	*ns0 = static_cast<int64_t>(ns);
	*ns_per_cycle = rate;
	return true;
}

} // namespace strata
