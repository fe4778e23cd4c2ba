// The stops under way (consumerd/stop_coordinator.h): one stop a session,
// joined by later STOPs and DESTROYs, the daemon's exit joined by nothing,
// gate ids never 0 nor reused, each stop taken once.
#include <gtest/gtest.h>

#include "stop_coordinator.h"

using strata::daemon_impl::StopCoordinator;
using strata::daemon_impl::StopWait;

namespace {

StopWait stop_of(uint64_t session, bool destroy, uint64_t conn)
{
	StopWait w;
	w.session_id = session;
	w.destroy = destroy;
	w.to.push_back({conn, 1, destroy});
	return w;
}

TEST(StopCoordinator, ALaterStopOfTheSameSessionJoinsIt)
{
	StopCoordinator c;
	EXPECT_TRUE(c.empty());
	const StopWait::To stop2{2, 7, false}, destroy3{3, 8, true};
	EXPECT_FALSE(c.join(5, false, &stop2)); // nothing under way yet
	const uint64_t g = c.wait(stop_of(5, false, 1));
	EXPECT_NE(g, 0u);
	EXPECT_FALSE(c.empty());
	EXPECT_TRUE(c.join(5, false, &stop2));
	EXPECT_TRUE(c.join(5, true, &destroy3)); // a DESTROY makes the whole stop one
	EXPECT_TRUE(c.join(5, false, nullptr));  // an owner's end: nobody more to answer
	EXPECT_FALSE(c.join(6, false, &stop2));  // another session's is its own
	StopWait w;
	ASSERT_TRUE(c.take(g, w));
	EXPECT_EQ(w.session_id, 5u);
	EXPECT_TRUE(w.destroy);
	ASSERT_EQ(w.to.size(), 3u);
	EXPECT_EQ(w.to[1].conn_id, 2u);
	EXPECT_FALSE(w.to[1].destroy);
	EXPECT_EQ(w.to[2].conn_id, 3u);
	EXPECT_TRUE(w.to[2].destroy);
	EXPECT_TRUE(c.empty());
	EXPECT_FALSE(c.take(g, w));             // once
	EXPECT_FALSE(c.join(5, false, &stop2)); // over: a new STOP is a new stop
}

TEST(StopCoordinator, TheDaemonsExitIsJoinedByNothingAndGatesAreNeverReused)
{
	StopCoordinator c;
	const uint64_t exit_gate = c.wait(StopWait()); // session 0
	const StopWait::To to{4, 1, false};
	EXPECT_FALSE(c.join(0, false, &to));
	const uint64_t a = c.wait(stop_of(1, false, 1));
	const uint64_t b = c.wait(stop_of(2, true, 2));
	EXPECT_NE(exit_gate, 0u);
	EXPECT_NE(a, exit_gate);
	EXPECT_NE(b, a);
	StopWait w;
	EXPECT_FALSE(c.take(12345, w)); // an unknown gate
	ASSERT_TRUE(c.take(a, w));
	EXPECT_EQ(w.session_id, 1u);
	const uint64_t d = c.wait(stop_of(1, false, 3)); // the same session again
	EXPECT_NE(d, a);
	EXPECT_NE(d, b);
	ASSERT_TRUE(c.take(exit_gate, w));
	EXPECT_EQ(w.session_id, 0u);
	EXPECT_TRUE(w.to.empty());
	EXPECT_FALSE(c.empty()); // b and d still wait
}

} // namespace
