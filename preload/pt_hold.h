/*
 * pt_hold.h - the pthread preload's hold times: the clock that measures a
 * hold (the record clock page's TSC scale, or CLOCK_MONOTONIC) and the
 * conversion of TSC ticks to ns (docs/pthread.md, "Hold times").  Included
 * by pthread_wrap.c only (and by its unit test, which drives a page of its
 * own through pt_clock): static state, one copy per library.
 */
#ifndef STRATA_PRELOAD_PT_HOLD_H
#define STRATA_PRELOAD_PT_HOLD_H

#include <stdint.h>
#include <string.h>

#include <strata/tracepoint.h>

#include "runtime.h"
#include "strata_kclock.h"

#ifndef STRATA_PT_TLS
#define STRATA_PT_TLS __thread __attribute__((tls_model("initial-exec")))
#endif

/* ---- hold times ----------------------------------------------------------- */

/*
 * hold_ns is a duration on one thread, from the acquisition to the unlock:
 * both ends are plain `rdtsc` (no lfence), converted with the mult and
 * shift of the clock page that stamps the records, when there is one.  The
 * record's own timestamp stays the runtime's ordered read (strata_reserve):
 * it alone places the record among other threads' events and in its lane.
 * An unfenced read may run a few tens of cycles before or after the
 * instructions around it (the trylock, the real unlock), so a hold may be
 * off by that much, as it already was by the clock read's own duration;
 * a TSC difference on another CPU after a migration is synchronised by the
 * kernel's TSC clock source (the page is valid only then), and a negative
 * one (skew) counts as 0.  Without a page (STRATA_CLOCK=monotonic, no
 * consumer page) both ends are CLOCK_MONOTONIC reads, as before.
 *
 * pt_clock: 0 not known yet, 1 clock_gettime, else the page (set once, by
 * any thread, to the same value: relaxed would do, acquire pairs with the
 * runtime's release of the page's mapping for a thread that reads it from
 * here first).
 *
 * pt_scale: the page's (mult << 32 | shift) as last read valid (0: not yet
 * read), refreshed by every 1024th hold of each thread and by every hold
 * of 2^20 ticks or more (about 0.4 ms at 2.6 GHz); stored only on change,
 * so threads do not write one line pair by pair.  mult moves only by the kernel's NTP
 * frequency corrections (or the consumer's recalibration), parts per
 * million: on a short hold a stale scale is off by far less than a ns, and
 * long holds always convert with a fresh one.  A refresh that finds the
 * page busy or no longer valid (the clock source left the TSC) keeps the
 * last valid scale.
 */
static uintptr_t pt_clock;
static uint64_t pt_scale;

static __attribute__((noinline)) uintptr_t strata_pt_clock_slow(void)
{
#if defined(__x86_64__)
	const struct strata_kclock *k = strata_rt_clock_page();
	uintptr_t v = k ? (uintptr_t)k : strata_rt_clock_id() == STRATA_CLOCK_MONOTONIC ? 1 : 0;
#else
	uintptr_t v = 1;
#endif
	if (v)
		__atomic_store_n(&pt_clock, v, __ATOMIC_RELEASE); /* pairs with strata_pt_clock's acquire */
	return v;
}

static inline uintptr_t strata_pt_clock(void)
{
	uintptr_t v = __atomic_load_n(&pt_clock, __ATOMIC_ACQUIRE); /* see pt_clock */
	return __builtin_expect(v != 0, 1) ? v : strata_pt_clock_slow();
}

static STRATA_PT_TLS uint32_t scale_age; /* holds since this thread's refresh */

/* Read the page's scale into pt_scale (seqcount as strata_kclock_try); a
 * busy or invalid page leaves the last valid scale. */
static __attribute__((noinline)) uint64_t strata_pt_scale_refresh(void)
{
	scale_age = 0; /* a handler's increment lost meanwhile: harmless */
	const struct strata_kclock *k =
		(const struct strata_kclock *)__atomic_load_n(&pt_clock, __ATOMIC_ACQUIRE);
	/* The writer busy: a few more tries (as strata_kclock_now) while there
	 * is no scale yet, else keep the last one. */
	for (int tries = 0; tries < 1000; tries++) {
		/* Acquire: pairs with the writer's barrier before its final (even)
		 * seq store, as strata_kclock_try. */
		uint32_t seq = __atomic_load_n(&k->seq, __ATOMIC_ACQUIRE);
		/* Acquire: each load before the re-check below (the fence of
		 * strata_kclock_try, which TSan does not model; plain loads on
		 * x86-64); the writer's barrier after its odd seq store pairs. */
		uint32_t flags = __atomic_load_n(&k->flags, __ATOMIC_ACQUIRE);
		uint64_t mult = __atomic_load_n(&k->mult, __ATOMIC_ACQUIRE);
		uint32_t shift = __atomic_load_n(&k->shift, __ATOMIC_ACQUIRE);
		uint64_t scale = mult << 32 | shift;
		/* relaxed (pt_scale): a plain value, any valid one converts correctly. */
		uint64_t last = __atomic_load_n(&pt_scale, __ATOMIC_RELAXED);
		if (!(seq & 1) && __atomic_load_n(&k->seq, __ATOMIC_RELAXED) == seq) {
			if (!(flags & STRATA_KCLOCK_VALID) || shift > 63)
				return last; /* the clock source left the TSC */
			if (last != scale)
				__atomic_store_n(&pt_scale, scale, __ATOMIC_RELAXED);
			return scale;
		}
		if (last)
			return last;
	}
	return 0;
}

/* TSC ticks -> ns (see pt_scale). */
static inline uint64_t strata_pt_ticks_ns(uint64_t ticks)
{
	uint64_t scale = __atomic_load_n(&pt_scale, __ATOMIC_RELAXED); /* see pt_scale */
	if (__builtin_expect((++scale_age & 1023) == 0 || ticks >= (1u << 20) || scale == 0, 0))
		scale = strata_pt_scale_refresh();
	return (uint64_t)(((unsigned __int128)ticks * (scale >> 32)) >> (scale & 63));
}

/* Whether a hold starting now is measured in TSC ticks: a page, and a scale
 * to convert them with (read now if there is none yet).  A page busy
 * throughout the refresh's tries, or not valid (the clock source is not the
 * TSC), at a thread's first hold used to give that hold 0 ns (its ticks
 * times no scale): such a hold is measured with CLOCK_MONOTONIC instead. */
static inline int strata_pt_hold_tsc(void)
{
	if (strata_pt_clock() <= 1)
		return 0;
	/* relaxed (pt_scale): once non-zero it never returns to 0. */
	return __builtin_expect(__atomic_load_n(&pt_scale, __ATOMIC_RELAXED) != 0, 1) ||
	       strata_pt_scale_refresh() != 0;
}

/* ---- a hold that ends at its record's clock read ------------------------- */

/*
 * The uncontended pair's unlock with a TSC-timed acquisition: the hold
 * ends at the record's own ordered TSC read (strata_rt_reserve_hold), taken
 * after the real unlock, instead of at a TSC read of its own (about 8 ns
 * saved per pair, docs/pthread.md "The uncontended pair's cost").  The
 * record's timestamp is then exactly the hold's end.  Only for the common
 * case: one session slot records the event, no probe, no field filter,
 * the runtime's fast path (an owned lane, room in the packet, the page
 * readable), a hold short enough to convert with the scale as it is
 * (below the 2^20 ticks that make strata_pt_ticks_ns refresh it, see
 * pt_scale); anything else returns 0 with nothing written, and the caller
 * takes the path with its own TSC read and the generated emitter.
 */

/* pthread:mutex_held's and mutex_tryheld's payload as the generated
 * emitter writes it (pthread_tp.h: lock u64, site u32, hold_ns u32,
 * byte-packed in order, native byte order); tests/unit/rb_hold_test.cpp
 * compares the two. */
#define STRATA_PT_HELD_SIZE 16u
static inline void strata_pt_held_write(char *rec, uint64_t lock, uint32_t site, uint32_t hold_ns)
{
	memcpy(rec, &lock, 8);
	memcpy(rec + 8, &site, 4);
	memcpy(rec + 12, &hold_ns, 4);
}

/* The longest hold (ticks) timed at the record: below the refresh
 * threshold, and at most 2^31 ns with the scale as it is (a refresh at the
 * conversion moves mult by parts per million, far from the 2x left to
 * UINT32_MAX); 0 for a page whose ticks are that long (no TSC's are). */
static inline uint64_t strata_pt_held_max_ticks(void)
{
	const uint64_t max = (1u << 20) - 1;
	uint64_t scale = __atomic_load_n(&pt_scale, __ATOMIC_RELAXED); /* see pt_scale */
	return ((max * (scale >> 32)) >> (scale & 63)) <= (1u << 31) ? max : 0;
}

/* Emit `tp` (mutex_held or mutex_tryheld) for the hold of `lock` from TSC
 * value t0 (strata_pt_hold_tsc was 1 at its start) to the record's clock
 * read: 1 if written, 0 if nothing was (see above). */
static inline int strata_pt_held_at_record(struct strata_tracepoint *tp, uint64_t lock, uint32_t site,
					   uint64_t t0)
{
	/* Relaxed: as the generated emitter's read of the state. */
	const uint32_t st = __atomic_load_n(&tp->state, __ATOMIC_RELAXED);
	const uint32_t m = st & STRATA_TP_SLOTS_MASK;
	struct strata_reservation r;
	uint64_t ticks;
	if (st != m || m == 0 || (m & (m - 1)) != 0 ||
	    !strata_rt_reserve_hold(&r, tp, (unsigned)__builtin_ctz(m), STRATA_PT_HELD_SIZE, t0,
				    strata_pt_held_max_ticks(), &ticks))
		return 0;
	strata_pt_held_write(r.rec, lock, site, (uint32_t)strata_pt_ticks_ns(ticks));
	strata_commit(&r);
	return 1;
}

#endif
