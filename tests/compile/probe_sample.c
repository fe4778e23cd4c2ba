/*
 * probe_sample.c - the probe API (strata/probe.h) used from C11 (this
 * file) and C++17 (probe_sample.cpp compiles this same file), built with
 * -Wall -Wextra -Werror.  Exact oracle: a counting probe sees each hit once
 * with its arguments; after unregister, none.
 */
#include <stdio.h>

#define STRATA_DEFINE_PROVIDERS
#include "sample_tp.h"
#include <strata/probe.h>

struct tally {
	int hits;
	int64_t sum; /* of sample:one's value */
	size_t ids;  /* elements of sample:all's ids */
	char label[16];
};

static void on_hit(const struct strata_probe_event *ev, void *priv)
{
	struct tally *t = (struct tally *)priv;
	int f;
	t->hits++;
	if ((f = strata_probe_field_index(ev->desc, "value")) >= 0)
		t->sum += strata_probe_int(ev, (uint32_t)f);
	if ((f = strata_probe_field_index(ev->desc, "ids")) >= 0)
		t->ids += strata_probe_count(ev, (uint32_t)f);
	if ((f = strata_probe_field_index(ev->desc, "label")) >= 0)
		snprintf(t->label, sizeof t->label, "%s", strata_probe_string(ev, (uint32_t)f));
}

int main(void)
{
	struct tally t = {0, 0, 0, ""};
	strata_probe *p = NULL;
	uint8_t mac[6] = {1, 2, 3, 4, 5, 6};
	uint32_t ids[3] = {7, 8, 9};
	int rc = strata_probe_register("sample:*", STRATA_LOGLEVEL_DEBUG, on_hit, &t, &p);
	if (rc < 0) {
		fprintf(stderr, "%s\n", strata_probe_strerror(rc));
		return 1;
	}
	strata_tracepoint(sample, one, 5);
	strata_tracepoint(sample, one, -2);
	strata_tracepoint(sample, all, 1, -2, 0x10, 0.5, 1, "label", mac, ids, 3, "raw", 3);
	strata_tracepoint(sample, ping);
	if (strata_probe_unregister(p) != 0)
		return 1;
	strata_tracepoint(sample, one, 100);
	printf("hits %d sum %lld ids %zu label %s\n", t.hits, (long long)t.sum, t.ids, t.label);
	return t.hits == 4 && t.sum == 3 && t.ids == 3 && strcmp(t.label, "label") == 0 ? 0 : 1;
}
