/*
 * record_loop.c - what check_record_kill.py records: bursts of 10 events
 * (one a millisecond), for at most MS milliseconds (default 3000), ending
 * at once when the process that started it (`strata record`) is gone.
 *
 * usage: strata-test-record-loop [MS]
 */
#define _GNU_SOURCE
#define STRATA_DEFINE_PROVIDERS
#include <stdint.h>
#include <strata/tracepoint.h>

STRATA_EVENT(rloop, tick, STRATA_LOGLEVEL_INFO,
	strata_int(uint64_t, i))

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const long ms = argc > 1 ? atol(argv[1]) : 3000;
	const pid_t parent = getppid();
	uint64_t i = 0;
	for (long t = 0; t < ms && getppid() == parent; t++) {
		for (int k = 0; k < 10; k++, i++)
			strata_tracepoint(rloop, tick, i);
		struct timespec d = {0, 1000000};
		nanosleep(&d, NULL);
	}
	return 0;
}
