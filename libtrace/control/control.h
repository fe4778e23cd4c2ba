/*
 * control.h - the process side of the control plane, inside libstrata.
 *
 * strata_ctl_sync_query() is what tp-sync's constructor calls: ask the
 * consumer daemon (if one answers) which sessions are active, open their
 * buffers, arm the tracepoints, hand the memfds over, and close the socket.
 *
 * Contract: called from ordinary thread context (a constructor, or the
 * runtime's fork-child hook), never from a signal handler (it allocates).
 * It never blocks longer than STRATA_REGISTER_TIMEOUT_MS (default 1000 ms)
 * in total, and returns at once when no daemon listens: a traced program
 * without a daemon runs exactly as without tracing.  It keeps no thread and
 * no file descriptor of its own.
 */
#ifndef STRATA_CONTROL_CONTROL_H
#define STRATA_CONTROL_CONTROL_H

#ifdef __cplusplus
extern "C" {
#endif

/* Returns the number of sessions joined (0: none active or no daemon), or a
 * negative errno on a protocol or buffer failure (tracing then stays off
 * for the sessions concerned, with one warning on stderr).  With
 * STRATA_DEBUG=1 it reports on stderr how long it took. */
__attribute__((visibility("default"))) int strata_ctl_sync_query(void);

/* tp-async: install the handler of `signo` (0: $STRATA_ASYNC_SIGNAL, else
 * SIGRTMAX-3; left alone if the program handles that signal), then query
 * like strata_ctl_sync_query, announcing the signal.  From then on the
 * daemon signals this process when a session starts or stops or its rules
 * change, and the handler re-queries (async-signal-safe) before
 * acknowledging by closing its connection. */
__attribute__((visibility("default"))) int strata_ctl_async_init(int signo);

/* For the runtime's fork-child hook: forget the parent's sessions, then
 * query as the new process. */
__attribute__((visibility("default"))) int strata_ctl_fork_child(void);

#ifdef __cplusplus
}
#endif
#endif
