/*
 * sig_boundary.c - issue 16's scenario: a loop of two-integer events while
 * a 200 us interval timer's SIGALRM handler emits its own; a forked child
 * emits its own loop and ends with _exit, as does the parent.  Prints what
 * it emitted: "parent=N child=N alarms=N" (stdout, before _exit), and the
 * child "child_alarms=N".
 *
 * Each handler event carries who ran it (0 parent, 1 child) and a number
 * taken with one atomic add, so the oracle is exact even where handlers
 * nest or a child runs one: under ThreadSanitizer a signal is deferred to
 * the thread's next intercepted call, so a SIGALRM that reached the parent
 * just before fork() can run its handler in the child (TSan's queue is
 * copied with the address space), and a deferred handler can run inside
 * another.  The kernel does neither here (no SA_NODEFER; the child gets no
 * pending signal and no timer), so the child's count is 0 outside TSan.
 *
 * usage: strata-test-sig-boundary [PARENT_EVENTS [CHILD_EVENTS]]
 */
#define _GNU_SOURCE
#define STRATA_DEFINE_PROVIDERS
#include <stdint.h>
#include <strata/tracepoint.h>

STRATA_EVENT(sigb, loop, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, i), strata_int(uint32_t, who))
STRATA_EVENT(sigb, alarm, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, n), strata_int(uint32_t, who))

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

/* Handler runs, counted with one atomic add so that a nested handler
 * cannot lose an increment; the child's are counted apart. */
static unsigned alarms, child_alarms;
static volatile pid_t parent_pid;

static void on_alarm(int signo)
{
	(void)signo;
	if (getpid() == parent_pid) {
		unsigned n = __atomic_fetch_add(&alarms, 1, __ATOMIC_RELAXED);
		strata_tracepoint(sigb, alarm, (uint64_t)n, 0u);
	} else {
		unsigned n = __atomic_fetch_add(&child_alarms, 1, __ATOMIC_RELAXED);
		strata_tracepoint(sigb, alarm, (uint64_t)n, 1u);
	}
}

static void timer(long us)
{
	struct itimerval it = {{0, us}, {0, us}};
	setitimer(ITIMER_REAL, &it, NULL);
}

int main(int argc, char **argv)
{
	uint64_t parent = argc > 1 ? strtoull(argv[1], NULL, 0) : 300000;
	uint64_t child = argc > 2 ? strtoull(argv[2], NULL, 0) : 100000;
	struct sigaction sa = {0};
	sa.sa_handler = on_alarm;
	sa.sa_flags = SA_RESTART;
	parent_pid = getpid();
	sigaction(SIGALRM, &sa, NULL);
	timer(200);
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) { /* interval timers are not inherited: no alarms here */
		for (uint64_t i = 0; i < child; i++)
			strata_tracepoint(sigb, loop, i, 1u);
		sa.sa_handler = SIG_IGN;
		sigaction(SIGALRM, &sa, NULL);
		printf("child_alarms=%u\n", __atomic_load_n(&child_alarms, __ATOMIC_RELAXED));
		fflush(stdout);
		_exit(0);
	}
	for (uint64_t i = 0; i < parent; i++)
		strata_tracepoint(sigb, loop, i, 0u);
	timer(0);
	/* No handler after this point: a SIGALRM still pending (or, under
	 * ThreadSanitizer, one it deferred to its next intercepted call, such
	 * as the printf below) is dropped instead of emitting an event that
	 * the count printed below would miss. */
	sa.sa_handler = SIG_IGN;
	sigaction(SIGALRM, &sa, NULL);
	int st;
	waitpid(pid, &st, 0);
	printf("parent=%llu child=%llu alarms=%u\n", (unsigned long long)parent, (unsigned long long)child,
	       __atomic_load_n(&alarms, __ATOMIC_RELAXED));
	fflush(stdout);
	_exit(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1);
}
