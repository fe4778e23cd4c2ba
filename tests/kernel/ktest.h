/* ktest.h - helpers shared by the in-guest tests of strata.ko. */
#ifndef STRATA_KTEST_H
#define STRATA_KTEST_H

#include <stdint.h>

#include "strata_kabi.h"

void kt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int kt_open(void);
int kt_register(int fd, int signo);
int kt_stats(int fd, struct strata_kabi_stats *st);
/* pattern NULL clears the slot. */
int kt_set_rules_uid(int fd, unsigned slot, uint32_t uid, const char *pattern, uint64_t *gen,
		     uint32_t *n_signalled);

/* ktest_kevents.c */
int kt_kevents(void);
int kt_kevents_loss(void);
int kt_kevents_stream(void);
int kt_kevents_load(void);

#endif
