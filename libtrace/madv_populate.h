/*
 * madv_populate.h - the two madvise advices that map a range of pages in
 * one system call (Linux 5.14), for the writers' first lap and the consumer
 * that makes and maps their pages ahead.  glibc 2.36's headers (Debian 12)
 * lack them: the uapi values then.  An older kernel answers EINVAL, which
 * only leaves the page faults where they were: every caller's populate is
 * a hint.  And the cheaper way to map pages a file already holds, a read
 * a fault-around window (map_made), with where a file's pages end
 * (made_prefix).
 */
#ifndef STRATA_MADV_POPULATE_H
#define STRATA_MADV_POPULATE_H

#include <stdint.h>
#include <sys/mman.h>

namespace strata {

#ifdef MADV_POPULATE_READ
constexpr int kMadvPopulateRead = MADV_POPULATE_READ;
#else
constexpr int kMadvPopulateRead = 22;
#endif
#ifdef MADV_POPULATE_WRITE
constexpr int kMadvPopulateWrite = MADV_POPULATE_WRITE;
#else
constexpr int kMadvPopulateWrite = 23;
#endif

// Pages of [p, p + n) that exist in the mapped file mapped into our page
// table: a read of one byte in each 64 KiB window (the kernel's default
// fault_around_bytes) takes a read fault that maps every page of the
// window the page cache holds, writable (a shared shmem mapping asks no
// write notice), where no page is mapped yet.  0.13-0.16 us a page on
// the AMD EPYC VM against 0.36-0.40 for MADV_POPULATE_READ, whose walk
// marks each page accessed (the LRU's lock) after its faults map them.
// A smaller fault-around leaves pages to the writer's own faults, as
// before.  A page fallocate reserved but nobody wrote is not up to date:
// fault-around skips it and mincore does not count it (the consumer's
// making writes its pages: Reader::populate_ahead).  Relaxed loads:
// another writer of a shared lane may be writing these bytes; the value
// is not used.
constexpr uintptr_t kFaultAround = 64u << 10;

inline void map_made(const char *p, uint64_t n)
{
	const uintptr_t b = reinterpret_cast<uintptr_t>(p), e = b + n;
	for (uintptr_t a = b & ~(kFaultAround - 1); a < e; a += kFaultAround) {
		const char v =
			__atomic_load_n(reinterpret_cast<const char *>(a < b ? b : a), __ATOMIC_RELAXED);
		asm volatile("" : : "r"(v));
	}
}

// The bytes at the start of [p, p + n) whose pages the buffer's file holds
// (mincore, 64 pages a call): where the consumer's making got to.
inline uint64_t made_prefix(const char *p, uint64_t n)
{
	constexpr uint64_t kChunk = 64 * 4096;
	unsigned char v[kChunk / 4096];
	for (uint64_t off = 0; off < n; off += kChunk) {
		const uint64_t len = n - off < kChunk ? n - off : kChunk;
		if (mincore(const_cast<char *>(p) + off, len, v) != 0)
			return off;
		for (uint64_t i = 0; i < len / 4096; i++)
			if (!(v[i] & 1))
				return off + i * 4096;
	}
	return n;
}

} // namespace strata

#endif
