// The drain threads' scheduling changes (consumerd/sched_policy.h), each
// on a thread of its own: a multiplexing worker between streaming turns is
// SCHED_BATCH, back to SCHED_OTHER for a streaming turn, quick (SCHED_OTHER
// with the short slice) while a writer's first lap waits, set from another
// thread while it sleeps, and a policy someone else chose is left alone; a
// worker steps off its writers' CPUs when it may run elsewhere, its
// affinity given back as it was.
#include <gtest/gtest.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
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

// sched_getattr(2) of thread `tid`: its policy and slice request (ns;
// 0 on a kernel before 6.12, which has none).
struct Attr {
	uint32_t size, policy;
	uint64_t flags;
	int32_t nice;
	uint32_t priority;
	uint64_t runtime, deadline, period;
	uint32_t util_min, util_max;
};
Attr attr_of(pid_t tid)
{
	Attr a;
	memset(&a, 0, sizeof a);
	EXPECT_EQ(0, syscall(SYS_sched_getattr, tid, &a, sizeof a, 0));
	return a;
}

TEST(SchedPolicy, BetweenTurnsIsQuickBatchOrTheKernelsSlice)
{
	on_thread([] {
		EXPECT_TRUE(strata::between_turns(0, true, true));
		Attr a = attr_of(0);
		EXPECT_EQ(a.policy, static_cast<uint32_t>(SCHED_OTHER)) << "quick";
		// A kernel with per-task slices (6.12) reads the slice back (the
		// kernel's own when none was asked); an older one reads 0.
		const bool slices = a.runtime != 0;
		if (slices) {
			EXPECT_EQ(a.runtime, 100000u) << "the short slice, 100 us";
		}
		EXPECT_TRUE(strata::between_turns(0, false, true));
		a = attr_of(0);
		EXPECT_EQ(a.policy, static_cast<uint32_t>(SCHED_BATCH));
		if (slices) {
			EXPECT_NE(a.runtime, 100000u) << "the kernel's slice again";
		}
		EXPECT_TRUE(strata::between_turns(0, false, false)) << "the reaper: never batch";
		a = attr_of(0);
		EXPECT_EQ(a.policy, static_cast<uint32_t>(SCHED_OTHER));
		if (slices) {
			EXPECT_NE(a.runtime, 100000u);
		}
		EXPECT_EQ(a.nice, 0) << "nice untouched";
	});
}

// The pool sets its sleeping workers' policy from the thread that armed
// a first lap's wait: the worker is not woken for it, and finds it set.
TEST(SchedPolicy, BetweenTurnsSetsAnotherThreadAsleep)
{
	std::mutex mu;
	std::condition_variable cv;
	pid_t tid = 0;
	bool go = false;
	int seen = -1;
	std::thread t([&] {
		std::unique_lock<std::mutex> lk(mu);
		tid = static_cast<pid_t>(syscall(SYS_gettid));
		cv.notify_all();
		cv.wait(lk, [&] { return go; });
		seen = sched_getscheduler(0);
	});
	{
		std::unique_lock<std::mutex> lk(mu);
		cv.wait(lk, [&] { return tid != 0; });
	}
	EXPECT_TRUE(strata::between_turns(tid, false, true));
	EXPECT_EQ(attr_of(tid).policy, static_cast<uint32_t>(SCHED_BATCH));
	EXPECT_TRUE(strata::between_turns(tid, true, true));
	EXPECT_EQ(attr_of(tid).policy, static_cast<uint32_t>(SCHED_OTHER));
	EXPECT_TRUE(strata::between_turns(tid, false, true));
	{
		std::lock_guard<std::mutex> g(mu);
		go = true;
	}
	cv.notify_all();
	t.join();
	EXPECT_EQ(seen, SCHED_BATCH) << "what it woke with";
}

TEST(SchedPolicy, BetweenTurnsLeavesAnotherPolicyAlone)
{
	on_thread([] {
		struct sched_param p = {};
		ASSERT_EQ(sched_setscheduler(0, SCHED_IDLE, &p), 0);
		EXPECT_FALSE(strata::between_turns(0, true, true));
		EXPECT_EQ(own_policy(), SCHED_IDLE);
		EXPECT_FALSE(strata::between_turns(0, false, true));
		EXPECT_EQ(own_policy(), SCHED_IDLE);
	});
}

bool same_mask(const cpu_set_t &a, const cpu_set_t &b)
{
	return CPU_EQUAL(&a, &b);
}

// The calling thread's allowed CPUs: at least two of them?
bool two_allowed(cpu_set_t *allowed)
{
	return sched_getaffinity(0, sizeof *allowed, allowed) == 0 && CPU_COUNT(allowed) >= 2;
}

TEST(SchedPolicy, StepOffLeavesABusyCpuWhenAnotherIsAllowed)
{
	on_thread([] {
		cpu_set_t allowed;
		if (!two_allowed(&allowed))
			GTEST_SKIP() << "one CPU allowed: nowhere to step to";
		// Nothing busy, or busy elsewhere: stays, nothing changed.
		cpu_set_t busy;
		CPU_ZERO(&busy);
		EXPECT_FALSE(strata::step_off(busy));
		// Busy where we run: moved to a CPU outside the set.  A load
		// balance between the move and our look could bring the thread
		// back: three tries, each of which must move it.
		bool away = false;
		for (int i = 0; i < 3 && !away; i++) {
			const int me = sched_getcpu();
			ASSERT_GE(me, 0);
			CPU_ZERO(&busy);
			CPU_SET(me, &busy);
			ASSERT_TRUE(strata::step_off(busy));
			away = sched_getcpu() != me;
		}
		EXPECT_TRUE(away);
		cpu_set_t now;
		ASSERT_EQ(0, sched_getaffinity(0, sizeof now, &now));
		EXPECT_TRUE(same_mask(now, allowed)) << "the affinity given back";
		// Every allowed CPU busy: nowhere better, stays.
		EXPECT_FALSE(strata::step_off(allowed));
		ASSERT_EQ(0, sched_getaffinity(0, sizeof now, &now));
		EXPECT_TRUE(same_mask(now, allowed));
	});
}

// Writers of two drains, one on each CPU: the worker steps off the first
// drain's, then stays for the second's (the CPUs seen in the window cover
// every allowed one: a move would only land on the first's again); once
// the window passed, it steps off the newest drain's alone again.
TEST(SchedPolicy, RecentWritersOfOtherDrainsAreKeptOffToo)
{
	on_thread([] {
		cpu_set_t allowed;
		if (!two_allowed(&allowed))
			GTEST_SKIP() << "one CPU allowed: nowhere to step to";
		strata::RecentWriters recent;
		uint64_t t = 1000;
		// Writers where we run, in a new window: a move.  A migration
		// between our look and step_off's would leave nothing to do:
		// three tries, each in a window of its own.
		auto step_from_here = [&recent, &t](cpu_set_t *here) {
			for (int i = 0; i < 3; i++) {
				t += strata::RecentWriters::kWindowNs + 1000;
				CPU_ZERO(here);
				CPU_SET(sched_getcpu(), here);
				if (recent.before_turn(*here, t))
					return true;
			}
			return false;
		};
		cpu_set_t first, second;
		EXPECT_TRUE(step_from_here(&first));
		CPU_AND(&second, &allowed, &first);
		CPU_XOR(&second, &allowed, &second); // every other allowed CPU
		EXPECT_FALSE(recent.before_turn(second, t + 1000)) << "every allowed CPU had a writer";
		cpu_set_t here;
		EXPECT_TRUE(step_from_here(&here)) << "a new window: this drain's writers only";
	});
}

// A mask narrowed by whoever runs the daemon (taskset) is kept: narrowed
// to the one CPU it runs on, the worker stays; narrowed to two, it steps
// only to the other; the narrowed mask is what is given back.
TEST(SchedPolicy, StepOffStaysInsideANarrowedMask)
{
	on_thread([] {
		cpu_set_t allowed;
		ASSERT_EQ(0, sched_getaffinity(0, sizeof allowed, &allowed));
		int a = -1, b = -1;
		for (int c = 0; c < CPU_SETSIZE && b < 0; c++)
			if (CPU_ISSET(c, &allowed))
				(a < 0 ? a : b) = c;
		cpu_set_t one, busy, now;
		CPU_ZERO(&one);
		CPU_SET(a, &one);
		ASSERT_EQ(0, sched_setaffinity(0, sizeof one, &one));
		ASSERT_EQ(a, sched_getcpu());
		EXPECT_FALSE(strata::step_off(one)) << "its one CPU busy: nowhere to go";
		ASSERT_EQ(0, sched_getaffinity(0, sizeof now, &now));
		EXPECT_TRUE(same_mask(now, one));
		if (CPU_COUNT(&allowed) < 3)
			GTEST_SKIP() << "fewer than 3 CPUs allowed: the two-CPU mask not tried";
		cpu_set_t two = one;
		CPU_SET(b, &two);
		ASSERT_EQ(0, sched_setaffinity(0, sizeof two, &two));
		CPU_ZERO(&busy);
		CPU_SET(a, &busy); // we run on a: the narrowing above kept us there
		ASSERT_TRUE(strata::step_off(busy));
		EXPECT_EQ(b, sched_getcpu());
		ASSERT_EQ(0, sched_getaffinity(0, sizeof now, &now));
		EXPECT_TRUE(same_mask(now, two));
	});
}

} // namespace
