/*
 * kinteg_causal.c - workload of the clock causality test (kernel.causal_*):
 * N times, one user event then getppid() on the same thread, so that each
 * kcausal:before must be stamped no later than the kernel's sys_enter of
 * that getppid (check_kinteg.py causal).  The getppid carries the
 * sequence number as an (ignored) argument, which sys_enter records in
 * args[0]: user event and system call are matched exactly, even with loss.
 *
 *   strata-kinteg-causal N     prints "clock_id=ID emitted=N"
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(kcausal, before, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, seq))

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* libstrata's runtime query (libtrace/runtime/runtime.h, exported as strata_*). */
uint32_t strata_rt_clock_id(void);

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 100000;

	for (uint64_t i = 0; i < n; i++) {
		strata_tracepoint(kcausal, before, i);
		syscall(SYS_getppid, (long)i); /* args[0] of sys_enter = seq */
	}
	printf("clock_id=%u emitted=%llu\n", strata_rt_clock_id(), (unsigned long long)n);
	return 0;
}
