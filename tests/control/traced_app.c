/*
 * traced_app.c - the traced program of the control tests: THREADS threads
 * each emit EVENTS events ctltest:tick {thread, seq}, seq = 0..EVENTS-1.
 * Linked with tp-sync, so it joins active sessions before main().
 * Then, by MODE: "exit" (status 0), "exit3" (status 3), "kill" (SIGKILL
 * itself: no destructor, no flush by the process), "wait" (block until
 * stdin reaches EOF, then exit 0), "fork" (fork first: parent and child,
 * without exec, each emit THREADS x EVENTS into buffers of their own),
 * "serve" (emit nothing at first; for each line read on stdin emit
 * THREADS x EVENTS, seq continuing, then write "ok\n" on stdout; exit 0 at
 * EOF), "exec" (exec cat, which is not traced), "closefds IN OUT" (like a
 * daemon: close every descriptor, then serve with the FIFOs IN and OUT as
 * stdin and stdout), "execserve" (emit one batch, then exec itself in
 * "serve" mode: the new image registers again), "dlserve LIB" (serve, and
 * a line "o" dlopens LIB, "e" emits EVENTS ctllib:ev through it, "c"
 * dlcloses it), "forkwait" (fork without exec, then parent and child
 * each wait for stdin's EOF and emit one batch; the parent waits for the
 * child).  Built twice: with tp-sync (control_traced_app) and with tp-async
 * (control_async_app).
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(ctltest, tick, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, thread), strata_int(uint64_t, seq))

static unsigned long g_events;
static uint64_t g_base; /* first seq of the current batch */

static void *worker(void *arg)
{
	uint64_t t = (uint64_t)(uintptr_t)arg;
	for (uint64_t i = 0; i < g_events; i++)
		strata_tracepoint(ctltest, tick, t, g_base + i);
	return NULL;
}

static void batch(unsigned long n)
{
	pthread_t th[64];
	for (unsigned long i = 0; i < n; i++)
		pthread_create(&th[i], NULL, worker, (void *)(uintptr_t)i);
	for (unsigned long i = 0; i < n; i++)
		pthread_join(th[i], NULL);
	g_base += g_events;
}

/* forkwait: fork, then both wait for EOF on stdin and write a batch; the
 * parent returns the child's status. */
static int forkwait(unsigned long n)
{
	pid_t kid = fork();
	char c;
	struct pollfd pf = {0, POLLIN, 0};
	for (;;) { /* EINTR (our signal) and data: keep waiting for EOF */
		if (poll(&pf, 1, -1) < 0)
			continue;
		if (read(0, &c, 1) == 0)
			break;
	}
	batch(n);
	if (kid > 0) {
		int st;
		waitpid(kid, &st, 0);
		return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	}
	return kid == 0 ? 0 : 1;
}

/* serve: a batch per line on stdin, answered "ok"; with lib_path (dlserve),
 * 'o' dlopens the library, 'e' emits through it, 'c' dlcloses it. */
static int serve(unsigned long n, const char *lib_path)
{
	void *lib = NULL;
	uint64_t lib_base = 0;
	/* poll(2) then read(2), not stdio: ThreadSanitizer delivers
	 * signals at once only inside blocking calls it knows (poll). */
	char c;
	struct pollfd pf = {0, POLLIN, 0};
	for (;;) {
		if (poll(&pf, 1, -1) < 0) /* EINTR: our signal */
			continue;
		ssize_t r = read(0, &c, 1);
		if (r == 0)
			break;
		if (r < 0)
			continue;
		if (lib_path && c == 'o') {
			lib = dlopen(lib_path, RTLD_NOW);
			if (!lib)
				return 5;
		} else if (lib_path && c == 'e') {
			void (*emit)(uint64_t, uint64_t) =
				lib ? (void (*)(uint64_t, uint64_t))dlsym(lib, "ctllib_emit") : NULL;
			if (!emit)
				return 6;
			emit(g_events, lib_base);
			lib_base += g_events;
		} else if (lib_path && c == 'c') {
			if (!lib || dlclose(lib) != 0)
				return 7;
			lib = NULL;
		} else if (c == '\n' && lib_path) {
			/* a bare line in dlserve mode: just answer */
		} else if (c == '\n') {
			batch(n);
		} else {
			continue;
		}
		if (lib_path && c != '\n')
			continue;
		if (write(1, "ok\n", 3) != 3)
			return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s THREADS EVENTS [exit|exit3|kill|wait|fork|serve|exec]\n", argv[0]);
		return 2;
	}
	unsigned long n = strtoul(argv[1], NULL, 10);
	g_events = strtoul(argv[2], NULL, 10);
	const char *mode = argc > 3 ? argv[3] : "exit";
	if (n > 64)
		n = 64;
	if (!strcmp(mode, "exec")) { /* become an untraced program: cat */
		execlp("cat", "cat", (char *)NULL);
		return 127;
	}
	if (!strcmp(mode, "closefds")) {
		if (argc < 6)
			return 2;
		for (int fd = 0; fd < 1024; fd++)
			close(fd);
		if (open(argv[4], O_RDONLY) != 0 || open(argv[5], O_WRONLY) != 1)
			return 1;
		mode = "serve";
	}
	if (!strcmp(mode, "forkwait"))
		return forkwait(n);
	if (!strcmp(mode, "execserve")) {
		batch(n);
		execl("/proc/self/exe", argv[0], argv[1], argv[2], "serve", (char *)NULL);
		return 127;
	}
	const char *lib_path = NULL;
	if (!strcmp(mode, "dlserve")) {
		if (argc < 5)
			return 2;
		lib_path = argv[4];
		mode = "serve";
	}
	if (!strcmp(mode, "serve"))
		return serve(n, lib_path);
	pid_t child = -1;
	if (!strcmp(mode, "fork"))
		child = fork();
	batch(n);
	if (child > 0) {
		int st;
		waitpid(child, &st, 0);
		return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
	}
	if (!strcmp(mode, "kill"))
		raise(SIGKILL);
	if (!strcmp(mode, "exit3"))
		return 3;
	if (!strcmp(mode, "wait")) {
		char buf[64];
		while (read(0, buf, sizeof(buf)) > 0) {
		}
	}
	return 0;
}
