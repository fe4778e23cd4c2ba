/*
 * agg_target.c - a program for check_agg_top.py: four workers serve N
 * requests each (aggdemo:req with a known latency and route) and take two
 * pthread mutexes a known number of times, then the program says
 * "ready PID LOCK_A LOCK_B" and waits for its stdin to close.  Run with
 * STRATA_AGGREGATE (and the pthread preload) it aggregates in place.
 * With a second argument "go" it first says "waiting PID" and waits for a
 * line on stdin before its workers start (check_agg_session.py: a process
 * running before its session starts).  Built twice: alone, and with
 * tp-async (strata-test-agg-session: it joins sessions).
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>
STRATA_EVENT(aggdemo, req, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, worker),
	     strata_int(uint64_t, latency_ns), strata_string(route))

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define WORKERS 4
static const char *const routes[3] = {"/api/users", "/api/orders", "/static"};
static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER, lock_b = PTHREAD_MUTEX_INITIALIZER;
static unsigned n_requests;
static volatile unsigned long shared;

static void *worker(void *arg)
{
	uint32_t w = (uint32_t)(uintptr_t)arg;
	for (unsigned i = 0; i < n_requests; i++) {
		for (int k = 0; k < 3; k++) {
			pthread_mutex_lock(&lock_a);
			shared++;
			pthread_mutex_unlock(&lock_a);
		}
		pthread_mutex_lock(&lock_b);
		shared++;
		pthread_mutex_unlock(&lock_b);
		strata_tracepoint(aggdemo, req, w, (uint64_t)(i * 37 % 1000) * 1000 + w, routes[i % 3]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	n_requests = argc > 1 ? (unsigned)atoi(argv[1]) : 1000;
	char buf[64];
	if (argc > 2 && argv[2][0] == 'g') {
		printf("waiting %d\n", (int)getpid());
		fflush(stdout);
		if (!fgets(buf, sizeof buf, stdin))
			return 1;
	}
	pthread_t t[WORKERS];
	for (uintptr_t w = 0; w < WORKERS; w++)
		pthread_create(&t[w], NULL, worker, (void *)w);
	for (int w = 0; w < WORKERS; w++)
		pthread_join(t[w], NULL);
	printf("ready %d %p %p\n", (int)getpid(), (void *)&lock_a, (void *)&lock_b);
	fflush(stdout);
	while (read(0, buf, sizeof buf) > 0) {
	}
	return 0;
}
