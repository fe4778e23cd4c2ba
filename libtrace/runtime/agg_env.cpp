/*
 * agg_env.cpp - aggregation asked for by the environment, until sessions
 * can ask for it (docs/probes.md "Aggregation"):
 *
 *     STRATA_AGGREGATE='pthread:mutex_lock:wait_ns by lock; app:req by $tid' prog
 *
 * opens one region per spec at libstrata's load, for the life of the
 * process; `strata top --pid` finds them among the process's descriptors
 * (memfds named "strata-agg").  A forked child gets regions of its own
 * (agg.cpp).  A spec that does not parse is warned about and skipped.
 *
 * Spec: PROVIDER:EVENT[:VALUE_FIELD] [by KEY] [limit N]
 *   (PROVIDER:EVENT may hold '*'; KEY a field, $tid or $event; N keys,
 *   default 256, at most 4096).
 */
#include <errno.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "agg.h"
#include "rt_internal.h"

namespace {

constexpr size_t kMaxEnvRegions = 8;
strata_rt_agg *g_env[kMaxEnvRegions];
strata_agg_spec g_env_spec[kMaxEnvRegions];
size_t g_n_env;

void open_env_regions()
{
	for (size_t i = 0; i < g_n_env; i++)
		if (strata_rt_agg_open(&g_env_spec[i], &g_env[i]) != 0) {
			g_env[i] = nullptr;
			strata::warn("STRATA_AGGREGATE: a region could not be opened");
		}
}

__attribute__((constructor)) void agg_env_init()
{
	const char *env = getenv("STRATA_AGGREGATE"); // read-only walk of environ
	if (!env || !*env)
		return;
	const char *p = env;
	while (*p && g_n_env < kMaxEnvRegions) {
		const char *end = strchr(p, ';');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		char one[512], err[128];
		if (n < sizeof one) {
			memcpy(one, p, n);
			one[n] = 0;
			bool blank = strspn(one, " \t") == n;
			if (!blank && strata_rt_agg_parse(one, &g_env_spec[g_n_env], err, sizeof err) == 0)
				g_n_env++;
			else if (!blank)
				strata::warn("STRATA_AGGREGATE: a spec does not parse: skipped");
		}
		p += n;
		if (*p == ';')
			p++;
	}
	open_env_regions();
}

} // namespace

extern "C" STRATA_EXPORT int strata_rt_agg_parse(const char *text, struct strata_agg_spec *out, char *err,
						 size_t errlen)
{
	return strata::agg_spec_parse(text, out, err, errlen);
}
