/*
 * pthread_count.h - counting mode of the pthread preload (docs/pthread.md,
 * "Counting mode"): by default, or with STRATA_PTHREAD_COUNT=N, an uncontended pair that
 * would be one mutex_held (mutex_tryheld) record updates a per-thread
 * table instead, and pthread:mutex_counts records carry the counts when an
 * entry is flushed; the first pair of each (thread, lock, site, kind) stays
 * a mutex_held and leaves an empty entry (a lock met once costs no more
 * than without counting).  Included once, by pthread_wrap.c, after the stash and
 * the hold times (it uses both); not a header of its own API.
 *
 * Timing: STRATA_PTHREAD_COUNT=1 times every counted hold (two unfenced TSC
 * reads, as a mutex_held's); =N (2..65536) times one pair in N of each
 * thread (count_skip) and counts the others untimed (no clock read at
 * all): a record says how many of its pairs were timed, and the sum and
 * max are theirs.  An untimed pair cannot become a mutex_held (it has no
 * interval): when it cannot be counted it is written alone as a
 * mutex_counts of 1, and an untimed hold whose unlock found waiters is
 * counted as such (waited_untimed: the blockers analysis cannot credit it).
 * So that holds others wait behind keep their interval, a lock whose
 * unlock found waiters joins the thread's `hot` locks (4, round robin),
 * each of whose pairs reads its start (STRATA_PT_IF_WAITED): one whose
 * unlock finds waiters again is timed and stays a mutex_held; the others
 * are counted untimed, but for their sampled turn (timed, as any lock's),
 * so that their end's clock read is saved and the sample stays unbiased.
 *
 * Counting is the default (STRATA_PTHREAD_COUNT_DEFAULT, one pair in 16
 * timed: pthread_count_env.h; one in 4 costs about what one in 16 does, 16
 * leaves a margin where a clock read costs more);
 * STRATA_PTHREAD_COUNT=0 writes every pair as its own record.
 *
 * Spilling: a thread whose (lock, site, kind) keys do not fit its table
 * (a server's helper walking thousands of item locks) pays a cache miss or
 * two on the table for every pair, found or not, and a record for most of
 * them anyway: more than a record alone costs (memcached, pt_lockloop over
 * 1024 locks: docs/pthread.md, "Spilling").  So each thread judges its own
 * table every window (STRATA_PT_CWINDOW pairs): when more than one in
 * STRATA_PT_CTRADE missed it, the thread trades its table for a big
 * one (`big`, STRATA_PT_CBIG_BITS: thousands of keys, memcached's LRU
 * maintainer's 3,148) if one is free, and counts on, judged over longer
 * windows (STRATA_PT_CWINDOW_BIG: a big table's first pairs miss it while
 * they fill it); a thread whose big table churns too (more than one in
 * STRATA_PT_CCHURN missed it), or whose small one did and found no big one
 * free, writes its table out and its next 16 windows' pairs
 * (STRATA_PT_CSPILL_WINDOWS) are records of their own, all timed, with no
 * lookup; then it counts again for a window and judges again.
 *
 * Contract (who touches what):
 *   - A thread's table (one of `pool`, static memory, so that a flusher
 *     never reads freed memory; the thread's `ctab` points to it) is
 *     UPDATED only by that thread and its signal handlers, inside `busy`:
 *     a handler that finds busy set (it interrupted its thread's update or
 *     flush) counts nothing and writes its pair as mutex_held instead; a
 *     handler runs to completion before its thread resumes, so updates
 *     never interleave.  Updates are single-writer stores in program
 *     order (signal fences for the compiler; x86-64 keeps stores in order
 *     and loads in order; elsewhere, and under TSan, release stores and
 *     acquire loads: ORDERED_*).
 *   - An entry is FLUSHED (a mutex_counts record of what was counted since
 *     its marks fcount/fsum, then the marks advanced) only by the holder
 *     of the table's flush lock `flusher` (0 or the holder's thread mark;
 *     a lock-prefixed CAS, once per flush): the owner when an entry is
 *     old, full or evicted, every entry when it starts spilling, and at
 *     its exit (thread-specific data destructor); any thread at the process' exit and before the control
 *     plane changes tracepoint states (flush_all).  The owner only tries
 *     the lock; the others spin for it (the holder is another thread, which
 *     progresses).  flush_all skips a table whose update or flush lock its
 *     own thread holds, interrupted (a handler cannot wait for the code it
 *     interrupted): those counts go in that entry's next record, and no
 *     mutex_counts_done follows that flush.  So that the control plane's
 *     changes never meet that case, tp-async's update handler asks first
 *     (strata_rt_state_ready, strata_pt_count_ready): a handler that
 *     interrupted its thread's update or flush serves nothing and sets
 *     the table's `owed` (owner and its handlers only); the owner, out of
 *     its window (strata_pt_count_idle), raises the signal again.
 *   - A flusher on another thread reads an entry with a sequence check:
 *     gen (counted at the end of each update) unchanged and busy 0 before
 *     and after the entry's fields: the fields are one update's.
 *   - A hint (an entry's address found before the update: by the lock's
 *     probe, carried in the stash, or by strata_pt_count_known) is a guess
 *     made outside busy: a handler, or the thread's own pairs between its
 *     lock and unlock, may evict that entry or trade the table meanwhile.
 *     The update takes it only inside busy, if it lies in the thread's
 *     current table and still holds the pair's key (one entry a key);
 *     else it probes (strata_pt_count_hint).
 *   - Exit (the library's destructor, one thread): counts_closed is set,
 *     then a process-wide memory barrier (membarrier): an update that set
 *     busy before the barrier is seen busy by flush_all, which waits for it;
 *     one that began after it sees counts_closed and writes mutex_held
 *     (Dekker's pattern with the expensive fence on the rare side, as
 *     liburcu's membarrier flavour).  Every pair is then either in a
 *     record flush_all writes or in a mutex_held.  The same around a
 *     change the control plane applies (strata_rt_set_state_hooks): the
 *     flag STRATA_PT_CSUSPENDED and the barrier before it flushes, the
 *     flag cleared once the change is applied, so that the pairs of that
 *     window are records of their own in the sessions still armed.  An
 *     update reads mutex_counts' state again inside busy: an unlock that
 *     decided to count before a change that disabled counting (its
 *     handler may interrupt that very unlock) writes its own record too,
 *     never a count left in the table for a later session.
 *   - A thread takes a free table of the pool at its first count (CAS of
 *     `owned` 0 -> 1); its exit destructor, holding the flush lock, writes
 *     it, empties it and frees it.  flush_all looks at every owned table
 *     of both pools; one freed or taken again meanwhile holds nothing
 *     written already.  Past STRATA_PT_CTABLES threads at once a thread
 *     counts nothing (its pairs stay mutex_held records).
 *   - A trade for a big table (the owner, at a window's end, inside its
 *     small table's busy and holding its flush lock, every entry written):
 *     the big table is taken as a first one is, marked busy, made the
 *     thread's (TSD, then ctab: a handler finds either table busy), then
 *     the small one emptied, unlocked and freed as at exit.  A thread keeps
 *     its big table until it exits.
 *   - fork child: one thread; its own tables (copies of the parent's) are
 *     emptied, the other threads' freed and marked stale, emptied by the
 *     thread that takes one next (strata_pt_count_take): the parent's
 *     counts are the parent's to write, the child starts from zero.
 * Nothing here allocates or takes a lock but the flush lock.
 */

#ifndef STRATA_PT_CBITS
#define STRATA_PT_CBITS 8u /* log2 of the entries per thread table */
#endif
#define STRATA_PT_CENTRIES (1u << STRATA_PT_CBITS) /* entries per thread table */
#define STRATA_PT_CPROBES 4u                       /* probed entries per key */
#define STRATA_PT_CTABLES 256u                     /* threads with a table at once */
#define STRATA_PT_CBIG_BITS 13u                    /* log2 of a big table's entries */
#define STRATA_PT_CBIG_ENTRIES (1u << STRATA_PT_CBIG_BITS)
#define STRATA_PT_CBIGS 8u           /* threads with a big table at once */
#define STRATA_PT_CMAX (1ull << 20)  /* pairs an entry counts before it is flushed */
#define STRATA_PT_CAGE_NS 20000000u  /* age of an entry's first unflushed pair that flushes it */
#define STRATA_PT_UNTIMED 2          /* strata_pt_pending.tsc: no clock read for this pair */
#define STRATA_PT_IF_WAITED 3        /* strata_pt_pending.tsc: a TSC start kept only for waiters */
#define STRATA_PT_TURN_HOT 1u        /* strata_pt_count_untimed_turn: a hot lock's pair */
#define STRATA_PT_COUNT_ON 1         /* strata_pt_count_on: count this unlock's pair */
#define STRATA_PT_COUNT_WAITERS 2    /* the same, but it has waiters: a timed pair keeps its record */
#define STRATA_PT_CWINDOW 4096u      /* pairs a thread's table is judged over (spilling) */
#define STRATA_PT_CWINDOW_BIG 32768u /* the same for a big table: 4 x its entries */
#define STRATA_PT_CCHURN 3u          /* it spills when more than 1 pair in this many missed it */
#define STRATA_PT_CTRADE 8u          /* a small one is traded when more than 1 in this many did */
#define STRATA_PT_CSPILL_WINDOWS 16u /* windows' pairs a spilling thread then writes as records */

/* An entry: what a pair's update reads and writes, one cache line (a
 * server's tables miss the cache: 96 bytes were two lines an update). */
struct strata_pt_centry {
	uint64_t lock; /* 0: free */
	uint32_t site;
	uint32_t max;    /* the longest timed hold (ns; a counted hold fits 32 bits) */
	uint32_t waited; /* untimed pairs whose unlock had waiters (mod 2^32, as its field) */
	uint8_t try_;
	uint64_t count, sum, timed; /* since the entry was made: owner-written */
	uint64_t fcount;            /* count's flushed mark (written under the flush lock) */
	uint64_t first;             /* clock value of the first timed pair after the marks, 0: none */
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct strata_pt_centry) == 64, "an entry is one cache line");

/* The other flushed marks, read and written by flushes only (under the
 * flush lock): beside the entries, not in their line. */
struct strata_pt_cmarks {
	uint64_t fsum, ftimed;
	uint32_t fwaited;
};

/* A table; its arrays (of 2^bits each) lie in the pool's static storage
 * (strata_pt_count_pools, at the constructor: a setting, as bits). */
struct strata_pt_ctable {
	uint32_t owned;    /* a thread has it */
	uint32_t busy;     /* owner's update or flush in progress (see above) */
	uint32_t owed;     /* an update signal waits for busy's end (see above) */
	uint32_t bits;     /* log2 of its entries */
	uint32_t stale;    /* a fork child's copy of a parent thread's: emptied when taken */
	uint64_t gen;      /* updates done (the sequence check) */
	uintptr_t flusher; /* the flush lock: 0 or the holder's thread mark */
	/* Each entry's fingerprint (strata_pt_count_fp), 0: free; owner only.
	 * A window's 4 are 8 bytes, one cache line where the entries are 4:
	 * a probe that misses (most of a server's locks, met too rarely to
	 * stay in the table) reads no entry. */
	uint16_t *fp;
	struct strata_pt_centry *e;
	struct strata_pt_cmarks *m; /* e[i]'s marks */
};

/* Table t's entries. */
static inline uint32_t strata_pt_count_n(const struct strata_pt_ctable *t)
{
	return 1u << t->bits;
}

/* Entry e's marks, in table t. */
static inline struct strata_pt_cmarks *strata_pt_count_marks(struct strata_pt_ctable *t,
							     const struct strata_pt_centry *e)
{
	return &t->m[e - t->e];
}

static struct strata_pt_ctable pool[STRATA_PT_CTABLES];
static struct strata_pt_ctable big[STRATA_PT_CBIGS];
static uint16_t pool_fp[STRATA_PT_CTABLES][STRATA_PT_CENTRIES] __attribute__((aligned(64)));
static struct strata_pt_centry pool_e[STRATA_PT_CTABLES][STRATA_PT_CENTRIES];
static struct strata_pt_cmarks pool_m[STRATA_PT_CTABLES][STRATA_PT_CENTRIES];
static uint16_t big_fp[STRATA_PT_CBIGS][STRATA_PT_CBIG_ENTRIES] __attribute__((aligned(64)));
static struct strata_pt_centry big_e[STRATA_PT_CBIGS][STRATA_PT_CBIG_ENTRIES];
static struct strata_pt_cmarks big_m[STRATA_PT_CBIGS][STRATA_PT_CBIG_ENTRIES];
static STRATA_PT_TLS struct strata_pt_ctable *ctab; /* this thread's, or NULL */
/* Its small table, kept (empty) once traded for a big one: an update the
 * trade interrupted (a handler's) may still land there (see the contract). */
static STRATA_PT_TLS struct strata_pt_ctable *ctab_small;
static STRATA_PT_TLS uint8_t ctab_closed; /* exiting, or no table: count nothing */
static STRATA_PT_TLS uint8_t ctab_mark;   /* its address: the thread's flush-lock mark */
static uint32_t counts_closed;            /* STRATA_PT_CEXIT | STRATA_PT_CSUSPENDED: count nothing */
#define STRATA_PT_CEXIT 1u                /* the process' final flush began */
#define STRATA_PT_CSUSPENDED 2u           /* the control plane is applying a change */
static pid_t count_pid;                   /* whose tables these are (a setting; fork child: its own) */
static uint32_t counts_written;           /* a mutex_counts record was written (this process) */
static int count_mode;                    /* STRATA_PTHREAD_COUNT: a setting */
static uint32_t count_every;              /* time one pair in count_every: a setting */
static STRATA_PT_TLS uint32_t count_skip; /* untimed pairs before the next timed one */
#define STRATA_PT_HOT 4u
static STRATA_PT_TLS uint64_t hot[STRATA_PT_HOT]; /* locks lately unlocked with waiters: hints */
static STRATA_PT_TLS uint32_t hot_next;
/* Spilling (above).  Plain values: a handler that moves one (its pair
 * judged, or spilled, in the middle of its thread's update) only shifts a
 * judgement by a pair. */
static STRATA_PT_TLS uint32_t spill_left; /* pairs still written as records, no lookup */
static STRATA_PT_TLS uint32_t win_pairs;  /* pairs this window (admitted to counting) */
static STRATA_PT_TLS uint32_t win_missed; /* of which looked up and not found */
static STRATA_PT_TLS uint8_t win_big;     /* the thread's table is a big one */
static pthread_key_t count_key;
static int count_key_ok;

#if defined(__x86_64__) && !defined(STRATA_TSAN)
#define ORDERED_LOAD(p) __atomic_load_n(p, __ATOMIC_RELAXED)
#define ORDERED_STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELAXED)
#else
#define ORDERED_LOAD(p) __atomic_load_n(p, __ATOMIC_ACQUIRE)
#define ORDERED_STORE(p, v) __atomic_store_n(p, v, __ATOMIC_RELEASE)
#endif

/* The hash of (lock, site, kind): its entry's window (STRATA_PT_CPROBES
 * from strata_pt_count_slot) and fingerprint.  The site and kind are hashed
 * too: a lock taken at many sites (memcached's per-thread stats lock, at 8)
 * would otherwise have all of them compete for one window of 4, each new
 * entry evicting another while still empty, and every pair of that lock
 * stay a record of its own.  (A user-space address stays below bit 47; the
 * site's bits above it, the kind in the top bit.) */
static inline uint64_t strata_pt_count_hash(uint64_t lock, uint32_t site, uint8_t try_)
{
	const uint64_t k = lock ^ ((uint64_t)site << 47) ^ ((uint64_t)try_ << 63);
	return k * 0x9e3779b97f4a7c15ull;
}

/* The window's first entry in a table of 2^bits: the hash's top bits. */
static inline uint32_t strata_pt_count_slot(uint64_t hk, uint32_t bits)
{
	return (uint32_t)(hk >> (64 - bits));
}

/* The fingerprint: the 16 bits below those (never 0, which says free). */
static inline uint16_t strata_pt_count_fp(uint64_t hk, uint32_t bits)
{
	const uint16_t f = (uint16_t)(hk >> (48 - bits));
	return f ? f : 1;
}

/* A key's window and fingerprint, as both the probe and the lookup use them. */
struct strata_pt_ckey {
	uint32_t h;
	uint16_t f;
};
static inline __attribute__((always_inline)) struct strata_pt_ckey
strata_pt_count_key(const struct strata_pt_ctable *t, uint64_t lock, uint32_t site, uint8_t try_)
{
	const uint64_t hk = strata_pt_count_hash(lock, site, try_);
	const uint32_t bits = t->bits;
	return (struct strata_pt_ckey){strata_pt_count_slot(hk, bits), strata_pt_count_fp(hk, bits)};
}

/* One entry's figures, as a flusher read them. */
struct strata_pt_csnap {
	uint64_t lock, count, sum, timed;
	uint32_t site, max, waited;
	uint8_t try_;
};

/* The record of what `e` counted since its marks (up to the snapshot
 * `s`), then the marks advanced.  Under the flush lock. */
static void strata_pt_count_emit(struct strata_pt_ctable *t, struct strata_pt_centry *e,
				 const struct strata_pt_csnap *s)
{
	struct strata_pt_cmarks *m = strata_pt_count_marks(t, e);
	const uint64_t n = s->count - RELAXED_LOAD(&e->fcount);
	if (!n)
		return;
	strata_tracepoint(pthread, mutex_counts, s->lock, s->site, s->try_, n,
			  s->timed - RELAXED_LOAD(&m->ftimed), s->sum - RELAXED_LOAD(&m->fsum), s->max,
			  s->waited - RELAXED_LOAD(&m->fwaited));
	/* release: the record before the flag (strata_pt_count_done's acquire) */
	if (!__atomic_load_n(&counts_written, __ATOMIC_RELAXED))
		__atomic_store_n(&counts_written, 1, __ATOMIC_RELEASE);
	RELAXED_STORE(&e->fcount, s->count);
	RELAXED_STORE(&m->fsum, s->sum);
	RELAXED_STORE(&m->ftimed, s->timed);
	RELAXED_STORE(&m->fwaited, s->waited);
}

/* The owner's view of `e` (or a flush-lock holder's while the owner
 * cannot update it). */
static inline void strata_pt_count_own_snap(const struct strata_pt_centry *e, struct strata_pt_csnap *s)
{
	s->lock = e->lock;
	s->count = e->count;
	s->sum = e->sum;
	s->max = e->max;
	s->timed = e->timed;
	s->waited = e->waited;
	s->site = e->site;
	s->try_ = e->try_;
}

/* Empty `e` (under the flush lock). */
static void strata_pt_count_clear(struct strata_pt_ctable *t, struct strata_pt_centry *e)
{
	struct strata_pt_cmarks *m = strata_pt_count_marks(t, e);
	ORDERED_STORE(&e->lock, 0);
	ORDERED_STORE(&e->count, 0);
	ORDERED_STORE(&e->sum, 0);
	ORDERED_STORE(&e->max, 0);
	ORDERED_STORE(&e->timed, 0);
	ORDERED_STORE(&e->waited, 0);
	ORDERED_STORE(&e->first, 0);
	RELAXED_STORE(&e->fcount, 0); /* the marks: under the lock */
	RELAXED_STORE(&m->fsum, 0);
	RELAXED_STORE(&m->ftimed, 0);
	RELAXED_STORE(&m->fwaited, 0);
}

/* Table `t`'s (the calling thread's own) entry for (lock, site, try_):
 * its address (a hint for strata_pt_count_hint), 0 if none.  A read, no
 * update. */
static inline uint64_t strata_pt_count_known(const struct strata_pt_ctable *t, uint64_t lock, uint32_t site,
					     uint8_t try_)
{
	const struct strata_pt_ckey k = strata_pt_count_key(t, lock, site, try_);
	const uint32_t h = k.h, mask = strata_pt_count_n(t) - 1;
	const uint16_t f = k.f;
	for (uint32_t i = 0; i < STRATA_PT_CPROBES; i++) {
		const uint32_t j = (h + i) & mask;
		const struct strata_pt_centry *e = &t->e[j];
		if (t->fp[j] == f && e->lock == lock && e->site == site && e->try_ == try_)
			return U64(e);
	}
	return 0;
}

/* Has table `t` (the calling thread's own) an entry for (lock, site,
 * try_), by the fingerprints alone?  Its entry's line is fetched meanwhile
 * for the update at the unlock: at the lock only the fingerprints' line is
 * waited for (a server's big table misses the cache: memcached's LRU
 * maintainer waited there a third of its tracing time).  A false match
 * (one in 2^16 a probe) only makes an untimed pair the first of a new
 * entry, counted: exact, in a mutex_counts record where a mutex_held would
 * have been.  Returns that entry's address (the hint the stash carries to
 * the unlock, strata_pt_count_entry), 0 if none matched.
 * strata_pt_count_fp_probe: the same probe, the entry's index + 1. */
static inline __attribute__((always_inline)) uint32_t
strata_pt_count_fp_probe(const struct strata_pt_ctable *t, uint64_t lock, uint32_t site, uint8_t try_)
{
	const struct strata_pt_ckey k = strata_pt_count_key(t, lock, site, try_);
	const uint32_t mask = strata_pt_count_n(t) - 1;
	for (uint32_t i = 0; i < STRATA_PT_CPROBES; i++) {
		const uint32_t j = (k.h + i) & mask;
		if (t->fp[j] == k.f) {
			__builtin_prefetch(&t->e[j], 1);
			return j + 1;
		}
	}
	return 0;
}
static inline __attribute__((always_inline)) uint64_t
strata_pt_count_hinted(const struct strata_pt_ctable *t, uint64_t lock, uint32_t site, uint8_t try_)
{
	const uint32_t j = strata_pt_count_fp_probe(t, lock, site, try_);
	return j ? U64(&t->e[j - 1]) : 0;
}

/* A timed pair of `lock` at `site` (a try: try_) where the thread has a
 * big table: its entry there, if it has one by the fingerprints
 * (strata_pt_count_fp_probe), as its index + 1 (0: none, or a small
 * table), carried in the stash to strata_pt_count_timed at the unlock;
 * the entry's line is fetched meanwhile, where the unlock otherwise
 * waited for it (memcached's workers and LRU maintainer, counting every
 * hold, spent a third of that function's time on the entry's first
 * load).  A small table (16 KiB of entries) stays in the cache: its
 * pairs skip the probe here (pt_lockloop, counting every hold: 7
 * instructions a pair more with it, for nothing). */
static inline __attribute__((always_inline)) uint16_t strata_pt_count_warm(const void *lock, uint32_t site,
									   uint8_t try_)
{
	const struct strata_pt_ctable *t = ctab;
	if (!t || t->bits == STRATA_PT_CBITS)
		return 0;
	return (uint16_t)strata_pt_count_fp_probe(t, U64(lock), site, try_);
}
_Static_assert(STRATA_PT_CBIG_ENTRIES <= UINT16_MAX, "strata_pt_count_warm's index + 1 fits 16 bits");

/* This pair of `lock` at `site` (a try: try_) goes untimed (sampling, see
 * "Timing"): its entry's hint (strata_pt_count_hinted, an entry's address),
 * else 0 (timed; *warm: strata_pt_count_warm's), or STRATA_PT_TURN_HOT: a
 * hot lock's pair off its sampled turn, whose start is read in case its
 * unlock finds waiters (STRATA_PT_IF_WAITED).  A handler moving
 * count_skip or `hot` only shifts the sample. */
static inline __attribute__((always_inline)) uint64_t
strata_pt_count_untimed_turn(const void *lock, uint32_t site, uint8_t try_, uint16_t *warm)
{
	const uint32_t every = __atomic_load_n(&count_every, __ATOMIC_RELAXED); /* a setting */
	*warm = 0;
	if (__builtin_expect(every <= 1, 1)) { /* every hold timed, or no counting */
		if (every && !spill_left)      /* spilling: no lookup (its unlock makes none) */
			*warm = strata_pt_count_warm(lock, site, try_);
		return 0;
	}
	if (!strata_tracepoint_enabled(pthread, mutex_counts))
		return 0;
	if (spill_left) /* spilling: every pair a record, which needs its interval */
		return 0;
	if (!count_skip) {
		count_skip = every - 1;
		*warm = strata_pt_count_warm(lock, site, try_);
		return 0;
	}
	count_skip--;
	for (uint32_t i = 0; hot_next && i < STRATA_PT_HOT; i++) /* hot_next 0: none yet */
		if (hot[i] == U64(lock))
			return STRATA_PT_TURN_HOT;
	/* Untimed only where its entry exists already: the first pair of a
	 * (lock, site, kind) is timed, so that it can stay a mutex_held if it
	 * is not met again (memcached's item locks: an entry, then a 49-byte
	 * record, for one pair, where a mutex_held is 20). */
	const struct strata_pt_ctable *t = ctab;
	return t ? strata_pt_count_hinted(t, U64(lock), site, try_) : 0;
}

/* An unlock of `lock` found waiters: time its next pairs. */
static void strata_pt_count_hot(uint64_t lock)
{
	for (uint32_t i = 0; i < STRATA_PT_HOT; i++)
		if (hot[i] == lock)
			return;
	hot[hot_next++ % STRATA_PT_HOT] = lock;
}

/* The flush lock: 1 if taken (never waits). */
static inline int strata_pt_count_trylock(struct strata_pt_ctable *t)
{
	uintptr_t expected = 0;
	/* acquire: the marks the previous holder wrote; pairs with the release
	 * in strata_pt_count_unlock. */
	return __atomic_compare_exchange_n(&t->flusher, &expected, (uintptr_t)&ctab_mark, 0, __ATOMIC_ACQUIRE,
					   __ATOMIC_RELAXED);
}

/* The flush lock, waiting for another thread that holds it; 0 if this
 * thread holds it (a handler that interrupted its own thread's flush, or
 * its exit's: it cannot wait for the code it interrupted). */
static int strata_pt_count_lock(struct strata_pt_ctable *t)
{
	while (!strata_pt_count_trylock(t)) {
		/* relaxed: our own mark can only be there if we stored it */
		if (__atomic_load_n(&t->flusher, __ATOMIC_RELAXED) == (uintptr_t)&ctab_mark)
			return 0;
		sched_yield();
	}
	return 1;
}

static inline void strata_pt_count_unlock(struct strata_pt_ctable *t)
{
	__atomic_store_n(&t->flusher, 0, __ATOMIC_RELEASE); /* pairs with the lock's acquire */
}

/* tp-async's update handler asks (strata_rt_state_ready): 0 when it
 * interrupted this thread's update or flush of its table, which the
 * change's flush could not write (see the contract); the owner raises the
 * signal again at the end of that window (strata_pt_count_idle). */
static int strata_pt_count_ready(void)
{
	struct strata_pt_ctable *t = ctab, *small = ctab_small;
	/* relaxed: this thread's own stores, read by its handler.  Its small
	 * table too, once traded (an update there the trade interrupted). */
	if (!t || (!RELAXED_LOAD(&t->busy) &&
		   __atomic_load_n(&t->flusher, __ATOMIC_RELAXED) != (uintptr_t)&ctab_mark &&
		   !(small && RELAXED_LOAD(&small->busy))))
		return 1;
	RELAXED_STORE(&t->owed, 1);
	return 0;
}

/* The owner leaves its update (busy 0); an update signal it held off is
 * raised again now (a handler between the two stores found it not busy
 * and served itself: the raise only costs another query). */
static inline __attribute__((always_inline)) void strata_pt_count_idle(struct strata_pt_ctable *t)
{
	SIGNAL_FENCE();
	ORDERED_STORE(&t->busy, 0);
	SIGNAL_FENCE();
	if (__builtin_expect(RELAXED_LOAD(&t->owed), 0)) {
		RELAXED_STORE(&t->owed, 0);
		strata_rt_state_retry();
	}
}

/* The owner flushes its entry (inside busy). */
static void strata_pt_count_flush_own(struct strata_pt_ctable *t, struct strata_pt_centry *e)
{
	if (!strata_pt_count_trylock(t))
		return; /* flush_all has it, and writes this entry */
	struct strata_pt_csnap s;
	strata_pt_count_own_snap(e, &s);
	strata_pt_count_emit(t, e, &s);
	strata_pt_count_unlock(t);
}

/* Every entry, mark and fingerprint of `t` zeroed (whatever state an
 * interrupted update left them in). */
static void strata_pt_count_zero(struct strata_pt_ctable *t)
{
	const uint32_t n = strata_pt_count_n(t);
	memset(t->e, 0, n * sizeof t->e[0]);
	memset(t->m, 0, n * sizeof t->m[0]);
	memset(t->fp, 0, n * sizeof t->fp[0]);
}

/* A free table of the n in `p`, now owned; NULL if every one is.  One a
 * fork child's parent thread owned (stale) is emptied now, not at the fork:
 * a fork then touches no page of the tables it does not keep (a big one is
 * 720 KiB). */
static struct strata_pt_ctable *strata_pt_count_take(struct strata_pt_ctable *p, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t expected = 0;
		/* acquire: the emptying by its previous owner (the release in
		 * strata_pt_count_free). */
		if (RELAXED_LOAD(&p[i].owned) == 0 &&
		    __atomic_compare_exchange_n(&p[i].owned, &expected, 1, 0, __ATOMIC_ACQUIRE,
						__ATOMIC_RELAXED)) {
			struct strata_pt_ctable *t = &p[i];
			if (t->stale) { /* owner only now; set by the fork child alone */
				strata_pt_count_zero(t);
				t->stale = 0;
			}
			return t;
		}
	}
	return NULL;
}

/* Make `t` this thread's table: its exit destructor's argument, then ctab. */
static void strata_pt_count_adopt(struct strata_pt_ctable *t)
{
	int was_busy = strata_pt_busy;
	strata_pt_busy = 1; /* glibc's TSD code: no traced locks */
	pthread_setspecific(count_key, t);
	strata_pt_busy = was_busy;
	ctab = t;
	SIGNAL_FENCE();
}

/* Take a table of the pool for this thread and arm its exit destructor;
 * NULL when there is none (no key, every table owned): the thread then
 * counts nothing. */
static __attribute__((noinline)) struct strata_pt_ctable *strata_pt_count_register(void)
{
	ctab_closed = 1;                                       /* until it has one */
	if (!__atomic_load_n(&count_key_ok, __ATOMIC_RELAXED)) /* a setting */
		return NULL;
	struct strata_pt_ctable *t = strata_pt_count_take(pool, STRATA_PT_CTABLES);
	if (!t)
		return NULL;
	strata_pt_count_adopt(t);
	ctab_closed = 0;
	return t;
}

/* Age limit of an entry in the clock's units (TSC ticks or ns).  The
 * ticks are computed once per scale (a 128-bit division): age_scale is the
 * scale age_ticks was computed with (both relaxed: plain values, a racing
 * thread computes the same ones; a pair of mismatched values only moves
 * one flush by a fraction). */
static uint64_t age_ticks, age_scale;
static inline uint64_t strata_pt_count_age(uint8_t tsc)
{
	if (!tsc)
		return STRATA_PT_CAGE_NS;
	const uint64_t scale = __atomic_load_n(&pt_scale, __ATOMIC_RELAXED); /* see pt_scale */
	if (__builtin_expect(scale == __atomic_load_n(&age_scale, __ATOMIC_RELAXED) && scale, 1))
		return __atomic_load_n(&age_ticks, __ATOMIC_RELAXED);
	const uint64_t mult = scale >> 32;
	if (!mult)
		return 1ull << 26;
	/* ns = ticks * mult >> shift, so ticks = (ns << shift) / mult */
	const uint64_t t = (uint64_t)(((unsigned __int128)STRATA_PT_CAGE_NS << (scale & 63)) / mult);
	__atomic_store_n(&age_ticks, t, __ATOMIC_RELAXED);
	__atomic_store_n(&age_scale, scale, __ATOMIC_RELAXED);
	return t;
}

/* The entry an untimed pair's lock found (its hint, from
 * strata_pt_count_hinted), if it still is (lock, site, try_)'s in `t`: a
 * key has one entry at most, so a match is it, found without the hash and
 * the probe.  NULL: no hint (0), an address outside t's entries (the
 * thread's small table, traded since), or an entry evicted meanwhile. */
static inline __attribute__((always_inline)) struct strata_pt_centry *
strata_pt_count_hint(const struct strata_pt_ctable *t, uint64_t hint, uint64_t lock, uint32_t site,
		     uint8_t try_)
{
	if (hint - U64(t->e) >= (uint64_t)strata_pt_count_n(t) * sizeof t->e[0])
		return NULL;
	struct strata_pt_centry *e = (struct strata_pt_centry *)(uintptr_t)hint;
	return e->lock == lock && e->site == site && e->try_ == try_ ? e : NULL;
}

/* The entry of (lock, site, try_), made if needed (*made: it was); NULL:
 * count nothing.  `hint`: strata_pt_count_hint's.  A full window evicts,
 * in that order: an entry with nothing unwritten (free), its first entry
 * for an untimed pair (which has nothing else to become; its counts
 * written first), or that entry for a timed pair if it is older than the
 * age limit; else the timed pair stays a mutex_held. */
static inline __attribute__((always_inline)) struct strata_pt_centry *
strata_pt_count_entry(struct strata_pt_ctable *t, uint64_t lock, uint32_t site, uint8_t try_, int timed,
		      uint64_t now, uint8_t tsc, uint64_t hint, int *made)
{
	struct strata_pt_centry *const hinted = strata_pt_count_hint(t, hint, lock, site, try_);
	if (hinted) {
		*made = 0;
		return hinted;
	}
	const struct strata_pt_ckey k = strata_pt_count_key(t, lock, site, try_);
	const uint32_t h = k.h, mask = strata_pt_count_n(t) - 1;
	const uint16_t f = k.f;
	struct strata_pt_centry *free_e = NULL, *idle = NULL;
	uint32_t at = h; /* free_e's index */
	*made = 1;
	for (uint32_t i = 0; i < STRATA_PT_CPROBES; i++) {
		const uint32_t j = (h + i) & mask;
		struct strata_pt_centry *e = &t->e[j];
		const uint16_t g = t->fp[j];
		if (g == f && e->lock == lock && e->site == site && e->try_ == try_) {
			*made = 0;
			return e;
		}
		if (!g && !free_e) {
			free_e = e;
			at = j;
		}
	}
	win_missed++;
	if (!free_e) {
		/* Every entry of the window taken: read them for one with nothing
		 * unwritten only now. */
		for (uint32_t i = 0; i < STRATA_PT_CPROBES && !idle; i++) {
			const uint32_t j = (h + i) & mask;
			if (t->e[j].count == RELAXED_LOAD(&t->e[j].fcount)) {
				idle = &t->e[j];
				at = j;
			}
		}
		free_e = idle ? idle : &t->e[h];
		if (!idle && timed && !(free_e->first && now - free_e->first >= strata_pt_count_age(tsc)))
			return NULL;
		if (!strata_pt_count_trylock(t))
			return NULL;
		struct strata_pt_csnap s;
		strata_pt_count_own_snap(free_e, &s);
		strata_pt_count_emit(t, free_e, &s); /* nothing for an idle one */
		strata_pt_count_clear(t, free_e);
		strata_pt_count_unlock(t);
	}
	ORDERED_STORE(&free_e->site, site);
	ORDERED_STORE(&free_e->try_, try_);
	ORDERED_STORE(&free_e->lock, lock);
	t->fp[at] = f;
	return free_e;
}

/* The update of entry `e` by one pair (inside busy); 1 if it is to be
 * flushed now (old or full).  Untimed (timed 0): no hold, no clock. */
static inline __attribute__((always_inline)) int strata_pt_count_add(struct strata_pt_centry *e,
								     uint64_t hold, uint64_t now, uint8_t tsc,
								     int timed, int waited)
{
	const uint64_t c = e->count, fc = RELAXED_LOAD(&e->fcount);
	if (c == fc)
		ORDERED_STORE(&e->first, 0);
	ORDERED_STORE(&e->count, c + 1);
	if (!timed) {
		if (waited)
			ORDERED_STORE(&e->waited, e->waited + 1);
		return c + 1 - fc >= STRATA_PT_CMAX;
	}
	ORDERED_STORE(&e->timed, e->timed + 1);
	ORDERED_STORE(&e->sum, e->sum + hold);
	if (hold > e->max) /* a counted hold fits (strata_pt_count's callers) */
		ORDERED_STORE(&e->max, (uint32_t)hold);
	if (!e->first)
		ORDERED_STORE(&e->first, now + !now); /* 0 stays "none" */
	return c + 1 - fc >= STRATA_PT_CMAX || now - e->first >= strata_pt_count_age(tsc);
}

/* The calling thread's table, unless counting cannot touch it now (a
 * handler inside its thread's update, the thread exiting, no table). */
static inline __attribute__((always_inline)) struct strata_pt_ctable *strata_pt_count_mine(void)
{
	struct strata_pt_ctable *t = ctab;
	if (__builtin_expect(!t, 0) && (ctab_closed || !(t = strata_pt_count_register())))
		return NULL;
	if (RELAXED_LOAD(&t->busy) || ctab_closed)
		return NULL;
	return t;
}

/* Table `t` (strata_pt_count_mine) marked busy, and pair p's entry in it
 * (strata_pt_count_entry, `hint` its address if known: an untimed pair's
 * t0, from its lock's probe, or strata_pt_count_known's; NULL once
 * counting closed).  The caller clears busy. */
static inline __attribute__((always_inline)) struct strata_pt_centry *
strata_pt_count_begin(struct strata_pt_ctable *t, const struct strata_pt_pending *p, int timed, uint64_t now,
		      uint64_t hint, int *made)
{
	ORDERED_STORE(&t->busy, 1);
	SIGNAL_FENCE();
	*made = 0;
	/* acquire: pairs with the release that clears STRATA_PT_CSUSPENDED
	 * (strata_pt_count_after_change): the flag seen cleared, the states
	 * that change applied are seen below.  The exit's membarrier orders
	 * this load after the busy store against the exiting thread (see the
	 * contract).  mutex_counts read again here, inside busy: the unlock
	 * read it before its real unlock, and a change applied since (its
	 * handler may have interrupted this very unlock) flushed the table
	 * already: a pair counted now would wait, unwritten, for a session
	 * that counts again, and go into that one's trace (a pair made before
	 * it started).  It is a record of its own instead, where one is
	 * still enabled. */
	if (__atomic_load_n(&counts_closed, __ATOMIC_ACQUIRE) ||
	    !strata_tracepoint_enabled(pthread, mutex_counts))
		return NULL;
	return strata_pt_count_entry(t, p->lock, p->site, p->try_, timed, now, p->tsc, hint, made);
}

/*
 * Count an uncontended pair `p` held `hold` ns, its unlock at clock value
 * `now` (p's units): 1, or 0 when it must be written as mutex_held (a
 * handler inside its thread's update, the thread or process exiting, no
 * table, no entry).  `hint`: strata_pt_count_begin's.
 */
static inline __attribute__((always_inline)) int strata_pt_count_in(const struct strata_pt_pending *p,
								    uint64_t hold, uint64_t now, int timed,
								    int waited, uint64_t hint)
{
	struct strata_pt_ctable *t = strata_pt_count_mine();
	if (!t)
		return 0;
	int made;
	struct strata_pt_centry *e = strata_pt_count_begin(t, p, timed, now, hint, &made);
	/* A lock's first timed pair here stays a mutex_held and leaves an
	 * empty entry: its next pairs are counted.  A lock met once (memcached's
	 * item locks) so costs what it costs without counting; an empty entry
	 * is evicted for free. */
	if (!e || (made && timed)) {
		strata_pt_count_idle(t);
		return 0;
	}
	const int flush = strata_pt_count_add(e, hold, now, p->tsc, timed, waited);
	SIGNAL_FENCE(); /* the fields, then gen (the compiler keeps relaxed stores' order only so) */
	ORDERED_STORE(&t->gen, t->gen + 1);
	if (__builtin_expect(flush, 0))
		strata_pt_count_flush_own(t, e);
	strata_pt_count_idle(t);
	return 1;
}

/* strata_pt_count_in out of line, for the pairs timed by CLOCK_MONOTONIC
 * (no TSC); the untimed and the TSC-timed ones inline it
 * (strata_pt_count_untimed, strata_pt_count_timed). */
static __attribute__((noinline)) int strata_pt_count(const struct strata_pt_pending *p, uint64_t hold,
						     uint64_t now, int timed, int waited, uint64_t hint)
{
	return strata_pt_count_in(p, hold, now, timed, waited, hint);
}

/* A timed pair's entry by its warm index (strata_pt_count_warm) if that
 * still is its entry in `t` (strata_pt_count_hint: an index of another
 * table, traded since, or an entry evicted or remade meanwhile is none),
 * else by the probe: its address, 0 if none. */
static inline uint64_t strata_pt_count_known_at(const struct strata_pt_ctable *t,
						const struct strata_pt_pending *p)
{
	const uint32_t i = p->warm - 1u; /* 0: none, UINT32_MAX here */
	const struct strata_pt_centry *e =
		i < strata_pt_count_n(t) ? strata_pt_count_hint(t, U64(&t->e[i]), p->lock, p->site, p->try_)
					 : NULL;
	return e ? U64(e) : strata_pt_count_known(t, p->lock, p->site, p->try_);
}

/*
 * A timed pair `p` (p->tsc 1: timed by the TSC) at its unlock, before any
 * clock read there: 1 if counted (its (lock, site, kind) has an entry: the
 * hold is read now, as strata_pt_count counts it), 0 if it is to stay a
 * mutex_held: it has none (one is made empty now, as strata_pt_count makes
 * it, so that the next pairs are counted), or the table cannot be used now.
 * The caller then writes the record with the hold ending at the record's
 * own clock read (pt_hold.h), where strata_pt_count needed a read of its
 * own first: a lock met once (memcached's item locks, thousands of them
 * through a table of 32 entries then) cost three clock reads, not two.  The
 * eviction's age test takes the pair's start for `now`: an entry a little
 * younger than it is, kept a little longer.
 */
static __attribute__((noinline)) int strata_pt_count_timed(const struct strata_pt_pending *p)
{
	struct strata_pt_ctable *t = strata_pt_count_mine();
	if (!t)
		return 0;
	const uint64_t known = strata_pt_count_known_at(t, p);
	if (!known) {
		int made;
		(void)strata_pt_count_begin(t, p, 1, p->t0, 0, &made);
		strata_pt_count_idle(t);
		return 0;
	}
	uint64_t now;
	const uint64_t hold = strata_pt_since_at(p, &now);
	return hold <= UINT32_MAX && strata_pt_count_in(p, hold, now, 1, 0, known);
}

/* One entry of table `t` (its flush lock held) written from a consistent
 * snapshot; 0 if its thread stayed busy. */
static int strata_pt_count_flush_entry(struct strata_pt_ctable *t, struct strata_pt_centry *e)
{
	for (int tries = 0; tries < 1000000; tries++) {
		const uint64_t g = ORDERED_LOAD(&t->gen);
		if (ORDERED_LOAD(&t->busy)) {
			sched_yield();
			continue;
		}
		SIGNAL_FENCE(); /* gen and busy, then the fields, then both again (see the stores) */
		struct strata_pt_csnap s;
		s.lock = ORDERED_LOAD(&e->lock);
		s.count = ORDERED_LOAD(&e->count);
		s.sum = ORDERED_LOAD(&e->sum);
		s.max = ORDERED_LOAD(&e->max);
		s.timed = ORDERED_LOAD(&e->timed);
		s.waited = ORDERED_LOAD(&e->waited);
		s.site = ORDERED_LOAD(&e->site);
		s.try_ = ORDERED_LOAD(&e->try_);
		SIGNAL_FENCE();
		if (ORDERED_LOAD(&t->busy) || ORDERED_LOAD(&t->gen) != g)
			continue;
		if (s.lock)
			strata_pt_count_emit(t, e, &s);
		return 1;
	}
	return 0;
}

/* Every entry of `t`.  1 if all were written (see the contract). */
static int strata_pt_count_flush_table(struct strata_pt_ctable *t)
{
	if (((t == ctab || t == ctab_small) && RELAXED_LOAD(&t->busy)) || !strata_pt_count_lock(t))
		return 0; /* we interrupted our own thread's update or flush */
	int ok = 1;
	for (uint32_t i = 0; i < strata_pt_count_n(t); i++)
		ok &= strata_pt_count_flush_entry(t, &t->e[i]);
	strata_pt_count_unlock(t);
	return ok;
}

/* Every owned table of the n in `p` (see the contract); how many were
 * written whole, *whole cleared if one was not. */
static uint32_t strata_pt_count_flush_pool(struct strata_pt_ctable *p, uint32_t n, int *whole)
{
	uint32_t done = 0;
	for (uint32_t i = 0; i < n; i++) {
		/* relaxed: the flush lock orders what is read (its acquire). */
		if (!__atomic_load_n(&p[i].owned, __ATOMIC_RELAXED))
			continue;
		const int ok = strata_pt_count_flush_table(&p[i]);
		done += (uint32_t)ok;
		*whole &= ok;
	}
	return done;
}

/* Every owned table, small and big.  How many were written whole;
 * *whole: all of them were. */
static uint32_t strata_pt_count_flush_all(int *whole)
{
	*whole = 1;
	return strata_pt_count_flush_pool(pool, STRATA_PT_CTABLES, whole) +
	       strata_pt_count_flush_pool(big, STRATA_PT_CBIGS, whole);
}

/* After a flush of every table (`whole`: all written, n of them): say that
 * everything counted so far is in the records before it, once the process
 * wrote a record at all (a program that counted nothing, `true` under
 * --preload pthread, records nothing). */
static void strata_pt_count_done(int whole, uint32_t n)
{
	/* acquire: pairs with the release in strata_pt_count_emit */
	if (whole && __atomic_load_n(&counts_written, __ATOMIC_ACQUIRE))
		strata_tracepoint(pthread, mutex_counts_done, n);
}

/* Order counts_closed's new value against every thread's next update (see
 * the contract): after it, an update in progress is seen busy, a later one
 * sees the flag. */
static void strata_pt_count_barrier(void)
{
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0 &&
	    syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL, 0, 0) != 0)
		__atomic_thread_fence(__ATOMIC_SEQ_CST); /* no membarrier: docs/pthread.md */
}

/* The control plane is about to change tracepoint states (a session starts
 * or stops, rules change; strata_rt_set_state_hooks, maybe in a handler):
 * counting is suspended (pairs until the change is applied are records of
 * their own, in the sessions still armed) and what was counted goes to the
 * sessions that recorded it.  Not in a fork child before our atfork
 * handler emptied the parent's tables (count_pid). */
static void strata_pt_count_before_change(void)
{
	if (!strata_tracepoint_enabled(pthread, mutex_counts) ||
	    getpid() != __atomic_load_n(&count_pid, __ATOMIC_RELAXED))
		return;
	/* seq_cst, then the barrier: as at exit. */
	__atomic_fetch_or(&counts_closed, STRATA_PT_CSUSPENDED, __ATOMIC_SEQ_CST);
	strata_pt_count_barrier();
	int whole;
	const uint32_t n = strata_pt_count_flush_all(&whole);
	strata_pt_count_done(whole, n);
}

/* The change is applied: counting resumes where it is enabled.  (release:
 * pairs with the acquire in strata_pt_count_begin, which then sees the
 * change's states; a pair that still sees the flag writes its own record,
 * exact either way.) */
static void strata_pt_count_after_change(void)
{
	__atomic_fetch_and(&counts_closed, ~STRATA_PT_CSUSPENDED, __ATOMIC_RELEASE);
}

/* Write every entry of `t` (its flush lock held, by its owner: a spill,
 * a trade, the exit), and `empty` it too. */
static void strata_pt_count_write(struct strata_pt_ctable *t, int empty)
{
	for (uint32_t i = 0; i < strata_pt_count_n(t); i++) {
		struct strata_pt_centry *e = &t->e[i];
		if (!t->fp[i])
			continue; /* free, and empty */
		struct strata_pt_csnap s;
		strata_pt_count_own_snap(e, &s);
		if (s.lock)
			strata_pt_count_emit(t, e, &s);
		if (empty)
			strata_pt_count_clear(t, e);
	}
	if (empty)
		memset(t->fp, 0, strata_pt_count_n(t) * sizeof t->fp[0]);
}

/* Give `t` (emptied, no longer ctab) back to its pool; 1 if an update
 * signal waits (its `owed`). */
static int strata_pt_count_free(struct strata_pt_ctable *t)
{
	const uint32_t owed = RELAXED_LOAD(&t->owed);
	RELAXED_STORE(&t->owed, 0);
	__atomic_store_n(&t->owned, 0, __ATOMIC_RELEASE); /* pairs with the take's acquire */
	return owed != 0;
}

/* Thread exit (thread-specific data destructor): write the table (and a
 * small one it was traded for), empty and free it, holding its flush lock. */
static void strata_pt_count_thread_exit(void *arg)
{
	struct strata_pt_ctable *t = arg, *small = ctab_small;
	ctab_closed = 1; /* later destructors' pairs: mutex_held */
	SIGNAL_FENCE();
	(void)strata_pt_count_lock(t); /* thread context: never held by this thread */
	strata_pt_count_write(t, 1);
	strata_pt_count_unlock(t);
	if (small) {
		(void)strata_pt_count_lock(small);
		strata_pt_count_write(small, 1);
		strata_pt_count_unlock(small);
	}
	ctab = NULL; /* after the unlock: a handler that finds ctab holds no lock of its thread */
	ctab_small = NULL;
	SIGNAL_FENCE();
	int owed = strata_pt_count_free(t);
	if (small)
		owed |= strata_pt_count_free(small);
	if (owed)
		strata_rt_state_retry(); /* an update signal that came while we held the lock */
}

/* Process exit: close counting, order that against every thread (see the
 * contract), write every table, then say so. */
static void __attribute__((destructor)) strata_pt_count_exit(void)
{
	/* Not in a vfork child calling _exit (it shares our memory, and runs
	 * no atfork handler: count_pid is still ours). */
	if (!__atomic_load_n(&count_mode, __ATOMIC_RELAXED) ||
	    !strata_tracepoint_enabled(pthread, mutex_counts) ||
	    getpid() != __atomic_load_n(&count_pid, __ATOMIC_RELAXED))
		return;
	/* seq_cst: the membarrier below orders it for the other threads; once
	 * only (a second _exit, or _exit from a destructor). */
	if (__atomic_fetch_or(&counts_closed, STRATA_PT_CEXIT, __ATOMIC_SEQ_CST) & STRATA_PT_CEXIT)
		return;
	strata_pt_count_barrier();
	int whole;
	uint32_t n = strata_pt_count_flush_all(&whole);
	strata_pt_count_done(whole, n);
}

/* _exit (a fork child's usual way out) runs no destructor: the final flush
 * runs here, then the next _exit (an interposer's, TSan's, or glibc's). */
static void (*next_exit)(int);
STRATA_PT_EXPORT __attribute__((noreturn)) void _exit(int status)
{
	strata_pt_count_exit();
	void (*f)(int) = __atomic_load_n(&next_exit, __ATOMIC_RELAXED); /* a setting */
	if (f)
		f(status);
	for (;;)
		syscall(SYS_exit_group, status);
}

/* STRATA_PTHREAD_COUNT (pthread_count_env.h); a value it does not read is
 * said on stderr (write(2): no stdio here) and the default applies. */
static long strata_pt_count_setting(const char *c)
{
	const long every = strata_pthread_count_parse(c);
	if (every >= 0)
		return every;
	static const char msg[] =
		"strata: STRATA_PTHREAD_COUNT is not 0 (a record per lock pair) or 1 to "
		"65536 (count uncontended pairs, one hold in N timed): the default applies\n";
	ssize_t w = write(2, msg, sizeof msg - 1);
	(void)w;
	return STRATA_PTHREAD_COUNT_DEFAULT;
}

/* Each table's arrays in its pool's storage (before any thread counts). */
static void strata_pt_count_pools(void)
{
	for (uint32_t i = 0; i < STRATA_PT_CTABLES; i++)
		pool[i] = (struct strata_pt_ctable){
			.bits = STRATA_PT_CBITS, .fp = pool_fp[i], .e = pool_e[i], .m = pool_m[i]};
	for (uint32_t i = 0; i < STRATA_PT_CBIGS; i++)
		big[i] = (struct strata_pt_ctable){
			.bits = STRATA_PT_CBIG_BITS, .fp = big_fp[i], .e = big_e[i], .m = big_m[i]};
}

/* Constructor: the setting and the thread-exit key. */
static void strata_pt_count_init(void)
{
	strata_pt_count_pools();
	int was_busy = strata_pt_busy;
	strata_pt_busy = 1; /* dlsym may lock */
	__atomic_store_n(&next_exit, (void (*)(int))dlsym(RTLD_NEXT, "_exit"), __ATOMIC_RELAXED);
	strata_pt_busy = was_busy;
	const long every = strata_pt_count_setting(getenv("STRATA_PTHREAD_COUNT"));
	if (every < 1)
		return;
	__atomic_store_n(&count_every, (uint32_t)every, __ATOMIC_RELAXED); /* a setting */
	if (pthread_key_create(&count_key, strata_pt_count_thread_exit) == 0)
		__atomic_store_n(&count_key_ok, 1, __ATOMIC_RELAXED); /* a setting */
	__atomic_store_n(&count_mode, 1, __ATOMIC_RELAXED);           /* a setting */
	__atomic_store_n(&count_pid, getpid(), __ATOMIC_RELAXED);     /* a setting */
	strata_rt_set_ready_hook(strata_pt_count_ready);
	strata_rt_set_state_hooks(strata_pt_count_before_change, strata_pt_count_after_change);
}

/* Table `t` in a fork child: `own`, the child's thread keeps it, emptied
 * (its entries in use only, unless the fork came from a handler inside an
 * update of it: an entry without a fingerprint is empty otherwise); else
 * free, and stale (emptied when taken: a parent thread may have been inside
 * an update, so every entry then). */
static void strata_pt_count_wipe(struct strata_pt_ctable *t, int own)
{
	const uint32_t n = strata_pt_count_n(t);
	if (own && RELAXED_LOAD(&t->busy)) {
		strata_pt_count_zero(t);
	} else if (own) {
		for (uint32_t i = 0; i < n; i++)
			if (t->fp[i]) {
				memset(&t->e[i], 0, sizeof t->e[i]);
				memset(&t->m[i], 0, sizeof t->m[i]);
			}
		memset(t->fp, 0, n * sizeof t->fp[0]);
	} else
		t->stale = 1;
	t->busy = 0;
	t->owed = 0; /* the parent's signal: its own to serve */
	t->gen = 0;
	t->flusher = 0;
	t->owned = (uint32_t)own;
}

/* fork child (one thread): the parent's counts stay the parent's. */
static void strata_pt_count_atfork_child(void)
{
	for (uint32_t i = 0; i < STRATA_PT_CTABLES + STRATA_PT_CBIGS; i++) {
		struct strata_pt_ctable *t = i < STRATA_PT_CTABLES ? &pool[i] : &big[i - STRATA_PT_CTABLES];
		/* ours keep their key, emptied; a parent thread's are not ours */
		if (RELAXED_LOAD(&t->owned))
			strata_pt_count_wipe(t, t == ctab || t == ctab_small);
	}
	RELAXED_STORE(&counts_closed, 0);
	RELAXED_STORE(&counts_written, 0); /* the parent's records are not the child's */
	RELAXED_STORE(&count_pid, getpid());
}

/* Counting applies to this unlock: 0 no, STRATA_PT_COUNT_ON, or
 * STRATA_PT_COUNT_WAITERS when glibc's lock word shows a waiter (2, or
 * FUTEX_WAITERS for robust and PI mutexes): a wait's blockers need the
 * hold's interval, so a timed pair keeps its mutex_held. */
static inline int strata_pt_count_on(const pthread_mutex_t *m)
{
	if (!__atomic_load_n(&count_mode, __ATOMIC_RELAXED) ||
	    !strata_tracepoint_enabled(pthread, mutex_counts))
		return 0;
	/* relaxed: a hint read before the real unlock; a waiter that comes
	 * later finds its blocker counted (docs/pthread.md). */
	const uint32_t w = __atomic_load_n((const uint32_t *)&m->__data.__lock, __ATOMIC_RELAXED);
	return w != 2 && !(w & 0x80000000u) ? STRATA_PT_COUNT_ON : STRATA_PT_COUNT_WAITERS;
}

/* An untimed pair (sampling): counted, or when it cannot be (a handler
 * inside its thread's update, exiting, no table) written alone: it has no
 * interval for a mutex_held. */
static inline __attribute__((always_inline)) void strata_pt_count_untimed(const struct strata_pt_pending *p,
									  int waited)
{
	if (!strata_pt_count_in(p, 0, 0, 0, waited, p->t0)) /* its t0: the lock's hint */
		strata_tracepoint(pthread, mutex_counts, p->lock, p->site, p->try_, 1, 0, 0, 0,
				  (uint32_t)waited);
}

/* The pairs of this thread's window (spilling, above). */
static inline uint32_t strata_pt_count_window(void)
{
	return win_big ? STRATA_PT_CWINDOW_BIG : STRATA_PT_CWINDOW;
}

/* Trade the thread's small table `t` (inside its busy, its flush lock
 * held) for a big one, if one is free (see the contract): 1 if traded,
 * `t` written, emptied, unlocked and idle, kept as ctab_small. */
static int strata_pt_count_trade(struct strata_pt_ctable *t)
{
	struct strata_pt_ctable *b = strata_pt_count_take(big, STRATA_PT_CBIGS);
	if (!b)
		return 0;
	ORDERED_STORE(&b->busy, 1);
	SIGNAL_FENCE();
	ctab_small = t;
	strata_pt_count_adopt(b);
	win_big = 1;
	strata_pt_count_write(t, 1);
	strata_pt_count_unlock(t);
	if (RELAXED_LOAD(&t->owed)) { /* a handler found t busy: b serves it */
		RELAXED_STORE(&t->owed, 0);
		RELAXED_STORE(&b->owed, 1);
	}
	strata_pt_count_idle(t);
	strata_pt_count_idle(b);
	return 1;
}

/* The end of a window (spilling, above): when more than one pair in
 * STRATA_PT_CTRADE missed a small table, it is traded for a big one;
 * failing that, or when more than one in STRATA_PT_CCHURN missed a big
 * one, the next STRATA_PT_CSPILL_WINDOWS windows' pairs are records, and
 * what the table counted is written now rather than when the thread counts
 * again (inside busy, as the owner's other flushes; the flush lock only
 * tried: flush_all, which holds it, writes every entry). */
static __attribute__((noinline)) void strata_pt_count_judge(void)
{
	const uint64_t pairs = win_pairs, missed = win_missed;
	win_pairs = 0;
	win_missed = 0;
	const int churned = missed * STRATA_PT_CCHURN > pairs;
	const int trade = !win_big && missed * STRATA_PT_CTRADE > pairs;
	if (!churned && !trade)
		return;
	const uint32_t spill = strata_pt_count_window() * STRATA_PT_CSPILL_WINDOWS;
	struct strata_pt_ctable *t = strata_pt_count_mine();
	if (!t) {
		if (churned)
			spill_left = spill;
		return;
	}
	ORDERED_STORE(&t->busy, 1);
	SIGNAL_FENCE();
	if (strata_pt_count_trylock(t)) {
		if (trade && strata_pt_count_trade(t))
			return;
		if (churned)
			strata_pt_count_write(t, 0);
		strata_pt_count_unlock(t);
	}
	if (churned)
		spill_left = spill;
	strata_pt_count_idle(t);
}

/* Counting applies to this uncontended pair (`count`: strata_pt_count_on's
 * answer at its unlock): 0 while its thread spills; a pair admitted
 * counts toward the window's judgement. */
static inline int strata_pt_count_admit(int count)
{
	if (count != STRATA_PT_COUNT_ON)
		return count;
	if (__builtin_expect(spill_left != 0, 0)) {
		spill_left--;
		return 0;
	}
	if (__builtin_expect(++win_pairs >= strata_pt_count_window(), 0))
		strata_pt_count_judge();
	return count;
}
