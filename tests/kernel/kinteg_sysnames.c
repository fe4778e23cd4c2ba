/*
 * kinteg_sysnames N - the workload of kernel.kinteg_sysnames: exactly N + 2
 * openat system calls, nothing else that opens (linked statically: no
 * loader opens libraries), then exit.
 *   - N times openat(AT_FDCWD, PATH, O_RDONLY) on a path that does not
 *     exist (returns -ENOENT);
 *   - once a 300-byte path that straddles a page boundary (the module
 *     copies it page by page and keeps its first 255 bytes);
 *   - once an unmapped pointer (the kernel returns -EFAULT, the module
 *     records "(fault)");
 * then on a memfd (memfd_create: no openat) LSEEK_N lseek(fd, 3 * i,
 * SEEK_SET) (returns 3 * i), one with a bad whence (-EINVAL) and one on a
 * closed fd (-EBADF): the returns a kretprobe on the syscall's function
 * records; every return is checked here too (exit 1 if one differs).
 * The host oracle (check_kinteg.py sysnames) knows these values.
 *
 * kinteg_sysnames spin MS - a busy loop until this thread used MS ms of
 * CPU time (CLOCK_THREAD_CPUTIME_ID), between two getppid calls (its
 * bounds in a trace); prints "loop_cpu_ns X thread_cpu_ns Y": the loop's
 * CPU time and the thread's since it was created, read before exit
 * (kernel.kinteg_lttng_cputop).
 *
 * kinteg_sysnames dio DEV N - N reads of 4 KiB with O_DIRECT from block
 * device DEV at offsets 0, 8 KiB, 16 KiB, ... (pread64: one block request
 * each); prints "dio_reads N" once all returned 4096
 * (kernel.kinteg_lttng_analyses: block requests, lttng-iolatencytop).
 *
 * kinteg_sysnames cost N - N getppid calls as fast as possible; prints
 * "ns_per_call X" (wall time of the loop / N) on stdout: the cost figure of
 * kernel.kinteg_cost, run with and without recording.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define PATH "/strata-kinteg/no-such-file"
#define LSEEK_N 200

static long thread_cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1000000000L + t.tv_nsec;
}

static int spin(long ms)
{
	volatile unsigned long x = 0;
	long t0, t1;

	syscall(SYS_getppid); /* the loop's bounds in the trace */
	t0 = thread_cpu_ns();
	do
		for (int i = 0; i < 10000; i++)
			x++;
	while ((t1 = thread_cpu_ns()) < t0 + ms * 1000000L);
	syscall(SYS_getppid);
	printf("loop_cpu_ns %ld thread_cpu_ns %ld\n", t1 - t0, thread_cpu_ns());
	return 0;
}

static int dio(const char *dev, long n)
{
	int fd = open(dev, O_RDONLY | O_DIRECT);
	void *buf;
	long i;

	if (fd < 0 || posix_memalign(&buf, 4096, 4096))
		return 1;
	for (i = 0; i < n; i++)
		if (pread(fd, buf, 4096, i * 8192) != 4096)
			return 1;
	close(fd);
	printf("dio_reads %ld\n", n);
	return 0;
}

/* lseek on a memfd: each return as the oracle knows it, else 1. */
static int seeks(void)
{
	int fd = memfd_create("strata-kinteg", 0);
	long i;

	if (fd < 0)
		return 1;
	for (i = 0; i < LSEEK_N; i++)
		if (syscall(SYS_lseek, fd, 3 * i, SEEK_SET) != 3 * i)
			return 1;
	if (syscall(SYS_lseek, fd, 0, 99) != -1 || errno != EINVAL)
		return 1;
	close(fd);
	if (syscall(SYS_lseek, fd, 0, SEEK_SET) != -1 || errno != EBADF)
		return 1;
	return 0;
}

static int cost(long n)
{
	struct timespec a, b;
	long i;

	clock_gettime(CLOCK_MONOTONIC, &a);
	for (i = 0; i < n; i++)
		syscall(SYS_getppid);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("ns_per_call %.1f\n", ((b.tv_sec - a.tv_sec) * 1e9 + (b.tv_nsec - a.tv_nsec)) / (double)n);
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
	if (argc > 2 && !strcmp(argv[1], "spin"))
		return spin(atol(argv[2]));
	if (argc > 3 && !strcmp(argv[1], "dio"))
		return dio(argv[2], atol(argv[3]));
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
	return seeks();
}
