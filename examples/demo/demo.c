/*
 * strata-demo - the bundled example: N threads each emit N events with
 * deterministic field values (demo_values.h), using every field kind.
 *
 *   strata-demo [--threads N] [--events N] [--sigkill-at K]
 *
 * --sigkill-at K: thread 0 sends SIGKILL to the whole process right after
 * emitting its event K (for the crash tests: a traced process killed
 * mid-run).  On a normal run the program prints what it emitted.
 */
#define _GNU_SOURCE /* pthread_barrier_t, kill */
#define STRATA_DEFINE_PROVIDERS
#include "demo_tp.h"
#include "demo_values.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct worker {
	pthread_t thread;
	uint32_t index;
	uint64_t n_events;
	uint64_t sigkill_at; /* UINT64_MAX: never */
};

static pthread_barrier_t start_line;

static void emit(uint32_t t, uint64_t i)
{
	if (i % 2 == 0) {
		struct demo_ints v = demo_ints_of(t, i);
		strata_tracepoint(demo, ints, t, i, v.s8, v.u8, v.s16, v.u16, v.s32, v.u32, v.s64, v.x64);
	} else {
		struct demo_mix v;
		demo_mix_of(t, i, &v);
		strata_tracepoint(demo, mix, t, i, v.f32, v.f64, v.state, v.msg, v.arr, v.vals, v.n_vals,
				  v.blob, v.n_blob);
	}
}

static void *work(void *arg)
{
	struct worker *w = (struct worker *)arg;
	uint64_t i;

	pthread_barrier_wait(&start_line);
	for (i = 0; i < w->n_events; i++) {
		emit(w->index, i);
		if (i == w->sigkill_at)
			kill(getpid(), SIGKILL);
	}
	return NULL;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long v;

	if (!s || !*s || *s == '-')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || *end || v > max)
		return -1;
	*out = v;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: strata-demo [--threads N] [--events N] [--sigkill-at K]\n"
		   "  --threads N     worker threads (default 4, at most 256)\n"
		   "  --events N      events per thread (default 1000)\n"
		   "  --sigkill-at K  thread 0 kills the process after its event K\n");
}

int main(int argc, char **argv)
{
	uint64_t n_threads = 4, n_events = 1000, sigkill_at = UINT64_MAX;
	struct worker *workers;
	uint64_t t;
	int a;

	for (a = 1; a < argc; a++) {
		const char *val = a + 1 < argc ? argv[a + 1] : NULL;
		if (!strcmp(argv[a], "--help") || !strcmp(argv[a], "-h")) {
			usage(stdout);
			return 0;
		} else if (!strcmp(argv[a], "--threads") && !parse_u64(val, 256, &n_threads) &&
			   n_threads > 0) {
			a++;
		} else if (!strcmp(argv[a], "--events") && !parse_u64(val, UINT64_MAX / 2, &n_events)) {
			a++;
		} else if (!strcmp(argv[a], "--sigkill-at") && !parse_u64(val, UINT64_MAX - 1, &sigkill_at)) {
			a++;
		} else {
			fprintf(stderr, "strata-demo: bad argument '%s'\n", argv[a]);
			usage(stderr);
			return 2;
		}
	}

	workers = calloc(n_threads, sizeof *workers);
	if (!workers || pthread_barrier_init(&start_line, NULL, (unsigned)n_threads)) {
		fprintf(stderr, "strata-demo: out of memory\n");
		return 1;
	}
	strata_tracepoint(demo, start);
	for (t = 0; t < n_threads; t++) {
		workers[t].index = (uint32_t)t;
		workers[t].n_events = n_events;
		workers[t].sigkill_at = t == 0 ? sigkill_at : UINT64_MAX;
		if (pthread_create(&workers[t].thread, NULL, work, &workers[t])) {
			fprintf(stderr, "strata-demo: cannot create thread %llu\n", (unsigned long long)t);
			return 1;
		}
	}
	for (t = 0; t < n_threads; t++)
		pthread_join(workers[t].thread, NULL);
	pthread_barrier_destroy(&start_line);
	free(workers);

	printf("strata-demo: %llu threads x %llu events: emitted %llu events "
	       "(demo:ints for even, demo:mix for odd sequence numbers) + 1 demo:start\n",
	       (unsigned long long)n_threads, (unsigned long long)n_events,
	       (unsigned long long)(n_threads * n_events));
	return 0;
}
