/* outside_tp.h - the provider of the standalone example. */
#include <strata/tracepoint.h>

STRATA_EVENT(outside, step, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, index), strata_string(what))
