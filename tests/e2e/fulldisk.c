/*
 * fulldisk.c - issue 32's full disk: emits BEFORE events scrib-like
 * (fulldisk:ev, phase 1, i = 0..), prints "waiting" and waits for a line on
 * stdin (the test frees space meanwhile), then emits AFTER events (phase 2)
 * and exits.  Prints "done".
 *
 * usage: strata-test-fulldisk BEFORE AFTER
 */
#define STRATA_DEFINE_PROVIDERS
#include <stdint.h>
#include <strata/tracepoint.h>

STRATA_EVENT(fulldisk, ev, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, i), strata_int(uint32_t, phase),
	     strata_string(pad))

#include <stdio.h>
#include <stdlib.h>

static const char pad[] = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s BEFORE AFTER\n", argv[0]);
		return 2;
	}
	uint64_t before = strtoull(argv[1], NULL, 0), after = strtoull(argv[2], NULL, 0);
	for (uint64_t i = 0; i < before; i++)
		strata_tracepoint(fulldisk, ev, i, 1u, pad);
	printf("waiting\n");
	fflush(stdout);
	char line[16];
	if (!fgets(line, sizeof line, stdin))
		return 1;
	for (uint64_t i = 0; i < after; i++)
		strata_tracepoint(fulldisk, ev, i, 2u, pad);
	printf("done\n");
	fflush(stdout);
	return 0;
}
