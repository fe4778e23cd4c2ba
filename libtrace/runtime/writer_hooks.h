/*
 * writer_hooks.h - named steps of the writer's path, for tests only.
 *
 * libstrata itself is built without hooks (STRATA_WRITER_HOOKS undefined:
 * every STRATA_WHOOK compiles to nothing).  The test variant
 * libstrata-hooked is built from the same sources with the hooks on; a
 * test sets strata_test_writer_hook and, at the step it chooses, runs a
 * nested writer on the same thread, exactly as a signal handler that
 * interrupts the writer between two instructions would
 * (tests/unit/rb_nesting_test.cpp).
 */
#ifndef STRATA_WRITER_HOOKS_H
#define STRATA_WRITER_HOOKS_H

enum strata_writer_step {
	STRATA_W_TSC_READ,           /* the fast path read the TSC (its nesting level taken),
					* before it loaded head; the general path: its level taken */
	STRATA_W_HEAD_LOADED,        /* strata_reserve loaded head, before the first try */
	STRATA_W_CLOCK_READ,         /* clock read: the first try, or a retry (reserve_slow) */
	STRATA_W_BEFORE_RESERVE_CAS, /* the record fits the open packet */
	STRATA_W_BEFORE_CLOSE_CAS,   /* the record does not fit: about to close (switch_packet) */
	STRATA_W_CLOSE_WON,          /* close CAS won, closing fields not yet written */
	STRATA_W_CLOSE_WRITTEN,      /* closing fields written, before their commit */
	STRATA_W_CLOSED,             /* close committed, before retrying */
	STRATA_W_AT_BOUNDARY,        /* head at a boundary, before the free check */
	STRATA_W_FREE_CHECKED,       /* the sub-buffer is free, before the open CAS */
	STRATA_W_OPEN_WON,           /* open CAS won, header not yet written */
	STRATA_W_OPEN_WRITTEN,       /* packet header written, before its commit */
	STRATA_W_RESERVED,           /* space reserved, record header not yet written */
	STRATA_W_BEFORE_COMMIT,      /* strata_commit, before the commit add */
	STRATA_W_N_STEPS,            /* the steps above: every writer may pass them */
	/* Blocking mode only, ring full: each check of the wait (not among the
	 * steps rb_nesting_test interrupts one by one). */
	STRATA_W_BLOCK_WAIT = STRATA_W_N_STEPS + 1,
	/* Blocking mode: a wait's sleep ended by the consumer's FUTEX_WAKE
	 * (not its timeout, not a signal). */
	STRATA_W_BLOCK_WOKEN,
	/* A sharer's countdown to its claim (promote_lane): the count loaded,
	 * not yet stored (the general path of a thread in the shared lanes). */
	STRATA_W_SHARER_COUNT
};

#ifdef STRATA_WRITER_HOOKS
#ifdef __cplusplus
extern "C" {
#endif
/* Called at every step when non-null (exported by libstrata-hooked only). */
extern void (*strata_test_writer_hook)(enum strata_writer_step step);
#ifdef __cplusplus
}
#endif
#define STRATA_WHOOK(step)                             \
	do {                                           \
		if (strata_test_writer_hook)           \
			strata_test_writer_hook(step); \
	} while (0)
#else
#define STRATA_WHOOK(step) \
	do {               \
	} while (0)
#endif

#endif
