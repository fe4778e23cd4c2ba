/*
 * boot_init.c - PID 1 of the VM boot test (tests/boot): a program linked
 * with Strata (tp-sync) that the kernel starts as /init.  The kernel command
 * line names the events (STRATA_EARLY=boot:*, passed by the kernel to
 * init's environment); there is no daemon, no /dev/shm and nothing mounted.
 *
 *   1. a constructor records boot:ctor before main;
 *   2. main records boot:main, then forks STRATA_BOOT_CHILDREN children, each
 *      records boot:child(i, k) for k < STRATA_BOOT_CHILD_EVENTS and waits
 *      on a pipe (see "children" below);
 *   3. runs the rest of the boot, /stage2 (busybox sh: modules, mounts,
 *      chroot, the daemon and a session, run-vm.sh), handing it two pipe
 *      ends as fds 5 (stage2 -> init "the session started") and 6 (init ->
 *      stage2 "done");
 *   4. on "started" records STRATA_BOOT_LATER boot:later(k), lets the
 *      children exit, reaps them and answers "done" with the counts
 *      (emitted events) on fd 6; then reaps until stage2 exits (poweroff).
 *
 * Children: they stay alive until the session has adopted their early
 * buffers.  A child that _exits before a daemon exists loses its buffer
 * today (its memfd dies with it): keeping those is not done yet (docs/boot.md).
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(boot, ctor, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, pid))
STRATA_EVENT(boot, main, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, pid))
STRATA_EVENT(boot, child, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, child), strata_int(uint32_t, k))
STRATA_EVENT(boot, later, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, k))

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Priority 200: after the tracepoint registration (101) and tp-sync's query
 * (110), which opens the early buffer. */
__attribute__((constructor(200))) static void boot_ctor(void)
{
	strata_tracepoint(boot, ctor, (uint32_t)getpid());
}

static unsigned env_num(const char *name, unsigned def)
{
	const char *v = getenv(name);
	return v && *v ? (unsigned)strtoul(v, NULL, 10) : def;
}

int main(void)
{
	const unsigned nchild = env_num("STRATA_BOOT_CHILDREN", 4);
	const unsigned nev = env_num("STRATA_BOOT_CHILD_EVENTS", 100);
	const unsigned nlater = env_num("STRATA_BOOT_LATER", 100);
	strata_tracepoint(boot, main, (uint32_t)getpid());

	int release[2];
	if (pipe(release) != 0)
		return 1;
	for (unsigned c = 0; c < nchild; c++) {
		pid_t p = fork();
		if (p == 0) {
			close(release[1]);
			for (unsigned k = 0; k < nev; k++)
				strata_tracepoint(boot, child, c, k);
			char b;
			while (read(release[0], &b, 1) > 0) {
			}
			_exit(0);
		}
		if (p < 0)
			return 1;
	}
	close(release[0]);

	int go[2], done[2];
	if (pipe(go) != 0 || pipe(done) != 0)
		return 1;
	pid_t stage2 = fork();
	if (stage2 == 0) {
		/* Move the ends above 9 first: the pipes may already sit on 5 or 6. */
		const int g = fcntl(go[1], F_DUPFD, 10), d = fcntl(done[0], F_DUPFD, 10);
		close(go[0]);
		close(go[1]);
		close(done[0]);
		close(done[1]);
		close(release[1]);
		if (g < 0 || d < 0 || dup2(g, 5) < 0 || dup2(d, 6) < 0)
			_exit(127);
		close(g);
		close(d);
		execl("/bin/busybox", "sh", "/stage2", (char *)NULL);
		_exit(127);
	}
	close(go[1]);
	close(done[0]);
	char b;
	if (read(go[0], &b, 1) == 1) {
		for (unsigned k = 0; k < nlater; k++)
			strata_tracepoint(boot, later, k);
		close(release[1]); /* the children see EOF and exit */
		for (unsigned c = 0; c < nchild; c++)
			wait(NULL);
		dprintf(done[1], "children=%u child_events=%u later=%u\n", nchild, nev, nlater);
	}
	close(done[1]);
	for (;;)
		if (wait(NULL) < 0)
			pause(); /* stage2 powers off */
}
