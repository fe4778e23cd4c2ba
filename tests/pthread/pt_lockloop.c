/*
 * pt_lockloop.c - uncontended pthread_mutex_lock/unlock loop, for the
 * overhead figures of docs/pthread.md: run it bare, under LD_PRELOAD of
 * libstrata-pthread.so (tracing off, then on) and under LTTng-UST's
 * liblttng-ust-pthread-wrapper.so.  Prints the best ns per lock+unlock pair
 * over several rounds (the minimum filters the noise of a shared machine).
 *
 *   pt_lockloop [pairs_per_round] [rounds] [locks]
 *
 * locks > 1: each pair takes one of that many mutexes, chosen by a
 * pseudo-random sequence (the same each run): a thread meeting more locks
 * than the preload's counting table holds (memcached's item locks).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m1 = PTHREAD_MUTEX_INITIALIZER;

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	int rounds = argc > 2 ? atoi(argv[2]) : 5;
	unsigned k = argc > 3 ? (unsigned)atoi(argv[3]) : 1;
	pthread_mutex_t *ms = &m1;
	if (k > 1) {
		ms = calloc(k, sizeof *ms);
		for (unsigned j = 0; ms && j < k; j++)
			pthread_mutex_init(&ms[j], NULL);
	}
	if (!ms || k == 0)
		return 2;
	double best = 1e30, sum = 0;
	for (int r = 0; r < rounds; r++) {
		double t0 = now();
		unsigned x = 1;
		for (long i = 0; k == 1 && i < n; i++) {
			if (pthread_mutex_lock(&m1) || pthread_mutex_unlock(&m1))
				return 1;
		}
		for (long i = 0; k > 1 && i < n; i++) {
			x = x * 1103515245u + 12345u; /* the same locks in the same order each run */
			pthread_mutex_t *m = &ms[(x >> 8) % k];
			if (pthread_mutex_lock(m) || pthread_mutex_unlock(m))
				return 1;
		}
		double per = (now() - t0) / (double)n;
		sum += per;
		if (per < best)
			best = per;
	}
	printf("pairs %ld x %d rounds: best %.2f ns/pair, mean %.2f ns/pair\n", n, rounds, best,
	       sum / rounds);
	return 0;
}
