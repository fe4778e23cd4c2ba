/*
 * sample.c - a provider defined and used from C (this file) and from C++
 * (sample.cpp compiles this same file), built with -Wall -Wextra -Werror.
 *
 * Run-time checks, with an exact oracle:
 *   - a disabled call site does not evaluate its arguments;
 *   - once a session slot records the events, each argument is evaluated
 *     exactly once per call (slot armed through libtrace/runtime/runtime.h, as the
 *     control plane does).
 */
#include <stdio.h>
#include <string.h>

#define STRATA_DEFINE_PROVIDERS
#include "sample_tp.h"
#include "runtime.h"

static int evaluations;

static uint32_t counted(uint32_t v)
{
	evaluations++;
	return v;
}

static int failures;

static void expect(int cond, const char *what)
{
	printf("%s %s\n", cond ? "ok  " : "FAIL", what);
	if (!cond)
		failures++;
}

static void call_sites(void)
{
	uint8_t mac[6] = {1, 2, 3, 4, 5, 6};
	uint32_t ids[3] = {7, 8, 9};
	const char raw[] = "raw";

	strata_tracepoint(sample, all, counted(1), -2, 0x10, 0.5, 1, "label", mac, ids, 3, raw, 3);
	strata_tracepoint(sample, one, (int)counted(5));
	strata_tracepoint(sample, ping);
}

int main(void)
{
#ifdef __cplusplus
	const char *lang = "C++";
#else
	const char *lang = "C";
#endif
	struct strata_channel_config cfg;
	struct strata_rule rule;
	uint8_t uuid[16] = {0};
	int i, fd;

	printf("%s call sites\n", lang);
	expect(!strata_tracepoint_enabled(sample, all), "no session: sample:all disabled");
	for (i = 0; i < 100; i++)
		call_sites();
	expect(evaluations == 0, "disabled call sites evaluate no argument");

	memset(&cfg, 0, sizeof cfg);
	strcpy(cfg.name, "channel0");
	cfg.mode = STRATA_MODE_DISCARD;
	fd = strata_rt_slot_open(0, &cfg, uuid);
	expect(fd >= 0, "strata_rt_slot_open");
	memset(&rule, 0, sizeof rule);
	strcpy(rule.pattern, "sample:*");
	rule.loglevel_max = -1;
	rule.enable = 1;
	expect(strata_rt_slot_set_rules(0, &rule, 1) == 0, "strata_rt_slot_set_rules(sample:*)");
	expect(strata_tracepoint_enabled(sample, all) && strata_tracepoint_enabled(sample, one) &&
		       strata_tracepoint_enabled(sample, ping),
	       "rule sample:* enables the three events");
	for (i = 0; i < 100; i++)
		call_sites();
	expect(evaluations == 200, "enabled call sites evaluate each argument exactly once");

	strata_rt_slot_close(0);
	expect(!strata_tracepoint_enabled(sample, all), "slot closed: disabled again");
	evaluations = 0;
	call_sites();
	expect(evaluations == 0, "disabled again: no argument evaluated");
	printf("%s: %d failure(s)\n", lang, failures);
	return failures ? 1 : 0;
}
