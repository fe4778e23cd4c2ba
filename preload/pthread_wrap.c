/*
 * pthread_wrap.c - LD_PRELOAD wrappers of pthread mutexes, condition
 * variables, read-write locks and POSIX semaphores (CPython's
 * threading.Lock), writing the `pthread` provider
 * (pthread_tp.h).  Build: libstrata-pthread.so; use:
 *     LD_PRELOAD=libstrata-pthread.so PROG       (or strata record --preload pthread)
 *
 * Contract (who runs here, who may interrupt whom):
 *   - Any application thread, at any time: before main (other libraries'
 *     constructors run before ours), inside a signal handler that
 *     interrupted another wrapper, in a fork child, after dlopen.
 *   - Real functions are resolved lazily with dlsym(RTLD_NEXT) by whichever
 *     thread first needs them.  dlsym may itself allocate or lock (a
 *     replaced malloc may call pthread_mutex_lock): the thread-local
 *     `strata_pt_busy` flag marks "this thread is inside our own code"; a
 *     wrapper entered with it set calls the real function directly (during
 *     resolution: glibc's exported __pthread_* aliases) and traces nothing,
 *     so it can neither recurse nor deadlock.
 *   - The flag is set only around our own code that may call pthread
 *     functions (dlsym during resolution, unw_backtrace), NOT around the
 *     real blocking call nor the runtime's emission, so a
 *     signal handler that runs while a thread is blocked in a lock, or while
 *     it emits an event (the runtime nests), is traced.  Only a handler
 *     that interrupts resolution or libunwind goes untraced.
 *   - Tracing off: one relaxed load of the tracepoint state and a branch
 *     beside the real call (strata_tracepoint_enabled).  Tracing on,
 *     uncontended: one real trylock, and for a compact record two unfenced
 *     TSC reads (lock and unlock, "hold times" below); contended: two
 *     CLOCK_MONOTONIC reads (vDSO) around the real blocking call.
 *   - The /proc/self/maps scan uses open/read/close only (async-signal-safe)
 *     and one static buffer owned by whoever wins `maps_busy` (CAS); losers
 *     skip it.
 * Nothing here allocates, takes a lock of its own or calls stdio.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/membarrier.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>

#define STRATA_DEFINE_PROVIDERS
#include "pthread_count_env.h"
#include "pthread_tp.h"
#include "runtime.h"
#include "strata_kclock.h"
#include "tsan.h"

#define STRATA_PT_EXPORT __attribute__((visibility("default")))
#define STRATA_PT_TLS __thread __attribute__((tls_model("initial-exec")))
#define STRATA_PT_MAX_DEPTH 32

#include "pt_hold.h" /* after STRATA_PT_TLS */

/* ---- the wrapped functions: one list ------------------------------------ */

/*
 * Every wrapped function, once:
 *   F(name, sym, start, fail, event, proto, args, traced)
 * name    real.<name> is the real function
 * sym     the wrapped symbol (pthread_<name>, or sem_*)
 * start   the entry before resolution: COMPAT, glibc's own implementation
 *         under its exported compat name __pthread_<name>@GLIBC_2.2.5;
 *         BOOT, a trampoline that resolves first (and returns `fail` when
 *         re-entered from dlsym itself, see STRATA_PT_START_BOOT)
 * event   the pthread tracepoint whose state gates the traced path
 * proto, args   the parameters, declared and passed on
 * traced  the traced path (out of line), run when `event` is enabled
 * From it come the table of real functions, the compat aliases and
 * trampolines, the table's initial values, the dlsym resolution and the
 * exported wrappers: a function is added or removed in one place.
 */
#define STRATA_PT_FUNCS(F)                                                                                  \
	F(mutex_lock, pthread_mutex_lock, COMPAT, 0, mutex_lock, (pthread_mutex_t * m), (m),                \
	  strata_pt_mutex_lock(m, CALLER()))                                                                \
	F(mutex_trylock, pthread_mutex_trylock, COMPAT, 0, mutex_trylock, (pthread_mutex_t * m), (m),       \
	  strata_pt_mutex_trylock(m, CALLER()))                                                             \
	F(mutex_timedlock, pthread_mutex_timedlock, BOOT, EINVAL, mutex_timedlock,                          \
	  (pthread_mutex_t * m, const struct timespec *t), (m, t),                                          \
	  strata_pt_acquire(PT_MUTEX_TIMEDLOCK, m, 0, t, CALLER()))                                         \
	F(mutex_unlock, pthread_mutex_unlock, COMPAT, 0, mutex_unlock, (pthread_mutex_t * m), (m),          \
	  strata_pt_mutex_unlock(m, CALLER()))                                                              \
	F(cond_wait, pthread_cond_wait, BOOT, EINVAL, cond_wait, (pthread_cond_t * c, pthread_mutex_t * m), \
	  (c, m), strata_pt_cond_wait(0, c, m, 0, NULL, CALLER()))                                          \
	F(cond_timedwait, pthread_cond_timedwait, BOOT, EINVAL, cond_timedwait,                             \
	  (pthread_cond_t * c, pthread_mutex_t * m, const struct timespec *t), (c, m, t),                   \
	  strata_pt_cond_wait(1, c, m, 0, t, CALLER()))                                                     \
	F(cond_signal, pthread_cond_signal, BOOT, 0, cond_signal, (pthread_cond_t * c), (c),                \
	  strata_pt_cond_wake(0, c, CALLER()))                                                              \
	F(cond_broadcast, pthread_cond_broadcast, BOOT, 0, cond_broadcast, (pthread_cond_t * c), (c),       \
	  strata_pt_cond_wake(1, c, CALLER()))                                                              \
	F(rwlock_rdlock, pthread_rwlock_rdlock, COMPAT, 0, rwlock_rdlock, (pthread_rwlock_t * l), (l),      \
	  strata_pt_acquire(PT_RW_RDLOCK, l, 0, NULL, CALLER()))                                            \
	F(rwlock_wrlock, pthread_rwlock_wrlock, COMPAT, 0, rwlock_wrlock, (pthread_rwlock_t * l), (l),      \
	  strata_pt_acquire(PT_RW_WRLOCK, l, 0, NULL, CALLER()))                                            \
	F(rwlock_tryrdlock, pthread_rwlock_tryrdlock, COMPAT, 0, rwlock_tryrdlock, (pthread_rwlock_t * l),  \
	  (l), strata_pt_acquire(PT_RW_TRYRDLOCK, l, 0, NULL, CALLER()))                                    \
	F(rwlock_trywrlock, pthread_rwlock_trywrlock, COMPAT, 0, rwlock_trywrlock, (pthread_rwlock_t * l),  \
	  (l), strata_pt_acquire(PT_RW_TRYWRLOCK, l, 0, NULL, CALLER()))                                    \
	F(rwlock_unlock, pthread_rwlock_unlock, COMPAT, 0, rwlock_unlock, (pthread_rwlock_t * l), (l),      \
	  strata_pt_rwlock_unlock(l, CALLER()))                                                             \
	/* glibc 2.30 clock variants (std::timed_mutex, condition_variable::wait_for) */                    \
	F(mutex_clocklock, pthread_mutex_clocklock, BOOT, EINVAL, mutex_timedlock,                          \
	  (pthread_mutex_t * m, clockid_t k, const struct timespec *t), (m, k, t),                          \
	  strata_pt_acquire(PT_MUTEX_CLOCKLOCK, m, k, t, CALLER()))                                         \
	F(cond_clockwait, pthread_cond_clockwait, BOOT, EINVAL, cond_timedwait,                             \
	  (pthread_cond_t * c, pthread_mutex_t * m, clockid_t k, const struct timespec *t), (c, m, k, t),   \
	  strata_pt_cond_wait(2, c, m, k, t, CALLER()))                                                     \
	F(rwlock_clockrdlock, pthread_rwlock_clockrdlock, BOOT, EINVAL, rwlock_rdlock,                      \
	  (pthread_rwlock_t * l, clockid_t k, const struct timespec *t), (l, k, t),                         \
	  strata_pt_acquire(PT_RW_CLOCKRDLOCK, l, k, t, CALLER()))                                          \
	F(rwlock_clockwrlock, pthread_rwlock_clockwrlock, BOOT, EINVAL, rwlock_wrlock,                      \
	  (pthread_rwlock_t * l, clockid_t k, const struct timespec *t), (l, k, t),                         \
	  strata_pt_acquire(PT_RW_CLOCKWRLOCK, l, k, t, CALLER()))                                          \
	/* POSIX semaphores: CPython's threading.Lock (sem_wait with a timeout \
	 * of -1, sem_clockwait with one, sem_trywait for blocking=False) */                            \
	F(sem_wait, sem_wait, BOOT, (errno = EINVAL, -1), sem_wait, (sem_t * s), (s),                       \
	  strata_pt_sem_wait(PT_SEM_WAIT, s, 0, NULL, CALLER()))                                            \
	F(sem_timedwait, sem_timedwait, BOOT, (errno = EINVAL, -1), sem_timedwait,                          \
	  (sem_t * s, const struct timespec *t), (s, t),                                                    \
	  strata_pt_sem_wait(PT_SEM_TIMEDWAIT, s, 0, t, CALLER()))                                          \
	F(sem_clockwait, sem_clockwait, BOOT, (errno = EINVAL, -1), sem_timedwait,                          \
	  (sem_t * s, clockid_t k, const struct timespec *t), (s, k, t),                                    \
	  strata_pt_sem_wait(PT_SEM_CLOCKWAIT, s, k, t, CALLER()))                                          \
	F(sem_trywait, sem_trywait, BOOT, (errno = EINVAL, -1), sem_trywait, (sem_t * s), (s),              \
	  strata_pt_sem_wait(PT_SEM_TRYWAIT, s, 0, NULL, CALLER()))                                         \
	F(sem_post, sem_post, BOOT, (errno = EINVAL, -1), sem_post, (sem_t * s), (s),                       \
	  strata_pt_sem_post(s, CALLER()))

/* ---- real functions ----------------------------------------------------- */

#define STRATA_PT_REAL_FIELD(name, sym, start, fail, ev, proto, args, traced) int(*name) proto;
struct strata_pt_real {
	STRATA_PT_FUNCS(STRATA_PT_REAL_FIELD)
};
static struct strata_pt_real real;
/* Entries are code addresses with no data published through them: relaxed. */
#define REAL(f) (__atomic_load_n(&real.f, __ATOMIC_RELAXED))

static int strata_pt_busy_get(void);
static void strata_pt_resolve(void);

/*
 * COMPAT: glibc >= 2.34 still exports its own implementation under the
 * compat names __pthread_*@GLIBC_2.2.5.  A call before our constructor
 * (another library's constructor: liburcu-bp's, loaded with libstrata,
 * locks a mutex) resolves first, as BOOT does, so that it reaches the next
 * interposer too; a call re-entered from dlsym (busy) needs no resolution
 * and goes to the compat alias.  Under ASan the alias binds to ASan's own
 * __pthread_* interceptor, whose real function glibc 2.34+ no longer
 * exports by that name: called before resolution, it jumped to 0.  The
 * constructor, or the first such call, switches to dlsym(RTLD_NEXT)
 * results, which keeps a chain of interposers working.
 *
 * BOOT: functions without a compat alias start at a trampoline that
 * resolves.  Re-entered from dlsym itself (busy), they cannot know the real
 * function: nothing in dlsym waits on a condvar, so they fail with EINVAL
 * (waits) or do nothing (signal/broadcast: nobody can be waiting yet).
 */
#define STRATA_PT_START_COMPAT(name, fail, proto, args)                                \
	extern int strata_pt_glibc_##name proto;                                       \
	__asm__(".symver strata_pt_glibc_" #name ", __pthread_" #name "@GLIBC_2.2.5"); \
	static int strata_pt_boot_##name proto                                         \
	{                                                                              \
		if (!strata_pt_busy_get())                                             \
			strata_pt_resolve();                                           \
		if (REAL(name) == strata_pt_boot_##name)                               \
			return strata_pt_glibc_##name args;                            \
		return REAL(name) args;                                                \
	}
#define STRATA_PT_START_BOOT(name, fail, proto, args)    \
	static int strata_pt_boot_##name proto           \
	{                                                \
		if (strata_pt_busy_get())                \
			return fail;                     \
		strata_pt_resolve();                     \
		if (REAL(name) == strata_pt_boot_##name) \
			return fail;                     \
		return REAL(name) args;                  \
	}
#define STRATA_PT_START(name, sym, start, fail, ev, proto, args, traced) \
	STRATA_PT_START_##start(name, fail, proto, args)
STRATA_PT_FUNCS(STRATA_PT_START)

/*
 * Every entry is always callable: a compat alias, a trampoline, or the
 * dlsym(RTLD_NEXT) result.  Entries are code addresses with no data
 * published through them, so they are stored and loaded relaxed (REAL).
 */
#define STRATA_PT_INIT_COMPAT(name) strata_pt_boot_##name
#define STRATA_PT_INIT_BOOT(name) strata_pt_boot_##name
#define STRATA_PT_INIT(name, sym, start, fail, ev, proto, args, traced) .name = STRATA_PT_INIT_##start(name),
static struct strata_pt_real real = {STRATA_PT_FUNCS(STRATA_PT_INIT)};

static STRATA_PT_TLS int strata_pt_busy;
static int strata_pt_busy_get(void)
{
	return strata_pt_busy;
}
static int strata_pt_depth; /* STRATA_PTHREAD_STACK_DEPTH, 0..32 */
static int strata_pt_resolved;

/* Fork child: re-emit the mappings into the child's own sub-trace.  A
 * parent thread may have owned the maps scan when fork() ran: it does not
 * exist in the child, so the ownership is dropped. */
static uint32_t maps_emitted_state;
static int maps_busy;
static void strata_pt_fold_atfork_child(void);
static void strata_pt_count_atfork_child(void);
static void strata_pt_count_init(void);
static void strata_pt_atfork_child(void)
{
	/* relaxed: the child has one thread at this point. */
	__atomic_store_n(&maps_emitted_state, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&maps_busy, 0, __ATOMIC_RELAXED);
	strata_pt_fold_atfork_child();
	strata_pt_count_atfork_child();
}

/* The default version of each symbol (for condvars GLIBC_2.3.2, the ABI
 * current programs link): asking for a version explicitly would skip an
 * interposer between us and glibc that does not version it (TSan's). */
static void *strata_pt_sym(const char *name)
{
	return dlsym(RTLD_NEXT, name);
}

/*
 * Resolve every real function.  Idempotent: threads racing here store the
 * same values.  Runs with strata_pt_busy set, so anything dlsym calls back
 * into (a replaced malloc -> pthread_mutex_lock) takes the direct path.
 */
static __attribute__((noinline)) void strata_pt_resolve(void)
{
	/* relaxed: only avoids repeated work, correctness does not depend on it. */
	if (__atomic_load_n(&strata_pt_resolved, __ATOMIC_RELAXED))
		return;
	int was_busy = strata_pt_busy;
	strata_pt_busy = 1;
	void *p;
	/* relaxed stores: see REAL. */
#define STRATA_PT_RESOLVE(name, sym, start, fail, ev, proto, args, traced) \
	if ((p = strata_pt_sym(#sym)) != NULL)                             \
		__atomic_store_n((void **)&real.name, p, __ATOMIC_RELAXED);
	STRATA_PT_FUNCS(STRATA_PT_RESOLVE)
#undef STRATA_PT_RESOLVE
	const char *d = getenv("STRATA_PTHREAD_STACK_DEPTH");
	int depth = d ? atoi(d) : 0;
	if (depth < 0)
		depth = 0;
	if (depth > STRATA_PT_MAX_DEPTH)
		depth = STRATA_PT_MAX_DEPTH;
	/* relaxed: both are plain settings, every racing resolver stores the
	 * same values, and a reader that misses them only repeats the work. */
	__atomic_store_n(&strata_pt_depth, depth, __ATOMIC_RELAXED);
	__atomic_store_n(&strata_pt_resolved, 1, __ATOMIC_RELAXED);
	strata_pt_busy = was_busy;
}

static void __attribute__((constructor(102))) strata_pt_ctor(void)
{
	strata_pt_resolve();
	strata_pt_count_init();
	pthread_atfork(NULL, NULL, strata_pt_atfork_child);
}

/* ---- time, caller mappings, stacks --------------------------------------- */

static inline uint64_t strata_pt_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#define STRATA_PT_MAX_RANGES 512
#define STRATA_PT_MAX_RESCANS 64
/* Executable ranges seen by the last scan.  Written only by the maps_busy
 * owner, read by every tracing thread, all relaxed: a reader that sees a
 * pair being rewritten at worst rescans once more, or skips a rescan for a
 * range that was described a moment ago. */
static uint64_t ranges[STRATA_PT_MAX_RANGES][2];
static uint32_t n_ranges;
static uint32_t n_rescans;
static char maps_buf[4096];
static char maps_line[4096 + 64];
static STRATA_PT_TLS uint64_t last_range[2];

static uint64_t strata_pt_hex(const char **p)
{
	uint64_t v = 0;
	for (;;) {
		char c = **p;
		unsigned d;
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else
			return v;
		v = v << 4 | d;
		(*p)++;
	}
}

/* One line of /proc/self/maps: "start-end perms offset dev inode   path". */
static void strata_pt_maps_line(const char *l, uint32_t *n)
{
	const char *p = l;
	uint64_t start = strata_pt_hex(&p), end, off;
	if (*p++ != '-')
		return;
	end = strata_pt_hex(&p);
	if (*p++ != ' ' || strlen(p) < 5 || p[2] != 'x')
		return;
	p += 5;
	off = strata_pt_hex(&p);
	for (int fields = 0; fields < 2 && *p; fields++) { /* dev, inode */
		while (*p == ' ')
			p++;
		while (*p && *p != ' ')
			p++;
	}
	while (*p == ' ')
		p++;
	if (*p != '/' && *p != '[')
		return;
	if (*n < STRATA_PT_MAX_RANGES) {
		/* relaxed: see `ranges`. */
		__atomic_store_n(&ranges[*n][0], start, __ATOMIC_RELAXED);
		__atomic_store_n(&ranges[*n][1], end, __ATOMIC_RELAXED);
		(*n)++;
	}
	if (*p == '/')
		strata_tracepoint(pthread, mapping, start, end, off, p);
}

static __attribute__((noinline)) void strata_pt_emit_maps(uint32_t state)
{
	int expected = 0;
	/* acquire: take ownership of the static buffers; pairs with the release
	 * below of the previous owner. */
	if (!__atomic_compare_exchange_n(&maps_busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		size_t used = 0;
		uint32_t n = 0;
		ssize_t got;
		while ((got = read(fd, maps_buf, sizeof(maps_buf))) > 0) {
			for (ssize_t i = 0; i < got; i++) {
				char c = maps_buf[i];
				if (c == '\n') {
					maps_line[used] = 0;
					strata_pt_maps_line(maps_line, &n);
					used = 0;
				} else if (used < sizeof(maps_line) - 1) {
					maps_line[used++] = c;
				}
			}
		}
		close(fd);
		/* relaxed: readers tolerate stale values (see `ranges`; a stale
		 * emitted state only repeats the idempotent emission). */
		__atomic_store_n(&n_ranges, n, __ATOMIC_RELAXED);
		__atomic_store_n(&maps_emitted_state, state, __ATOMIC_RELAXED);
	}
	/* release: pairs with the acquire CAS of the next owner. */
	__atomic_store_n(&maps_busy, 0, __ATOMIC_RELEASE);
}

/* Make sure the mappings reached every session that records pthread:mapping
 * and that `caller` lies in a mapping already described. */
static inline void strata_pt_check_maps(uint64_t caller)
{
	/* relaxed: a stale state only delays the (idempotent) emission. */
	uint32_t st = __atomic_load_n(&STRATA__TP(pthread, mapping).state, __ATOMIC_RELAXED);
	if (!st)
		return;
	if (__builtin_expect(st != __atomic_load_n(&maps_emitted_state, __ATOMIC_RELAXED), 0)) {
		strata_pt_emit_maps(st);
		return;
	}
	if (caller >= last_range[0] && caller < last_range[1])
		return;
	uint32_t n = __atomic_load_n(&n_ranges, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < n && i < STRATA_PT_MAX_RANGES; i++) {
		/* relaxed: see `ranges`. */
		uint64_t lo = __atomic_load_n(&ranges[i][0], __ATOMIC_RELAXED);
		uint64_t hi = __atomic_load_n(&ranges[i][1], __ATOMIC_RELAXED);
		if (caller >= lo && caller < hi) {
			last_range[0] = lo;
			last_range[1] = hi;
			return;
		}
	}
	/* Unknown code (dlopen since the last scan?): rescan, a bounded number
	 * of times per process (JIT code would otherwise rescan forever). */
	if (__atomic_fetch_add(&n_rescans, 1, __ATOMIC_RELAXED) < STRATA_PT_MAX_RESCANS)
		strata_pt_emit_maps(st);
}

/* Caller's stack (innermost first), starting at `caller`. */
static size_t strata_pt_stack(uint64_t *out, uint64_t caller)
{
	int depth = __atomic_load_n(&strata_pt_depth, __ATOMIC_RELAXED); /* a setting: relaxed */
	void *frames[STRATA_PT_MAX_DEPTH + 4];
	if (depth <= 0)
		return 0;
	/* libunwind may lock (its caches): those calls must not trace. */
	strata_pt_busy = 1;
	int n = unw_backtrace(frames, depth + 4);
	strata_pt_busy = 0;
	int first = 0;
	for (int i = 0; i < n; i++) {
		if ((uint64_t)(uintptr_t)frames[i] == caller) {
			first = i;
			break;
		}
	}
	size_t k = 0;
	for (int i = first; i < n && k < (size_t)depth; i++)
		out[k++] = (uint64_t)(uintptr_t)frames[i];
	return k;
}

/* Enabled, not re-entered, and not libstrata's own locking (its probe
 * report's lock, liburcu's, its fork handlers': runtime.h, strata_rt_inside):
 * the condition for the traced path. */
#define TRACED(ev) (strata_tracepoint_enabled(pthread, ev) && !strata_pt_busy && !strata_rt_inside)
#define CALLER() ((uint64_t)(uintptr_t)__builtin_return_address(0))
#define U64(p) ((uint64_t)(uintptr_t)(p))

/* ---- compact records: site ids and folded uncontended holds ------------- */

/*
 * Site table: caller address -> id (its slot), open addressing, filled by
 * CAS and never emptied, so an id stays valid for the process' life.  A
 * thread that installs a caller emits pthread:site for it; a session (or a
 * fork child) that has not seen the table yet gets all of it once
 * (sites_emitted_state, as maps_emitted_state).  Full table: no id, the
 * caller is traced in full.
 */
#define STRATA_PT_SITES 4096u
#define STRATA_PT_SITE_PROBES 16u
#define STRATA_PT_NO_SITE UINT32_MAX
static uint64_t sites[STRATA_PT_SITES];
static uint32_t sites_emitted_state;
static int sites_busy;

static inline __attribute__((always_inline)) uint32_t strata_pt_site_id(uint64_t caller)
{
	uint32_t h = (uint32_t)((caller * 0x9e3779b97f4a7c15ull) >> 52) & (STRATA_PT_SITES - 1);
	for (uint32_t i = 0; i < STRATA_PT_SITE_PROBES; i++) {
		uint32_t slot = (h + i) & (STRATA_PT_SITES - 1);
		/* relaxed: the slot holds a plain value, published by the CAS below
		 * (a reader that misses it probes on and installs or finds it). */
		uint64_t v = __atomic_load_n(&sites[slot], __ATOMIC_RELAXED);
		if (v == caller)
			return slot;
		if (v == 0) {
			uint64_t expected = 0;
			/* relaxed: no other data is published with the value. */
			if (__atomic_compare_exchange_n(&sites[slot], &expected, caller, 0, __ATOMIC_RELAXED,
							__ATOMIC_RELAXED)) {
				strata_tracepoint(pthread, site, slot, caller);
				return slot;
			}
			if (expected == caller)
				return slot;
		}
	}
	return STRATA_PT_NO_SITE;
}

/* The whole table into a session (or fork child) that has not had it. */
static __attribute__((noinline)) void strata_pt_emit_sites(uint32_t state)
{
	int expected = 0;
	/* acquire/release: ownership of the dump, as maps_busy. */
	if (!__atomic_compare_exchange_n(&sites_busy, &expected, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return;
	for (uint32_t i = 0; i < STRATA_PT_SITES; i++) {
		uint64_t v = __atomic_load_n(&sites[i], __ATOMIC_RELAXED); /* see strata_pt_site_id */
		if (v)
			strata_tracepoint(pthread, site, i, v);
	}
	__atomic_store_n(&sites_emitted_state, state, __ATOMIC_RELAXED); /* a hint, as maps_emitted_state */
	__atomic_store_n(&sites_busy, 0, __ATOMIC_RELEASE);
}

/*
 * Per-thread stash of uncontended mutex acquisitions not emitted yet; the
 * thread's unlock of one emits a single pthread:mutex_held.  Signal handlers
 * of the same thread push and pop too, at any point (under TSan even at an
 * atomic operation), so there is no shared count: each slot changes state
 * by one read-modify-write at a time (free 0 -> reserved 1 by CAS, then its
 * fields, then its lock stored; taken back by CAS lock -> reserved 1, its
 * fields read, then freed), which a handler cannot split.  A handler that
 * runs between two steps sees a slot reserved (1, never a mutex address:
 * it matches nothing) or complete.  `pending` counts the slots in use and
 * `stash_seq` is the push order; both are hints (the slots decide): the
 * unlock's fast check, and its first guess (below).
 *
 * Nobody but this thread and its handlers touches these (thread-local, and
 * a fork child resets them): every read-modify-write is one instruction
 * without a lock prefix (strata_pt_local_*), which a signal cannot split
 * and which orders nothing with other CPUs, as the runtime's owned-lane
 * commit (docs/ring-buffer.md); under TSan (which cannot see into asm) and
 * off x86-64, relaxed atomics.  The plain stores between them are ordered
 * for a handler by signal fences (compiler-only).
 *
 * First guess of a pop: push takes the lowest free slot, so with LIFO
 * unlocks the latest acquisition sits at pending - 1; it is the lock's
 * latest if it is the latest push of all (seq == stash_seq).  A pop of the
 * latest push gives its number back (stash_seq s -> s - 1 by one CAS, only
 * if no push came since), so the next pop of a nested pair finds its entry
 * by the same guess.  Anything else (unlocks out of order, a recursive
 * mutex, a handler in between) scans the 8 slots.  Numbers stay distinct
 * among the slots in use: stash_seq never falls below one of them.
 */
#define STRATA_PT_STASH 8u
struct strata_pt_pending {
	uint64_t lock, t0, seq;
	uint32_t site;
	uint8_t try_; /* 1: a pthread_mutex_trylock (mutex_tryheld), 0: a lock */
	/* t0 is a TSC value (1; STRATA_PT_IF_WAITED: a hot lock's pair, timed
	 * only if its unlock finds waiters, pthread_count.h), CLOCK_MONOTONIC
	 * ns (0), or no clock was read (STRATA_PT_UNTIMED) and t0 is the hint
	 * of its count entry (strata_pt_count_hint) */
	uint8_t tsc;
	/* A timed pair's count entry, its index + 1 in the thread's table
	 * (strata_pt_count_warm), 0: none known at the lock */
	uint16_t warm;
};
_Static_assert(sizeof(struct strata_pt_pending) == 32, "a stash slot is 32 bytes");
static STRATA_PT_TLS struct strata_pt_pending stash[STRATA_PT_STASH];
static STRATA_PT_TLS uint64_t stash_seq; /* push order: a recursive mutex pops LIFO */
static STRATA_PT_TLS uint32_t pending;
#define RELAXED_LOAD(p) __atomic_load_n(p, __ATOMIC_RELAXED)
#define RELAXED_STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)
/* Compiler-only: a handler of this thread sees the steps in program order. */
#define SIGNAL_FENCE() __atomic_signal_fence(__ATOMIC_SEQ_CST)

#if defined(__x86_64__) && !defined(STRATA_TSAN)
/* 1 if *p was `old` (and is now `val`). */
static inline int strata_pt_local_cas(uint64_t *p, uint64_t old, uint64_t val)
{
	uint64_t prev = old;
	__asm__ __volatile__("cmpxchgq %2, %1" : "+a"(prev), "+m"(*p) : "r"(val) : "memory", "cc");
	return prev == old;
}
static inline void strata_pt_local_add(uint32_t *p, int32_t v)
{
	__asm__ __volatile__("addl %1, %0" : "+m"(*p) : "ir"(v) : "memory", "cc");
}
/* *p += v; returns the old value. */
static inline uint64_t strata_pt_local_xadd(uint64_t *p, uint64_t v)
{
	__asm__ __volatile__("xaddq %0, %1" : "+r"(v), "+m"(*p) : : "memory", "cc");
	return v;
}
#else
/* Relaxed: thread-local data, no other thread to order with. */
static inline int strata_pt_local_cas(uint64_t *p, uint64_t old, uint64_t val)
{
	return __atomic_compare_exchange_n(p, &old, val, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
static inline void strata_pt_local_add(uint32_t *p, int32_t v)
{
	__atomic_fetch_add(p, (uint32_t)v, __ATOMIC_RELAXED);
}
static inline uint64_t strata_pt_local_xadd(uint64_t *p, uint64_t v)
{
	return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}
#endif

static void strata_pt_fold_atfork_child(void)
{
	/* The child's trace has none of the parent's acquisitions: its unlocks
	 * of them are traced in full (unmatched), as without the stash. */
	for (uint32_t i = 0; i < STRATA_PT_STASH; i++)
		RELAXED_STORE(&stash[i].lock, 0);
	RELAXED_STORE(&pending, 0);
	RELAXED_STORE(&stash_seq, 0);
	__atomic_store_n(&sites_emitted_state, 0, __ATOMIC_RELAXED); /* one thread here */
	__atomic_store_n(&sites_busy, 0, __ATOMIC_RELAXED);
}

/* Folding applies: the kind's two compact events and site on, no stacks
 * requested.  `try_`: a successful pthread_mutex_trylock. */
static inline int strata_pt_fold_on(int try_)
{
	return (try_ ? strata_tracepoint_enabled(pthread, mutex_tryheld) &&
				strata_tracepoint_enabled(pthread, mutex_tryacquired)
		     : strata_tracepoint_enabled(pthread, mutex_held) &&
				strata_tracepoint_enabled(pthread, mutex_acquired)) &&
	       strata_tracepoint_enabled(pthread, site) &&
	       __atomic_load_n(&strata_pt_depth, __ATOMIC_RELAXED) == 0; /* a setting: relaxed */
}

/* ---- hold times (pt_hold.h) ---------------------------------------------- */

static inline uint64_t strata_pt_tsc(void)
{
	/* Unfenced on purpose (pt_hold.h); the signal fences keep it in
	 * program order for the compiler. */
	SIGNAL_FENCE();
	uint64_t t = strata_kclock_rdtsc_unordered();
	SIGNAL_FENCE();
	return t;
}

/* Nanoseconds since the pending acquisition `p`; *now: the clock value
 * read (p's units). */
static inline uint64_t strata_pt_since_at(const struct strata_pt_pending *p, uint64_t *now)
{
	if (!p->tsc) {
		*now = strata_pt_now();
		return *now - p->t0;
	}
	*now = strata_pt_tsc();
	int64_t d = (int64_t)(*now - p->t0);
	return d > 0 ? strata_pt_ticks_ns((uint64_t)d) : 0;
}

static inline uint64_t strata_pt_since(const struct strata_pt_pending *p)
{
	uint64_t now;
	return strata_pt_since_at(p, &now);
}

#include "pthread_count.h"

/* ---- push and pop ----------------------------------------------------------- */

/* Stash an uncontended acquisition (`try_`: by a trylock); 0 when it must
 * be traced in full. */
static inline __attribute__((always_inline)) int strata_pt_stash_push(const void *lock, uint64_t caller,
								      uint8_t try_)
{
	/* relaxed: a hint; a stale value only repeats the idempotent dump. */
	uint32_t st = __atomic_load_n(&STRATA__TP(pthread, site).state, __ATOMIC_RELAXED);
	if (__builtin_expect(st != __atomic_load_n(&sites_emitted_state, __ATOMIC_RELAXED), 0))
		strata_pt_emit_sites(st);
	uint32_t site = strata_pt_site_id(caller);
	if (site == STRATA_PT_NO_SITE)
		return 0;
	uint16_t warm;
	const uint64_t hint = strata_pt_count_untimed_turn(lock, site, try_, &warm);
	uint8_t tsc = hint > STRATA_PT_TURN_HOT ? STRATA_PT_UNTIMED : (uint8_t)strata_pt_hold_tsc();
	if (hint == STRATA_PT_TURN_HOT && tsc == 1)
		tsc = STRATA_PT_IF_WAITED;
	for (uint32_t i = 0; i < STRATA_PT_STASH; i++) {
		if (RELAXED_LOAD(&stash[i].lock) != 0 || !strata_pt_local_cas(&stash[i].lock, 0, 1))
			continue;
		strata_pt_local_add(&pending, 1);
		RELAXED_STORE(&stash[i].site, site);
		RELAXED_STORE(&stash[i].try_, try_);
		RELAXED_STORE(&stash[i].seq, strata_pt_local_xadd(&stash_seq, 1) + 1);
		RELAXED_STORE(&stash[i].tsc, tsc);
		RELAXED_STORE(&stash[i].warm, warm);
		RELAXED_STORE(&stash[i].t0, tsc == STRATA_PT_UNTIMED ? hint
					    : tsc                    ? strata_pt_tsc()
								     : strata_pt_now());
		SIGNAL_FENCE(); /* the fields before the lock that publishes them */
		RELAXED_STORE(&stash[i].lock, U64(lock));
		return 1;
	}
	return 0;
}

/* Take slot j back if it still holds `lock`: 1 and *out. */
static inline int strata_pt_stash_take(uint32_t j, uint64_t lock, struct strata_pt_pending *out)
{
	/* A handler that took this slot meanwhile (a recursive mutex it
	 * unlocked): 0, look again. */
	if (!strata_pt_local_cas(&stash[j].lock, lock, 1))
		return 0;
	SIGNAL_FENCE(); /* the fields after the slot is ours */
	out->lock = lock;
	out->site = RELAXED_LOAD(&stash[j].site);
	out->try_ = RELAXED_LOAD(&stash[j].try_);
	out->t0 = RELAXED_LOAD(&stash[j].t0);
	out->tsc = RELAXED_LOAD(&stash[j].tsc);
	out->warm = RELAXED_LOAD(&stash[j].warm);
	const uint64_t seq = RELAXED_LOAD(&stash[j].seq);
	SIGNAL_FENCE(); /* read before the slot is free again */
	RELAXED_STORE(&stash[j].lock, 0);
	strata_pt_local_add(&pending, -1);
	/* The latest push undone gives its number back (see the stash). */
	strata_pt_local_cas(&stash_seq, seq, seq - 1);
	return 1;
}

/* strata_pt_stash_pop when its first guess missed: the latest of the
 * lock's entries, by a scan. */
static __attribute__((noinline)) int strata_pt_stash_scan(const void *lock, struct strata_pt_pending *out)
{
	for (;;) {
		uint32_t best = STRATA_PT_STASH;
		for (uint32_t j = 0; j < STRATA_PT_STASH; j++)
			if (RELAXED_LOAD(&stash[j].lock) == U64(lock) &&
			    (best == STRATA_PT_STASH ||
			     RELAXED_LOAD(&stash[j].seq) > RELAXED_LOAD(&stash[best].seq)))
				best = j;
		if (best == STRATA_PT_STASH)
			return 0;
		if (strata_pt_stash_take(best, U64(lock), out))
			return 1;
	}
}

/* Take `lock`'s latest pending acquisition out of the stash: 1 and *out if
 * found. */
static inline int strata_pt_stash_pop(const void *lock, struct strata_pt_pending *out)
{
	const uint32_t guess = RELAXED_LOAD(&pending) - 1;
	if (guess < STRATA_PT_STASH && RELAXED_LOAD(&stash[guess].lock) == U64(lock) &&
	    RELAXED_LOAD(&stash[guess].seq) == RELAXED_LOAD(&stash_seq) &&
	    strata_pt_stash_take(guess, U64(lock), out))
		return 1;
	return strata_pt_stash_scan(lock, out);
}

/* A popped acquisition as still held, age_ns ago. */
static void strata_pt_emit_acquired(const struct strata_pt_pending *p, uint64_t age)
{
	if (p->try_)
		strata_tracepoint(pthread, mutex_tryacquired, p->lock, p->site, age);
	else
		strata_tracepoint(pthread, mutex_acquired, p->lock, p->site, age);
}

/* Emit `lock`'s pending acquisition, if any, as still held (before a cond
 * wait releases it, or before a full unlock). */
static void strata_pt_flush_acquired(const void *lock)
{
	struct strata_pt_pending p;
	if (!strata_pt_stash_pop(lock, &p))
		return;
	if (p.tsc == STRATA_PT_UNTIMED) /* no age to say: counted, see strata_pt_count_untimed */
		strata_pt_count_untimed(&p, 0);
	else
		strata_pt_emit_acquired(&p, strata_pt_since(&p));
}

/* ---- traced paths (out of line: the wrappers' fast path stays a load, a
 * branch and a tail call) ------------------------------------------------ */

enum strata_pt_kind {
	PT_MUTEX_LOCK,
	PT_MUTEX_TIMEDLOCK,
	PT_MUTEX_CLOCKLOCK,
	PT_MUTEX_TRYLOCK,
	PT_RW_RDLOCK,
	PT_RW_WRLOCK,
	PT_RW_CLOCKRDLOCK,
	PT_RW_CLOCKWRLOCK,
	PT_RW_TRYRDLOCK,
	PT_RW_TRYWRLOCK,
	PT_SEM_WAIT,
	PT_SEM_TIMEDWAIT,
	PT_SEM_CLOCKWAIT,
	PT_SEM_TRYWAIT,
};

/* Emit an acquisition event of kind `k`.  The runtime's reserve/commit
 * calls no pthread function and nests (signal handlers), so only the
 * unwinder runs with the busy flag. */
static __attribute__((noinline)) void strata_pt_emit_acq(enum strata_pt_kind k, const void *lock, int ret,
							 int contended, uint64_t wait, uint64_t caller)
{
	uint64_t stack[STRATA_PT_MAX_DEPTH];
	strata_pt_check_maps(caller);
	size_t n = strata_pt_stack(stack, caller);
	uint64_t a = U64(lock);
	uint8_t c = (uint8_t)contended;
	/* One tracepoint per kind (names are compile-time): blocking kinds
	 * carry the wait, try kinds do not. */
#define STRATA_PT_ACQ(ev) strata_tracepoint(pthread, ev, a, ret, c, wait, caller, stack, n)
#define STRATA_PT_TRY(ev) strata_tracepoint(pthread, ev, a, ret, caller, stack, n)
	switch (k) {
	case PT_MUTEX_LOCK:
		STRATA_PT_ACQ(mutex_lock);
		break;
	case PT_MUTEX_TIMEDLOCK: /* fall through */
	case PT_MUTEX_CLOCKLOCK:
		STRATA_PT_ACQ(mutex_timedlock);
		break;
	case PT_MUTEX_TRYLOCK:
		STRATA_PT_TRY(mutex_trylock);
		break;
	case PT_RW_RDLOCK: /* fall through */
	case PT_RW_CLOCKRDLOCK:
		STRATA_PT_ACQ(rwlock_rdlock);
		break;
	case PT_RW_WRLOCK: /* fall through */
	case PT_RW_CLOCKWRLOCK:
		STRATA_PT_ACQ(rwlock_wrlock);
		break;
	case PT_RW_TRYRDLOCK:
		STRATA_PT_TRY(rwlock_tryrdlock);
		break;
	case PT_RW_TRYWRLOCK:
		STRATA_PT_TRY(rwlock_trywrlock);
		break;
	case PT_SEM_WAIT:
		STRATA_PT_ACQ(sem_wait);
		break;
	case PT_SEM_TIMEDWAIT: /* fall through */
	case PT_SEM_CLOCKWAIT:
		STRATA_PT_ACQ(sem_timedwait);
		break;
	case PT_SEM_TRYWAIT:
		STRATA_PT_TRY(sem_trywait);
		break;
	}
#undef STRATA_PT_ACQ
#undef STRATA_PT_TRY
}

/*
 * A traced acquisition: try first (uncontended: no clock read), then block
 * and time the wait.  For every mutex type trylock-then-lock returns what
 * lock alone returns (errorcheck owner: EBUSY then EDEADLK; recursive owner:
 * trylock succeeds as lock would; robust: EOWNERDEAD from either).  The try
 * kinds only try.
 */
static int strata_pt_acquire_tried(enum strata_pt_kind k, void *lock, clockid_t clk,
				   const struct timespec *abstime, uint64_t caller, int ret);
static __attribute__((noinline)) int strata_pt_acquire(enum strata_pt_kind k, void *lock, clockid_t clk,
						       const struct timespec *abstime, uint64_t caller)
{
	pthread_mutex_t *m = lock;
	pthread_rwlock_t *l = lock;
	int ret;
	switch (k) {
	case PT_MUTEX_LOCK:
	case PT_MUTEX_TIMEDLOCK:
	case PT_MUTEX_CLOCKLOCK:
	case PT_MUTEX_TRYLOCK:
		ret = REAL(mutex_trylock)(m);
		break;
	case PT_RW_RDLOCK:
	case PT_RW_CLOCKRDLOCK:
	case PT_RW_TRYRDLOCK:
		ret = REAL(rwlock_tryrdlock)(l);
		break;
	default:
		ret = REAL(rwlock_trywrlock)(l);
		break;
	}
	return strata_pt_acquire_tried(k, lock, clk, abstime, caller, ret);
}

/* The rest of an acquisition whose try returned `ret`: block if it was
 * busy, then emit the full event. */
static __attribute__((noinline)) int strata_pt_acquire_tried(enum strata_pt_kind k, void *lock, clockid_t clk,
							     const struct timespec *abstime, uint64_t caller,
							     int ret)
{
	pthread_mutex_t *m = lock;
	pthread_rwlock_t *l = lock;
	int contended = 0;
	uint64_t wait = 0;
	if (ret == EBUSY && k != PT_MUTEX_TRYLOCK && k != PT_RW_TRYRDLOCK && k != PT_RW_TRYWRLOCK) {
		uint64_t t0 = strata_pt_now();
		switch (k) {
		case PT_MUTEX_LOCK:
			ret = REAL(mutex_lock)(m);
			break;
		case PT_MUTEX_TIMEDLOCK:
			ret = REAL(mutex_timedlock)(m, abstime);
			break;
		case PT_MUTEX_CLOCKLOCK:
			ret = REAL(mutex_clocklock)(m, clk, abstime);
			break;
		case PT_RW_RDLOCK:
			ret = REAL(rwlock_rdlock)(l);
			break;
		case PT_RW_CLOCKRDLOCK:
			ret = REAL(rwlock_clockrdlock)(l, clk, abstime);
			break;
		case PT_RW_CLOCKWRLOCK:
			ret = REAL(rwlock_clockwrlock)(l, clk, abstime);
			break;
		default:
			ret = REAL(rwlock_wrlock)(l);
			break;
		}
		wait = strata_pt_now() - t0;
		contended = 1;
	}
	strata_pt_emit_acq(k, lock, ret, contended, wait, caller);
	return ret;
}

/* A mutex's try returned `ret`: if it succeeded, to the stash (compact
 * records), anything else to strata_pt_acquire_tried's full event.
 * `try_`: pthread_mutex_trylock (else pthread_mutex_lock). */
static inline __attribute__((always_inline)) int strata_pt_mutex_tried(pthread_mutex_t *m, uint64_t caller,
								       int ret, uint8_t try_)
{
	if (__builtin_expect(ret == 0, 1) && strata_pt_fold_on(try_) &&
	    (strata_pt_check_maps(caller), strata_pt_stash_push(m, caller, try_)))
		return 0;
	return strata_pt_acquire_tried(try_ ? PT_MUTEX_TRYLOCK : PT_MUTEX_LOCK, m, 0, NULL, caller, ret);
}

static __attribute__((noinline)) int strata_pt_mutex_lock(pthread_mutex_t *m, uint64_t caller)
{
	return strata_pt_mutex_tried(m, caller, REAL(mutex_trylock)(m), 0);
}

static __attribute__((noinline)) int strata_pt_mutex_trylock(pthread_mutex_t *m, uint64_t caller)
{
	return strata_pt_mutex_tried(m, caller, REAL(mutex_trylock)(m), 1);
}

/* pthread_mutex_unlock, traced: a pending uncontended acquisition (or
 * successful try) of the mutex and this unlock become one mutex_held (or
 * mutex_tryheld), or in counting mode one more pair counted
 * (pthread_count.h). */
static __attribute__((noinline)) int strata_pt_mutex_unlock(pthread_mutex_t *m, uint64_t caller)
{
	const int count = strata_pt_count_on(m);
	if (__builtin_expect(count == STRATA_PT_COUNT_WAITERS, 0))
		strata_pt_count_hot(U64(m));
#ifdef STRATA_PT_TEST_UNLOCK_WINDOW_US
	/* A test's build only (tests/pthread, live_count_window): the control
	 * plane's update signal lands between counting's decision and the
	 * count. */
	if (count)
		usleep(STRATA_PT_TEST_UNLOCK_WINDOW_US);
#endif
	int ret = REAL(mutex_unlock)(m);
	struct strata_pt_pending p;
	if (RELAXED_LOAD(&pending) && strata_pt_stash_pop(m, &p)) {
		/* 0 while the thread spills (an untimed pair, stashed before, is
		 * still counted) */
		const int on = strata_pt_count_admit(count);
		/* A hot lock's pair: counted untimed if nobody waits (no hint: its
		 * entry is looked up), else the timed pair it was read for. */
		if (p.tsc == STRATA_PT_IF_WAITED) {
			if (on == STRATA_PT_COUNT_ON) {
				p.tsc = STRATA_PT_UNTIMED;
				p.t0 = 0;
			} else {
				p.tsc = 1;
			}
		}
		if (p.tsc == STRATA_PT_UNTIMED) {
			strata_pt_count_untimed(&p, count == STRATA_PT_COUNT_WAITERS);
			return ret;
		}
		/* Counting: the pair counted, or it stays a record (a lock's
		 * first timed pair here: below too, if that record cannot be
		 * written so; its entry is made now; or its thread spills). */
		const int first = p.tsc == 1 && on == STRATA_PT_COUNT_ON;
		if (first && strata_pt_count_timed(&p))
			return ret;
		/* The common case: the hold ends at the record's clock read
		 * (pt_hold.h, strata_pt_held_at_record). */
		if (p.tsc == 1 && strata_pt_held_at_record(p.try_ ? &STRATA__TP(pthread, mutex_tryheld)
								  : &STRATA__TP(pthread, mutex_held),
							   p.lock, p.site, p.t0))
			return ret;
		uint64_t now;
		uint64_t hold = strata_pt_since_at(&p, &now);
		if (__builtin_expect(hold <= UINT32_MAX, 1)) {
			if (on == STRATA_PT_COUNT_ON && !first && strata_pt_count(&p, hold, now, 1, 0, 0))
				return ret;
			if (p.try_)
				strata_tracepoint(pthread, mutex_tryheld, p.lock, p.site, (uint32_t)hold);
			else
				strata_tracepoint(pthread, mutex_held, p.lock, p.site, (uint32_t)hold);
			return ret;
		}
		strata_pt_emit_acquired(&p, hold);
	}
	strata_tracepoint(pthread, mutex_unlock, U64(m), ret, caller);
	return ret;
}

static __attribute__((noinline)) int strata_pt_rwlock_unlock(pthread_rwlock_t *l, uint64_t caller)
{
	int ret = REAL(rwlock_unlock)(l);
	strata_tracepoint(pthread, rwlock_unlock, U64(l), ret, caller);
	return ret;
}

/* timed: 0 cond_wait, 1 cond_timedwait, 2 cond_clockwait (traced as timedwait) */
static __attribute__((noinline)) int strata_pt_cond_wait(int timed, pthread_cond_t *c, pthread_mutex_t *m,
							 clockid_t clk, const struct timespec *abstime,
							 uint64_t caller)
{
	uint64_t stack[STRATA_PT_MAX_DEPTH];
	uint64_t t0 = strata_pt_now();
	if (RELAXED_LOAD(&pending))
		strata_pt_flush_acquired(m);
	int ret = timed == 2 ? REAL(cond_clockwait)(c, m, clk, abstime)
		  : timed    ? REAL(cond_timedwait)(c, m, abstime)
			     : REAL(cond_wait)(c, m);
	uint64_t wait = strata_pt_now() - t0;
	strata_pt_check_maps(caller);
	size_t n = strata_pt_stack(stack, caller);
	if (timed)
		strata_tracepoint(pthread, cond_timedwait, U64(c), U64(m), ret, wait, caller, stack, n);
	else
		strata_tracepoint(pthread, cond_wait, U64(c), U64(m), ret, wait, caller, stack, n);
	return ret;
}

static __attribute__((noinline)) int strata_pt_cond_wake(int all, pthread_cond_t *c, uint64_t caller)
{
	int ret = all ? REAL(cond_broadcast)(c) : REAL(cond_signal)(c);
	if (all)
		strata_tracepoint(pthread, cond_broadcast, U64(c), ret, caller);
	else
		strata_tracepoint(pthread, cond_signal, U64(c), ret, caller);
	return ret;
}

/*
 * A traced semaphore wait, as strata_pt_acquire: try first (no clock read
 * when the count was positive), then block and time the wait.  The event's
 * `ret` is 0 or the errno of the failure (EAGAIN, ETIMEDOUT, EINTR); the
 * caller gets the real function's return value and errno (restored after
 * the emission, and as at entry on success).
 */
static __attribute__((noinline)) int strata_pt_sem_wait(enum strata_pt_kind k, sem_t *s, clockid_t clk,
							const struct timespec *abstime, uint64_t caller)
{
	const int errno0 = errno;
	int ret = REAL(sem_trywait)(s), err = ret ? errno : 0, contended = 0;
	uint64_t wait = 0;
	if (ret && err == EAGAIN && k != PT_SEM_TRYWAIT) {
		uint64_t t0 = strata_pt_now();
		if (k == PT_SEM_WAIT)
			ret = REAL(sem_wait)(s);
		else if (k == PT_SEM_TIMEDWAIT)
			ret = REAL(sem_timedwait)(s, abstime);
		else
			ret = REAL(sem_clockwait)(s, clk, abstime);
		err = ret ? errno : 0;
		wait = strata_pt_now() - t0;
		contended = 1;
	}
	strata_pt_emit_acq(k, s, err, contended, wait, caller);
	errno = ret ? err : errno0;
	return ret;
}

static __attribute__((noinline)) int strata_pt_sem_post(sem_t *s, uint64_t caller)
{
	const int errno0 = errno;
	int ret = REAL(sem_post)(s), err = ret ? errno : 0;
	strata_tracepoint(pthread, sem_post, U64(s), err, caller);
	errno = ret ? err : errno0;
	return ret;
}

/* ---- wrappers: tracing off costs one relaxed load and a branch ----------- */

#define STRATA_PT_WRAPPER(name, sym, start, fail, ev, proto, args, traced) \
	STRATA_PT_EXPORT int sym proto                                     \
	{                                                                  \
		if (__builtin_expect(!TRACED(ev), 1))                      \
			return REAL(name) args;                            \
		return traced;                                             \
	}
STRATA_PT_FUNCS(STRATA_PT_WRAPPER)
