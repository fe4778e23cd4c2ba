/*
 * runtime.h - internal contract between the tracing runtime (libtrace: the
 * registry, buffers and writer) and the control plane (the state query client,
 * tp-sync, tp-async, the preload library, the JVM agent).  Not installed:
 * an internal interface, not a public API.  The functions are nevertheless
 * exported from libstrata.so (STRATA_EXPORT, the strata_* version script),
 * since their callers are objects linked into other modules (tp-sync and
 * tp-async into programs, libstrata-pthread.so, libstrata-jvm.so).
 *
 * Roles:
 *   - module constructors/destructors call strata_register_tracepoints /
 *     strata_unregister_tracepoints (include/strata/tracepoint.h);
 *   - the control plane (tp-sync's constructor, tp-async's signal handler)
 *     opens session slots, sets their rules, and acknowledges;
 *   - application threads only run strata_reserve/strata_commit.
 *
 * Signal safety: every function below marked [AS-safe] may be called from a
 * signal handler that interrupted any application code, including a
 * tracepoint in progress and including another control-plane call on the
 * same thread (the runtime serialises control-plane calls with a try-lock
 * and reports STRATA_RT_EBUSY rather than deadlock).  They neither allocate
 * nor take blocking locks; they may make system calls.
 */
#ifndef STRATA_LIBTRACE_RUNTIME_H
#define STRATA_LIBTRACE_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#include "strata_abi.h"

#ifdef __cplusplus
extern "C" {
#endif

#define STRATA_RT_EBUSY (-16)

/* Per-channel buffer geometry, as the controller asked for it. */
struct strata_channel_config {
	char name[STRATA_NAME_MAX]; /* "channel0" by default */
	uint32_t stream_id;         /* CTF stream class id */
	uint32_t mode;              /* enum strata_channel_mode */
	uint32_t n_lanes;           /* 0: default (2 x online CPUs, at least 8) */
	uint32_t n_subbuf;          /* 0: default (8) */
	uint64_t subbuf_size;       /* 0: default (128 KiB) */
};

/* One enablement rule of a session, as matched in the process. */
#define STRATA_PATTERN_MAX STRATA_LIMIT_PATTERN
#define STRATA_FILTER_MAX STRATA_LIMIT_FILTER
struct strata_rule {
	char pattern[STRATA_PATTERN_MAX]; /* "provider:event" glob with '*' */
	int32_t loglevel_max;             /* -1: any; else enabled if loglevel <= this */
	uint32_t enable;                  /* 1: enable matches, 0: disable matches */
	char filter[STRATA_FILTER_MAX];   /* field filter expression, "" for none */
};
#define STRATA_MAX_RULES STRATA_LIMIT_RULES
/* These limits are the protocol's and the module's too: strata_limits.h. */

/*
 * How many records a thread writes in a slot's shared lanes before it
 * claims an owned lane of its own (default 64, at most 254; 0: at its first
 * record).  For tests that reason about which lane a record lands in; set
 * it before the threads it concerns write (docs/ring-buffer.md, "Lanes:
 * per thread, not per CPU").
 */
void strata_rt_set_own_after(unsigned n);

/*
 * [AS-safe] Create the shared-memory buffer of a session slot (memfd,
 * sized and initialised per strata_abi.h, the current event descriptors
 * written in).  Returns the memfd (kept open by the runtime until
 * strata_rt_slot_close) or a negative errno.  `trace_uuid` identifies the
 * sub-trace this process writes in that session.
 */
int strata_rt_slot_open(unsigned slot, const struct strata_channel_config *cfg, const uint8_t trace_uuid[16]);

/*
 * [AS-safe] Open a session slot whose buffer is made only when a thread
 * first records an event in it: the slot is armed now (its tracepoints
 * fire into a pending buffer), and the first event that fires makes the
 * buffer as strata_rt_slot_open would, then calls `handoff(slot, memfd,
 * ctx)` with a copy of `ctx` (at most STRATA_RT_HANDOFF_CTX bytes), under
 * the runtime's control lock, in that event's context (any thread, maybe a
 * signal handler: the hook must be async-signal-safe and must not call
 * back into this API).  A hook that returns < 0 closes the slot (its
 * tracepoints disarmed, the buffer unmapped).  A process that never fires
 * an enabled event never makes the buffer.  Returns 0 or a negative errno
 * (a configuration strata_rt_slot_open would refuse).
 */
#define STRATA_RT_HANDOFF_CTX 64
typedef int (*strata_rt_handoff)(unsigned slot, int memfd, const void *ctx);
int strata_rt_slot_open_lazy(unsigned slot, const struct strata_channel_config *cfg,
			     const uint8_t trace_uuid[16], strata_rt_handoff handoff, const void *ctx,
			     size_t ctx_len);

/* [AS-safe] Disarm the slot's tracepoints, mark the buffer producer-done,
 * unmap and close it.  Events already committed stay readable by whoever
 * holds the fd. */
void strata_rt_slot_close(unsigned slot);

/* [AS-safe] How many times `slot` was opened in this process (0: never):
 * tells a slot reopened for another session apart from the same session. */
uint32_t strata_rt_slot_generation(unsigned slot);

/* [AS-safe] Replace the slot's rules (later rules win over earlier ones)
 * and re-arm every registered tracepoint accordingly; modules registered
 * later are armed by the same rules.  Returns 0 or a negative errno. */
int strata_rt_slot_set_rules(unsigned slot, const struct strata_rule *rules, size_t n);

/* [AS-safe] Make every thread of the process observe the tracepoint states
 * just written (membarrier, or a fallback), so that an acknowledgement sent
 * after it is truthful. */
void strata_rt_quiesce(void);

/* Number of events registered (ids 0..n-1), for `strata list`. */
uint32_t strata_rt_event_count(void);
/* Copy "provider:event" of event `id` into buf; 0 or -ENOENT. */
int strata_rt_event_name(uint32_t id, char *buf, size_t len, uint32_t *loglevel);
/* The same for a caller that holds the registry: strata_rt_registry_hold
 * (the runtime's control lock: 0, or STRATA_RT_EBUSY from a handler of its
 * holder) .. strata_rt_registry_release, one lock for a whole list of
 * names.  Nothing else of this API may be called in between. */
int strata_rt_registry_hold(void);
void strata_rt_registry_release(void);
int strata_rt_event_name_held(uint32_t id, char *buf, size_t len, uint32_t *loglevel);

/* Which clock stamps events (enum strata_clock_id), and read it (ns). */
uint32_t strata_rt_clock_id(void);
uint64_t strata_rt_clock_now(void);
/* The clock page that stamps events (the module's or strata-consumerd's,
 * abi/strata_kclock.h), deciding the clock first if nobody has yet; NULL
 * while events are stamped with clock_gettime (or the thread that decided
 * has not published its page yet: ask again later).  A page returned stays
 * mapped and stays the process' clock.  For a caller that times a duration
 * in TSC ticks and converts it with the page's mult and shift (the pthread
 * preload's hold_ns, docs/pthread.md).  [AS-safe] */
struct strata_kclock;
const struct strata_kclock *strata_rt_clock_page(void);
/* strata_reserve's fast path for a record that also ends a duration the
 * caller started at TSC value t0 (the pthread preload's mutex_held, whose
 * hold ends at the record's own ordered clock read: docs/pthread.md, "Hold
 * times").  1: reserved (payload and strata_commit as after strata_reserve)
 * and *ticks = the record's TSC - t0 (0 if negative), which is at most
 * max_ticks.  0: nothing reserved and nothing of the lane changed: the
 * reservation would have left the fast path (any lane but an owned one,
 * the packet's end, no clock page or a busy one, a lost CAS...), or the
 * duration is longer than max_ticks; the caller then reads its own clock
 * and uses strata_reserve.  [AS-safe] */
struct strata_reservation;
struct strata_tracepoint;
int strata_rt_reserve_hold(struct strata_reservation *r, struct strata_tracepoint *tp, unsigned slot,
			   size_t size, uint64_t t0, uint64_t max_ticks, uint64_t *ticks);
/* A clock page from strata-consumerd (received with REGISTER_REPLY): kept
 * (mapped read-only) if it is valid and the clock is not decided yet, for
 * the choice the first slot open makes.  The caller keeps and closes fd.
 * 0 if kept, else -errno.  Async-signal-safe. */
int strata_rt_clock_offer(int fd);

/*
 * fork(): in the child the runtime forgets every slot of the parent (its
 * mappings are replaced by private memory, its fds closed, tracepoints
 * disarmed, cached thread ids refreshed), then calls this hook so that the
 * control plane can register the child and re-query its sessions.  One hook;
 * NULL removes it.  The hook runs in the child's pthread_atfork handler.
 */
typedef void (*strata_rt_fork_hook)(void);
void strata_rt_set_fork_child_hook(strata_rt_fork_hook hook);

/* One process-wide hook run after the control plane changed tracepoint
 * states (libtrace/runtime/change_hook.cpp); it may run in a signal handler, so it
 * must be async-signal-safe.  The last one set wins; NULL removes it. */
typedef void (*strata_rt_change_hook)(void);
void strata_rt_set_change_hook(strata_rt_change_hook hook);
/* A pair run around the control plane's application of an answer (slots
 * joined, rules set, slots closed): `before` while the sessions it may stop
 * still record, `after` once it is applied (and quiesced), whether or not
 * anything changed.  The control plane calls strata_rt_state_changing and
 * strata_rt_state_settled, in that order, in one query (the pthread
 * preload's counts, docs/pthread.md "Counting mode").  One pair, the last
 * one set wins.  [AS-safe] */
void strata_rt_set_state_hooks(strata_rt_change_hook before, strata_rt_change_hook after);
void strata_rt_state_changing(void);
void strata_rt_state_settled(void);
/* The update signal's handler (tp-async) asks strata_rt_state_ready() first:
 * 0 when the code it interrupted on its thread must finish before any change
 * (the pthread preload inside an update of its own count table, which a
 * flush cannot read from the handler that interrupted it).  The handler then
 * serves nothing, and that code, once out of its window, calls
 * strata_rt_state_retry(): the update signal (strata_rt_set_update_signal,
 * by whoever installed its handler) is raised again on this thread.  One
 * hook, the last one set wins; none: always ready.  [AS-safe] */
typedef int (*strata_rt_ready_hook)(void);
void strata_rt_set_ready_hook(strata_rt_ready_hook hook);
int strata_rt_state_ready(void);
void strata_rt_set_update_signal(int signo);
void strata_rt_state_retry(void);

/*
 * The probe report (abi/strata_probe_report.h): `hook` runs once per
 * process (per pid: a forked child makes its own report) right after the
 * report is made, in the thread that registered or unregistered a probe
 * (thread context, no runtime lock held), so that the control plane can
 * tell the daemon (docs/probes.md, "Who is on a tracepoint").  One hook;
 * the last one set wins.  Returns 1 if this process's report exists
 * already (the hook will not run for it: the caller tells now), else 0.
 * Internal to libstrata: not exported.
 */
typedef void (*strata_rt_report_hook)(void);
int strata_rt_set_probe_report_hook(strata_rt_report_hook hook);

/* Counters of the runtime's own health (for `strata status` and tests):
 * broken invariants met (each one also warned once on stderr) and
 * tracepoints rejected at registration (bad magic, version or fields). */
struct strata_rt_stats {
	uint64_t invariant_errors;
	uint64_t rejected_tracepoints;
	uint64_t descriptor_table_full;
};
void strata_rt_get_stats(struct strata_rt_stats *out);

/*
 * Non-zero while this thread runs libstrata's own locking: the probe
 * report's lock, liburcu-bp's (grace periods, thread registration, its fork
 * handlers), the dynamic events' lock, and libstrata's fork handlers that
 * take them.  The pthread preload traces nothing then: those locks are not
 * the program's, and a lock taken in a fork's prepare handler and dropped
 * in the child's showed there as an unlock without its lock.  Written by
 * its own thread only (a depth, so nesting and a signal handler that
 * interrupts inside are fine); read by the preload's wrappers, on their
 * traced path only.  Initial-exec TLS: libstrata is loaded with the program
 * (libstrata-pthread.so links it), as its other thread-locals.
 */
extern __thread uint32_t strata_rt_inside __attribute__((tls_model("initial-exec")));

#ifdef __cplusplus
}

namespace strata {
// strata_rt_inside for a scope.
struct RtInside {
	RtInside() { strata_rt_inside++; }
	~RtInside() { strata_rt_inside--; }
	RtInside(const RtInside &) = delete;
	RtInside &operator=(const RtInside &) = delete;
};
} // namespace strata
#endif
#endif
