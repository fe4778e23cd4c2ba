/*
 * plain_init.c - PID 1 of the VM preload boot test (tests/boot, boot.preload_vm):
 * an ordinary dynamically linked program that knows nothing of Strata (not
 * linked with it, no tracepoint).  The kernel starts it as /init with
 * LD_PRELOAD=.../libstrata-pthread.so and STRATA_EARLY=pthread:mutex_* on its
 * command line (the kernel passes both to init's environment); the preload
 * library records its mutex operations from boot, before any daemon exists.
 *
 *   1. two threads each lock and unlock one mutex, `hot`, PLAIN_EARLY times
 *      (contended: both run at once);
 *   2. runs the rest of the boot, /stage2 (busybox sh: mounts, the daemon,
 *      a session that adopts init's early buffer), handing it fds 5
 *      (stage2 -> init "the session started") and 6 (init -> stage2 "done");
 *   3. on "started" locks and unlocks `hot` PLAIN_LATER more times from main,
 *      then answers "done" with the counts and hot's address on fd 6.
 *
 * The oracle (check_preload.py): exactly 2 * PLAIN_EARLY + PLAIN_LATER
 * pthread:mutex_lock and as many mutex_unlock on hot's address, from pid 1.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "stage2.h"

static pthread_mutex_t hot = PTHREAD_MUTEX_INITIALIZER;
static unsigned long shared_counter;

static unsigned env_num(const char *name, unsigned def)
{
	const char *v = getenv(name);
	return v && *v ? (unsigned)strtoul(v, NULL, 10) : def;
}

static void lock_loop(unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		pthread_mutex_lock(&hot);
		shared_counter++;
		pthread_mutex_unlock(&hot);
	}
}

static void *worker(void *arg)
{
	lock_loop(*(const unsigned *)arg);
	return NULL;
}

int main(void)
{
	const unsigned nearly = env_num("PLAIN_EARLY", 1000);
	const unsigned nlater = env_num("PLAIN_LATER", 500);

	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		if (pthread_create(&t[i], NULL, worker, (void *)&nearly) != 0)
			return 1;
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);

	int go_rd, done_wr;
	if (start_stage2(&go_rd, &done_wr) != 0)
		return 1;
	char b;
	if (read(go_rd, &b, 1) == 1) {
		lock_loop(nlater);
		dprintf(done_wr, "early=%u later=%u threads=2 mutex=%lu counter=%lu\n", nearly, nlater,
			(unsigned long)(uintptr_t)&hot, shared_counter);
	}
	close(done_wr);
	for (;;)
		if (wait(NULL) < 0)
			pause(); /* stage2 powers off */
}
