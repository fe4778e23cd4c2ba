/*
 * strata_kclock.h - read CLOCK_MONOTONIC from the Strata module's clock page
 * (header-only C11/C++17, x86-64).  Usage:
 *
 *   int fd = open(STRATA_KABI_DEVICE, O_RDONLY | O_CLOEXEC);
 *   const struct strata_kclock *k = strata_kclock_map(fd);   // NULL: no page
 *   uint64_t ns;
 *   if (k && strata_kclock_now(k, &ns) == 0) ...              // else fallback
 *
 * Contract: the page has one writer, the kernel (seqcount, strata_clock.c);
 * readers are any threads, also in signal handlers (no allocation, no lock,
 * no system call).  strata_kclock_now() returns -1 when the page is not
 * valid (clock source not the TSC) or stays busy; then use clock_gettime.
 */
#ifndef STRATA_KCLOCK_H
#define STRATA_KCLOCK_H

#include <stdint.h>
#include <stddef.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>

#include "strata_kabi.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The read's steps are inlined into every caller: a call and its spills
 * would cost as much as the conversion (docs/benchmarks.md). */
#define STRATA_KCLOCK_HOT __attribute__((always_inline))

static inline const struct strata_kclock *strata_kclock_map(int fd)
{
	void *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	const struct strata_kclock *k = (const struct strata_kclock *)p;

	if (p == MAP_FAILED)
		return NULL;
	if (k->magic != STRATA_KCLOCK_MAGIC || k->version != 1) {
		munmap(p, 4096);
		return NULL;
	}
	return k;
}

static inline uint64_t strata_kclock_rdtsc(void)
{
#if defined(__x86_64__)
	uint32_t lo, hi;

	/* lfence: the TSC is read after the loads before it (the seq load),
	 * as the vDSO's rdtsc_ordered() does. */
	__asm__ __volatile__("lfence; rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
	return ((uint64_t)hi << 32) | lo;
#else
	return 0;
#endif
}

/*
 * Whether this CPU has RDTSCP (CPUID 0x80000001, EDX bit 27): the ordered
 * TSC read Linux's rdtsc_ordered() prefers to `lfence; rdtsc` where both
 * exist (so the vDSO's clock_gettime uses it).  It waits, as the lfence
 * does, until every load before it is globally visible; it does not keep
 * later instructions from starting before it, nor does `lfence; rdtsc`.
 * One CPUID: a caller asks once (the runtime, when it chooses its clock),
 * through strata_kclock_use_rdtscp below.
 */
static inline int strata_kclock_has_rdtscp(void)
{
#if defined(__x86_64__)
	unsigned int a, b, c, d;

	__asm__ __volatile__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000000u), "c"(0));
	if (a < 0x80000001u)
		return 0;
	__asm__ __volatile__("cpuid" : "=a"(a), "=b"(b), "=c"(c), "=d"(d) : "a"(0x80000001u), "c"(0));
	return (d >> 27) & 1;
#else
	return 0;
#endif
}

/*
 * Whether to read this page's TSC with RDTSCP: this process's CPUID says
 * the CPU has it and the page's writer did not find it missing
 * (STRATA_KCLOCK_NO_RDTSCP).  A process's CPUID can claim what the CPU
 * lacks: valgrind shows a canned Intel CPUID with RDTSCP on an AMD EPYC
 * guest without it, and its decoder then kills the process at the first
 * RDTSCP (SIGILL).  The writer's verdict is native: the daemon's own
 * CPUID, or the kernel's feature bits.
 */
static inline int strata_kclock_use_rdtscp(const struct strata_kclock *k)
{
	return strata_kclock_has_rdtscp() &&
	       !(__atomic_load_n(&k->flags, __ATOMIC_RELAXED) & STRATA_KCLOCK_NO_RDTSCP);
}

/*
 * The ordered TSC, and its low 32 bits again in a register of their own
 * (*lo): a conversion that multiplies them (strata_kclock_scale) need not
 * wait for the two halves to be joined; the asm hides that the two are
 * equal, which the compiler would otherwise use to take them from the
 * joined value.  With `rdtscp` (only where strata_kclock_has_rdtscp() said
 * so: elsewhere the instruction faults) RDTSCP, its TSC_AUX (ecx) dropped:
 * the same order as `lfence; rdtsc`, 1 to 2.5 ns cheaper on the Intel Xeon
 * measured, the same on the AMD EPYC (docs/benchmarks.md).  A constant
 * `rdtscp` leaves one instruction; a variable one a predicted branch.
 */
STRATA_KCLOCK_HOT static inline uint64_t strata_kclock_ordered_lo(uint32_t *lo_out, int rdtscp)
{
#if defined(__x86_64__)
	uint32_t lo, hi, lo2;

	if (__builtin_expect(rdtscp, 1)) /* laid out inline: the usual CPU's */
		__asm__ __volatile__("rdtscp; movl %%eax, %2"
				     : "=a"(lo), "=d"(hi), "=r"(lo2)
				     :
				     : "rcx", "memory");
	else
		__asm__ __volatile__("lfence; rdtsc; movl %%eax, %2"
				     : "=a"(lo), "=d"(hi), "=r"(lo2)
				     :
				     : "memory");
	*lo_out = lo2;
	return ((uint64_t)hi << 32) | lo;
#else
	(void)rdtscp;
	*lo_out = 0;
	return 0;
#endif
}

/* The ordered TSC alone, as strata_kclock_ordered_lo without the second
 * copy of its low half: for a caller that does not convert it (the
 * writer's fast path converts from the low half: its chain from the read
 * to the record's header is shorter, docs/ring-buffer.md). */
STRATA_KCLOCK_HOT static inline uint64_t strata_kclock_ordered(int rdtscp)
{
#if defined(__x86_64__)
	uint32_t lo, hi;

	if (__builtin_expect(rdtscp, 1))
		__asm__ __volatile__("rdtscp" : "=a"(lo), "=d"(hi) : : "rcx", "memory");
	else
		__asm__ __volatile__("lfence; rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
	return ((uint64_t)hi << 32) | lo;
#else
	(void)rdtscp;
	return 0;
#endif
}

STRATA_KCLOCK_HOT static inline uint64_t strata_kclock_rdtsc_lo(uint32_t *lo_out)
{
	return strata_kclock_ordered_lo(lo_out, 0);
}

/* The TSC without a fence: it may be read a few tens of cycles before or
 * after the instructions around it.  Only for a duration on one thread
 * whose ends need no order with other memory accesses (the pthread
 * preload's hold_ns, docs/pthread.md), converted with the page's mult and
 * shift; a timestamp is strata_kclock_rdtsc's. */
static inline uint64_t strata_kclock_rdtsc_unordered(void)
{
#if defined(__x86_64__)
	return __builtin_ia32_rdtsc();
#else
	return 0;
#endif
}

/* TSC value -> CLOCK_MONOTONIC ns with the parameters of one snapshot. */
static inline uint64_t strata_kclock_convert(uint64_t tsc, uint64_t cycle_last, uint64_t mask,
					     uint64_t xtime_nsec, uint64_t base_ns, uint32_t mult,
					     uint32_t shift)
{
	uint64_t delta = (int64_t)(tsc - cycle_last) > 0 ? (tsc - cycle_last) & mask : 0;
	unsigned __int128 v = (unsigned __int128)delta * mult + xtime_nsec;

	return base_ns + (uint64_t)(v >> shift);
}

/*
 * The TSC as ns past base_ns: strata_kclock_convert without the base, its
 * common case in 64 bits: fewer than 2^32 ticks past cycle_last (the page
 * is refreshed every second or more often) that the mask keeps (the TSC's
 * keeps all), so that delta is the difference of the low halves (lo: the
 * TSC's, strata_kclock_rdtsc_lo), delta * mult fits (mult < 2^32), and no
 * carry out of + xtime_nsec: the same value as the general form.  The
 * checks are predicted branches beside the chain of dependent instructions
 * from the TSC to the result, which is what a read costs beyond the fenced
 * TSC (an event's next fence waits for it): here a subtract, a multiply,
 * an add and a shift, where the general form also joins the TSC's halves,
 * clamps, masks, and multiplies, adds and shifts in 128 bits.  The general form takes a TSC before cycle_last
 * (flat: delta 0), a page left old (its writer died), a narrower mask.
 */
STRATA_KCLOCK_HOT static inline int strata_kclock_scale_common(uint64_t tsc, uint32_t lo, uint64_t last,
							       uint64_t mask, uint64_t xn, uint32_t mult,
							       uint32_t shift, uint64_t *ns)
{
	uint64_t delta = tsc - last, v;

	if (__builtin_expect(
		    ((delta >> 32) | (delta & ~mask)) == 0 &&
			    !__builtin_add_overflow((uint64_t)(uint32_t)(lo - (uint32_t)last) * mult, xn, &v),
		    1)) {
		*ns = v >> shift;
		return 1;
	}
	return 0;
}

STRATA_KCLOCK_HOT static inline uint64_t strata_kclock_scale(uint64_t tsc, uint32_t lo, uint64_t last,
							     uint64_t mask, uint64_t xn, uint32_t mult,
							     uint32_t shift)
{
	uint64_t v;

	if (strata_kclock_scale_common(tsc, lo, last, mask, xn, mult, shift, &v))
		return v;
	return strata_kclock_convert(tsc, last, mask, xn, 0, mult, shift);
}

/*
 * A read in two halves, for a hot caller that overlaps other work with the
 * TSC read: strata_kclock_begin loads seq and reads the ordered TSC (the
 * steps before the fence are all it waits for) and its low half (*lo);
 * strata_kclock_end loads the parameters, converts and re-checks seq.
 * Returns as strata_kclock_try_tsc.  Between the two a caller may do
 * anything but touch the page; one short of registers may pass
 * (uint32_t)tsc as lo rather than keep the low half live.
 */
STRATA_KCLOCK_HOT static inline uint64_t strata_kclock_begin_how(const struct strata_kclock *k, uint32_t *seq,
								 uint32_t *lo, int rdtscp)
{
	/* Acquire: pairs with the kernel's smp_wmb before the final (even)
	 * seq store; the fields read in strata_kclock_end are at least as new. */
	*seq = __atomic_load_n(&k->seq, __ATOMIC_ACQUIRE);
	/* The fence (lfence, or RDTSCP's own wait) orders the TSC after the
	 * seq load, and after every load of the caller before it. */
	return strata_kclock_ordered_lo(lo, rdtscp);
}

/* strata_kclock_begin_how without the low half (strata_kclock_ordered). */
STRATA_KCLOCK_HOT static inline uint64_t strata_kclock_begin_tsc(const struct strata_kclock *k, uint32_t *seq,
								 int rdtscp)
{
	/* Acquire: as strata_kclock_begin_how's. */
	*seq = __atomic_load_n(&k->seq, __ATOMIC_ACQUIRE);
	return strata_kclock_ordered(rdtscp);
}

STRATA_KCLOCK_HOT static inline uint64_t strata_kclock_begin(const struct strata_kclock *k, uint32_t *seq,
							     uint32_t *lo)
{
	return strata_kclock_begin_how(k, seq, lo, 0);
}

STRATA_KCLOCK_HOT static inline int strata_kclock_end(const struct strata_kclock *k, uint32_t seq,
						      uint64_t tsc, uint32_t lo, uint64_t *ns)
{
#if defined(__x86_64__)
	if (seq & 1)
		return 1;
	/* Converted before the re-check (shift masked: a torn snapshot is
	 * thrown away below, a bad page refused), so that only the result
	 * stays live across it, where the hot callers need every register
	 * they have. */
	uint64_t last = __atomic_load_n(&k->cycle_last, __ATOMIC_RELAXED);
	uint64_t mask = __atomic_load_n(&k->mask, __ATOMIC_RELAXED);
	uint32_t mult = __atomic_load_n(&k->mult, __ATOMIC_RELAXED);
	uint64_t xn = __atomic_load_n(&k->xtime_nsec, __ATOMIC_RELAXED);
	uint32_t shift = __atomic_load_n(&k->shift, __ATOMIC_RELAXED);
	uint64_t v = strata_kclock_scale(tsc, lo, last, mask, xn, mult, shift & 63);

	v += __atomic_load_n(&k->base_ns, __ATOMIC_RELAXED);
	uint32_t flags = __atomic_load_n(&k->flags, __ATOMIC_RELAXED);

	/* Acquire fence: the loads above complete before the re-check;
	 * pairs with the kernel's smp_wmb after the odd seq store. */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&k->seq, __ATOMIC_RELAXED) != seq)
		return 1;
	if (!(flags & STRATA_KCLOCK_VALID) || shift > 63)
		return -1;
	*ns = v;
	return 0;
#else
	(void)k;
	(void)seq;
	(void)tsc;
	(void)lo;
	(void)ns;
	return -1;
#endif
}

/*
 * strata_kclock_end's common case alone, for a caller whose slow path reads
 * the clock again in full: 0 and *ns as strata_kclock_end's; 1 for
 * everything else (a busy or changed page, and where the general form or
 * a refusal would be needed: a TSC before cycle_last or 2^32 ticks past
 * it, a narrower mask, a sum that carries, a bad shift, an invalid page).
 * Each parameter is loaded where it is first used, so that few values are
 * live at once (the loads are volatile to the compiler, which keeps their
 * order: loaded together, they were spilled and reloaded); their order
 * among themselves is free, all of them between the two loads of seq.
 */
STRATA_KCLOCK_HOT static inline int strata_kclock_end_common(const struct strata_kclock *k, uint32_t seq,
							     uint64_t tsc, uint32_t lo, uint64_t *ns)
{
#if defined(__x86_64__)
	if (seq & 1)
		return 1;
	const uint64_t last = __atomic_load_n(&k->cycle_last, __ATOMIC_RELAXED);
	const uint64_t delta = tsc - last;
	uint64_t v;

	/* delta past the mask or 2^32 ticks (a mask is 2^n - 1, the clock
	 * source's: then that is delta above its low 32 bits, one compare). */
	if (__builtin_expect(delta > (uint64_t)(uint32_t)__atomic_load_n(&k->mask, __ATOMIC_RELAXED), 0))
		return 1;
	const uint64_t scaled =
		(uint64_t)(uint32_t)(lo - (uint32_t)last) * __atomic_load_n(&k->mult, __ATOMIC_RELAXED);
	if (__builtin_expect(
		    __builtin_add_overflow(scaled, __atomic_load_n(&k->xtime_nsec, __ATOMIC_RELAXED), &v), 0))
		return 1;
	const uint32_t shift = __atomic_load_n(&k->shift, __ATOMIC_RELAXED);
	if (__builtin_expect(shift > 63, 0))
		return 1;
	v = (v >> shift) + __atomic_load_n(&k->base_ns, __ATOMIC_RELAXED);
	const uint32_t flags = __atomic_load_n(&k->flags, __ATOMIC_RELAXED);

	/* Acquire fence: as strata_kclock_end's. */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&k->seq, __ATOMIC_RELAXED) != seq || !(flags & STRATA_KCLOCK_VALID))
		return 1;
	*ns = v;
	return 0;
#else
	return strata_kclock_end(k, seq, tsc, lo, ns) ? 1 : 0; /* no page there: 1 */
#endif
}

/*
 * One attempt: 0 and *ns set (and *tsc: the TSC value *ns converts, for a
 * caller that also times a duration in ticks, the pthread preload's
 * hold_ns); 1 when the writer was in the middle of an update (odd or
 * changed seq: try again); -1 when the page is not valid.  Inlined by hot
 * callers, which take any non-zero to their slow path.
 */
STRATA_KCLOCK_HOT static inline int strata_kclock_try_tsc(const struct strata_kclock *k, uint64_t *ns,
							  uint64_t *tsc_out)
{
	uint32_t seq, lo;
	uint64_t tsc = strata_kclock_begin(k, &seq, &lo);

	*tsc_out = tsc;
	return strata_kclock_end(k, seq, tsc, lo, ns);
}

STRATA_KCLOCK_HOT static inline int strata_kclock_try(const struct strata_kclock *k, uint64_t *ns)
{
	uint64_t tsc;

	return strata_kclock_try_tsc(k, ns, &tsc);
}

/* strata_kclock_try with RDTSCP when `rdtscp` (only where
 * strata_kclock_has_rdtscp() said so), else as strata_kclock_try.  A
 * constant `rdtscp` leaves one instruction; a variable one a predicted
 * branch between the two. */
STRATA_KCLOCK_HOT static inline int strata_kclock_try_how(const struct strata_kclock *k, uint64_t *ns,
							  int rdtscp)
{
	uint32_t seq, lo;
	uint64_t tsc = strata_kclock_begin_how(k, &seq, &lo, rdtscp);

	return strata_kclock_end(k, seq, tsc, lo, ns);
}

static inline int strata_kclock_now(const struct strata_kclock *k, uint64_t *ns)
{
	for (int tries = 0; tries < 1000; tries++) {
		int rc = strata_kclock_try(k, ns);

		if (rc <= 0)
			return rc;
	}
	return -1;
}

/*
 * For a page written by a user-space process (strata-consumerd, flag
 * STRATA_KCLOCK_USER), which can be preempted while its seq is odd: wait
 * for it (sched_yield) up to max_wait_ns instead of giving up after 1000
 * tries, since clock_gettime is not the same clock to the ns.  -1 when the
 * page is not valid or the writer stayed busy that long (it died while
 * writing); max_wait_ns 0: no wait beyond the 1000 tries.
 * Async-signal-safe; a system call only while the page is busy.
 */
static inline int strata_kclock_now_patient(const struct strata_kclock *k, uint64_t *ns, uint64_t max_wait_ns)
{
	struct timespec t;
	uint64_t deadline = 0;

	for (;;) {
		if (strata_kclock_now(k, ns) == 0)
			return 0;
		if (!max_wait_ns || !(__atomic_load_n(&k->flags, __ATOMIC_RELAXED) & STRATA_KCLOCK_VALID))
			return -1;
		clock_gettime(CLOCK_MONOTONIC, &t);
		uint64_t now = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;

		if (!deadline)
			deadline = now + max_wait_ns;
		else if (now > deadline)
			return -1;
		sched_yield();
	}
}

#ifdef __cplusplus
}
#endif
#endif /* STRATA_KCLOCK_H */
