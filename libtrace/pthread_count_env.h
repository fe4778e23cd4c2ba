/*
 * pthread_count_env.h - STRATA_PTHREAD_COUNT as the pthread preload reads it
 * (docs/pthread.md, "Counting mode"), shared by the preload library (C11),
 * which applies it, and `strata record` (C++17), which refuses before the
 * program runs a value the library would not read.
 */
#ifndef STRATA_LIBTRACE_PTHREAD_COUNT_ENV_H
#define STRATA_LIBTRACE_PTHREAD_COUNT_ENV_H

#include <stdlib.h>

/* Unset or empty: count uncontended pairs, one hold in 16 timed. */
#define STRATA_PTHREAD_COUNT_DEFAULT 16L
#define STRATA_PTHREAD_COUNT_MAX 65536L

/* The setting `c` (getenv's value, or NULL): 0 (every pair a record of its
 * own), N in 1..STRATA_PTHREAD_COUNT_MAX (one timed hold in N), the default
 * when unset or empty, -1 when it is none of these. */
static inline long strata_pthread_count_parse(const char *c)
{
	if (!c || !*c)
		return STRATA_PTHREAD_COUNT_DEFAULT;
	char *end = NULL;
	const long every = strtol(c, &end, 10);
	return *end == 0 && every >= 0 && every <= STRATA_PTHREAD_COUNT_MAX ? every : -1;
}

#endif
