/*
 * sync_pingpong.c - workload of e2e_clock_link: two programs, each traced by
 * its own daemon (two machines' clocks), take turns over a unix stream
 * socket N times.  Each emits syncpp:send before writing a message and
 * syncpp:recv after reading one, with the message's number k and who
 * sent it, so that every message is a send/receive pair whose order the
 * merged trace must keep (check_clock_link.py).
 *
 *   strata-test-sync-pingpong serve PATH N    listens on PATH, answers N messages
 *   strata-test-sync-pingpong client PATH N   connects, sends N messages
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(syncpp, send, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, k), strata_int(uint32_t, from))
STRATA_EVENT(syncpp, recv, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, k), strata_int(uint32_t, from))

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

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
	struct sockaddr_un a;
	int fd, serve;
	uint64_t n;

	if (argc != 4 || (strcmp(argv[1], "serve") && strcmp(argv[1], "client")) ||
	    strlen(argv[2]) >= sizeof a.sun_path) {
		fprintf(stderr, "usage: %s serve|client PATH N\n", argv[0]);
		return 2;
	}
	serve = !strcmp(argv[1], "serve");
	n = strtoull(argv[3], NULL, 10);
	memset(&a, 0, sizeof a);
	a.sun_family = AF_UNIX;
	strcpy(a.sun_path, argv[2]);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0)
		return 1;
	if (serve) {
		int l = fd;
		unlink(argv[2]);
		if (bind(l, (struct sockaddr *)&a, sizeof a) < 0 || listen(l, 1) < 0) {
			perror("listen");
			return 1;
		}
		printf("listening\n");
		fflush(stdout);
		fd = accept(l, NULL, NULL);
		if (fd < 0)
			return 1;
	} else if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
		perror("connect");
		return 1;
	}
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = 2 * i;
		if (serve) {
			xfer(fd, &v, 0);
			strata_tracepoint(syncpp, recv, v, 0);
			v++;
			strata_tracepoint(syncpp, send, v, 1);
			xfer(fd, &v, 1);
		} else {
			strata_tracepoint(syncpp, send, v, 0);
			xfer(fd, &v, 1);
			xfer(fd, &v, 0);
			strata_tracepoint(syncpp, recv, v, 1);
		}
	}
	printf("%s: %llu messages each way\n", argv[1], (unsigned long long)n);
	return 0;
}
