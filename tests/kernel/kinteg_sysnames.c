/*
 * kinteg_sysnames N - the workload of kernel.kinteg_sysnames: exactly N + 2
 * openat system calls, nothing else that opens (linked statically: no
 * loader opens libraries), then exit.
 *   - N times openat(AT_FDCWD, PATH, O_RDONLY) on a path that does not
 *     exist (returns -ENOENT);
 *   - once a 300-byte path that straddles a page boundary (the module
 *     copies it page by page and keeps its first 255 bytes);
 *   - once an unmapped pointer (the kernel returns -EFAULT, the module
 *     records "(fault)").
 * The host oracle (check_kinteg.py sysnames) knows these values.
 *
 * kinteg_sysnames cost N - N getppid calls as fast as possible; prints
 * "ns_per_call X" (wall time of the loop / N) on stdout: the cost figure of
 * kernel.kinteg_cost, run with and without recording.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PATH "/strata-kinteg/no-such-file"

static int cost(long n)
{
	struct timespec a, b;
	long i;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < n; i++)
		syscall(SYS_getppid);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("ns_per_call %.1f\n",
	       ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n);
	return 0;
}

int main(int argc, char **argv)
{
	long n, i;
	long page = sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, 3 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *lng;

	if (argc > 2 && !strcmp(argv[1], "cost"))
		return cost(atol(argv[2]));
	n = argc > 1 ? atol(argv[1]) : 100;
	if (m == MAP_FAILED)
		return 1;
	/* An unmapped page after two mapped ones: the bad pointer. */
	if (munmap(m + 2 * page, page))
		return 1;
	for (i = 0; i < n; i++)
		if (syscall(SYS_openat, AT_FDCWD, PATH, O_RDONLY) != -1)
			return 1;
	/* "/strata-kinteg/" then 'a' x 284, starting 100 bytes before the
	 * boundary between the two mapped pages.
	 */
	lng = m + page - 100;
	memcpy(lng, "/strata-kinteg/", 15);
	memset(lng + 15, 'a', 284);
	lng[299] = 0;
	syscall(SYS_openat, AT_FDCWD, lng, O_RDONLY);
	syscall(SYS_openat, AT_FDCWD, m + 2 * page, O_RDONLY);
	return 0;
}
