/*
 * tp_sync.c - link this object into a traced program (Strata::tp_sync) and
 * tracing that was switched on before the program started records from its
 * first event on: a constructor asks the consumer daemon, synchronously,
 * which sessions are active (strata_ctl_sync_query, libtrace/control).
 *
 * Priority 110 runs after the module constructors (101) of the same
 * executable, so the REGISTER message lists their tracepoints; modules
 * loaded later (dlopen) are armed by the runtime with the same rules.
 * No daemon: the query returns at once and the program runs untraced.
 *
 * fork() without exec: the runtime forgets the parent's buffers in the
 * child and calls the hook registered here, so the child registers as a
 * process of its own and records into buffers of its own.
 */
#include "control/control.h"
#include "runtime.h"

static void strata__tp_sync_fork_child(void)
{
	(void)strata_ctl_fork_child();
}

static void __attribute__((constructor(110), used)) strata__tp_sync_ctor(void)
{
	strata_rt_set_fork_child_hook(strata__tp_sync_fork_child);
	(void)strata_ctl_sync_query();
}
