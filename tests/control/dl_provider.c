/*
 * dl_provider.c - a shared library with a provider of its own (ctllib),
 * dlopen'ed and dlclose'd by traced_app's "dlserve" mode while tracing is
 * on.  ctllib_emit(n, base) emits ctllib:ev {seq} for seq = base..base+n-1.
 */
#include <stdint.h>

#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(ctllib, ev, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, seq))

__attribute__((visibility("default"))) void ctllib_emit(uint64_t n, uint64_t base)
{
	for (uint64_t i = 0; i < n; i++)
		strata_tracepoint(ctllib, ev, base + i);
}
