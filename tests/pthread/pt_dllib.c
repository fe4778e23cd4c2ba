/* pt_dllib.c - a library pt_workload dlopens; it locks its own mutex. */
#include <pthread.h>

static pthread_mutex_t dl_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((visibility("default"))) int strata_test_dl_work(int n)
{
	int done = 0;
	for (int i = 0; i < n; i++) {
		if (pthread_mutex_lock(&dl_lock) != 0)
			return -1;
		done++;
		if (pthread_mutex_unlock(&dl_lock) != 0)
			return -1;
	}
	return done;
}

__attribute__((visibility("default"))) void *strata_test_dl_lock(void)
{
	return &dl_lock;
}
