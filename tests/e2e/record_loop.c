/*
 * record_loop.c - what check_record_kill.py records: bursts of 10 events
 * (one a millisecond), for at most MS milliseconds (default 3000), ending
 * at once when the process that started it (`strata record`) is gone.
 *
 * With "daemon" it daemonizes first (fork, setsid, fork; the first two
 * exit at once, as `memcached -d` does) and the daemon emits MS bursts of
 * 10 events whatever becomes of its parent, then prints nothing and exits.
 *
 * With a number BURST instead of "daemon" each burst is BURST events
 * (check_direct_io.py: MS x BURST events, the packets a disk write each).
 *
 * usage: strata-test-record-loop [MS [daemon | BURST]]
 */
#define _GNU_SOURCE
#define STRATA_DEFINE_PROVIDERS
#include <stdint.h>
#include <strata/tracepoint.h>

STRATA_EVENT(rloop, tick, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, i))

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	const long ms = argc > 1 ? atol(argv[1]) : 3000;
	const int daemon = argc > 2 && !strcmp(argv[2], "daemon");
	const long burst = argc > 2 && !daemon ? atol(argv[2]) : 10;
	if (daemon) {
		if (fork() != 0)
			_exit(0);
		setsid();
		if (fork() != 0)
			_exit(0);
	}
	const pid_t parent = getppid();
	uint64_t i = 0;
	for (long t = 0; t < ms && (daemon || getppid() == parent); t++) {
		for (long k = 0; k < burst; k++, i++)
			strata_tracepoint(rloop, tick, i);
		struct timespec d = {0, 1000000};
		if (t + 1 < ms) /* none after the last burst: it exits at once */
			nanosleep(&d, NULL);
	}
	return 0;
}
