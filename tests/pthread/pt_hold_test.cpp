// pt_hold_test.cpp - the pthread preload's hold clock (preload/pt_hold.h,
// docs/pthread.md "Hold times"), against a clock page of the test's own:
// a thread's first hold while the page is busy (seq odd) or not valid is
// measured with CLOCK_MONOTONIC, never converted with no scale (0 ns);
// later holds convert with the last valid scale, exactly.
#include <gtest/gtest.h>

#include <cstring>

#include "pt_hold.h"

namespace {

struct Page {
	strata_kclock k;
	Page()
	{
		memset(&k, 0, sizeof k);
		k.version = 1;
		k.flags = STRATA_KCLOCK_VALID;
		k.mult = 3u << 20; // 3 ns a tick at shift 20
		k.shift = 20;
		pt_clock = reinterpret_cast<uintptr_t>(&k);
		pt_scale = 0; // no scale read yet (a process's first hold)
	}
	~Page() { pt_clock = 0; }
};

} // namespace

TEST(PtHold, FirstHoldOnABusyPageIsMeasuredWithTheMonotonicClock)
{
	Page p;
	p.k.seq = 1; // the writer is inside its update, for every try
	EXPECT_EQ(0, strata_pt_hold_tsc()) << "no scale: CLOCK_MONOTONIC for this hold";
	EXPECT_EQ(0u, pt_scale);
	p.k.seq = 2; // the update done
	EXPECT_EQ(1, strata_pt_hold_tsc());
	EXPECT_EQ((uint64_t(3u << 20) << 32) | 20, pt_scale);
	EXPECT_EQ(3000u, strata_pt_ticks_ns(1000));
	// Busy again: the last valid scale serves, its holds stay in ticks.
	p.k.seq = 3;
	p.k.mult = 5u << 20;
	EXPECT_EQ(1, strata_pt_hold_tsc());
	EXPECT_EQ(3000u, strata_pt_ticks_ns(1000));
	EXPECT_EQ(uint64_t(3) << 20, strata_pt_ticks_ns(1u << 20))
		<< "a long hold refreshes: the page busy, the last";
	p.k.seq = 4;
	EXPECT_EQ(uint64_t(5) << 20, strata_pt_ticks_ns(1u << 20)) << "a long hold refreshes: the new scale";
}

TEST(PtHold, NoValidPageNoTicks)
{
	Page p;
	p.k.flags = 0; // the clock source left the TSC before any hold
	EXPECT_EQ(0, strata_pt_hold_tsc());
	EXPECT_EQ(0u, pt_scale);
	pt_clock = 1; // CLOCK_MONOTONIC records (STRATA_CLOCK=monotonic)
	EXPECT_EQ(0, strata_pt_hold_tsc());
}
