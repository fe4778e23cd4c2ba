/*
 * pt_lockloop.c - uncontended pthread_mutex_lock/unlock loop, for the
 * overhead figures of docs/pthread.md: run it bare, under LD_PRELOAD of
 * libstrata-pthread.so (tracing off, then on) and under LTTng-UST's
 * liblttng-ust-pthread-wrapper.so.  Prints the best ns per lock+unlock pair
 * over several rounds (the minimum filters the noise of a shared machine).
 *
 *   pt_lockloop [pairs_per_round] [rounds]
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

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
	double best = 1e30, sum = 0;
	for (int r = 0; r < rounds; r++) {
		double t0 = now();
		for (long i = 0; i < n; i++) {
			if (pthread_mutex_lock(&m) || pthread_mutex_unlock(&m))
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
