/*
 * change_hook.cpp - one process-wide callback run after the control plane
 * changed tracepoint states (strata_rt_quiesce: a tp-async update, early
 * tracing).  For bindings that must act on enablement rather than test a
 * state word at each call, e.g. the JVM agent switching JVMTI notifications
 * on and off (jvm/agent.cpp).
 *
 * Contract: the hook may run in tp-async's signal handler on any thread, so
 * it must be async-signal-safe (the JVM agent writes an eventfd).  Setting
 * it is one atomic store; at most one hook, the last one set wins.
 */
#include <atomic>

#include "rt_internal.h"

namespace {
// Release in set pairs with the acquire in strata_rt_state_changed: a hook
// seen is fully initialised by whoever set it.
std::atomic<strata_rt_change_hook> g_change_hook{nullptr};
} // namespace

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
