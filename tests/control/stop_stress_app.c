/*
 * stop_stress_app.c - the writers of check_stop_stress.py: stress:tick
 * {thread, seq} events, each thread's seq from 0 up, and the counts of
 * what was emitted in a shared file, so that the test knows exactly what
 * each process emitted while a session recorded it.  Linked with tp-async:
 * it joins the sessions that start while it runs and leaves those that stop
 * (the stop applied in the update handler, whichever thread it interrupts).
 *
 *   stop_stress_app long FILE THREADS [REST_US]   long-lived: THREADS
 *       writing threads, and one that starts short-lived threads (each SHORT
 *       events, then it exits), all writing while the file's `go` word is 1
 *       (bursts of BURST events, REST_US microseconds apart: 0, the default,
 *       as fast as they can) and idle while it is 0; each acknowledges a
 *       pause by copying the `pause` word into its `ack` word once it emits
 *       no more; ends when `quit` is 1.
 *   stop_stress_app short N              short-lived: N events, then exit 0.
 *
 * FILE's 8-byte words: 0 go, 1 quit, 2 pause (a generation the test raises
 * with go 0), then per writing thread t (and the spawner as t = THREADS):
 * 8 + 2t emitted (its events so far: the next seq), 9 + 2t ack.  Emitted
 * counts are stored after each event, so a count read is a lower bound of
 * what the thread emitted then, exact once it acknowledged a pause.
 */
#define _GNU_SOURCE
#define STRATA_DEFINE_PROVIDERS
#include <stdint.h>
#include <strata/tracepoint.h>

STRATA_EVENT(stress, tick, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, thread), strata_int(uint64_t, seq))

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define SHORT 50u /* events of a short-lived thread */
#define BURST 64u /* events between two looks at the control words */
#define MAX_THREADS 1024u
#define FILE_SIZE 32768 /* the words of MAX_THREADS + 1 threads */

static _Atomic uint64_t *g_w;
static unsigned g_threads;
static long g_rest_us;

static void pause_us(long us)
{
	struct timespec t = {0, us * 1000};
	nanosleep(&t, NULL);
}

/* Idle while go is 0 (the pause acknowledged); false once quit is set. */
static int wait_go(unsigned t)
{
	while (!atomic_load(&g_w[0])) {
		if (atomic_load(&g_w[1]))
			return 0;
		atomic_store(&g_w[9 + 2 * t], atomic_load(&g_w[2]));
		pause_us(200);
	}
	return !atomic_load(&g_w[1]);
}

static void *writer(void *arg)
{
	const unsigned t = (unsigned)(uintptr_t)arg;
	uint64_t seq = 0;
	while (wait_go(t)) {
		for (unsigned k = 0; k < BURST; k++) {
			strata_tracepoint(stress, tick, t, seq);
			atomic_store(&g_w[8 + 2 * t], ++seq);
		}
		if (g_rest_us)
			pause_us(g_rest_us);
	}
	return NULL;
}

static void *short_thread(void *arg)
{
	const uint64_t id = (uint64_t)(uintptr_t)arg;
	for (uint64_t i = 0; i < SHORT; i++)
		strata_tracepoint(stress, tick, id, i);
	return NULL;
}

/* Short-lived threads one after the other, ids from 1000 up: their
 * events are counted when the thread was joined. */
static void *spawner(void *arg)
{
	(void)arg;
	uint64_t id = 1000;
	while (wait_go(g_threads)) {
		pthread_t th;
		if (pthread_create(&th, NULL, short_thread, (void *)(uintptr_t)id++) != 0)
			continue;
		pthread_join(th, NULL);
		atomic_fetch_add(&g_w[8 + 2 * g_threads], SHORT);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "short")) {
		const unsigned long n = strtoul(argv[2], NULL, 10);
		for (unsigned long i = 0; i < n; i++)
			strata_tracepoint(stress, tick, 0, i);
		return 0;
	}
	if (argc < 4 || argc > 5 || strcmp(argv[1], "long")) {
		fprintf(stderr, "usage: %s long FILE THREADS [REST_US] | short N\n", argv[0]);
		return 2;
	}
	g_threads = (unsigned)strtoul(argv[3], NULL, 10);
	g_rest_us = argc > 4 ? atol(argv[4]) : 0;
	if (g_rest_us < 0 || g_rest_us > 999999)
		return 2;
	if (g_threads < 1 || g_threads > MAX_THREADS)
		return 2;
	int fd = open(argv[2], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, FILE_SIZE) != 0)
		return 1;
	g_w = mmap(NULL, FILE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (g_w == MAP_FAILED)
		return 1;
	static pthread_t th[MAX_THREADS + 1];
	for (unsigned t = 0; t < g_threads; t++)
		pthread_create(&th[t], NULL, writer, (void *)(uintptr_t)t);
	pthread_create(&th[g_threads], NULL, spawner, NULL);
	for (unsigned t = 0; t <= g_threads; t++)
		pthread_join(th[t], NULL);
	return 0;
}
