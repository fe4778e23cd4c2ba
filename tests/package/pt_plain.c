/* An unmodified program (no Strata at all): two threads take one mutex
 * N times each.  The package test records it with the installed
 * `strata record --preload pthread`.  usage: pt-plain N */
#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long counter;

static void *worker(void *arg)
{
	long n = (long)arg;
	for (long i = 0; i < n; i++) {
		pthread_mutex_lock(&lock);
		counter++;
		pthread_mutex_unlock(&lock);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000;
	pthread_t t[2];
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, worker, (void *)n);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	return counter == 2 * n ? 0 : 1;
}
