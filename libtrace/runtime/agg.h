/*
 * agg.h - aggregation in the process (docs/probes.md "Aggregation"): a
 * probe that folds each hit into a shared-memory region (agg_layout.h)
 * instead of recording it.  The internal contract for the control plane
 * (an aggregation session's grant, sync_query.cpp), STRATA_AGGREGATE and
 * the tests; not
 * installed.  Everything here is hidden but the strata_rt_agg_* entry
 * points, which follow the probe API's rules (any thread, not a signal
 * handler, not a probe callback).
 */
#ifndef STRATA_LIBTRACE_AGG_H
#define STRATA_LIBTRACE_AGG_H

#include <stdint.h>

#include "agg_layout.h"
#include "agg_spec.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct strata_rt_agg strata_rt_agg;

/* Makes the region (a memfd, mapped shared) and registers its probe.
 * 0 and *out, or -EINVAL (a bad spec or filter), -ENOMEM, or a memfd/mmap
 * errno. */
int strata_rt_agg_open(const struct strata_agg_spec *spec, strata_rt_agg **out);
/* The region's memfd, for a reader to map (the aggregator keeps it). */
int strata_rt_agg_fd(const strata_rt_agg *a);
/* Unregisters the probe (a grace period), unmaps, closes the memfd. */
void strata_rt_agg_close(strata_rt_agg *a);

/* Parses "PROVIDER:EVENT[:VALUE_FIELD] [by KEY] [limit N]" (the syntax of
 * STRATA_AGGREGATE, agg_env.cpp) into *out.  0, or -EINVAL with a reason
 * in err. */
int strata_rt_agg_parse(const char *text, struct strata_agg_spec *out, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
