/*
 * pt_live.c - an unmodified pthread program (no Strata code) that locks and
 * unlocks one mutex in a loop, keeping the number of completed lock/unlock
 * pairs in the first 8 bytes of FILE (shared mapping), until FILE's second
 * word becomes non-zero or ITERS pairs are done.  For check_live.py: tracing
 * is switched on and off while it runs.  A non-zero third word is an
 * allowance: pairs stop (the program idles, locking nothing) while the
 * count has reached it, so that a test knows exactly how many pairs were
 * made while it traced (check_stop_counts.py).  The fourth word is 1 while
 * it idles so, its last pair complete and counted (check_live.py --window).
 *
 *   pt_live FILE [ITERS] [INTERVAL_US]
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s FILE [ITERS] [INTERVAL_US]\n", argv[0]);
		return 2;
	}
	const long iters = argc > 2 ? atol(argv[2]) : 1000000;
	const long interval = argc > 3 ? atol(argv[3]) : 200;
	int fd = open(argv[1], O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0 || ftruncate(fd, 4096) != 0)
		return 1;
	_Atomic uint64_t *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (w == MAP_FAILED)
		return 1;
	for (long i = 0; i < iters && !atomic_load(&w[1]); i++) {
		while (atomic_load(&w[2]) && atomic_load(&w[0]) >= atomic_load(&w[2]) &&
		       !atomic_load(&w[1])) {
			atomic_store(&w[3], 1);
			usleep(500); /* the allowance is used up: idle until raised or ended */
		}
		atomic_store(&w[3], 0);
		if (atomic_load(&w[1]))
			break;
		if (pthread_mutex_lock(&live_lock) != 0 || pthread_mutex_unlock(&live_lock) != 0)
			return 1;
		atomic_fetch_add(&w[0], 1); /* after the pair: counted pairs are complete */
		if (interval)
			usleep((useconds_t)interval); /* 0: no pause (usleep(0) still sleeps ~50 us) */
	}
	return 0;
}
