/*
 * kcrash_workload.c - the workload of the crash test (tests/kernel/test-crash.sh):
 * N times, one numbered user event then getppid(seq) (the kernel's
 * syscall_entry_getppid records seq as its argument, so user and kernel
 * events match one to one); then it prints "last=N-1" and panics the
 * kernel itself with a write of "c" to /proc/sysrq-trigger.  So the last
 * event it emitted before the panic is known exactly: seq N-1, followed
 * by the kernel's syscall_entry_write of that write.
 *
 *   strata-kcrash-workload N
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>

STRATA_EVENT(kcrash, seq, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, seq))

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 1000;
	int fd = open("/proc/sysrq-trigger", O_WRONLY | O_CLOEXEC);

	if (fd < 0 || n == 0) {
		perror("strata-kcrash-workload: /proc/sysrq-trigger");
		return 1;
	}
	for (uint64_t i = 0; i < n; i++) {
		strata_tracepoint(kcrash, seq, i);
		syscall(SYS_getppid, (long)i);
	}
	printf("last=%llu\n", (unsigned long long)(n - 1));
	fflush(stdout);
	fsync(1);
	if (write(fd, "c", 1) != 1)
		perror("strata-kcrash-workload: write c");
	return 1; /* not reached: the kernel panicked */
}
