/*
 * boot_init.c - PID 1 of the VM boot test (tests/boot): a program linked
 * with Strata (tp-sync) that the kernel starts as /init.  The kernel command
 * line names the events (STRATA_EARLY=boot:*, passed by the kernel to
 * init's environment); there is no daemon, no /dev/shm and nothing mounted.
 *
 *   1. a constructor records boot:ctor before main;
 *   2. main records boot:main, then forks STRATA_BOOT_CHILDREN children, each
 *      records boot:child(i, k) for k < STRATA_BOOT_CHILD_EVENTS and _exits;
 *      init reaps them all before going on (see "children" below);
 *   3. runs the rest of the boot, /stage2 (busybox sh: modules, mounts,
 *      chroot, the daemon and a session, run-vm.sh), handing it two pipe
 *      ends as fds 5 (stage2 -> init "the session started") and 6 (init ->
 *      stage2 "done");
 *   4. on "started" records STRATA_BOOT_LATER boot:later(k) and answers
 *      "done" with the counts
 *      (emitted events) on fd 6; then reaps until stage2 exits (poweroff).
 *
 * Children: they exit long before any daemon exists.  Their early buffers
 * survive because the runtime makes each child's memfd at fork and keeps the
 * parent's descriptor of it (libtrace/runtime/slots.cpp, STRATA_EARLY_KEEP); the
 * daemon adopts them from init's descriptors (docs/boot.md).
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

#include "stage2.h"

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

	for (unsigned c = 0; c < nchild; c++) {
		pid_t p = fork();
		if (p == 0) {
			for (unsigned k = 0; k < nev; k++)
				strata_tracepoint(boot, child, c, k);
			_exit(0);
		}
		if (p < 0)
			return 1;
	}
	/* Every child has exited before anything else happens: no daemon has
	 * seen them; their buffers live on in the memfds init keeps. */
	for (unsigned c = 0; c < nchild; c++)
		if (wait(NULL) < 0)
			return 1;

	int go_rd, done_wr;
	if (start_stage2(&go_rd, &done_wr) != 0)
		return 1;
	char b;
	if (read(go_rd, &b, 1) == 1) {
		for (unsigned k = 0; k < nlater; k++)
			strata_tracepoint(boot, later, k);
		dprintf(done_wr, "children=%u child_events=%u later=%u\n", nchild, nev, nlater);
	}
	close(done_wr);
	for (;;)
		if (wait(NULL) < 0)
			pause(); /* stage2 powers off */
}
