/*
 * clock_pingpong.c - workload of e2e.clock_pingpong: a parent and its
 * forked child take turns through two pipes N times; each emits one event
 * before writing to the other, so event k (k = 2*round + who) causally
 * precedes event k+1 in the other process.  Under a trace merged by time
 * (babeltrace2) the events must come out in exactly the order 0, 1, 2, ...
 * with strictly increasing timestamps, whatever clock stamped them
 * (check_clock_pingpong.py).
 *
 *   strata-test-pingpong N   prints "clock_id=ID rounds=N duration_ns=D"
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(pingpong, hit, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, k), strata_int(uint32_t, who))

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* libstrata's runtime query (libtrace/runtime/runtime.h, exported as strata_*). */
uint32_t strata_rt_clock_id(void);

static void xfer(int fd, uint64_t *v, int out)
{
	ssize_t n = out ? write(fd, v, sizeof *v) : read(fd, v, sizeof *v);

	if (n != (ssize_t)sizeof *v) {
		perror(out ? "write" : "read");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000;
	int p2c[2], c2p[2];
	struct timespec t0, t1;

	if (pipe(p2c) < 0 || pipe(c2p) < 0)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	pid_t pid = fork(); /* the child registers as a process of its own */
	if (pid < 0)
		return 1;
	if (pid == 0) {
		for (uint64_t i = 0; i < n; i++) {
			uint64_t v;
			xfer(p2c[0], &v, 0);
			strata_tracepoint(pingpong, hit, 2 * i + 1, 1);
			xfer(c2p[1], &v, 1);
		}
		_exit(0);
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = i;
		strata_tracepoint(pingpong, hit, 2 * i, 0);
		xfer(p2c[1], &v, 1);
		xfer(c2p[0], &v, 0);
	}
	int st;
	if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &t1);
	long long d = (t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec);
	printf("clock_id=%u rounds=%llu duration_ns=%lld\n", strata_rt_clock_id(), (unsigned long long)n, d);
	return 0;
}
