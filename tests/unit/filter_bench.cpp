/*
 * filter_bench - ns per event of a tracepoint with field filters against
 * the same tracepoint unfiltered and disabled (not a test: a figure).
 * One thread, one lane, overwrite mode, no consumer.
 *   build-DIR/tests/unit/filter_bench [events per case]
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(fbench, ev, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, size), strata_string(path),
	     strata_int(int32_t, k))

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "runtime.h"

namespace {

double ns_per_event(long n)
{
	auto t0 = std::chrono::steady_clock::now();
	for (long i = 0; i < n; i++)
		strata_tracepoint(fbench, ev, 8192, "/tmp/some/file", 7);
	return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}

} // namespace

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	strata_channel_config c{};
	strcpy(c.name, "channel0");
	c.mode = STRATA_MODE_OVERWRITE;
	c.n_lanes = 1;
	c.n_subbuf = 4;
	c.subbuf_size = 1 << 20;
	const uint8_t uuid[16] = {1};
	if (strata_rt_slot_open(0, &c, uuid) < 0) {
		fprintf(stderr, "slot_open failed\n");
		return 1;
	}
	const char *cases[][2] = {
		{"", "no filter (recorded)"},
		{"size > 4096", "size > 4096 (passes, recorded)"},
		{"size > 99999", "size > 99999 (rejects)"},
		{"size > 4096 && path == \"/tmp/*\"", "size > 4096 && path glob (passes)"},
		{"k == 1 || k == 2 || k == 3 || path == \"/var/*\"", "4 comparisons (rejects)"},
	};
	for (auto &cs : cases) {
		strata_rule r{};
		strcpy(r.pattern, "fbench:ev");
		r.loglevel_max = -1;
		r.enable = 1;
		strcpy(r.filter, cs[0]);
		strata_rt_slot_set_rules(0, &r, 1);
		ns_per_event(n / 4); // warm up
		printf("%-40s %6.1f ns/event\n", cs[1], ns_per_event(n));
	}
	strata_rt_slot_set_rules(0, nullptr, 0);
	printf("%-40s %6.1f ns/event\n", "disabled", ns_per_event(n));
	strata_rt_slot_close(0);
	return 0;
}
