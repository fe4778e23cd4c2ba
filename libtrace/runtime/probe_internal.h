/*
 * probe_internal.h - what the registry and the probes (probe.cpp) tell each
 * other.  Everything here runs under the runtime's control lock
 * (rt_internal.h).  Not installed.
 */
#ifndef STRATA_LIBTRACE_PROBE_INTERNAL_H
#define STRATA_LIBTRACE_PROBE_INTERNAL_H

#include <cstdint>

#include <strata/probe.h>

#include "runtime.h" // STRATA_PATTERN_MAX

namespace strata {

// Registry side (registry.cpp).
// Calls fn(tp, ctx) for every registered, valid tracepoint.
void registry_for_each(void (*fn)(strata_tracepoint *tp, void *ctx), void *ctx);
// Sets or clears tp's STRATA_TP_PROBED bit (release store, as rules do).
void registry_set_probed(strata_tracepoint *tp, bool on);

// Probe side (probe.cpp).
// A tracepoint just registered (valid, id assigned): the probes matching it.
void probe_on_register(strata_tracepoint *tp);
// A tracepoint being unregistered: its probes' list retired.
void probe_on_unregister(strata_tracepoint *tp);
// strata_probe_register for the runtime's own probes: wants_time false
// spares the clock read when no probe on a tracepoint reads
// ev->timestamp (it is then 0).  Not under the control lock.
int probe_register(const char *pattern, int loglevel_max, strata_probe_fn fn, void *priv, bool wants_time,
		   strata_probe **out);
// For the probe report (probe_report.cpp): the first `cap` probes as they
// are, their total in *total and the list's generation in *gen (0 when the
// control lock could not be taken: inside a control call).  Takes the
// control lock.
struct ProbeSnapshot {
	char pattern[STRATA_PATTERN_MAX];
	int loglevel_max;
	strata_probe_fn fn;
	bool runtime; // the runtime's own (aggregation)
};
uint32_t probe_snapshot(ProbeSnapshot *out, uint32_t cap, uint32_t *total, uint64_t *gen);

// Probe report (probe_report.cpp): rewritten after each register and
// unregister, outside the control lock.
void probe_report_sync();

} // namespace strata
#endif
