/*
 * scribble.c - issue 32's hostile producer: two traced processes in one
 * session.  A forked child behaves: it emits GOOD events scrib:good
 * (i = 0..GOOD-1, a string "g<i>") and exits.  The parent emits some
 * events, then writes random bytes over its own trace buffer (every
 * `memfd:strata-slot-*` mapping in /proc/self/maps) and goes on emitting,
 * scribbling again between bursts; how it scribbles depends on the round:
 *   mode 0: the whole mapping, once
 *   mode 1: 64 short writes (1-16 bytes) at random places, per burst
 *   mode 2: one random range (up to 64 KiB), per burst
 *   mode 3: single bytes at random places, per burst (records mostly
 *           decode, with wrong ids, lengths, timestamps)
 * Prints "good=N child=PID" once the child is done.
 *
 * usage: strata-test-scribble SEED [GOOD]
 */
#define _GNU_SOURCE
#define STRATA_DEFINE_PROVIDERS
#include <stdint.h>
#include <strata/tracepoint.h>

STRATA_EVENT(scrib, good, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, i), strata_string(s))
STRATA_EVENT(scrib, bad, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, i), strata_int(uint32_t, burst))
STRATA_EVENT(scrib, badstr, STRATA_LOGLEVEL_INFO, strata_string(s), strata_int(uint16_t, x))

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rng;

static uint64_t next_rand(void)
{
	/* xorshift64*: reproducible from the seed */
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 2685821657736338717ull;
}

struct region {
	uint8_t *p;
	size_t n;
};

/* The process's trace-buffer mappings. */
static int find_buffers(struct region *out, int max)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;
	if (!f)
		return 0;
	while (n < max && fgets(line, sizeof line, f)) {
		unsigned long lo, hi;
		if (!strstr(line, "memfd:strata-slot-") || strncmp(strchr(line, ' ') + 1, "rw", 2) != 0)
			continue;
		if (sscanf(line, "%lx-%lx", &lo, &hi) == 2) {
			out[n].p = (uint8_t *)lo;
			out[n].n = hi - lo;
			n++;
		}
	}
	fclose(f);
	return n;
}

static void scribble(int mode, int first)
{
	struct region r[8];
	int n = find_buffers(r, 8);
	for (int k = 0; k < n; k++) {
		size_t len = r[k].n;
		if (mode == 0) {
			if (!first)
				continue;
			for (size_t o = 0; o + 8 <= len; o += 8) {
				uint64_t v = next_rand();
				memcpy(r[k].p + o, &v, 8);
			}
		} else if (mode == 1) {
			for (int j = 0; j < 64; j++) {
				size_t o = next_rand() % len, w = 1 + next_rand() % 16;
				for (size_t b = 0; b < w && o + b < len; b++)
					r[k].p[o + b] = (uint8_t)next_rand();
			}
		} else if (mode == 2) {
			size_t o = next_rand() % len, w = next_rand() % 65536;
			for (size_t b = 0; b < w && o + b < len; b++)
				r[k].p[o + b] = (uint8_t)next_rand();
		} else {
			for (int j = 0; j < 256; j++)
				r[k].p[next_rand() % len] = (uint8_t)next_rand();
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s SEED [GOOD]\n", argv[0]);
		return 2;
	}
	uint64_t seed = strtoull(argv[1], NULL, 0);
	uint64_t good = argc > 2 ? strtoull(argv[2], NULL, 0) : 20000;
	rng = seed * 0x9e3779b97f4a7c15ull + 1;
	int mode = (int)(seed % 4);
	pid_t child = fork();
	if (child == 0) {
		char s[32];
		for (uint64_t i = 0; i < good; i++) {
			snprintf(s, sizeof s, "g%llu", (unsigned long long)i);
			strata_tracepoint(scrib, good, i, s);
		}
		_exit(0);
	}
	char s[64];
	uint64_t i = 0;
	for (uint32_t burst = 0; burst < 8; burst++) {
		for (int j = 0; j < 3000; j++, i++) {
			strata_tracepoint(scrib, bad, i, burst);
			snprintf(s, sizeof s, "bad%llu", (unsigned long long)i);
			strata_tracepoint(scrib, badstr, s, (uint16_t)j);
		}
		if (burst >= 1)
			scribble(mode, burst == 1);
	}
	int st = 0;
	waitpid(child, &st, 0);
	printf("good=%llu child=%d\n", (unsigned long long)(WIFEXITED(st) && WEXITSTATUS(st) == 0 ? good : 0),
	       (int)child);
	fflush(stdout);
	return 0;
}
