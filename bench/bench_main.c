/*
 * bench_main.c - the one workload program of the benchmark suite, built three
 * times from this same source so that both tracers run the very same loops:
 *
 *   strata-bench        BENCH_STRATA: Strata tracepoints, libstrata + tp-sync
 *   strata-bench-lttng  BENCH_LTTNG:  LTTng-UST tracepoints (bench_tp_lttng.h)
 *   strata-bench-plain  neither: no tracepoint at all (start-up baseline and
 *                       the fork/exec timing loop)
 *
 * Modes (argv[1]); every result is printed as "key=value" lines on stdout
 * for bench/run.py:
 *   loop W T N [WU [ordered]]
 *                   T threads each emit WU warm-up events (default 0: the
 *                   first lap of fresh buffers costs page faults), then N
 *                   events of workload W (ints, str, mixed) after a common
 *                   barrier; prints the mean per-thread
 *                   ns per loop iteration, in wall time and in thread CPU
 *                   time.  Without a session this is the
 *                   disabled-tracepoint cost.  `ordered` (T = 1): also
 *                   the ordered TSC read's CPU ns, timed in the thread
 *                   beside its loop (ordered_tsc_ns; issue 64's stretch).
 *   rate W R MS     one thread emits workload W at R events/s (bursts of
 *                   R/1000 events at each millisecond; R = 0: unthrottled)
 *                   for MS milliseconds.
 *   tick US MS      emits bench:tick(CLOCK_MONOTONIC now, seq) every US
 *                   microseconds for MS milliseconds (enablement latency).
 *   hold T N        T threads each emit N "ints" events, then stay alive;
 *                   prints "ready=1" and waits for EOF on stdin (memory).
 *   spin T          T threads (up to 1024) emit "ints" events as fast as
 *                   they can until EOF on stdin; prints "ready=1" once each
 *                   emitted one (stop_live.py: a stop with T live writers).
 *   wake MS         the machine's wake-up tail, no tracer: one thread spins
 *                   (a producer's stand-in) while another sleeps 0.5 ms at a
 *                   time for MS milliseconds, as a drain waits for its next
 *                   packet; prints how often and by how much the sleeper
 *                   woke late.  A ring lapping in less than the tail's
 *                   longest delay loses events whatever the drain does.
 *   burst N K C     short-lived threads: N threads, each emitting K "ints"
 *                   events and exiting, C alive at a time (created in
 *                   rounds of C, each round joined before the next); prints
 *                   the process's CPU ns (every thread's, the exited ones'
 *                   too) and wall ns per thread.
 *   noop            returns at once (start-up cost).
 *   one             emits one "ints" event and returns (start-up with a
 *                   first event: where a tracer makes its buffer then).
 *   costs           CPU ns of the fast path's building blocks on this
 *                   machine: rdtsc, rdtscp, lfence+rdtsc (an ordered TSC
 *                   read), clock_gettime(CLOCK_MONOTONIC), an uncontended
 *                   lock cmpxchg and lock xadd; what an instruction
 *                   after the ordered TSC read costs (ordered_48add_*,
 *                   add48_alone_ns: print_ordered_adds); and what a
 *                   fresh page of shared memory costs (page_*_us: a
 *                   ring's first lap writes each page once, the writer's
 *                   and the daemon's mapping alike): its first write, and
 *                   MADV_POPULATE_WRITE then the first write after it (a
 *                   VM with shadow page tables traps at both).
 *   clock N         (strata-bench only) CPU ns of the clock read that stamps
 *                   Strata's events in this process (strata_rt_clock_now:
 *                   the module's page, the consumer's page or
 *                   clock_gettime) and which one it is (clock_id), beside
 *                   clock_gettime; with a page, the read part by part
 *                   (part_*_ns: the fenced TSC, the conversion, the
 *                   seqcount, the fence).
 *   spawn N PROG..  runs each PROG N times with the argument "noop" (or
 *                   $BENCH_SPAWN_ARG) (posix_spawn + waitpid, programs
 *                   interleaved) and prints the median and minimum wall time
 *                   of each in microseconds.
 *
 * No concurrency beyond the benchmark threads themselves: they share only
 * the start/stop barriers and write their own slot of `elapsed_ns`, read by
 * main after pthread_join (which orders it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "strata_kclock.h" /* header only: the ordered TSC read (costs) */
#if defined(BENCH_STRATA)
#define STRATA_DEFINE_PROVIDERS
#include "bench_tp_strata.h"
#define EMIT_INTS(a, b) strata_tracepoint(bench, ints, a, b)
#define EMIT_STR(s) strata_tracepoint(bench, str, s)
#define EMIT_MIXED(a, b, c, d, e, f, g, h) strata_tracepoint(bench, mixed, a, b, c, d, e, f, g, h)
#define EMIT_TICK(t, s) strata_tracepoint(bench, tick, t, s)
#define BENCH_SIDE "strata"
#elif defined(BENCH_LTTNG)
#include "bench_tp_lttng.h"
#define EMIT_INTS(a, b) tracepoint(bench, ints, a, b)
#define EMIT_STR(s) tracepoint(bench, str, s)
#define EMIT_MIXED(a, b, c, d, e, f, g, h) tracepoint(bench, mixed, a, b, c, d, e, f, g, h)
#define EMIT_TICK(t, s) tracepoint(bench, tick, t, s)
#define BENCH_SIDE "lttng"
#else
/* No tracepoint: keep the arguments alive so the loops stay comparable. */
#define BENCH_SINK(x) __asm__ volatile("" : : "g"(x) : "memory")
#define EMIT_INTS(a, b)        \
	do {                   \
		BENCH_SINK(a); \
		BENCH_SINK(b); \
	} while (0)
#define EMIT_STR(s) BENCH_SINK(s)
#define EMIT_MIXED(a, b, c, d, e, f, g, h) \
	do {                               \
		BENCH_SINK(a);             \
		BENCH_SINK(h);             \
	} while (0)
#define EMIT_TICK(t, s)        \
	do {                   \
		BENCH_SINK(t); \
		BENCH_SINK(s); \
	} while (0)
#define BENCH_SIDE "plain"
#endif

#define BENCH_MAX_THREADS 256

/* 64 characters, NUL not counted. */
static const char bench_str64[] = "0123456789abcdef0123456789ABCDEF0123456789abcdef0123456789ABCDEF";

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* CPU time of the calling thread: less disturbed by other processes on a
 * shared machine than wall time (a descheduled thread is not charged). */
static uint64_t cpu_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The three loops: noinline so callgrind can count exactly these functions
 * (--toggle-collect=bench_loop_*). */
__attribute__((noinline)) void bench_loop_ints(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		EMIT_INTS((uint32_t)i, i * 3);
}

__attribute__((noinline)) void bench_loop_str(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		EMIT_STR(bench_str64);
}

__attribute__((noinline)) void bench_loop_mixed(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		EMIT_MIXED((uint8_t)i, (int16_t) - (int16_t)i, (uint32_t)i, (int64_t)i * 7,
			   (uint16_t)(i ^ 0x5a5a), (double)i * 0.5, "short", (int32_t)-1);
}

typedef void (*bench_loop_fn)(uint64_t);

static bench_loop_fn loop_by_name(const char *w)
{
	if (!strcmp(w, "ints"))
		return bench_loop_ints;
	if (!strcmp(w, "str"))
		return bench_loop_str;
	if (!strcmp(w, "mixed"))
		return bench_loop_mixed;
	fprintf(stderr, "unknown workload '%s' (ints, str, mixed)\n", w);
	exit(2);
}

struct worker {
	pthread_t thread;
	bench_loop_fn fn;
	uint64_t n;
	uint64_t warmup;
	uint64_t elapsed_ns;
	uint64_t cpu_ns;
	int ordered;       /* loop's "ordered": time the ordered TSC read beside it */
	double ordered_ns; /* that read's CPU ns */
	pthread_barrier_t *start;
	pthread_barrier_t *hold; /* hold mode: stay alive until main arrives */
};

static double ordered_loop_ns(int n, int rdtscp, int adds);

/* A worker's loop.  With `ordered` (loop's 6th argument, one thread),
 * the ordered TSC read (the events' own) is timed in the same thread just
 * before and just after the loop, n / 16 reads each side (at least
 * 100,000: 2 ms, for a short loop's reading to settle), outside the
 * loop's times: issue 64's stretch rows subtract a read of the same phase
 * of a shared host, not one timed minutes apart (their mean: ordered_ns). */
static void *worker_main(void *arg)
{
	struct worker *w = arg;
	const int m = (int)(w->n / 16 > 100000 ? w->n / 16 : 100000);
	const int rdtscp = w->ordered ? strata_kclock_has_rdtscp() : 0;
	double before = 0;
	w->fn(w->warmup);
	pthread_barrier_wait(w->start);
	if (w->ordered)
		before = ordered_loop_ns(m, rdtscp, 0);
	uint64_t c0 = cpu_ns(), t0 = now_ns();
	w->fn(w->n);
	w->cpu_ns = cpu_ns() - c0;
	const uint64_t elapsed = now_ns() - t0;
	if (w->ordered)
		w->ordered_ns = (before + ordered_loop_ns(m, rdtscp, 0)) / 2;
	/* release: pairs with main's acquire poll in hold mode (pthread_join
	 * orders it otherwise) */
	__atomic_store_n(&w->elapsed_ns, elapsed, __ATOMIC_RELEASE);
	if (w->hold)
		pthread_barrier_wait(w->hold);
	return NULL;
}

static int run_threads(bench_loop_fn fn, unsigned nthreads, uint64_t n, uint64_t warmup, int hold,
		       int ordered)
{
	static struct worker workers[BENCH_MAX_THREADS];
	pthread_barrier_t start, hold_b;
	pthread_barrier_init(&start, NULL, nthreads);
	if (hold)
		pthread_barrier_init(&hold_b, NULL, nthreads + 1);
	uint64_t t0 = now_ns();
	for (unsigned i = 0; i < nthreads; i++) {
		workers[i] =
			(struct worker){0, fn, n, warmup, 0, 0, ordered, 0, &start, hold ? &hold_b : NULL};
		int err = pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
		if (err) {
			fprintf(stderr, "pthread_create: %s\n", strerror(err));
			exit(1);
		}
	}
	if (hold) {
		/* Wait until every worker has emitted (each then blocks in the
		 * hold barrier), then say so and wait for EOF on stdin. */
		uint64_t deadline = now_ns() + 60ull * 1000000000u;
		for (;;) {
			unsigned done = 0;
			for (unsigned i = 0; i < nthreads; i++)
				/* acquire: pairs with the worker's release store */
				done += __atomic_load_n(&workers[i].elapsed_ns, __ATOMIC_ACQUIRE) != 0;
			if (done == nthreads || now_ns() > deadline)
				break;
			usleep(1000); /* polling a condition, with a deadline */
		}
		printf("ready=1\npid=%d\n", (int)getpid());
		fflush(stdout);
		char buf[64];
		while (read(0, buf, sizeof buf) > 0)
			;
		pthread_barrier_wait(&hold_b);
	}
	double sum = 0, cpu = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(workers[i].thread, NULL);
		sum += (double)workers[i].elapsed_ns / (double)(n ? n : 1);
		cpu += (double)workers[i].cpu_ns / (double)(n ? n : 1);
	}
	uint64_t wall = now_ns() - t0;
	printf("side=%s\nthreads=%u\nemitted=%llu\nns_per_event=%.3f\ncpu_ns_per_event=%.3f\n"
	       "wall_ms=%.1f\n",
	       BENCH_SIDE, nthreads, (unsigned long long)((n + warmup) * nthreads), sum / nthreads,
	       cpu / nthreads, (double)wall / 1e6);
	if (ordered)
		printf("ordered_tsc_ns=%.3f\n", workers[0].ordered_ns);
	return 0;
}

static int run_rate(bench_loop_fn fn, uint64_t rate, uint64_t ms)
{
	uint64_t emitted = 0, t0 = now_ns(), end = t0 + ms * 1000000u;
	if (rate == 0) {
		while (now_ns() < end) {
			fn(1000);
			emitted += 1000;
		}
	} else {
		/* Burst of rate/1000 events at every millisecond boundary; the
		 * remainder carried so the average rate is exact. */
		uint64_t tick = t0, carry = 0;
		while (tick < end) {
			uint64_t n = (rate + carry) / 1000;
			carry = (rate + carry) % 1000;
			fn(n);
			emitted += n;
			tick += 1000000u;
			struct timespec ts = {(time_t)(tick / 1000000000u), (long)(tick % 1000000000u)};
			while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
				;
		}
	}
	uint64_t wall = now_ns() - t0;
	printf("side=%s\nemitted=%llu\nwall_ms=%.1f\nachieved_rate=%.0f\n", BENCH_SIDE,
	       (unsigned long long)emitted, (double)wall / 1e6, (double)emitted * 1e9 / (double)wall);
	return 0;
}

/* spin mode: the writers run until main sets this (relaxed: a flag polled
 * between events; the join orders the rest). */
static int spin_stop;
static uint64_t spin_count[1024];

static void *spin_main(void *arg)
{
	uint64_t *count = arg, i = 0;
	while (!__atomic_load_n(&spin_stop, __ATOMIC_RELAXED)) {
		EMIT_INTS((uint32_t)i, i);
		/* release: pairs with main's acquire poll for the first event */
		__atomic_store_n(count, ++i, __ATOMIC_RELEASE);
	}
	return NULL;
}

static int run_spin(unsigned nthreads)
{
	static pthread_t th[1024];
	for (unsigned i = 0; i < nthreads; i++)
		if (pthread_create(&th[i], NULL, spin_main, &spin_count[i])) {
			fprintf(stderr, "pthread_create failed at thread %u\n", i);
			exit(1);
		}
	uint64_t deadline = now_ns() + 120ull * 1000000000u;
	for (unsigned i = 0; i < nthreads && now_ns() < deadline;)
		if (__atomic_load_n(&spin_count[i], __ATOMIC_ACQUIRE)) /* pairs with the release above */
			i++;
		else
			usleep(1000); /* polling a condition, with a deadline */
	printf("ready=1\npid=%d\n", (int)getpid());
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof buf) > 0)
		;
	__atomic_store_n(&spin_stop, 1, __ATOMIC_RELAXED);
	uint64_t emitted = 0;
	for (unsigned i = 0; i < nthreads; i++) {
		pthread_join(th[i], NULL);
		emitted += spin_count[i];
	}
	printf("side=%s\nthreads=%u\nemitted=%llu\n", BENCH_SIDE, nthreads, (unsigned long long)emitted);
	return 0;
}

/* burst mode: each thread emits its K events and exits. */
static uint64_t burst_k;

static void *burst_main(void *arg)
{
	(void)arg;
	bench_loop_ints(burst_k);
	return NULL;
}

static int run_burst(uint64_t n, uint64_t k, unsigned c)
{
	static pthread_t th[BENCH_MAX_THREADS];
	struct timespec a, b;
	burst_k = k;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &a);
	const uint64_t w0 = now_ns();
	for (uint64_t done = 0; done < n;) {
		const unsigned r = n - done < c ? (unsigned)(n - done) : c;
		for (unsigned i = 0; i < r; i++)
			if (pthread_create(&th[i], NULL, burst_main, NULL)) {
				fprintf(stderr, "pthread_create failed after %llu threads\n",
					(unsigned long long)done);
				exit(1);
			}
		for (unsigned i = 0; i < r; i++)
			pthread_join(th[i], NULL);
		done += r;
	}
	const uint64_t wall = now_ns() - w0;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &b);
	const uint64_t cpu =
		(uint64_t)(b.tv_sec - a.tv_sec) * 1000000000u + (uint64_t)b.tv_nsec - (uint64_t)a.tv_nsec;
	printf("side=%s\nthreads=%llu\nemitted=%llu\ncpu_ns_per_thread=%.1f\nwall_ns_per_thread=%.1f\n",
	       BENCH_SIDE, (unsigned long long)n, (unsigned long long)(n * k), (double)cpu / (double)n,
	       (double)wall / (double)n);
	return 0;
}

static int run_tick(uint64_t period_us, uint64_t ms)
{
	uint64_t seq = 0, t0 = now_ns(), end = t0 + ms * 1000000u;
	printf("ready=1\n");
	fflush(stdout);
	for (uint64_t t = t0; t < end; t = now_ns()) {
		EMIT_TICK(t, seq);
		seq++;
		struct timespec ts = {0, (long)(period_us * 1000u)};
		nanosleep(&ts, NULL);
	}
	printf("emitted=%llu\n", (unsigned long long)seq);
	return 0;
}

static int wake_stop; /* the spinner's stop flag: atomic accesses only */

static void *wake_spin(void *arg)
{
	(void)arg;
	/* Relaxed: a stop flag publishes nothing (pthread_join orders the
	 * rest); pairs with the relaxed store in run_wake. */
	while (!__atomic_load_n(&wake_stop, __ATOMIC_RELAXED))
		;
	return NULL;
}

static int run_wake(uint64_t ms)
{
	const uint64_t period = 500000;
	pthread_t spinner;
	int err = pthread_create(&spinner, NULL, wake_spin, NULL);
	if (err) {
		fprintf(stderr, "pthread_create: %s\n", strerror(err));
		return 1;
	}
	uint64_t n = 0, late1 = 0, late2 = 0, late4 = 0, worst = 0;
	const uint64_t t0 = now_ns(), end = t0 + ms * 1000000u;
	for (uint64_t t = t0; t < end;) {
		struct timespec ts = {0, (long)period};
		nanosleep(&ts, NULL);
		const uint64_t t1 = now_ns();
		const uint64_t late = t1 - t > period ? t1 - t - period : 0;
		n++;
		late1 += late > 1000000u;
		late2 += late > 2000000u;
		late4 += late > 4000000u;
		worst = late > worst ? late : worst;
		t = t1;
	}
	const double secs = (double)(now_ns() - t0) / 1e9;
	__atomic_store_n(&wake_stop, 1, __ATOMIC_RELAXED); /* see wake_spin */
	pthread_join(spinner, NULL);
	printf("wakes=%llu\nlate_1ms_per_s=%.2f\nlate_2ms_per_s=%.2f\nlate_4ms_per_s=%.2f\n"
	       "late_max_ms=%.3f\n",
	       (unsigned long long)n, (double)late1 / secs, (double)late2 / secs, (double)late4 / secs,
	       (double)worst / 1e6);
	return 0;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 uapi; glibc 2.36 headers lack it */
#endif

/* CPU us per page of a fresh 8 MiB memfd mapping: t[0] the first write of
 * each page; with `populate`, t[1] MADV_POPULATE_WRITE of the whole range
 * and t[0] the first write after it.  -1 where the kernel refuses. */
static void fresh_pages(int populate, double t[2])
{
	const size_t size = 8u << 20, page = 4096;
	t[0] = t[1] = -1;
	int fd = memfd_create("bench-pages", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
		if (fd >= 0)
			close(fd);
		return;
	}
	volatile char *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return;
	uint64_t c = cpu_ns();
	if (populate && madvise((void *)p, size, MADV_POPULATE_WRITE) != 0)
		goto out;
	t[1] = populate ? (double)(cpu_ns() - c) / (size / page) / 1e3 : 0;
	c = cpu_ns();
	for (size_t o = 0; o < size; o += page)
		p[o] = 1;
	t[0] = (double)(cpu_ns() - c) / (size / page) / 1e3;
out:
	munmap((void *)p, size);
}

/* What an instruction after the ordered TSC read costs on this machine:
 * the read (strata_kclock_ordered: rdtscp where the CPU has it, else
 * lfence; rdtsc, the events' own; its value used, as an event's is) with
 * 48 independent register additions after it (six chains of 8), over the
 * read alone.  Where the read's wait hides the instructions that
 * follow it the difference is 0; where it hides none, 48 instructions at
 * the machine's issue rate (an event's other instructions: issue 64's
 * stretch rows).  ADD_ROUNDS rounds of n / ADD_ROUNDS, the two loops in
 * turn; the median of the rounds' paired differences (two loops timed
 * apart moved by more than the difference on a shared machine). */
#define BENCH_ADD6                                                                            \
	"add $1, %%r8\n\tadd $1, %%r9\n\tadd $1, %%r10\n\tadd $1, %%r11\n\tadd $1, %%rsi\n\t" \
	"add $1, %%rdi\n\t"
#define BENCH_ADD48 BENCH_ADD6 BENCH_ADD6 BENCH_ADD6 BENCH_ADD6 BENCH_ADD6 BENCH_ADD6 BENCH_ADD6 BENCH_ADD6
#define BENCH_ADD_CLOBBERS "r8", "r9", "r10", "r11", "rsi", "rdi", "memory"
#define ADD_ROUNDS 15
static double ordered_loop_ns(int n, int rdtscp, int adds)
{
	volatile uint64_t sink = 0;
	uint64_t c = cpu_ns();
	for (int i = 0; i < n; i++) {
		sink += strata_kclock_ordered(rdtscp);
#if defined(__x86_64__)
		if (adds)
			__asm__ __volatile__(BENCH_ADD48 : : : BENCH_ADD_CLOBBERS);
#endif
	}
	return (double)(cpu_ns() - c) / n;
}

/* The 48 additions alone (the loop's own increment and branch beside
 * them, as beside the read's loops). */
static double adds_alone_ns(int n)
{
	uint64_t c = cpu_ns();
#if defined(__x86_64__)
	for (int i = 0; i < n; i++)
		__asm__ __volatile__(BENCH_ADD48 : : : BENCH_ADD_CLOBBERS);
#endif
	return (double)(cpu_ns() - c) / n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void print_ordered_adds(int n)
{
#if defined(__x86_64__)
	const int rdtscp = strata_kclock_has_rdtscp();
	double over[ADD_ROUNDS], alone[ADD_ROUNDS];
	const int m = n / ADD_ROUNDS;
	for (int r = 0; r < ADD_ROUNDS; r++) {
		const double first = ordered_loop_ns(m, rdtscp, r & 1);
		const double second = ordered_loop_ns(m, rdtscp, !(r & 1));
		over[r] = r & 1 ? first - second : second - first;
		alone[r] = adds_alone_ns(m);
	}
	qsort(over, ADD_ROUNDS, sizeof over[0], cmp_double);
	qsort(alone, ADD_ROUNDS, sizeof alone[0], cmp_double);
	printf("ordered_48add_over_ns=%.2f\nadd48_alone_ns=%.2f\nordered_48add_read=%s\n",
	       over[ADD_ROUNDS / 2], alone[ADD_ROUNDS / 2], rdtscp ? "rdtscp" : "lfence_rdtsc");
#else
	(void)n;
#endif
}

static int run_costs(void)
{
	const int n = 10000000;
	volatile uint64_t sink = 0;
	uint64_t word = 0;
	unsigned aux;
	struct timespec ts;
	double t[7];
	t[0] = (double)cpu_ns();
#if defined(__x86_64__) || defined(__i386__)
	for (int i = 0; i < n; i++)
		sink += __builtin_ia32_rdtsc();
	t[1] = (double)cpu_ns();
	for (int i = 0; i < n; i++)
		sink += __builtin_ia32_rdtscp(&aux);
#else
	(void)aux;
	t[1] = t[0];
#endif
	t[2] = (double)cpu_ns();
#if defined(__x86_64__) || defined(__i386__)
	for (int i = 0; i < n; i++) {
		uint32_t lo, hi;
		__asm__ __volatile__("lfence; rdtsc" : "=a"(lo), "=d"(hi) : : "memory");
		sink += ((uint64_t)hi << 32) | lo;
	}
#endif
	t[6] = (double)cpu_ns();
	for (int i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		sink += (uint64_t)ts.tv_nsec;
	}
	t[3] = (double)cpu_ns();
	/* Single thread: the orders only make the instructions the fast path
	 * uses (lock cmpxchg, lock xadd); nothing pairs with them. */
	for (int i = 0; i < n; i++) {
		uint64_t expected = word;
		__atomic_compare_exchange_n(&word, &expected, expected + 1, 0, __ATOMIC_RELAXED,
					    __ATOMIC_RELAXED);
	}
	t[4] = (double)cpu_ns();
	for (int i = 0; i < n; i++)
		__atomic_fetch_add(&word, 1, __ATOMIC_RELEASE);
	t[5] = (double)cpu_ns();
	printf("rdtsc_ns=%.1f\nrdtscp_ns=%.1f\nlfence_rdtsc_ns=%.1f\nclock_gettime_ns=%.1f\n"
	       "lock_cmpxchg_ns=%.1f\nlock_xadd_ns=%.1f\n",
	       (t[1] - t[0]) / n, (t[2] - t[1]) / n, (t[6] - t[2]) / n, (t[3] - t[6]) / n, (t[4] - t[3]) / n,
	       (t[5] - t[4]) / n);
	print_ordered_adds(n / 2);
	double touch[2], pop[2];
	fresh_pages(0, touch);
	fresh_pages(1, pop);
	printf("page_touch_us=%.2f\npage_populate_us=%.2f\npage_after_populate_us=%.2f\n", touch[0], pop[1],
	       pop[0]);
	return sink == 42; /* never: keeps `sink` alive */
}

#if defined(BENCH_STRATA)
/* libstrata's clock (libtrace/runtime/runtime.h, exported). */
uint32_t strata_rt_clock_id(void);
uint64_t strata_rt_clock_now(void);
const struct strata_kclock *strata_rt_clock_page(void);

/* The page read taken apart (docs/benchmarks.md, "The clock read, part by
 * part"): each loop adds one step to the one before, and each iteration's
 * result feeds a volatile store, so that, as in an event, the next
 * iteration's fence waits for the whole chain from the TSC to the result.
 * The page's parameters are loaded as the reader loads them. */
enum clock_part {
	CP_FENCED_TSC, /* the ordered TSC as the events read it: rdtscp where the
			* CPU has it (libtrace/runtime/clock.cpp), else lfence; rdtsc */
	CP_GENERAL,    /* + the general conversion (clamp, mask, 128 bits) */
	CP_CONVERT,    /* + the reader's conversion (64-bit common case) */
	CP_SEQ,        /* + the seqcount: the reader's whole inline read */
	CP_UNFENCED,   /* the same without the fence (plain rdtsc) */
	CP_SEQ_AFTER,  /* the same, the seq load after the ordered TSC */
	CP_N
};

/* The page's parameters, loaded as the reader loads them. */
struct clock_params {
	uint64_t last, mask, xn, base;
	uint32_t mult, shift;
};

static inline struct clock_params clock_params_load(const struct strata_kclock *k)
{
	struct clock_params p = {__atomic_load_n(&k->cycle_last, __ATOMIC_RELAXED),
				 __atomic_load_n(&k->mask, __ATOMIC_RELAXED),
				 __atomic_load_n(&k->xtime_nsec, __ATOMIC_RELAXED),
				 __atomic_load_n(&k->base_ns, __ATOMIC_RELAXED),
				 __atomic_load_n(&k->mult, __ATOMIC_RELAXED),
				 __atomic_load_n(&k->shift, __ATOMIC_RELAXED) & 63};
	return p;
}

static inline __attribute__((always_inline)) uint64_t clock_part_once(const struct strata_kclock *k,
								      enum clock_part part, int rdtscp)
{
	uint64_t tsc, ns = 0;
	uint32_t seq, lo;
	struct clock_params p;
	switch (part) {
	case CP_FENCED_TSC:
		return strata_kclock_ordered_lo(&lo, rdtscp);
	case CP_GENERAL:
		tsc = strata_kclock_ordered_lo(&lo, rdtscp);
		p = clock_params_load(k);
		return strata_kclock_convert(tsc, p.last, p.mask, p.xn, p.base, p.mult, p.shift);
	case CP_CONVERT:
		tsc = strata_kclock_ordered_lo(&lo, rdtscp);
		p = clock_params_load(k);
		return strata_kclock_scale(tsc, lo, p.last, p.mask, p.xn, p.mult, p.shift) + p.base;
	case CP_SEQ:
		return strata_kclock_try_how(k, &ns, rdtscp) == 0 ? ns : 0;
	case CP_UNFENCED:
		seq = __atomic_load_n(&k->seq, __ATOMIC_ACQUIRE);
		tsc = strata_kclock_rdtsc_unordered();
		return strata_kclock_end(k, seq, tsc, (uint32_t)tsc, &ns) == 0 ? ns : 0;
	case CP_SEQ_AFTER:
		tsc = strata_kclock_ordered_lo(&lo, rdtscp);
		seq = __atomic_load_n(&k->seq, __ATOMIC_ACQUIRE);
		return strata_kclock_end(k, seq, tsc, lo, &ns) == 0 ? ns : 0;
	default:
		return 0;
	}
}

/* CPU ns per read of one part; the switch is on constants (inlined per part). */
#define CLOCK_PART_LOOP(k, part, rdtscp, n, out)                         \
	do {                                                             \
		volatile uint64_t sink_ = 0;                             \
		double c0_ = (double)cpu_ns();                           \
		for (uint64_t i_ = 0; i_ < (n); i_++)                    \
			sink_ += clock_part_once((k), (part), (rdtscp)); \
		(out) = ((double)cpu_ns() - c0_) / (double)(n);          \
	} while (0)

/* One part's loop, a constant part and instruction per loop. */
#define CLOCK_PART_CASES(k, p, rdtscp, m, out)                     \
	switch (p) {                                               \
	case CP_FENCED_TSC:                                        \
		CLOCK_PART_LOOP(k, CP_FENCED_TSC, rdtscp, m, out); \
		break;                                             \
	case CP_GENERAL:                                           \
		CLOCK_PART_LOOP(k, CP_GENERAL, rdtscp, m, out);    \
		break;                                             \
	case CP_CONVERT:                                           \
		CLOCK_PART_LOOP(k, CP_CONVERT, rdtscp, m, out);    \
		break;                                             \
	case CP_SEQ:                                               \
		CLOCK_PART_LOOP(k, CP_SEQ, rdtscp, m, out);        \
		break;                                             \
	case CP_UNFENCED:                                          \
		CLOCK_PART_LOOP(k, CP_UNFENCED, rdtscp, m, out);   \
		break;                                             \
	default:                                                   \
		CLOCK_PART_LOOP(k, CP_SEQ_AFTER, rdtscp, m, out);  \
		break;                                             \
	}

/* Each part's loop run CLOCK_ROUNDS times for n / CLOCK_ROUNDS reads, the
 * parts in turn (each round starting one part later), so that a slow phase
 * of a shared machine falls on every part alike; each part's figure is its
 * median round, and the whole read over the fenced TSC (the "clock
 * read at most the ordered TSC + 2 ns") is the median of the rounds' paired
 * differences: one sample each, as before, moved by 3 ns between runs.  The
 * ordered TSC is the runtime's: RDTSCP where the CPU has it. */
#define CLOCK_ROUNDS 15
static void run_clock_parts(const struct strata_kclock *k, uint64_t n)
{
	static const char *const names[CP_N] = {"fenced_tsc", "general_convert", "convert",
						"seqcount",   "unfenced",        "seq_after_tsc"};
	double t[CP_N][CLOCK_ROUNDS], over[CLOCK_ROUNDS];
	uint64_t m = n / CLOCK_ROUNDS ? n / CLOCK_ROUNDS : 1;
	const int rdtscp = strata_kclock_use_rdtscp(k);
	for (int r = 0; r < CLOCK_ROUNDS; r++) {
		for (int i = 0; i < CP_N; i++) {
			int p = (r + i) % CP_N;
			if (rdtscp) {
				CLOCK_PART_CASES(k, p, 1, m, t[p][r]);
			} else {
				CLOCK_PART_CASES(k, p, 0, m, t[p][r]);
			}
		}
		over[r] = t[CP_SEQ][r] - t[CP_FENCED_TSC][r];
	}
	for (int p = 0; p < CP_N; p++) {
		qsort(t[p], CLOCK_ROUNDS, sizeof t[p][0], cmp_double);
		printf("part_%s_ns=%.1f\n", names[p], t[p][CLOCK_ROUNDS / 2]);
	}
	qsort(over, CLOCK_ROUNDS, sizeof over[0], cmp_double);
	printf("seqcount_over_fenced_ns=%.2f\nclock_part_rounds=%d\nclock_ordered_tsc=%s\n",
	       over[CLOCK_ROUNDS / 2], CLOCK_ROUNDS, rdtscp ? "rdtscp" : "lfence_rdtsc");
}

static int run_clock(uint64_t n)
{
	volatile uint64_t sink = 0;
	uint32_t id = strata_rt_clock_id();
	double t0 = (double)cpu_ns();
	for (uint64_t i = 0; i < n; i++)
		sink += strata_rt_clock_now();
	double t1 = (double)cpu_ns();
	struct timespec ts;
	for (uint64_t i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC, &ts);
		sink += (uint64_t)ts.tv_nsec;
	}
	double t2 = (double)cpu_ns();
	printf("strata_clock_ns=%.1f\nclock_id=%u\nclock_gettime_ns=%.1f\n", (t1 - t0) / (double)n, id,
	       (t2 - t1) / (double)n);
	const struct strata_kclock *k = strata_rt_clock_page();
	if (k)
		run_clock_parts(k, n);
	return sink == 42; /* never: keeps `sink` alive */
}
#endif

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

extern char **environ;

/* Runs each program of progs[0..nprog) with the argument "noop" (or
 * $BENCH_SPAWN_ARG), n rounds,
 * interleaved (A B C A B C ...) so that load on a shared machine hits all of
 * them alike; prints the median and minimum wall time of each. */
static int run_spawn(unsigned n, char **progs, unsigned nprog)
{
	uint64_t *t = calloc((size_t)n * nprog, sizeof *t);
	if (!t)
		return 1;
	const char *arg = getenv("BENCH_SPAWN_ARG");
	for (unsigned i = 0; i < n; i++) {
		for (unsigned p = 0; p < nprog; p++) {
			char *argv[] = {progs[p], (char *)(arg && *arg ? arg : "noop"), NULL};
			pid_t pid;
			int status;
			uint64_t t0 = now_ns();
			int err = posix_spawn(&pid, progs[p], NULL, NULL, argv, environ);
			if (err) {
				fprintf(stderr, "posix_spawn %s: %s\n", progs[p], strerror(err));
				return 1;
			}
			if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status)) {
				fprintf(stderr, "%s failed (status %d)\n", progs[p], status);
				return 1;
			}
			t[(size_t)p * n + i] = now_ns() - t0;
		}
	}
	printf("runs=%u\n", n);
	for (unsigned p = 0; p < nprog; p++) {
		uint64_t *tp = t + (size_t)p * n;
		qsort(tp, n, sizeof *tp, cmp_u64);
		printf("median_us_%u=%.1f\nmin_us_%u=%.1f\n", p, (double)tp[n / 2] / 1e3, p,
		       (double)tp[0] / 1e3);
	}
	free(t);
	return 0;
}

static uint64_t arg_u64(const char *s)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 0);
	if (errno || *end || end == s) {
		fprintf(stderr, "bad number '%s'\n", s);
		exit(2);
	}
	return v;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: strata-bench{,-lttng,-plain} MODE ...\n"
		"  loop W T N [WU [ordered]] | rate W R MS | tick US MS | hold T N | spin T | burst N K C |\n"
		"  noop | one |\n"
		"  costs |\n"
		"  wake MS |\n"
		"  spawn N PROG...\n"
		"  W: ints, str, mixed\n");
	return 2;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	const char *mode = argv[1];
	if (!strcmp(mode, "noop"))
		return 0;
	if (!strcmp(mode, "one")) {
		bench_loop_ints(1);
		return 0;
	}
	if (!strcmp(mode, "costs"))
		return run_costs();
	if (!strcmp(mode, "wake") && argc == 3)
		return run_wake(arg_u64(argv[2]));
#if defined(BENCH_STRATA)
	if (!strcmp(mode, "clock") && argc == 3)
		return run_clock(arg_u64(argv[2]));
#endif
	if (!strcmp(mode, "loop") && argc >= 5 && argc <= 7) {
		uint64_t t = arg_u64(argv[3]);
		const int ordered = argc == 7 && !strcmp(argv[6], "ordered");
		if (t < 1 || t > BENCH_MAX_THREADS || (argc == 7 && (!ordered || t != 1)))
			return usage();
		return run_threads(loop_by_name(argv[2]), (unsigned)t, arg_u64(argv[4]),
				   argc >= 6 ? arg_u64(argv[5]) : 0, 0, ordered);
	}
	if (!strcmp(mode, "hold") && argc == 4) {
		uint64_t t = arg_u64(argv[2]);
		if (t < 1 || t > BENCH_MAX_THREADS)
			return usage();
		return run_threads(bench_loop_ints, (unsigned)t, arg_u64(argv[3]), 0, 1, 0);
	}
	if (!strcmp(mode, "spin") && argc == 3) {
		uint64_t t = arg_u64(argv[2]);
		if (t < 1 || t > 1024)
			return usage();
		return run_spin((unsigned)t);
	}
	if (!strcmp(mode, "burst") && argc == 5) {
		uint64_t c = arg_u64(argv[4]);
		if (c < 1 || c > BENCH_MAX_THREADS)
			return usage();
		return run_burst(arg_u64(argv[2]), arg_u64(argv[3]), (unsigned)c);
	}
	if (!strcmp(mode, "rate") && argc == 5)
		return run_rate(loop_by_name(argv[2]), arg_u64(argv[3]), arg_u64(argv[4]));
	if (!strcmp(mode, "tick") && argc == 4)
		return run_tick(arg_u64(argv[2]), arg_u64(argv[3]));
	if (!strcmp(mode, "spawn") && argc >= 4) {
		uint64_t n = arg_u64(argv[2]);
		if (n < 1)
			return usage();
		return run_spawn((unsigned)n, argv + 3, (unsigned)(argc - 3));
	}
	return usage();
}
