/*
 * sig_boundary.c - issue 16's scenario: a loop of two-integer events while
 * a 200 us interval timer's SIGALRM handler emits its own; a forked child
 * emits its own loop and ends with _exit, as does the parent.  Prints what
 * it emitted: "parent=N child=N alarms=N" (stdout, before _exit).
 *
 * usage: strata-test-sig-boundary [PARENT_EVENTS [CHILD_EVENTS]]
 */
#define _GNU_SOURCE
#define STRATA_DEFINE_PROVIDERS
#include <stdint.h>
#include <strata/tracepoint.h>

STRATA_EVENT(sigb, loop, STRATA_LOGLEVEL_INFO,
	strata_int(uint64_t, i),
	strata_int(uint32_t, who))
STRATA_EVENT(sigb, alarm, STRATA_LOGLEVEL_INFO,
	strata_int(uint64_t, n))

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t alarms;

static void on_alarm(int signo)
{
	(void)signo;
	strata_tracepoint(sigb, alarm, (uint64_t)alarms);
	alarms = alarms + 1;
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
	sigaction(SIGALRM, &sa, NULL);
	timer(200);
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) { /* interval timers are not inherited: no alarms here */
		for (uint64_t i = 0; i < child; i++)
			strata_tracepoint(sigb, loop, i, 1u);
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
	printf("parent=%llu child=%llu alarms=%d\n", (unsigned long long)parent,
	       (unsigned long long)child, (int)alarms);
	fflush(stdout);
	_exit(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1);
}
