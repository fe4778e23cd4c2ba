/*
 * snap_app.c - workload of control.snapshot (check_snapshot.py): emits
 * numbered events on command, one thread, and stays alive between batches.
 * Reads lines from stdin: "N" emits the next N events (snap:tick, seq
 * counting from 0) then prints the last seq emitted; "fatal" emits one
 * snap:fatal; EOF exits.
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(snap, tick, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, seq))

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
	char line[64];
	uint64_t seq = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		uint64_t n = strtoull(line, NULL, 10);
		for (uint64_t i = 0; i < n; i++, seq++)
			strata_tracepoint(snap, tick, seq);
		printf("%llu\n", (unsigned long long)(seq - 1));
	}
	return 0;
}
