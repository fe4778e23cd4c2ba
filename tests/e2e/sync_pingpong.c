/*
 * sync_pingpong.c - workload of the clock link checks (check_clock_link.py,
 * tests/kernel/check_clock_vm.py): two programs, each traced by its own
 * daemon (two machines' clocks), take turns N times.  Each emits
 * syncpp:send before writing a message and syncpp:recv after reading one,
 * with the message's number k and who sent it (0: the client), so that
 * every message is a send/receive pair whose order the merged trace must
 * keep.
 *
 *   strata-test-sync-pingpong serve|client ENDPOINT N [pause]
 *
 * ENDPOINT: listen:PATH (a unix socket this program listens on), unix:PATH
 * (one it connects to, retrying for 60 s: qemu's chardev), dev:PATH (a
 * character device: a virtio-serial port), listen:tcp:ADDR:PORT and
 * tcp:ADDR:PORT (IPv4, TCP_NODELAY: the messages of a link kind that is
 * TCP cross TCP too, kernel.clock_vm_defaults_tcp).  The client first says hello
 * (HELLO words, every 10 ms until the server answers GO: what a guest
 * writes before the host end is connected is lost), then sends 2k and
 * receives 2k+1.  The server prints "half" on stdout after N/2 messages
 * and, with `pause`, reads a line from stdin there (the check pauses the
 * VM meanwhile).  SYNCPP_KBASE=B adds B to every k (two pairs in one
 * timeline).  SYNCPP_REPLY_ID=1 traces each reply with its request's k
 * (request and reply share an id, as in most RPC protocols; `from` still
 * tells them apart).
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(syncpp, send, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, k), strata_int(uint32_t, from))
STRATA_EVENT(syncpp, recv, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, k), strata_int(uint32_t, from))

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define HELLO 0xfeedfacecafef00dULL
#define GO 0x600d600d600d600dULL

/* One 8-byte word, whole (a byte stream may cut it). */
static int io_word(int fd, uint64_t *v, int out)
{
	size_t done = 0;
	while (done < sizeof *v) {
		ssize_t n = out ? write(fd, (char *)v + done, sizeof *v - done)
				: read(fd, (char *)v + done, sizeof *v - done);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd p = {fd, out ? POLLOUT : POLLIN, 0};
			poll(&p, 1, 100);
			continue;
		}
		if (n <= 0) {
			if (!out && n == 0 && done == 0) { /* a port with no peer yet */
				struct timespec ts = {0, 1000000};
				nanosleep(&ts, NULL);
				continue;
			}
			perror(out ? "write" : "read");
			exit(1);
		}
		done += (size_t)n;
	}
	return 0;
}

/* listen:tcp:ADDR:PORT or tcp:ADDR:PORT: a TCP connection, Nagle off (a
 * message is one word, sent at once). */
static int open_tcp(const char *spec, int listening)
{
	char host[64];
	const char *colon = strrchr(spec, ':');
	struct sockaddr_in a;
	int fd, one = 1;

	if (!colon || (size_t)(colon - spec) >= sizeof host)
		return -1;
	memcpy(host, spec, (size_t)(colon - spec));
	host[colon - spec] = 0;
	memset(&a, 0, sizeof a);
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &a.sin_addr) != 1)
		return -1;
	fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	if (listening) {
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
		if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1) < 0) {
			close(fd);
			return -1;
		}
		int c = accept(fd, NULL, NULL);
		close(fd);
		fd = c;
	} else {
		int i;
		for (i = 0; i < 6000; i++) { /* the listener may not be up yet */
			if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
				break;
			close(fd);
			fd = socket(AF_INET, SOCK_STREAM, 0);
			if (fd < 0)
				return -1;
			struct timespec ts = {0, 10000000};
			nanosleep(&ts, NULL);
		}
		if (i == 6000) {
			close(fd);
			return -1;
		}
	}
	if (fd >= 0)
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	return fd;
}

static int open_endpoint(const char *ep)
{
	struct sockaddr_un a;
	int fd;

	if (!strncmp(ep, "dev:", 4))
		return open(ep + 4, O_RDWR | O_NOCTTY);
	if (!strncmp(ep, "listen:tcp:", 11))
		return open_tcp(ep + 11, 1);
	if (!strncmp(ep, "tcp:", 4))
		return open_tcp(ep + 4, 0);
	memset(&a, 0, sizeof a);
	a.sun_family = AF_UNIX;
	const char *path = strchr(ep, ':') ? strchr(ep, ':') + 1 : ep;
	if (strlen(path) >= sizeof a.sun_path)
		return -1;
	strcpy(a.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	if (!strncmp(ep, "listen:", 7)) {
		unlink(path);
		if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1) < 0)
			return -1;
		printf("listening\n");
		fflush(stdout);
		int c = accept(fd, NULL, NULL);
		close(fd);
		return c;
	}
	for (int i = 0; i < 6000; i++) { /* qemu may not have made it yet */
		if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
			return fd;
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	return -1;
}

int main(int argc, char **argv)
{
	int fd, serve;
	uint64_t n, v;
	int pause_at_half = 0;

	if (argc < 4 || (strcmp(argv[1], "serve") && strcmp(argv[1], "client"))) {
		fprintf(stderr,
			"usage: %s serve|client listen:PATH|unix:PATH|dev:PATH|"
			"listen:tcp:ADDR:PORT|tcp:ADDR:PORT N [pause]\n",
			argv[0]);
		return 2;
	}
	serve = !strcmp(argv[1], "serve");
	n = strtoull(argv[3], NULL, 10);
	if (argc > 4)
		pause_at_half = !strcmp(argv[4], "pause");
	fd = open_endpoint(argv[2]);
	if (fd < 0) {
		perror(argv[2]);
		return 1;
	}
	if (serve) {
		io_word(fd, &v, 0);
		if (v != HELLO) {
			fprintf(stderr, "serve: no hello\n");
			return 1;
		}
		v = GO;
		io_word(fd, &v, 1);
	} else {
		int fl = fcntl(fd, F_GETFL);
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
		for (;;) {
			uint64_t h = HELLO, r;
			io_word(fd, &h, 1);
			struct pollfd p = {fd, POLLIN, 0};
			if (poll(&p, 1, 10) > 0 && (p.revents & POLLIN)) {
				io_word(fd, &r, 0);
				if (r == GO)
					break;
			}
		}
		fcntl(fd, F_SETFL, fl);
	}
	const char *kb = getenv("SYNCPP_KBASE");
	const uint64_t base = kb ? strtoull(kb, NULL, 10) : 0;
	const char *rid = getenv("SYNCPP_REPLY_ID");
	const uint64_t reply = rid && !strcmp(rid, "1"); /* subtracted from a reply's k */
	for (uint64_t i = 0; i < n; i++) {
		v = 2 * i;
		if (serve) {
			do /* the client's late hellos */
				io_word(fd, &v, 0);
			while (v == HELLO);
			strata_tracepoint(syncpp, recv, base + v, 0);
			v++;
			if (i + 1 == n / 2) {
				printf("half\n");
				fflush(stdout);
				if (pause_at_half) {
					char line[64];
					if (!fgets(line, sizeof line, stdin))
						return 1;
				}
			}
			strata_tracepoint(syncpp, send, base + v - reply, 1);
			io_word(fd, &v, 1);
		} else {
			strata_tracepoint(syncpp, send, base + v, 0);
			io_word(fd, &v, 1);
			io_word(fd, &v, 0);
			strata_tracepoint(syncpp, recv, base + v - reply, 1);
		}
	}
	printf("%s: %llu messages each way\n", argv[1], (unsigned long long)n);
	return 0;
}
