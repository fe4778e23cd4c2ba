/*
 * pt_workload.c - an unmodified pthread program (no Strata code in it) for
 * the LD_PRELOAD tests.  Each mode exercises one situation and writes what it
 * did (lock addresses, exact counts, its own measure of waits) as JSON to the
 * file named by the second argument, for check_pthread.py to compare with
 * `strata analyze mutex`.  Every mode checks return codes itself and exits 1
 * on a wrong one, so it is also the wrappers' correctness test without a
 * daemon.
 *
 *   pt_workload contend OUT [threads iters hold_us]
 *   pt_workload basic OUT
 *   pt_workload fork OUT
 *   pt_workload dlopen OUT LIB
 *   pt_workload signal OUT
 *   pt_workload sigstorm OUT [threads iters]
 *   pt_workload blocker OUT [rounds]
 *   pt_workload ctor OUT
 *   pt_workload nest OUT [rounds]
 *   pt_workload count OUT [pairs rounds]
 *   pt_workload spill OUT [churn pairs locks every]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Exported on purpose: the analysis names locks by their data symbol. */
pthread_mutex_t strata_hot_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t strata_cold_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_rwlock_t strata_rw_lock = PTHREAD_RWLOCK_INITIALIZER;
pthread_mutex_t strata_fork_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t strata_sig_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t strata_ctor_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t strata_count_main = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t strata_count_idle = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t strata_count_exit = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t strata_count_child = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t strata_count_sites = PTHREAD_MUTEX_INITIALIZER;
/* A one-letter name: "m" is also the mangled code of `unsigned long`, and
 * must be reported as the variable it is. */
pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

#define CHECK(expr, want)                                                                                \
	do {                                                                                             \
		int r_ = (expr);                                                                         \
		if (r_ != (want)) {                                                                      \
			fprintf(stderr, "%s:%d: %s returned %d (%s), expected %d\n", __FILE__, __LINE__, \
				#expr, r_, strerror(r_), (want));                                        \
			exit(1);                                                                         \
		}                                                                                        \
	} while (0)

/* A semaphore call: 0, or -1 with errno `want`; errno kept on success. */
#define SEMCHECK(expr, want)                                                                             \
	do {                                                                                             \
		errno = 4242;                                                                            \
		int r_ = (expr), e_ = r_ ? errno : (errno == 4242 ? 0 : -errno);                         \
		if (e_ != (want)) {                                                                      \
			fprintf(stderr, "%s:%d: %s gave %d/%d, expected errno %d\n", __FILE__, __LINE__, \
				#expr, r_, e_, (want));                                                  \
			exit(1);                                                                         \
		}                                                                                        \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void spin_ns(uint64_t ns)
{
	uint64_t end = now_ns() + ns;
	while (now_ns() < end)
		;
}

/* Locks taken in a constructor, before main and before our own constructor
 * of libstrata-pthread.so may have run. */
static int ctor_acquisitions;
static void __attribute__((constructor)) early_locks(void)
{
	for (int i = 0; i < 5; i++) {
		CHECK(pthread_mutex_lock(&strata_ctor_lock), 0);
		ctor_acquisitions++;
		CHECK(pthread_mutex_unlock(&strata_ctor_lock), 0);
	}
}

/* ---- contend ---------------------------------------------------------- */
static int n_iters;
static uint64_t hold_ns;
static _Atomic uint64_t self_wait_hot;
static int n_contenders;
static _Atomic int gate_taken;

/* The first contender to hold the hot lock keeps it until another sleeps
 * on it, so every run has a contended acquisition: on a loaded machine the
 * threads could otherwise run one after another, and the oracles that need
 * a wait (flows from a release to a waiter) would find none.  glibc's
 * normal mutex reads 2 once a waiter sleeps in the kernel, which under the
 * preload is after its trylock failed: a contended acquisition.  Every
 * other contender has its first take_hot ahead of it, so the wait ends. */
static void hold_until_waited_for(void)
{
	if (n_contenders < 2 || atomic_exchange(&gate_taken, 1))
		return;
	while (__atomic_load_n(&strata_hot_lock.__data.__lock, __ATOMIC_ACQUIRE) != 2)
		sched_yield();
}

static __attribute__((noinline)) uint64_t take_hot(uint64_t hold)
{
	uint64_t t0 = now_ns();
	CHECK(pthread_mutex_lock(&strata_hot_lock), 0);
	uint64_t waited = now_ns() - t0;
	hold_until_waited_for();
	spin_ns(hold);
	CHECK(pthread_mutex_unlock(&strata_hot_lock), 0);
	return waited;
}

static void *contender(void *arg)
{
	(void)arg;
	uint64_t waited = 0;
	for (int i = 0; i < n_iters; i++) {
		waited += take_hot(hold_ns);
		CHECK(pthread_mutex_lock(&strata_cold_lock), 0);
		CHECK(pthread_mutex_unlock(&strata_cold_lock), 0);
		spin_ns(hold_ns / 4); /* outside any lock: let the others in */
	}
	for (int i = 0; i < 10; i++) {
		CHECK(pthread_rwlock_rdlock(&strata_rw_lock), 0);
		CHECK(pthread_rwlock_unlock(&strata_rw_lock), 0);
	}
	for (int i = 0; i < 5; i++) {
		CHECK(pthread_rwlock_wrlock(&strata_rw_lock), 0);
		CHECK(pthread_rwlock_unlock(&strata_rw_lock), 0);
	}
	atomic_fetch_add(&self_wait_hot, waited);
	return NULL;
}

static int mode_contend(FILE *out, int threads, int iters, int hold_us)
{
	pthread_t t[64];
	n_iters = iters;
	hold_ns = (uint64_t)hold_us * 1000u;
	n_contenders = threads;
	if (threads < 1 || threads > 64)
		return 2;
	for (int i = 0; i < threads; i++)
		CHECK(pthread_create(&t[i], NULL, contender, NULL), 0);
	for (int i = 0; i < threads; i++)
		CHECK(pthread_join(t[i], NULL), 0);
	fprintf(out,
		"{\"pid\": %d, \"hot\": \"%p\", \"cold\": \"%p\", \"rw\": \"%p\", \"threads\": %d, "
		"\"iters\": %d,"
		" \"hot_acq\": %d, \"cold_acq\": %d, \"rw_acq\": %d, \"hold_ns\": %" PRIu64
		", \"self_wait_hot_ns\": %" PRIu64 "}\n",
		(int)getpid(), (void *)&strata_hot_lock, (void *)&strata_cold_lock, (void *)&strata_rw_lock,
		threads, iters, threads * iters, threads * iters, threads * 15, hold_ns,
		atomic_load(&self_wait_hot));
	return 0;
}

/* ---- blocker: who made others wait ------------------------------------ */
/* main holds the lock in hold_long() while the worker asks for it in
 * ask_briefly(); main takes it again only after the worker let it go, so
 * every wait is the worker's, behind a hold taken in hold_long().  main's
 * hold lasts `ns` from the worker's announcement that it is about to ask
 * (asking), not from the lock: a worker scheduled late on a loaded machine
 * would otherwise find the lock free in every round, and the oracles that
 * need a contended wait could not be checked. */
static _Atomic int round_go, round_done, asking;

static __attribute__((noinline)) void ask_briefly(void)
{
	CHECK(pthread_mutex_lock(&strata_hot_lock), 0);
	CHECK(pthread_mutex_unlock(&strata_hot_lock), 0);
}

static __attribute__((noinline)) void hold_long(uint64_t ns)
{
	CHECK(pthread_mutex_lock(&strata_hot_lock), 0);
	const int r = atomic_fetch_add(&round_go, 1) + 1;
	while (atomic_load(&asking) < r)
		sched_yield();
	spin_ns(ns);
	CHECK(pthread_mutex_unlock(&strata_hot_lock), 0);
}

static void *blocked_worker(void *arg)
{
	int rounds = (int)(intptr_t)arg;
	for (int r = 1; r <= rounds; r++) {
		while (atomic_load(&round_go) < r)
			sched_yield();
		atomic_store(&asking, r);
		ask_briefly();
		atomic_store(&round_done, r);
	}
	return NULL;
}

static int mode_blocker(FILE *out, int rounds)
{
	pthread_t t;
	CHECK(pthread_create(&t, NULL, blocked_worker, (void *)(intptr_t)rounds), 0);
	for (int r = 1; r <= rounds; r++) {
		hold_long(5u * 1000 * 1000);
		while (atomic_load(&round_done) < r)
			sched_yield();
	}
	CHECK(pthread_join(t, NULL), 0);
	fprintf(out, "{\"pid\": %d, \"hot\": \"%p\", \"hot_acq\": %d}\n", (int)getpid(),
		(void *)&strata_hot_lock, 2 * rounds);
	return 0;
}

/* ---- count: counting mode's oracles (STRATA_PTHREAD_COUNT=1) ---------- */
/* Uncontended pairs of five locks, each made by one party that then stops
 * locking: main (locks and tries; and one lock at 8 sites), a thread that
 * then idles until the process exits (its counts are written by the exit's
 * flush), a thread that exits (its own flush), a fork child that leaves by
 * _exit; and the blocker rounds on the hot lock, whose waits stay exact. */
static int count_n;
static _Atomic int idle_counted;
static int idle_pipe[2];

static void count_pairs(pthread_mutex_t *m, int n)
{
	for (int i = 0; i < n; i++) {
		CHECK(pthread_mutex_lock(m), 0);
		CHECK(pthread_mutex_unlock(m), 0);
	}
}

/* One lock at 8 call sites in turn, n/8 rounds: each (lock, site) its own
 * entry (a lock's sites once shared one window of 4 entries, and all of
 * its pairs stayed records). */
#define COUNT_SITE(m)                              \
	do {                                       \
		CHECK(pthread_mutex_lock(m), 0);   \
		CHECK(pthread_mutex_unlock(m), 0); \
	} while (0)
static void count_sites(pthread_mutex_t *m, int n)
{
	for (int i = 0; i < n / 8; i++) {
		COUNT_SITE(m);
		COUNT_SITE(m);
		COUNT_SITE(m);
		COUNT_SITE(m);
		COUNT_SITE(m);
		COUNT_SITE(m);
		COUNT_SITE(m);
		COUNT_SITE(m);
	}
}

static void *count_idler(void *arg)
{
	(void)arg;
	count_pairs(&strata_count_idle, count_n);
	atomic_store(&idle_counted, 1);
	char c;
	while (read(idle_pipe[0], &c, 1) < 0 && errno == EINTR) /* never written: idles until exit */
		;
	return NULL;
}

static void *count_exiter(void *arg)
{
	(void)arg;
	count_pairs(&strata_count_exit, count_n);
	return NULL;
}

static __attribute__((unused)) void *count_child_half(void *arg)
{
	count_pairs(&strata_count_child, (int)(intptr_t)arg);
	return NULL;
}

static int mode_count(FILE *out, int n, int rounds)
{
	pthread_t idler, exiter, worker;
	count_n = n;
	count_pairs(&strata_count_main, n);
	count_sites(&strata_count_sites, n);
	for (int i = 0; i < n / 2; i++) {
		CHECK(pthread_mutex_trylock(&strata_count_main), 0);
		CHECK(pthread_mutex_unlock(&strata_count_main), 0);
	}
	if (pipe(idle_pipe))
		return 1;
	CHECK(pthread_create(&idler, NULL, count_idler, NULL), 0);
	while (!atomic_load(&idle_counted))
		sched_yield();
	CHECK(pthread_create(&exiter, NULL, count_exiter, NULL), 0);
	CHECK(pthread_join(exiter, NULL), 0);
	fflush(out);
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		/* half in a thread of the child's own: it takes the table the
		 * idler holds in the parent, whose counts are not the child's
		 * (not under TSan, which refuses a thread made after a fork of a
		 * process with threads) */
		count_pairs(&strata_count_child, n - n / 2);
#ifdef __SANITIZE_THREAD__
		count_pairs(&strata_count_child, n / 2);
#else
		pthread_t half;
		CHECK(pthread_create(&half, NULL, count_child_half, (void *)(intptr_t)(n / 2)), 0);
		CHECK(pthread_join(half, NULL), 0);
#endif
		_exit(0);
	}
	int st = 0;
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 1;
	CHECK(pthread_create(&worker, NULL, blocked_worker, (void *)(intptr_t)rounds), 0);
	for (int r = 1; r <= rounds; r++) {
		hold_long(2u * 1000 * 1000);
		while (atomic_load(&round_done) < r)
			sched_yield();
	}
	CHECK(pthread_join(worker, NULL), 0);
	/* The hot lock, which main's hold_long() unlocked with a waiter (one of
	 * main's hot locks now), n more times with nobody waiting: counted, and
	 * in the one-in-16 sample as any lock's pairs (docs/pthread.md). */
	count_pairs(&strata_hot_lock, n);
	fprintf(out,
		"{\"pid\": %d, \"child\": %d, \"main\": \"%p\", \"idle\": \"%p\", \"exit\": \"%p\", "
		"\"child_lock\": \"%p\", \"hot\": \"%p\", \"sites\": \"%p\", \"main_acq\": %d, "
		"\"idle_acq\": %d, \"exit_acq\": %d, \"child_acq\": %d, \"hot_acq\": %d, \"sites_acq\": "
		"%d}\n",
		(int)getpid(), (int)child, (void *)&strata_count_main, (void *)&strata_count_idle,
		(void *)&strata_count_exit, (void *)&strata_count_child, (void *)&strata_hot_lock,
		(void *)&strata_count_sites, n + n / 2, n, n, n, 2 * rounds + n, n / 8 * 8);
	return 0; /* the idler is still blocked in read: the exit's flush writes its counts */
}

/* ---- spill: a thread whose locks do not fit its counting table -------- */
/* `churn` pairs over `locks` locks (at most SPILL_LOCKS) in a fixed
 * pseudo-random order (with `every` > 1, only one pair in `every`, the
 * others on one lock; with `every` -1, each inside a hold of that one lock,
 * so that the thread's table is traded while the one lock is held: its
 * unlock finds the entry its lock saw in the small table no longer there,
 * preload/pthread_count.h's hint), then n pairs of that one lock (docs/pthread.md,
 * "Spilling").  A thread's first table (256 entries) misses most of 2,048
 * locks: it trades it for a big one (8,192), where they fit, and counts
 * them; 32,768 miss that too: the thread spills, and writes its pairs as
 * records for a while, the one lock's first ones too, the rest counted. */
#define SPILL_LOCKS 32768
static pthread_mutex_t spill_locks[SPILL_LOCKS];
static int spill_acq[SPILL_LOCKS];
pthread_mutex_t strata_spill_one = PTHREAD_MUTEX_INITIALIZER;

static int mode_spill(FILE *out, int churn, int n, int locks, int every)
{
	int one_acq = n;
	uint32_t x = 12345;
	if (locks < 1 || locks > SPILL_LOCKS)
		locks = SPILL_LOCKS;
	for (int i = 0; i < locks; i++)
		CHECK(pthread_mutex_init(&spill_locks[i], NULL), 0);
	for (int i = 0; i < churn; i++) {
		if (every > 1 && i % every != 0) {
			count_pairs(&strata_spill_one, 1);
			one_acq++;
			continue;
		}
		x = x * 1664525u + 1013904223u;
		const uint32_t k = (x >> 8) % (uint32_t)locks;
		if (every == -1) {
			CHECK(pthread_mutex_lock(&strata_spill_one), 0);
			one_acq++;
		}
		CHECK(pthread_mutex_lock(&spill_locks[k]), 0);
		CHECK(pthread_mutex_unlock(&spill_locks[k]), 0);
		spill_acq[k]++;
		if (every == -1)
			CHECK(pthread_mutex_unlock(&strata_spill_one), 0);
	}
	count_pairs(&strata_spill_one, n);
	fprintf(out, "{\"pid\": %d, \"one\": \"%p\", \"one_acq\": %d, \"churn\": [", (int)getpid(),
		(void *)&strata_spill_one, one_acq);
	const char *sep = "";
	for (int i = 0; i < locks; i++) {
		if (!spill_acq[i])
			continue;
		fprintf(out, "%s[\"%p\", %d]", sep, (void *)&spill_locks[i], spill_acq[i]);
		sep = ", ";
	}
	fprintf(out, "]}\n");
	return 0;
}

/* ---- basic: every wrapped call's return codes ------------------------- */
static pthread_mutex_t held_by_other = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t cv_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int cv_flag;
static _Atomic int other_ready, other_release;

static void *holder(void *arg)
{
	(void)arg;
	CHECK(pthread_mutex_lock(&held_by_other), 0);
	atomic_store(&other_ready, 1);
	while (!atomic_load(&other_release))
		sched_yield();
	CHECK(pthread_mutex_unlock(&held_by_other), 0);
	return NULL;
}

static void *signaller(void *arg)
{
	(void)arg;
	CHECK(pthread_mutex_lock(&cv_mutex), 0);
	cv_flag = 1;
	CHECK(pthread_cond_signal(&cv), 0);
	CHECK(pthread_mutex_unlock(&cv_mutex), 0);
	return NULL;
}

/* mode_basic's condvar: a timed wait that times out, then a signalled wait */
static void basic_condvar(void)
{
	struct timespec soon;
	CHECK(pthread_mutex_lock(&cv_mutex), 0);
	clock_gettime(CLOCK_REALTIME, &soon);
	CHECK(pthread_cond_timedwait(&cv, &cv_mutex, &soon), ETIMEDOUT);
	pthread_t s;
	CHECK(pthread_create(&s, NULL, signaller, NULL), 0);
	while (!cv_flag)
		CHECK(pthread_cond_wait(&cv, &cv_mutex), 0);
	CHECK(pthread_mutex_unlock(&cv_mutex), 0);
	CHECK(pthread_join(s, NULL), 0);
	CHECK(pthread_cond_broadcast(&cv), 0);
}

/* mode_basic's rwlock: shared twice, then exclusive, each refusing the
 * other.  The lock is the caller's: it lives as long as mode_basic's other
 * locks, so that no other lock of the run takes its address. */
static void basic_rwlock(pthread_rwlock_t *rw)
{
	CHECK(pthread_rwlock_rdlock(rw), 0);
	CHECK(pthread_rwlock_tryrdlock(rw), 0);
	CHECK(pthread_rwlock_trywrlock(rw), EBUSY);
	CHECK(pthread_rwlock_unlock(rw), 0);
	CHECK(pthread_rwlock_unlock(rw), 0);
	CHECK(pthread_rwlock_wrlock(rw), 0);
	CHECK(pthread_rwlock_tryrdlock(rw), EBUSY);
	CHECK(pthread_rwlock_unlock(rw), 0);
	CHECK(pthread_rwlock_trywrlock(rw), 0);
	CHECK(pthread_rwlock_unlock(rw), 0);
}

static int mode_basic(FILE *out)
{
	pthread_mutexattr_t a;
	pthread_mutex_t ec, rec;
	pthread_mutexattr_init(&a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
	pthread_mutex_init(&ec, &a);
	pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&rec, &a);

	CHECK(pthread_mutex_lock(&ec), 0);
#ifndef __SANITIZE_THREAD__ /* TSan reports these deliberate misuses */
	CHECK(pthread_mutex_lock(&ec), EDEADLK);
#endif
	CHECK(pthread_mutex_trylock(&ec), EBUSY);
	CHECK(pthread_mutex_unlock(&ec), 0);
#ifndef __SANITIZE_THREAD__
	CHECK(pthread_mutex_unlock(&ec), EPERM);
#endif
	CHECK(pthread_mutex_trylock(&ec), 0);
	CHECK(pthread_mutex_unlock(&ec), 0);

	for (int i = 0; i < 3; i++)
		CHECK(pthread_mutex_lock(&rec), 0);
	CHECK(pthread_mutex_trylock(&rec), 0);
	for (int i = 0; i < 4; i++)
		CHECK(pthread_mutex_unlock(&rec), 0);

	struct timespec soon;
	pthread_t h;
	CHECK(pthread_create(&h, NULL, holder, NULL), 0);
	while (!atomic_load(&other_ready))
		sched_yield();
	CHECK(pthread_mutex_trylock(&held_by_other), EBUSY);
	clock_gettime(CLOCK_REALTIME, &soon);
	soon.tv_nsec += 20 * 1000 * 1000;
	if (soon.tv_nsec >= 1000000000) {
		soon.tv_sec++;
		soon.tv_nsec -= 1000000000;
	}
	CHECK(pthread_mutex_timedlock(&held_by_other, &soon), ETIMEDOUT);
	atomic_store(&other_release, 1);
	CHECK(pthread_join(h, NULL), 0);
	clock_gettime(CLOCK_REALTIME, &soon);
	soon.tv_sec += 5;
	CHECK(pthread_mutex_timedlock(&held_by_other, &soon), 0);
	CHECK(pthread_mutex_unlock(&held_by_other), 0);

	basic_condvar();
	pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
	basic_rwlock(&rw);
	CHECK(pthread_mutex_lock(&m), 0);
	CHECK(pthread_mutex_unlock(&m), 0);

	/* semaphore (CPython's locks): 2 acquisitions, 3 failed calls */
	sem_t sem;
	CHECK(sem_init(&sem, 0, 1), 0);
	SEMCHECK(sem_trywait(&sem), 0);
	SEMCHECK(sem_trywait(&sem), EAGAIN);
	clock_gettime(CLOCK_REALTIME, &soon);
	SEMCHECK(sem_timedwait(&sem, &soon), ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &soon);
	SEMCHECK(sem_clockwait(&sem, CLOCK_MONOTONIC, &soon), ETIMEDOUT);
	SEMCHECK(sem_post(&sem), 0);
	SEMCHECK(sem_wait(&sem), 0);
	SEMCHECK(sem_post(&sem), 0);
	/* ec: lock, trylock, unlock; rec: 3 locks + 1 trylock; held_by_other: 1
	 * timedlock (the holder's lock is in another thread). */
	fprintf(out,
		"{\"pid\": %d, \"ec\": \"%p\", \"rec\": \"%p\", \"ec_acq\": 2, \"rec_acq\": 4, \"m\": "
		"\"%p\", "
		"\"sem\": \"%p\", \"sem_acq\": 2, \"sem_failed\": 3}\n",
		(int)getpid(), (void *)&ec, (void *)&rec, (void *)&m, (void *)&sem);
	/* The mutexes live on this stack: print before they go. */
	fflush(out);
	return 0;
}

/* ---- fork: the child locks too ------------------------------------------ */
static int mode_fork(FILE *out)
{
	for (int i = 0; i < 10; i++) {
		CHECK(pthread_mutex_lock(&strata_fork_lock), 0);
		CHECK(pthread_mutex_unlock(&strata_fork_lock), 0);
	}
	fflush(out);
	pid_t child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		for (int i = 0; i < 20; i++) {
			CHECK(pthread_mutex_lock(&strata_fork_lock), 0);
			CHECK(pthread_mutex_unlock(&strata_fork_lock), 0);
		}
		_exit(0);
	}
	int st = 0;
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 1;
	for (int i = 0; i < 5; i++) {
		CHECK(pthread_mutex_lock(&strata_fork_lock), 0);
		CHECK(pthread_mutex_unlock(&strata_fork_lock), 0);
	}
	fprintf(out,
		"{\"pid\": %d, \"child\": %d, \"lock\": \"%p\", \"parent_acq\": 15, \"child_acq\": 20}\n",
		(int)getpid(), (int)child, (void *)&strata_fork_lock);
	return 0;
}

/* ---- dlopen: a library that locks --------------------------------------- */
static int mode_dlopen(FILE *out, const char *lib)
{
	void *h = dlopen(lib, RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	int (*work)(int) = (int (*)(int))dlsym(h, "strata_test_dl_work");
	void *(*lock_addr)(void) = (void *(*)(void))dlsym(h, "strata_test_dl_lock");
	if (!work || !lock_addr)
		return 1;
	if (work(30) != 30)
		return 1;
	fprintf(out, "{\"pid\": %d, \"lock\": \"%p\", \"acq\": 30}\n", (int)getpid(), lock_addr());
	return 0;
}

/* ---- signal: lock in a handler ------------------------------------------ */
static _Atomic int handled;
static void on_usr1(int sig)
{
	(void)sig;
	/* Not async-signal-safe by POSIX, but what real programs do; the lock
	 * is never held by the code the signal interrupts. */
	if (pthread_mutex_lock(&strata_sig_lock) == 0)
		pthread_mutex_unlock(&strata_sig_lock);
	atomic_fetch_add(&handled, 1);
}

static void *blocked_waiter(void *arg)
{
	(void)arg;
	/* Blocks on the hot lock held by main; the signal interrupts the wait. */
	CHECK(pthread_mutex_lock(&strata_hot_lock), 0);
	CHECK(pthread_mutex_unlock(&strata_hot_lock), 0);
	return NULL;
}

static int mode_signal(FILE *out)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	for (int i = 0; i < 25; i++)
		raise(SIGUSR1);
	CHECK(pthread_mutex_lock(&strata_hot_lock), 0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, blocked_waiter, NULL), 0);
	pthread_kill(t, SIGUSR1);
	uint64_t deadline = now_ns() + 10ull * 1000000000u;
	while (atomic_load(&handled) < 26 && now_ns() < deadline)
		sched_yield();
	CHECK(pthread_mutex_unlock(&strata_hot_lock), 0);
	CHECK(pthread_join(t, NULL), 0);
	if (atomic_load(&handled) != 26)
		return 1;
	fprintf(out, "{\"pid\": %d, \"lock\": \"%p\", \"acq\": 26}\n", (int)getpid(),
		(void *)&strata_sig_lock);
	return 0;
}

/*
 * Holds nested in and out of order, a recursive mutex around another, ten
 * mutexes held at once (more than the preload's 8 pending acquisitions per
 * thread: the rest go in full), then a timed hold of about 20 ms (asleep)
 * around one of 200 us (spinning), each measured by the program between
 * its lock call's return and its unlock call (docs/pthread.md, "Compact
 * records": the long one converts its TSC ticks with a fresh scale, the
 * short one with the cached one).
 */
#define NEST_LOCKS 10
pthread_mutex_t strata_nest_locks[NEST_LOCKS];
static pthread_mutex_t nest_rec;
static int nest_acq[NEST_LOCKS], nest_rec_acq;

static void nest_lock(int i)
{
	CHECK(pthread_mutex_lock(i < 0 ? &nest_rec : &strata_nest_locks[i]), 0);
	if (i < 0)
		nest_rec_acq++;
	else
		nest_acq[i]++;
}

static void nest_unlock(int i)
{
	CHECK(pthread_mutex_unlock(i < 0 ? &nest_rec : &strata_nest_locks[i]), 0);
}

/* Lock then unlock the listed mutexes (-1: the recursive one), in order. */
static void nest_run(const int *locks, size_t n, const int *unlocks, size_t m)
{
	for (size_t i = 0; i < n; i++)
		nest_lock(locks[i]);
	for (size_t i = 0; i < m; i++)
		nest_unlock(unlocks[i]);
}

static int mode_nest(FILE *out, int rounds)
{
	pthread_mutexattr_t attr;
	pthread_mutexattr_init(&attr);
	pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
	CHECK(pthread_mutex_init(&nest_rec, &attr), 0);
	for (int i = 0; i < NEST_LOCKS; i++)
		CHECK(pthread_mutex_init(&strata_nest_locks[i], NULL), 0);
	static const int all[NEST_LOCKS] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
	static const int all_back[NEST_LOCKS] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
	for (int r = 0; r < rounds; r++) {
		nest_run((const int[]){0, 1, 2}, 3, (const int[]){2, 1, 0}, 3); /* LIFO */
		nest_run((const int[]){0, 1}, 2, (const int[]){0, 1}, 2);       /* FIFO */
		nest_lock(0);                                                   /* interleaved */
		nest_lock(1);
		nest_unlock(0);
		nest_lock(2);
		nest_unlock(1);
		nest_unlock(2);
		nest_run((const int[]){-1, 3, -1}, 3, (const int[]){-1, 3, -1}, 3); /* recursive */
		nest_run(all, NEST_LOCKS, all_back, NEST_LOCKS);                    /* 10 at once */
	}
	const struct timespec ten_ms = {0, 10000000};
	nest_lock(4);
	uint64_t a = now_ns();
	nanosleep(&ten_ms, NULL);
	nest_lock(5);
	uint64_t c = now_ns();
	spin_ns(200000);
	uint64_t d = now_ns();
	nest_unlock(5);
	nanosleep(&ten_ms, NULL);
	uint64_t b = now_ns();
	nest_unlock(4);
	fprintf(out,
		"{\"pid\": %d, \"rec\": \"%p\", \"rec_acq\": %d, \"outer_ns\": %" PRIu64
		", \"inner_ns\": %" PRIu64 ", \"locks\": [",
		(int)getpid(), (void *)&nest_rec, nest_rec_acq, b - a, d - c);
	for (int i = 0; i < NEST_LOCKS; i++)
		fprintf(out, "%s{\"lock\": \"%p\", \"acq\": %d}", i ? ", " : "",
			(void *)&strata_nest_locks[i], nest_acq[i]);
	fprintf(out, "]}\n");
	return 0;
}

/* With STRATA_PT_EXPECT_PRELOAD set, fail unless pthread_mutex_lock really
 * is the preloaded wrapper (a wrong LD_PRELOAD path only warns). */
static int preload_ok(void)
{
	Dl_info di;
	if (!getenv("STRATA_PT_EXPECT_PRELOAD"))
		return 1;
	void *f = dlsym(RTLD_DEFAULT, "pthread_mutex_lock");
	if (f && dladdr(f, &di) && di.dli_fname && strstr(di.dli_fname, "libstrata-pthread"))
		return 1;
	fprintf(stderr, "pthread_mutex_lock is not libstrata-pthread's (LD_PRELOAD not applied)\n");
	return 0;
}

/* ---- sigstorm: handlers lock while workers lock and trace ---------------- */
static _Atomic int storm_running;
static _Atomic int storm_acq;
static int storm_iters;

/* A worker does its iterations and goes on until some handler has run:
 * main sends only while every worker runs, and on a loaded machine main may
 * not run at all while the first worker finishes (a storm of 0 signals once
 * in CI).  So the acquisitions are counted, not computed. */
static void *storm_worker(void *arg)
{
	(void)arg;
	int i = 0;
	while (i < storm_iters || atomic_load(&handled) == 0) {
		CHECK(pthread_mutex_lock(&strata_hot_lock), 0);
		spin_ns(5000);
		CHECK(pthread_mutex_unlock(&strata_hot_lock), 0);
		i++;
	}
	atomic_fetch_add(&storm_acq, i);
	atomic_fetch_sub(&storm_running, 1);
	return NULL;
}

static int mode_sigstorm(FILE *out, int threads, int iters)
{
	pthread_t t[16];
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	if (threads < 1 || threads > 16)
		return 2;
	storm_iters = iters;
	atomic_store(&storm_running, threads);
	for (int i = 0; i < threads; i++)
		CHECK(pthread_create(&t[i], NULL, storm_worker, NULL), 0);
	/* Signals land anywhere: in the workers' lock calls, in the tracer's
	 * emission, in the real blocking call.  Paced (a pending signal is not
	 * queued twice) until every worker is done. */
	int sent = 0;
	while (atomic_load(&storm_running) == threads) {
		for (int i = 0; i < threads; i++)
			if (pthread_kill(t[i], SIGUSR1) == 0)
				sent++;
		spin_ns(30000);
	}
	for (int i = 0; i < threads; i++)
		CHECK(pthread_join(t[i], NULL), 0);
	/* Every handler run counted itself; pending signals of exited threads
	 * are simply lost, which the count reflects. */
	fprintf(out,
		"{\"pid\": %d, \"hot\": \"%p\", \"hot_acq\": %d, \"lock\": \"%p\", \"acq\": %d, \"sent\": "
		"%d}\n",
		(int)getpid(), (void *)&strata_hot_lock, atomic_load(&storm_acq), (void *)&strata_sig_lock,
		atomic_load(&handled), sent);
	return 0;
}

int main(int argc, char **argv)
{
	if (!preload_ok())
		return 3;
	if (argc < 3) {
		fprintf(stderr,
			"usage: %s contend|basic|fork|dlopen|signal|sigstorm|blocker|ctor|nest|count OUT "
			"[args]\n",
			argv[0]);
		return 2;
	}
	FILE *out = strcmp(argv[2], "-") ? fopen(argv[2], "w") : stdout;
	if (!out)
		return 2;
	int rc = 2;
	const char *m = argv[1];
	if (!strcmp(m, "contend"))
		rc = mode_contend(out, argc > 3 ? atoi(argv[3]) : 4, argc > 4 ? atoi(argv[4]) : 200,
				  argc > 5 ? atoi(argv[5]) : 200);
	else if (!strcmp(m, "basic"))
		rc = mode_basic(out);
	else if (!strcmp(m, "fork"))
		rc = mode_fork(out);
	else if (!strcmp(m, "dlopen") && argc > 3)
		rc = mode_dlopen(out, argv[3]);
	else if (!strcmp(m, "signal"))
		rc = mode_signal(out);
	else if (!strcmp(m, "blocker"))
		rc = mode_blocker(out, argc > 3 ? atoi(argv[3]) : 10);
	else if (!strcmp(m, "sigstorm"))
		rc = mode_sigstorm(out, argc > 3 ? atoi(argv[3]) : 4, argc > 4 ? atoi(argv[4]) : 2000);
	else if (!strcmp(m, "nest"))
		rc = mode_nest(out, argc > 3 ? atoi(argv[3]) : 100);
	else if (!strcmp(m, "spill"))
		rc = mode_spill(out, argc > 3 ? atoi(argv[3]) : 40960, argc > 4 ? atoi(argv[4]) : 200000,
				argc > 5 ? atoi(argv[5]) : 2048, argc > 6 ? atoi(argv[6]) : 1);
	else if (!strcmp(m, "count"))
		rc = mode_count(out, argc > 3 ? atoi(argv[3]) : 5000, argc > 4 ? atoi(argv[4]) : 10);
	else if (!strcmp(m, "ctor")) {
		fprintf(out, "{\"pid\": %d, \"lock\": \"%p\", \"acq\": %d}\n", (int)getpid(),
			(void *)&strata_ctor_lock, ctor_acquisitions);
		rc = ctor_acquisitions == 5 ? 0 : 1;
	}
	if (out != stdout)
		fclose(out);
	return rc;
}
