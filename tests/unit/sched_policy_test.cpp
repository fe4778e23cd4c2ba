// The drain threads' scheduling changes (consumerd/sched_policy.h), each
// on a thread of its own: a multiplexing worker between streaming turns is
// SCHED_BATCH, back to SCHED_OTHER for a streaming turn, and a policy
// someone else chose is left alone.
#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <thread>

#include "sched_policy.h"

namespace {

int own_policy()
{
	return sched_getscheduler(0);
}

template <class F> void on_thread(F f)
{
	std::thread t(f);
	t.join();
}

TEST(SchedPolicy, QuietIsBatchUntilAStreamingTurn)
{
	on_thread([] {
		ASSERT_EQ(own_policy(), SCHED_OTHER);
		EXPECT_TRUE(strata::quiet_scheduling(true));
		EXPECT_EQ(own_policy(), SCHED_BATCH);
		EXPECT_TRUE(strata::quiet_scheduling(true)); // already: unchanged
		EXPECT_EQ(own_policy(), SCHED_BATCH);
		EXPECT_TRUE(strata::quiet_scheduling(false));
		EXPECT_EQ(own_policy(), SCHED_OTHER);
	});
}

TEST(SchedPolicy, AnotherPolicyIsLeftAlone)
{
	on_thread([] {
		struct sched_param p = {};
		ASSERT_EQ(sched_setscheduler(0, SCHED_IDLE, &p), 0);
		EXPECT_FALSE(strata::quiet_scheduling(true));
		EXPECT_EQ(own_policy(), SCHED_IDLE);
		EXPECT_FALSE(strata::quiet_scheduling(false));
		EXPECT_EQ(own_policy(), SCHED_IDLE);
	});
}

} // namespace
