// clock_page_test.cpp - strata-consumerd's clock page (consumerd/clock_page.h):
// the calibration and refresh arithmetic on simulated clocks (never a step
// back across thousands of refreshes with skewed, noisy inputs; the error
// against the simulated truth bounded), then the real page on this machine
// (read-only, sealed, within a bound of clock_gettime, monotonic within and
// across threads while it is refreshed back to back).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <fcntl.h>
#include <random>
#include <sys/mman.h>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "strata_abi.h"
#include "clock_page.h"
#include "strata_kclock.h"
#include "runtime.h"

namespace strata {
namespace {

uint64_t mono_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

TEST(ClockMath, RateFromTwoSamples)
{
	// A 2.5 GHz TSC (0.4 ns/cycle) and a 1.1 GHz one, 10 ms apart.
	for (double ns_per_cycle : {0.4, 1.0 / 1.1}) {
		TscSample a{1000000, 5000000000ull, 40};
		TscSample b{a.tsc + static_cast<uint64_t>(10000000 / ns_per_cycle), a.ns + 10000000, 40};
		uint32_t mult = 0, shift = 0;
		ASSERT_TRUE(tsc_rate(a, b, &mult, &shift));
		const double got = mult / static_cast<double>(1ull << shift);
		EXPECT_NEAR(got / ns_per_cycle, 1.0, 1e-8);
		EXPECT_LT(mult * 1.01, 4294967295.0); // room for the slew
		// The fixed-shift form (refresh) keeps the shift.
		uint32_t m2 = 0, s2 = shift;
		ASSERT_TRUE(tsc_rate(a, b, &m2, &s2));
		EXPECT_EQ(s2, shift);
		EXPECT_EQ(m2, mult);
	}
	TscSample a{100, 100, 1}, b{100, 200, 1};
	uint32_t mult = 0, shift = 0;
	EXPECT_FALSE(tsc_rate(a, b, &mult, &shift)); // no TSC progress
	EXPECT_FALSE(tsc_rate(b, a, &mult, &shift));
}

// The reader's 64-bit common case (strata_kclock_scale) gives the general
// 128-bit form's value to the ns, in it and at its edges: deltas just
// below and at 2^32, a TSC before cycle_last (flat), narrower masks, a
// carry out of + xtime_nsec (the module's page keeps ns of the second
// shifted there), shifts 0 to 63, and a million random parameter sets.
TEST(ClockMath, CommonCaseEqualsTheGeneralForm)
{
	const auto same = [](uint64_t tsc, uint64_t last, uint64_t mask, uint64_t xn, uint32_t mult,
			     uint32_t shift) {
		ASSERT_EQ(strata_kclock_scale(tsc, static_cast<uint32_t>(tsc), last, mask, xn, mult, shift),
			  strata_kclock_convert(tsc, last, mask, xn, 0, mult, shift))
			<< "tsc " << tsc << " last " << last << " mask " << mask << " xn " << xn << " mult "
			<< mult << " shift " << shift;
	};
	const uint64_t last = 1ull << 50;
	for (uint64_t d : {0ull, 1ull, 12345ull, 0xfffffffeull, 0xffffffffull, 0x100000000ull, 0x100000001ull,
			   1ull << 40, ~0ull, ~0ull - 0xffffffffull})
		for (uint64_t mask : {~0ull, (1ull << 32) - 1, (1ull << 40) - 1, 0xffffffff00000000ull})
			for (uint64_t xn : {0ull, 1ull, 0xffffffffull, 1ull << 60, ~0ull})
				for (uint32_t mult : {0u, 1u, 1503238553u, 0xffffffffu})
					for (uint32_t shift : {0u, 1u, 24u, 32u, 63u})
						same(last + d, last, mask, xn, mult, shift);
	std::mt19937_64 rng(64);
	for (int i = 0; i < 1000000; i++) {
		const uint64_t l = rng();
		const uint64_t d = rng() >> (rng() % 64);
		const uint64_t mask = i % 8 ? ~0ull : ~0ull >> (rng() % 64);
		const uint64_t xn = rng() >> (rng() % 64);
		same(l + d, l, mask, xn, static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng() % 64));
	}
}

// The writer's fast path reads the page with strata_kclock_end_common: where
// it answers (0) it gives strata_kclock_end's value to the ns; it declines
// (1) exactly where the general form or a refusal is needed, so that its
// caller's full read decides.
TEST(ClockMath, CommonReadAnswersAsTheFullReadOrDeclines)
{
	struct strata_kclock k = {};
	k.magic = STRATA_KCLOCK_MAGIC;
	k.version = 1;
	k.flags = STRATA_KCLOCK_VALID;
	const auto check = [&k](uint64_t tsc, uint32_t seq, bool common) {
		uint64_t full = 0, fast = 0;
		const int rf = strata_kclock_end(&k, seq, tsc, static_cast<uint32_t>(tsc), &full);
		const int rc = strata_kclock_end_common(&k, seq, tsc, static_cast<uint32_t>(tsc), &fast);
		if (common) {
			ASSERT_EQ(0, rf);
			ASSERT_EQ(0, rc) << "tsc " << tsc << " last " << k.cycle_last;
			ASSERT_EQ(full, fast) << "tsc " << tsc << " last " << k.cycle_last;
		} else {
			ASSERT_EQ(1, rc) << "tsc " << tsc << " last " << k.cycle_last << " full read " << rf;
		}
	};
	std::mt19937_64 rng(65);
	for (int i = 0; i < 200000; i++) {
		k.seq = 2 * static_cast<uint32_t>(rng() % 1000);
		k.cycle_last = rng() >> 2;
		k.mask = ~0ull;
		k.xtime_nsec = rng() >> (32 + rng() % 32);
		k.base_ns = rng() >> 2;
		k.mult = static_cast<uint32_t>(rng());
		k.shift = static_cast<uint32_t>(rng() % 32);
		k.flags = STRATA_KCLOCK_VALID;
		const uint64_t d = rng() % (1ull << 32); // the common case: < 2^32 ticks past
		unsigned __int128 sum = static_cast<unsigned __int128>(d) * k.mult + k.xtime_nsec;
		check(k.cycle_last + d, k.seq, sum >> 64 == 0);
		check(k.cycle_last + d, k.seq + 1, false);            // being written
		check(k.cycle_last + (1ull << 32) + d, k.seq, false); // 2^32 ticks past or more
		check(k.cycle_last - 1 - d % 1000, k.seq, false);     // before cycle_last
		k.mask = (1ull << 31) - 1;                            // a narrower mask
		check(k.cycle_last + (1ull << 31) + d % (1ull << 31), k.seq, false);
		k.mask = ~0ull;
		k.shift = 64 + static_cast<uint32_t>(rng() % 100); // a bad shift: the full read refuses
		check(k.cycle_last + d, k.seq, false);
		k.shift = 24;
		k.flags = 0; // not valid: the full read refuses
		check(k.cycle_last + d, k.seq, false);
	}
	k.flags = STRATA_KCLOCK_VALID; // a sum that carries
	k.cycle_last = 1000;
	k.mult = 0xffffffffu;
	k.xtime_nsec = ~0ull - 5;
	k.shift = 24;
	check(k.cycle_last + 10, k.seq, false);
}

// The simulated world: a TSC at ~3 GHz whose true rate (ns per cycle)
// wanders by a random walk; the publisher sees the truth through noisy
// samples and measures the rate with an error.  Every refresh must keep the
// page monotone: nothing the old mapping gave at or before the switch point
// (plus a slop for a reader's rdtsc executing late) exceeds what the new
// mapping gives at the same or a later TSC value.
TEST(ClockMath, NeverStepsBackAcrossRefreshes)
{
	std::mt19937_64 rng(42);
	std::uniform_int_distribution<int> noise_ns(-50, 50);
	std::uniform_real_distribution<double> walk(-1e-6, 1e-6);
	const double nominal = 1.0 / 3.0; // ns per cycle
	double rate = nominal;
	const uint64_t period = 3000000000ull; // ~1 s of cycles
	long double truth = 1e12L;             // true ns at tsc
	uint64_t tsc = 1ull << 40;

	uint32_t mult = 0, shift = 0;
	// Start 300 ppm off in rate and 40 us ahead.
	TscSample a{tsc, static_cast<uint64_t>(truth), 30};
	TscSample b{tsc + 3000000, static_cast<uint64_t>(truth + 3000000 * nominal * (1 + 3e-4)), 30};
	ASSERT_TRUE(tsc_rate(a, b, &mult, &shift));
	TscMapping m = tsc_map_first(TscSample{tsc, static_cast<uint64_t>(truth) + 40000, 0}, mult, shift);

	int64_t worst_late = 0;
	const int kRefreshes = 5000;
	for (int i = 0; i < kRefreshes; i++) {
		// Advance one period (jittered) at the current true rate.
		const uint64_t step = period + static_cast<uint64_t>(rng() % 1000000);
		truth += static_cast<long double>(step) * rate;
		tsc += step;
		rate = std::clamp(rate * (1 + walk(rng)), nominal * (1 - 2e-4), nominal * (1 + 2e-4));
		// The measured rate: the truth +- 2 ppm; the truth: +- 50 ns.
		const double measured = rate * (1 + walk(rng) * 2);
		uint32_t mm = 0, ss = shift;
		TscSample s0{0, 0, 0}, s1{1000000000000ull, static_cast<uint64_t>(1e12 * measured), 0};
		ASSERT_TRUE(tsc_rate(s0, s1, &mm, &ss));
		const uint64_t seen =
			static_cast<uint64_t>(truth) + static_cast<uint64_t>(int64_t{noise_ns(rng)});
		const TscMapping n = tsc_map_next(m, tsc, seen, mm, period);

		// Continuity: the new mapping starts 1 ns after the old one's value.
		ASSERT_EQ(tsc_map_eval(n, tsc), tsc_map_eval(m, tsc) + 1) << "refresh " << i;
		// Readers with the new mapping at any TSC value (also before the
		// switch point) are after old readers up to the switch point; old
		// readers whose rdtsc ran up to 2000 cycles late are at or before
		// new readers of the same TSC value.
		ASSERT_LT(tsc_map_eval(m, tsc), tsc_map_eval(n, tsc - 5000)) << "refresh " << i;
		for (uint64_t d = 0; d <= 2000; d += 50)
			ASSERT_LE(tsc_map_eval(m, tsc + d), tsc_map_eval(n, tsc + d))
				<< "refresh " << i << " +" << d;
		// The slew is bounded.
		const double dm = std::abs(static_cast<double>(n.mult) - mm) / mm;
		ASSERT_LE(dm, kMaxSlewPpm * 1e-6 + 1e-9);
		// Error against the truth at the switch: converges, then stays
		// within a few us (rate walk of 1 ppm/period, 2 ppm measurement).
		const int64_t err = static_cast<int64_t>(tsc_map_eval(n, tsc)) - static_cast<int64_t>(truth);
		if (i >= 5)
			worst_late = std::max(worst_late, std::abs(err));
		m = n;
	}
	printf("worst |page - truth| at a switch after convergence: %lld ns\n",
	       static_cast<long long>(worst_late));
	EXPECT_LT(worst_late, 10000);
}

TEST(ClockMath, FarBehindStepsForwardFarAheadSlews)
{
	uint32_t mult = 0, shift = 0;
	TscSample a{0, 0, 0}, b{3000000000ull, 1000000000ull, 0};
	ASSERT_TRUE(tsc_rate(a, b, &mult, &shift));
	const TscMapping m = tsc_map_first(TscSample{1000, 5000000000ull, 0}, mult, shift);
	const uint64_t t = 3000001000ull;
	const uint64_t at = tsc_map_eval(m, t); // ~6e9
	// 5 ms behind the truth: a forward step to it.
	TscMapping n = tsc_map_next(m, t, at + 5000000, mult, 3000000000ull);
	EXPECT_EQ(tsc_map_eval(n, t), at + 5000000);
	EXPECT_EQ(n.mult, mult);
	// 10 ms ahead: no step back, the slowest rate allowed.
	n = tsc_map_next(m, t, at - 10000000, mult, 3000000000ull);
	EXPECT_EQ(tsc_map_eval(n, t), at + 1);
	EXPECT_NEAR(static_cast<double>(n.mult), mult * (1 - kMaxSlewPpm * 1e-6), 1.0);
	// 100 us behind, within the step threshold: slewed, faster.
	n = tsc_map_next(m, t, at + 100000, mult, 3000000000ull);
	EXPECT_EQ(tsc_map_eval(n, t), at + 1);
	EXPECT_GT(n.mult, mult);
}

// The real page.  Skipped where the TSC cannot back one.
TEST(ClockPageLive, SealedReadOnlyAndCloseToClockGettime)
{
	std::string why;
	std::unique_ptr<ClockPage> p = ClockPage::create(&why);
	if (!p)
		GTEST_SKIP() << "no clock page here: " << why;
	const int fd = p->fd();
	// Read-only descriptor: no writable mapping, no write, no resize.
	EXPECT_EQ(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), MAP_FAILED);
	EXPECT_EQ(EACCES, errno);
	EXPECT_LT(ftruncate(fd, 0), 0);
	EXPECT_EQ(fcntl(fd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW), F_SEAL_SHRINK | F_SEAL_GROW);
	const strata_kclock *k = strata_kclock_map(fd);
	ASSERT_NE(k, nullptr);
	// The daemon's native verdict on RDTSCP, which a process under valgrind
	// reads instead of its canned CPUID's.
	EXPECT_EQ(k->flags, STRATA_KCLOCK_VALID | STRATA_KCLOCK_USER |
				    (strata_kclock_has_rdtscp() ? 0u : STRATA_KCLOCK_NO_RDTSCP));
	void *w = reinterpret_cast<void *>(const_cast<strata_kclock *>(k));
	EXPECT_LT(mprotect(w, 4096, PROT_READ | PROT_WRITE), 0);

	// Each read within [before, after] of clock_gettime, widened by the
	// calibration error (2 ms baseline: tens of ppm of the test's length).
	int64_t worst = 0;
	for (int i = 0; i < 100000; i++) {
		const uint64_t before = mono_ns();
		uint64_t v = 0;
		ASSERT_EQ(strata_kclock_now(k, &v), 0);
		const uint64_t after = mono_ns();
		const int64_t out = v < before  ? static_cast<int64_t>(before - v)
				    : v > after ? static_cast<int64_t>(v - after)
						: 0;
		worst = std::max(worst, out);
		if (i % 10000 == 9999)
			p->refresh();
	}
	printf("worst distance outside [clock_gettime before, after]: %lld ns\n",
	       static_cast<long long>(worst));
	EXPECT_LT(worst, 20000);
	munmap(w, 4096);
}

// RDTSCP only where this process's CPUID and the page's writer both say
// the CPU has it (valgrind's CPUID claims it on CPUs where it faults).
TEST(ClockMath, RdtscpOnlyWhereThePageDoesNotSayNo)
{
	strata_kclock k{};
	k.flags = STRATA_KCLOCK_VALID | STRATA_KCLOCK_USER;
	EXPECT_EQ(strata_kclock_use_rdtscp(&k), strata_kclock_has_rdtscp());
	k.flags |= STRATA_KCLOCK_NO_RDTSCP;
	EXPECT_EQ(strata_kclock_use_rdtscp(&k), 0);
}

TEST(ClockPageLive, MonotonicAcrossThreadsWhileRefreshed)
{
	std::string why;
	std::unique_ptr<ClockPage> p = ClockPage::create(&why);
	if (!p)
		GTEST_SKIP() << "no clock page here: " << why;
	// Each reader: its own reads non-decreasing, and each read at or after
	// the largest value any reader published before it (acquire/release on
	// `latest` orders the reads).  One reader takes the TSC with `lfence;
	// rdtsc` (consumer_page_now), the other, where the CPU has it, with
	// RDTSCP as the processes' events do (strata_kclock_try_how), so
	// that reads of the two kinds are ordered against each other too.
	const strata_kclock *page = nullptr;
	{
		const int fd = dup(p->fd());
		page = fd >= 0 ? strata_kclock_map(fd) : nullptr;
		if (fd >= 0)
			close(fd);
	}
	ASSERT_NE(page, nullptr);
	const bool rdtscp = strata_kclock_use_rdtscp(page);
	std::atomic<uint64_t> latest{0};
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> bad{0}, reads{0};
	auto reader = [&](bool with_rdtscp) {
		uint64_t mine = 0, n = 0;
		while (!stop.load(std::memory_order_relaxed)) {
			// Acquire: pairs with the release CAS below (another reader's).
			const uint64_t seen = latest.load(std::memory_order_acquire);
			uint64_t v = 0;
			if (with_rdtscp) {
				int rc;
				while ((rc = strata_kclock_try_how(page, &v, 1)) == 1) // busy: again
					;
				if (rc != 0)
					bad.fetch_add(1, std::memory_order_relaxed);
			} else {
				v = consumer_page_now();
			}
			if (v < seen || v < mine)
				bad.fetch_add(1, std::memory_order_relaxed);
			mine = v;
			uint64_t cur = seen;
			while (cur < v && !latest.compare_exchange_weak(cur, v, std::memory_order_release,
									std::memory_order_relaxed))
				;
			if ((++n & 1023) == 0)
				reads.fetch_add(1024, std::memory_order_relaxed);
		}
	};
	std::thread r1(reader, false), r2(reader, rdtscp);
	// Refresh back to back (each one a switch under the readers) until both
	// readers did many reads across many refreshes (deadline: 20 s).
	const uint64_t deadline = mono_ns() + 20000000000ull;
	uint64_t n = 0;
	while ((n < 3000 || reads.load(std::memory_order_relaxed) < 1000000) && mono_ns() < deadline) {
		p->refresh();
		n++;
	}
	stop.store(true, std::memory_order_relaxed);
	r1.join();
	r2.join();
	printf("%llu refreshes under %llu reads\n", static_cast<unsigned long long>(n),
	       static_cast<unsigned long long>(reads.load()));
	EXPECT_EQ(p->refreshes(), n);
	EXPECT_GE(n, 3000u);
	EXPECT_GE(reads.load(), 1000000u);
	EXPECT_EQ(bad.load(), 0u);
	printf("the second reader read the TSC with %s\n", rdtscp ? "rdtscp" : "lfence; rdtsc");
	munmap(const_cast<strata_kclock *>(page), 4096);
}

// A memfd holding a page-sized strata_kclock (fields from `k`), sealed
// against shrinking when `seal`.
int fake_page(const strata_kclock &k, off_t size, bool seal)
{
	int fd = memfd_create("fake-clock", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, size) < 0 ||
	    pwrite(fd, &k, sizeof k, 0) != static_cast<ssize_t>(sizeof k))
		return -1;
	if (seal && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)
		return -1;
	return fd;
}

// A sealed page of `good` with one field broken by `mutate`.
template <class F> int broken_page(strata_kclock good, F mutate)
{
	mutate(good);
	return fake_page(good, 4096, true);
}

// The process side (libtrace/runtime/clock.cpp): a page from the daemon is hostile.
// One test, in order: the clock is chosen once per process.
TEST(ClockOffer, ValidatesThenChoosesTheConsumerPage)
{
	if (access("/dev/strata", F_OK) == 0 || getenv("STRATA_CLOCK"))
		GTEST_SKIP() << "the module's page or STRATA_CLOCK would decide";
	std::string why;
	std::unique_ptr<ClockPage> p = ClockPage::create(&why);
	if (!p)
		GTEST_SKIP() << "no clock page here: " << why;
	strata_kclock good = *strata_kclock_map(p->fd()); // a consistent copy
	good.seq = 0;

	int pfd[2];
	ASSERT_EQ(pipe(pfd), 0);
	EXPECT_EQ(strata_rt_clock_offer(pfd[0]), -EINVAL); // not a regular file
	close(pfd[0]);
	close(pfd[1]);
	struct {
		const char *what;
		int fd;
		int expect;
	} bad[] = {
		{"unsealed", fake_page(good, 4096, false), -EPERM},
		{"too small", fake_page(good, 64, true), -EINVAL},
		{"bad magic", broken_page(good, [](strata_kclock &k) { k.magic ^= 1; }), -EINVAL},
		{"bad version", broken_page(good, [](strata_kclock &k) { k.version = 2; }), -EINVAL},
		{"not user-calibrated",
		 broken_page(good, [](strata_kclock &k) { k.flags = STRATA_KCLOCK_VALID; }), -EINVAL},
		{"not valid", broken_page(good, [](strata_kclock &k) { k.flags = STRATA_KCLOCK_USER; }),
		 -EINVAL},
		{"shift out of range", broken_page(good, [](strata_kclock &k) { k.shift = 64; }), -EINVAL},
		{"always busy", broken_page(good, [](strata_kclock &k) { k.seq = 1; }), -EINVAL},
	};
	for (auto &b : bad) {
		ASSERT_GE(b.fd, 0) << b.what;
		EXPECT_EQ(strata_rt_clock_offer(b.fd), b.expect) << b.what;
		close(b.fd);
	}
	// The real page is kept, and chosen by the first clock query.
	ASSERT_EQ(strata_rt_clock_offer(p->fd()), 0);
	EXPECT_EQ(strata_rt_clock_offer(p->fd()), 0); // the same file again: nothing new mapped
	EXPECT_EQ(strata_rt_clock_id(), static_cast<uint32_t>(STRATA_CLOCK_CONSUMER_PAGE));
	const uint64_t before = mono_ns();
	const uint64_t v = strata_rt_clock_now();
	const uint64_t after = mono_ns();
	EXPECT_GE(v + 20000, before);
	EXPECT_LE(v, after + 20000);
	EXPECT_EQ(strata_rt_clock_offer(p->fd()), -EALREADY); // chosen for the process's life
}

} // namespace
} // namespace strata
