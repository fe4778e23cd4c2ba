/*
 * change_hook.cpp - one process-wide callback run after the control plane
 * changed tracepoint states (strata_rt_quiesce: a tp-async update, early
 * tracing).  For bindings that must act on enablement rather than test a
 * state word at each call, e.g. the JVM agent switching JVMTI notifications
 * on and off (jvm/agent.cpp).  And a pair run around the control plane's
 * application of a daemon's or the module's answer: before it
 * (strata_rt_state_changing), while the sessions it may stop still record,
 * and after it (strata_rt_state_settled, whether or not anything changed):
 * the pthread preload suspends its counting and writes the pairs it counted
 * (docs/pthread.md, "Counting mode").
 *
 * Contract: the hooks may run in tp-async's signal handler on any thread, so
 * they must be async-signal-safe (the JVM agent writes an eventfd).  Setting
 * one is one atomic store; at most one hook of each kind, the last one set wins.
 */
#include <atomic>

#include "rt_internal.h"

namespace {
// Release in set pairs with the acquire in strata_rt_state_changed: a hook
// seen is fully initialised by whoever set it.
std::atomic<strata_rt_change_hook> g_change_hook{nullptr};
// The same pairing: set's release, the callers' acquire.
std::atomic<strata_rt_change_hook> g_before_hook{nullptr}, g_after_hook{nullptr};
} // namespace

extern "C" STRATA_EXPORT void strata_rt_set_state_hooks(strata_rt_change_hook before,
							strata_rt_change_hook after)
{
	g_after_hook.store(after, std::memory_order_release);
	g_before_hook.store(before, std::memory_order_release);
}

extern "C" STRATA_EXPORT void strata_rt_state_changing(void)
{
	strata_rt_change_hook h = g_before_hook.load(std::memory_order_acquire);
	if (h)
		h();
}

extern "C" STRATA_EXPORT void strata_rt_state_settled(void)
{
	strata_rt_change_hook h = g_after_hook.load(std::memory_order_acquire);
	if (h)
		h();
}

extern "C" STRATA_EXPORT void strata_rt_set_change_hook(strata_rt_change_hook hook)
{
	g_change_hook.store(hook, std::memory_order_release);
}

extern "C" void strata_rt_state_changed(void)
{
	strata_rt_change_hook h = g_change_hook.load(std::memory_order_acquire);
	if (h)
		h();
}
