// change_hook_test.cpp - libstrata's change hook (libtrace/runtime/change_hook.cpp):
// run once per strata_rt_quiesce, the last one set wins, none after it is
// cleared, and it sees the tracepoint states the control call just wrote.
#include <gtest/gtest.h>

#include <atomic>

#include <strata/dynamic.h>

#include "runtime.h"

namespace {

std::atomic<int> g_a{0}, g_b{0};
strata_dyn_event *g_ev;
std::atomic<uint32_t> g_seen_state{0xffffffffu};

void hook_a()
{
	g_a.fetch_add(1, std::memory_order_relaxed);
}
void hook_b()
{
	g_b.fetch_add(1, std::memory_order_relaxed);
}
void hook_state()
{
	g_seen_state.store(__atomic_load_n(&g_ev->state, __ATOMIC_RELAXED), std::memory_order_relaxed);
}

TEST(ChangeHook, RunsOncePerQuiesceLastOneWins)
{
	strata_rt_set_change_hook(hook_a);
	strata_rt_quiesce();
	strata_rt_quiesce();
	EXPECT_EQ(g_a.load(), 2);
	strata_rt_set_change_hook(hook_b);
	strata_rt_quiesce();
	EXPECT_EQ(g_a.load(), 2);
	EXPECT_EQ(g_b.load(), 1);
	strata_rt_set_change_hook(nullptr);
	strata_rt_quiesce();
	EXPECT_EQ(g_a.load(), 2);
	EXPECT_EQ(g_b.load(), 1);
}

TEST(ChangeHook, SeesTheStatesJustArmed)
{
	static const strata_dyn_field f[] = {{"x", STRATA_FIELD_INTEGER, 4, 0, 10, 0}};
	ASSERT_EQ(strata_dyn_declare("hooktest", "ev", STRATA_LOGLEVEL_INFO, f, 1, &g_ev), 0);
	strata_channel_config cfg = {};
	uint8_t uuid[16] = {1};
	int fd = strata_rt_slot_open(3, &cfg, uuid);
	ASSERT_GE(fd, 0);
	strata_rule r = {};
	snprintf(r.pattern, sizeof r.pattern, "hooktest:*");
	r.loglevel_max = -1;
	r.enable = 1;
	ASSERT_EQ(strata_rt_slot_set_rules(3, &r, 1), 0);
	strata_rt_set_change_hook(hook_state);
	strata_rt_quiesce(); // as tp-async does after re-arming
	EXPECT_NE(g_seen_state.load(), 0u);
	EXPECT_NE(g_seen_state.load(), 0xffffffffu);
	strata_rt_slot_close(3);
	strata_rt_quiesce();
	EXPECT_EQ(g_seen_state.load(), 0u);
	strata_rt_set_change_hook(nullptr);
	strata_dyn_release(g_ev);
}

} // namespace
