/*
 * pthread_tp.h - the `pthread` tracepoint provider written by
 * libstrata-pthread.so (LD_PRELOAD wrappers of pthread mutexes, condition
 * variables, read-write locks and POSIX semaphores).  The field names below are read by
 * `strata analyze mutex` (processor/analyze/): change both together.
 *
 * Common fields:
 *   lock       address of the pthread_mutex_t / pthread_rwlock_t
 *   cond       address of the pthread_cond_t
 *   ret        return value of the real function (0, EBUSY, ETIMEDOUT, ...)
 *   contended  1 when the lock was not free at the call (the wrapper's
 *              try-first failed and the call blocked), else 0
 *   wait_ns    CLOCK_MONOTONIC ns spent blocked in the real call (0 when
 *              uncontended: no clock is read then)
 *   caller     return address of the wrapped call (inside the caller)
 *   stack      return addresses of the caller's frames, innermost first;
 *              empty unless STRATA_PTHREAD_STACK_DEPTH > 0
 *
 * Blocking calls emit ONE event when they return (its timestamp is the
 * acquisition time; the wait started wait_ns before).  Hold times are
 * derived by the analysis from an acquisition and the next unlock of the
 * same lock by the same thread.
 *
 * pthread:mapping describes one executable mapping of a loaded object (from
 * /proc/self/maps), so that caller addresses can be symbolized off-line.
 * It is emitted before the first lock event of a session that enables it,
 * again after fork in the child, and when a caller address falls outside
 * every mapping seen so far (dlopen).
 */
#include <strata/tracepoint.h>

#ifndef STRATA_PRELOAD_PTHREAD_TP_H
#define STRATA_PRELOAD_PTHREAD_TP_H

#define STRATA_PTHREAD_ACQ_FIELDS(what)                                                       \
	strata_hex(uint64_t, what), strata_int(int32_t, ret), strata_int(uint8_t, contended), \
		strata_int(uint64_t, wait_ns), strata_hex(uint64_t, caller),                  \
		strata_sequence_hex(uint64_t, stack)
#define STRATA_PTHREAD_TRY_FIELDS(what)                                                     \
	strata_hex(uint64_t, what), strata_int(int32_t, ret), strata_hex(uint64_t, caller), \
		strata_sequence_hex(uint64_t, stack)
#define STRATA_PTHREAD_SIMPLE_FIELDS(what) \
	strata_hex(uint64_t, what), strata_int(int32_t, ret), strata_hex(uint64_t, caller)

STRATA_EVENT(pthread, mutex_lock, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_ACQ_FIELDS(lock))
STRATA_EVENT(pthread, mutex_timedlock, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_ACQ_FIELDS(lock))
STRATA_EVENT(pthread, mutex_trylock, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_TRY_FIELDS(lock))
STRATA_EVENT(pthread, mutex_unlock, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_SIMPLE_FIELDS(lock))

STRATA_EVENT(pthread, rwlock_rdlock, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_ACQ_FIELDS(lock))
STRATA_EVENT(pthread, rwlock_wrlock, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_ACQ_FIELDS(lock))
STRATA_EVENT(pthread, rwlock_tryrdlock, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_TRY_FIELDS(lock))
STRATA_EVENT(pthread, rwlock_trywrlock, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_TRY_FIELDS(lock))
STRATA_EVENT(pthread, rwlock_unlock, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_SIMPLE_FIELDS(lock))

/* POSIX semaphores (CPython's threading.Lock is one): `lock` is the sem_t,
 * `ret` 0 or the errno of the failure (EAGAIN, ETIMEDOUT, EINTR).
 * sem_timedwait also records sem_clockwait.  sem_post is the release. */
STRATA_EVENT(pthread, sem_wait, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_ACQ_FIELDS(lock))
STRATA_EVENT(pthread, sem_timedwait, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_ACQ_FIELDS(lock))
STRATA_EVENT(pthread, sem_trywait, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_TRY_FIELDS(lock))
STRATA_EVENT(pthread, sem_post, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_SIMPLE_FIELDS(lock))

/* cond_wait/_timedwait: emitted on return, with the mutex re-acquired.  The
 * mutex was released wait_ns before the event. */
STRATA_EVENT(pthread, cond_wait, STRATA_LOGLEVEL_DEBUG, strata_hex(uint64_t, cond),
	     strata_hex(uint64_t, lock), strata_int(int32_t, ret), strata_int(uint64_t, wait_ns),
	     strata_hex(uint64_t, caller), strata_sequence_hex(uint64_t, stack))
STRATA_EVENT(pthread, cond_timedwait, STRATA_LOGLEVEL_DEBUG, strata_hex(uint64_t, cond),
	     strata_hex(uint64_t, lock), strata_int(int32_t, ret), strata_int(uint64_t, wait_ns),
	     strata_hex(uint64_t, caller), strata_sequence_hex(uint64_t, stack))
STRATA_EVENT(pthread, cond_signal, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_SIMPLE_FIELDS(cond))
STRATA_EVENT(pthread, cond_broadcast, STRATA_LOGLEVEL_DEBUG, STRATA_PTHREAD_SIMPLE_FIELDS(cond))

/* The compact form of uncontended mutex acquisitions (docs/pthread.md,
 * "Compact records").  Used only while mutex_held, mutex_acquired and site
 * are all enabled, and without STRATA_PTHREAD_STACK_DEPTH.
 *   mutex_held      one uncontended pthread_mutex_lock (ret 0) and the same
 *                   thread's unlock of it: the acquisition was hold_ns before
 *                   this event, the unlock is this event; replaces a
 *                   mutex_lock + mutex_unlock pair (20 bytes instead of 61)
 *   mutex_acquired  an uncontended acquisition age_ns before this event that
 *                   is still held (emitted before a cond wait on the mutex, or
 *                   before a full mutex_unlock when the hold exceeds 2^32 ns)
 *   mutex_tryheld, mutex_tryacquired
 *                   the same for a pthread_mutex_trylock that succeeded
 *                   (ret 0; a failed try is traced in full, as EBUSY)
 *   site            the caller address of a site id, once per id and
 *                   session (again in a fork child) */
STRATA_EVENT(pthread, mutex_held, STRATA_LOGLEVEL_DEBUG, strata_hex(uint64_t, lock),
	     strata_int(uint32_t, site), strata_int(uint32_t, hold_ns))
STRATA_EVENT(pthread, mutex_acquired, STRATA_LOGLEVEL_DEBUG, strata_hex(uint64_t, lock),
	     strata_int(uint32_t, site), strata_int(uint64_t, age_ns))
STRATA_EVENT(pthread, mutex_tryheld, STRATA_LOGLEVEL_DEBUG, strata_hex(uint64_t, lock),
	     strata_int(uint32_t, site), strata_int(uint32_t, hold_ns))
STRATA_EVENT(pthread, mutex_tryacquired, STRATA_LOGLEVEL_DEBUG, strata_hex(uint64_t, lock),
	     strata_int(uint32_t, site), strata_int(uint64_t, age_ns))
STRATA_EVENT(pthread, site, STRATA_LOGLEVEL_DEBUG, strata_int(uint32_t, id), strata_hex(uint64_t, caller))

/* Counting mode (the default; STRATA_PTHREAD_COUNT=0 turns it off;
 * docs/pthread.md "Counting mode"):
 * uncontended pairs that would each be a mutex_held (try_ 0) or a
 * mutex_tryheld (try_ 1) are counted per thread and (lock, site, try_),
 * and written when an entry is flushed:
 *   mutex_counts       count pairs since the entry's previous record, of
 *                      which `timed` had their hold timed (all of them with
 *                      STRATA_PTHREAD_COUNT=1, one in 16 by default),
 *                      hold_sum_ns the sum of those;
 *                      hold_max_ns the longest timed hold of the entry's
 *                      pairs so far (this record's or an earlier one's of the
 *                      same entry); waited_untimed: untimed holds whose
 *                      unlock found waiters (no interval for the blockers)
 *   mutex_counts_done  every pair the process counted so far is in the
 *                      mutex_counts before it (its exit's flush, or the one
 *                      before a change of tracepoint states): a process
 *                      whose last mutex_counts have no mutex_counts_done
 *                      after them stopped being recorded with pairs counted
 *                      and not written (`strata analyze mutex` says so);
 *                      threads: the thread tables flushed */
STRATA_EVENT(pthread, mutex_counts, STRATA_LOGLEVEL_DEBUG, strata_hex(uint64_t, lock),
	     strata_int(uint32_t, site), strata_int(uint8_t, try_), strata_int(uint64_t, count),
	     strata_int(uint64_t, timed), strata_int(uint64_t, hold_sum_ns),
	     strata_int(uint32_t, hold_max_ns), strata_int(uint32_t, waited_untimed))
STRATA_EVENT(pthread, mutex_counts_done, STRATA_LOGLEVEL_DEBUG, strata_int(uint32_t, threads))

STRATA_EVENT(pthread, mapping, STRATA_LOGLEVEL_DEBUG, strata_hex(uint64_t, start), strata_hex(uint64_t, end),
	     strata_hex(uint64_t, offset), strata_string(path))

#endif
