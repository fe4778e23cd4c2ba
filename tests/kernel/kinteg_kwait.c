/*
 * kinteg_kwait.c - the controller's side of kernel.kinteg_ack, through the
 * module (what `--wait` would do with /dev/strata):
 *
 *   strata-kinteg-kwait gen                 print the module's generation
 *   strata-kinteg-kwait live N TIMEOUT_MS   until N processes are registered
 *   strata-kinteg-kwait wait G0 TIMEOUT_MS  a change after G0 happened; WAIT
 *                                           until every targeted process has
 *                                           acknowledged it
 * Exit 0 on success, 1 otherwise (the reason on stdout).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "strata_kmod.h"

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int main(int argc, char **argv)
{
	struct strata_kabi_stats st;
	int fd = strata_kmod_open();

	if (fd < 0 || argc < 2 || strata_kmod_stats(fd, &st)) {
		printf("kwait: no /dev/strata or bad usage\n");
		return 1;
	}
	if (!strcmp(argv[1], "gen")) {
		printf("%llu\n", (unsigned long long)st.generation);
		return 0;
	}
	if (argc != 4)
		return 1;
	uint64_t arg = strtoull(argv[2], NULL, 10), tmo = strtoull(argv[3], NULL, 10);
	uint64_t t0 = now_ms();
	if (!strcmp(argv[1], "live")) {
		/* Polling a kernel counter with a deadline: no sleep as a
		 * synchronisation, the condition decides. */
		while (st.procs_live < arg) {
			if (now_ms() - t0 > tmo) {
				printf("kwait: %llu processes registered, wanted %llu\n",
				       (unsigned long long)st.procs_live, (unsigned long long)arg);
				return 1;
			}
			usleep(10000);
			strata_kmod_stats(fd, &st);
		}
		return 0;
	}
	if (!strcmp(argv[1], "wait")) {
		uint32_t missing[8], n_missing = 0;
		uint64_t g = st.generation;

		if (g <= arg) {
			printf("kwait: no change after generation %llu\n", (unsigned long long)arg);
			return 1;
		}
		int r = strata_kmod_wait(fd, g, (uint32_t)tmo, missing, 8, &n_missing);
		if (r) {
			printf("kwait: WAIT(%llu): %s, %u missing, first pid %u\n", (unsigned long long)g,
			       strerror(-r), n_missing, n_missing ? missing[0] : 0);
			return 1;
		}
		printf("kwait: generation %llu acknowledged by every targeted process after %llu ms\n",
		       (unsigned long long)g, (unsigned long long)(now_ms() - t0));
		return 0;
	}
	return 1;
}
