/*
 * snap_app.c - workload of control.snapshot (check_snapshot.py): emits
 * numbered events on command, one thread, and stays alive between batches.
 * Reads lines from stdin: "N" emits the next N events (snap:tick, seq
 * counting from 0) then prints the last seq emitted; "t N" does the same
 * on a new thread (joined before the answer: a thread's first event
 * claims a lane of its own, check_relay.py); "fatal" emits one snap:fatal
 * (after = the last tick's seq) and prints "fatal"; EOF exits.
 * Linked with tp-async: follows rule changes while it runs.
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(snap, tick, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, seq))
STRATA_EVENT(snap, fatal, STRATA_LOGLEVEL_ERR, strata_int(uint64_t, after))

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t seq; /* main thread's, or the one thread it joins */

static void *emit(void *arg)
{
	uint64_t n = *(const uint64_t *)arg;

	for (uint64_t i = 0; i < n; i++, seq++)
		strata_tracepoint(snap, tick, seq);
	return NULL;
}

int main(void)
{
	char line[64];

	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("ready\n");
	while (fgets(line, sizeof line, stdin)) {
		if (!strncmp(line, "fatal", 5)) {
			strata_tracepoint(snap, fatal, seq - 1);
			printf("fatal\n");
			continue;
		}
		pthread_t t;
		uint64_t n;

		if (line[0] == 't') {
			n = strtoull(line + 1, NULL, 10);
			if (pthread_create(&t, NULL, emit, &n) != 0 || pthread_join(t, NULL) != 0)
				return 1;
		} else {
			n = strtoull(line, NULL, 10);
			emit(&n);
		}
		printf("%llu\n", (unsigned long long)(seq - 1));
	}
	return 0;
}
