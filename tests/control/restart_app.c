/*
 * restart_app.c - the traced program of control.restart (check_restart.py):
 * THREADS threads each emit EVENTS events rstest:seq {proc, thread, i},
 * i = 0..EVENTS-1, in PHASES equal phases.  Between phases every thread
 * waits for the test: the shared file STATE (little-endian u64 words)
 * holds at word 0 the phase the test allows (the threads of phase k wait
 * until it is >= k), and at word 1 + thread this process's count of
 * events emitted by that thread (written after each event, release), so
 * that the test kills the daemon at an instant it chooses by what was
 * emitted, not by time.  Linked with tp-sync: it joins active sessions
 * before main().  Exits 0 once every event was emitted.
 *
 *   restart_app PROC THREADS EVENTS PHASES STATE
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(rstest, seq, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, proc), strata_int(uint32_t, thread),
	     strata_int(uint64_t, i))

static uint32_t g_proc;
static uint64_t g_events, g_phases;
static _Atomic uint64_t *g_state;

static void *worker(void *arg)
{
	const uint32_t t = (uint32_t)(uintptr_t)arg;
	const uint64_t per = g_events / g_phases;
	for (uint64_t i = 0; i < g_events; i++) {
		const uint64_t phase = i / per < g_phases ? i / per : g_phases - 1;
		// Acquire: pairs with nothing but the test's write; a hint.
		while (atomic_load_explicit(&g_state[0], memory_order_acquire) < phase) {
			struct timespec ts = {0, 200000};
			nanosleep(&ts, NULL);
		}
		strata_tracepoint(rstest, seq, g_proc, t, i);
		// Release: the count is published after the event (the test
		// reads it to decide when to kill).
		atomic_store_explicit(&g_state[1 + t], i + 1, memory_order_release);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: restart_app PROC THREADS EVENTS PHASES STATE\n");
		return 2;
	}
	g_proc = (uint32_t)strtoul(argv[1], NULL, 10);
	const unsigned long threads = strtoul(argv[2], NULL, 10);
	g_events = strtoull(argv[3], NULL, 10);
	g_phases = strtoull(argv[4], NULL, 10);
	if (threads == 0 || threads > 32 || g_phases == 0 || g_events < g_phases)
		return 2;
	int fd = open(argv[5], O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror(argv[5]);
		return 1;
	}
	g_state = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (g_state == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	pthread_t th[32];
	for (unsigned long i = 0; i < threads; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
	for (unsigned long i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	printf("emitted %llu events\n", (unsigned long long)(threads * g_events));
	return 0;
}
