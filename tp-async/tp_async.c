/*
 * tp_async.c - asynchronous enablement (issue 3): link this object instead
 * of tp-sync (Strata::tp_async) and the program also joins sessions that
 * start after it, leaves those that stop, and follows rule changes.
 *
 * The constructor installs a handler for one real-time signal
 * ($STRATA_ASYNC_SIGNAL, default SIGRTMAX-3; a signal the program already
 * handles is left alone and async enablement is off) and registers like
 * tp-sync, announcing that signal.  When a session changes, the daemon
 * sends it; the handler re-runs the state query (async-signal-safe: no
 * allocation, no locks), makes the change visible to every thread
 * (membarrier), and only then closes its connection, which is the
 * acknowledgement the daemon waits for before answering the controller.
 * No descriptor stays open, and no thread is added to the program, but one:
 * when the daemon speaks protocol version 6, a helper thread (strata-agg,
 * blocked on an eventfd) opens and closes the regions of aggregation
 * sessions that start or stop while the program runs, which a signal
 * handler cannot (docs/probes.md, "Aggregation sessions").
 */
#include "control/control.h"
#include "runtime.h"

static void strata__tp_async_fork_child(void)
{
	(void)strata_ctl_fork_child();
}

static void __attribute__((constructor(110), used)) strata__tp_async_ctor(void)
{
	strata_rt_set_fork_child_hook(strata__tp_async_fork_child);
	(void)strata_ctl_async_init(0);
}
