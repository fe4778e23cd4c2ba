/*
 * probe_bench - the per-hit cost of a probe beside recording, as
 * instruction counts (valgrind --tool=callgrind; run twice with different
 * hit counts and divide the difference, which cancels start-up).  Not a
 * test.  docs/probes.md has the figures and the command.
 *     probe_bench off|probe|record|both|agg|agg+record [hits]
 * agg: the aggregator of libtrace/runtime/agg.h, sum/min/max/histogram of b keyed by
 * a (16 keys).
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>
STRATA_EVENT(pbench, two, STRATA_LOGLEVEL_INFO, strata_int(int, a), strata_int(int, b))

#include <strata/probe.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "agg.h"
#include "runtime.h"

namespace {

void count(const strata_probe_event *ev, void *priv)
{
	*static_cast<uint64_t *>(priv) += (uint64_t)strata_probe_int(ev, 1);
}

} // namespace

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "both";
	const long n = argc > 2 ? atol(argv[2]) : 100000;
	const bool probe = !strcmp(mode, "probe") || !strcmp(mode, "both");
	const bool record = !strcmp(mode, "record") || !strcmp(mode, "both") || !strcmp(mode, "agg+record");
	const bool agg = !strncmp(mode, "agg", 3);
	if (record) { // overwrite mode: no reader needed, the cost is steady
		strata_channel_config cfg{};
		strcpy(cfg.name, "channel0");
		cfg.mode = STRATA_MODE_OVERWRITE;
		const uint8_t uuid[16] = {1};
		if (strata_rt_slot_open(0, &cfg, uuid) < 0)
			return 1;
		strata_rule rule{};
		strcpy(rule.pattern, "*");
		rule.enable = 1;
		rule.loglevel_max = -1;
		strata_rt_slot_set_rules(0, &rule, 1);
	}
	uint64_t sum = 0;
	strata_probe *p = nullptr;
	if (probe && strata_probe_register("pbench:two", -1, count, &sum, &p) != 0)
		return 1;
	strata_rt_agg *ag = nullptr;
	strata_agg_spec spec{};
	strcpy(spec.pattern, "pbench:two");
	strcpy(spec.value_field, "b");
	strcpy(spec.key_field, "a");
	spec.max_keys = 64;
	if (agg && strata_rt_agg_open(&spec, &ag) != 0)
		return 1;
	for (long i = 0; i < n; i++)
		strata_tracepoint(pbench, two, (int)(i & 15), 1);
	if (p)
		strata_probe_unregister(p);
	if (ag)
		strata_rt_agg_close(ag);
	if (record)
		strata_rt_slot_close(0);
	std::printf("%s: %ld hits, probe sum %llu\n", mode, n, (unsigned long long)sum);
	return probe && sum != (uint64_t)n;
}
