/*
 * eio_inject.c - an I/O error on demand, for check_eio.py (issue 32): an
 * LD_PRELOAD library for strata-consumerd whose write and writev fail
 * with EIO on any file under $STRATA_TEST_EIO_DIR while the file
 * $STRATA_TEST_EIO_FLAG exists.  No device-mapper `error` target is needed
 * (this machine's kernel has none); the daemon sees what a failing disk
 * gives it: the call fails, errno EIO, nothing written.
 *
 * Test only: two syscalls (access, readlink) per write.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);

/* Before main, so before any thread of the daemon exists. */
__attribute__((constructor)) static void eio_init(void)
{
	real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
	real_writev = (ssize_t(*)(int, const struct iovec *, int))dlsym(RTLD_NEXT, "writev");
}

static int eio_now(int fd)
{
	const char *dir = getenv("STRATA_TEST_EIO_DIR"), *flag = getenv("STRATA_TEST_EIO_FLAG");
	char link[64], path[4096];
	ssize_t n;

	if (!dir || !*dir || !flag || access(flag, F_OK) != 0)
		return 0;
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	n = readlink(link, path, sizeof(path) - 1);
	if (n <= 0)
		return 0;
	path[n] = 0;
	return strncmp(path, dir, strlen(dir)) == 0;
}

__attribute__((visibility("default"))) ssize_t write(int fd, const void *buf, size_t n)
{
	if (eio_now(fd)) {
		errno = EIO;
		return -1;
	}
	return real_write(fd, buf, n);
}

__attribute__((visibility("default"))) ssize_t writev(int fd, const struct iovec *iov, int n)
{
	if (eio_now(fd)) {
		errno = EIO;
		return -1;
	}
	return real_writev(fd, iov, n);
}
