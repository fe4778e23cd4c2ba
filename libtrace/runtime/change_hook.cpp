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
 * (docs/pthread.md, "Counting mode").  And a test the update signal's
 * handler makes before it serves the signal (strata_rt_state_ready): the
 * preload, interrupted inside an update of its own count table, has the
 * handler return at once and raises the signal again once out of it
 * (strata_rt_state_retry), so that the change's flush finds the table whole.
 *
 * Contract: the hooks may run in tp-async's signal handler on any thread, so
 * they must be async-signal-safe (the JVM agent writes an eventfd).  Setting
 * one is one atomic store; at most one hook of each kind, the last one set wins.
 */
#include <atomic>
#include <csignal>

#include "rt_internal.h"

namespace {
// Release in set pairs with the acquire in strata_rt_state_changed: a hook
// seen is fully initialised by whoever set it.
std::atomic<strata_rt_change_hook> g_change_hook{nullptr};
// The same pairing: set's release, the callers' acquire.
std::atomic<strata_rt_change_hook> g_before_hook{nullptr}, g_after_hook{nullptr};
// The same pairing for the ready hook.
std::atomic<strata_rt_ready_hook> g_ready_hook{nullptr};
// The update signal, 0: none installed (relaxed: a setting, stored before
// the handler that makes a retry possible is installed).
std::atomic<int> g_update_signo{0};
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

extern "C" STRATA_EXPORT void strata_rt_set_ready_hook(strata_rt_ready_hook hook)
{
	g_ready_hook.store(hook, std::memory_order_release);
}

extern "C" int strata_rt_state_ready(void)
{
	strata_rt_ready_hook h = g_ready_hook.load(std::memory_order_acquire);
	return h ? h() : 1;
}

extern "C" void strata_rt_set_update_signal(int signo)
{
	g_update_signo.store(signo, std::memory_order_relaxed);
}

// raise: the calling thread, at once (the signal is not blocked outside the
// handler, and the handler masks it while it runs).  [AS-safe]
extern "C" STRATA_EXPORT void strata_rt_state_retry(void)
{
	const int signo = g_update_signo.load(std::memory_order_relaxed);
	if (signo > 0)
		(void)raise(signo);
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
