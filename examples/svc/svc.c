/*
 * strata-svc - a service-like example: serves "requests" until SIGTERM or
 * SIGINT, one svc:request event each, and never needs a daemon.  Linked
 * with tp-async, so `strata enable-event 'svc:*' --wait; strata start s
 * --wait` turns its events on while it runs, and disable-event turns them
 * off again, without restarting it.
 *
 *   strata-svc [--interval-us N] [--counter FILE]
 *
 * --interval-us N: pause between requests (default 100000 = 10 per second).
 * --counter FILE: keep the number of requests served so far in the first 8
 *   bytes of FILE (created, shared mapping), for tests that account for
 *   events around enable and disable.
 * Prints "svc: ready" at start and "svc: N requests served" at exit.
 */
#define _GNU_SOURCE
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

STRATA_EVENT(svc, request, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, id), strata_int(uint32_t, latency_us))

static volatile sig_atomic_t g_quit;

static void on_quit(int sig)
{
	(void)sig;
	g_quit = 1;
}

int main(int argc, char **argv)
{
	long interval_us = 100000;
	const char *counter_path = NULL;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--interval-us") && i + 1 < argc)
			interval_us = strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--counter") && i + 1 < argc)
			counter_path = argv[++i];
		else {
			fprintf(stderr, "usage: %s [--interval-us N] [--counter FILE]\n", argv[0]);
			return 2;
		}
	}
	uint64_t local = 0;
	volatile uint64_t *served = &local;
	if (counter_path) {
		int fd = open(counter_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
		if (fd < 0 || ftruncate(fd, 4096) < 0)
			return 1;
		void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		close(fd);
		if (p == MAP_FAILED)
			return 1;
		served = (volatile uint64_t *)p;
		*served = 0;
	}
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_quit;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	printf("svc: ready\n");
	fflush(stdout);
	for (uint64_t id = 0; !g_quit; id++) {
		strata_tracepoint(svc, request, id, (uint32_t)(id % 1000));
		/* Published after the event: a reader seeing N knows ids < N were emitted. */
		__atomic_store_n(served, id + 1, __ATOMIC_RELEASE);
		struct timespec ts = {interval_us / 1000000, (interval_us % 1000000) * 1000};
		/* tp-async's signal may interrupt the pause: that only shortens it. */
		if (interval_us > 0)
			nanosleep(&ts, NULL);
	}
	printf("svc: %llu requests served\n", (unsigned long long)*served);
	return 0;
}
