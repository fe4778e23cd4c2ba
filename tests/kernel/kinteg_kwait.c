/*
 * kinteg_kwait.c - the controller's side of kernel.kinteg_ack, through the
 * module (what `--wait` would do with /dev/strata):
 *
 *   strata-kinteg-kwait gen                 print the module's generation
 *   strata-kinteg-kwait live N TIMEOUT_MS   until N processes are registered
 *   strata-kinteg-kwait wait G0 TIMEOUT_MS  a change after G0 happened; WAIT
 *                                           until every targeted process has
 *                                           acknowledged it
 *   strata-kinteg-kwait hold UID            as UID, set every slot it can get,
 *                                           print "held N", keep them until
 *                                           stdin reaches EOF (kinteg_share)
 * Exit 0 on success, 1 otherwise (the reason on stdout).
 */
#define _GNU_SOURCE /* setresuid */
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

/* The ioctls run with the caller's credentials: dropped first, the fd
 * (opened as root) is then a plain user's. */
static int hold(int fd, uid_t uid)
{
	struct strata_kabi_rule rule;
	unsigned n = 0;
	char c;

	memset(&rule, 0, sizeof(rule));
	strcpy(rule.pattern, "hold:*");
	rule.loglevel_max = -1;
	rule.enable = 1;
	if (setresgid(uid, uid, uid) || setresuid(uid, uid, uid)) {
		printf("kwait: cannot become uid %u\n", (unsigned)uid);
		return 1;
	}
	for (unsigned slot = 0; slot < STRATA_KABI_MAX_SLOTS; slot++)
		if (strata_kmod_set_rules(fd, slot, &rule, 1, STRATA_KABI_TARGET_UID, uid, NULL, 0, NULL,
					  NULL) == 0)
			n++;
	printf("held %u\n", n);
	fflush(stdout);
	while (read(0, &c, 1) > 0) {
	}
	return 0;
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
	if (!strcmp(argv[1], "hold") && argc == 3)
		return hold(fd, (uid_t)strtoul(argv[2], NULL, 10));
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
