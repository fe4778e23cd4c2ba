/*
 * huge_chunks.h - a busy lane's first lap in 2 MiB pages.
 *
 * A shmem page the daemon makes ahead of a writer still costs the writer
 * a fault at its first write, and on a VM with shadow page tables a trap
 * to the hypervisor at each process's first touch of each 4 KiB page
 * (5-16 us on the PVM guest), however the page was made.  A 2 MiB page
 * mapped by one PMD costs one such fault for 512 pages.  memfd's shmem
 * takes no huge page by fault or fallocate while the machine's
 * shmem_enabled says never (Debian's default), but MADV_COLLAPSE (Linux
 * 6.1) ignores that setting: the consumer makes one small page of a 2 MiB
 * range of its mapping, then collapses the range into one huge page
 * (Reader::populate_ahead; docs/ring-buffer.md, "A busy writer's first
 * lap").  For the writer's mapping to take it by one PMD, its address and
 * the file offset must agree modulo 2 MiB: map_chunk_aligned.  For a
 * lane's first lap to be whole chunks past its first few pages, the
 * writer places the lane data so that each lane's byte huge_lead(S) sits
 * on a chunk boundary (compute_geometry), where the lane stride is a
 * whole number of chunks.  Everything here is a hint: a kernel or a file that
 * refuses leaves 4 KiB pages, as before.
 */
#ifndef STRATA_HUGE_CHUNKS_H
#define STRATA_HUGE_CHUNKS_H

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

namespace strata {

constexpr uint64_t kHugeChunk = 2u << 20;
// A lane's bytes before its first chunk boundary (S: the sub-buffer
// size): an idle lane's few pages stay 4 KiB pages (the consumer's busy
// mark is 64 KiB), and the first chunk starts at the second sub-buffer's
// open, where the writer collapses it before writing into it
// (collapse_ahead, writer_lane.h), or for sub-buffers past 512 KiB at 512
// KiB: the consumer, which looks at a busy writer 0.3-4 ms after its first
// records on the PVM guest, has made it by then in most runs, and the
// writer's collapse at its second open maps it, or copies what it wrote
// there.  Short runs on the PVM guest (8 x 1 MiB, 8 alternated rounds):
// medians 36.9 / 40.3 / 47.2 ns an event with leads of 256 KiB / 512 KiB
// / 1 MiB, the 256 KiB runs bimodal (33-40 or 48-74: the consumer late).
constexpr uint64_t kHugeLeadMin = 128u << 10, kHugeLeadMax = 512u << 10;
constexpr uint64_t huge_lead(uint64_t subbuf_size)
{
	return subbuf_size < kHugeLeadMin   ? kHugeLeadMin
	       : subbuf_size > kHugeLeadMax ? kHugeLeadMax
					    : subbuf_size;
}

#ifdef MADV_COLLAPSE
constexpr int kMadvCollapse = MADV_COLLAPSE;
#else
constexpr int kMadvCollapse = 25; // uapi value; glibc 2.36 lacks it
#endif

// STRATA_HUGE_PAGES=0 in the environment: 4 KiB pages only, on both
// sides (the writer's collapse_ahead, the consumer's make_huge_chunk).
inline bool huge_pages_off()
{
	const char *e = getenv("STRATA_HUGE_PAGES");
	return e && e[0] == '0' && e[1] == 0;
}

// A shared mapping of [0, size) of `fd` at an address that is a multiple
// of kHugeChunk (address space reserved 2 MiB larger, the file mapped
// over its aligned part, the rest given back), so that a 2 MiB page of
// the file can be mapped by one PMD.  Below one chunk, a plain mapping.
// MAP_FAILED and errno as mmap's.
inline void *map_chunk_aligned(uint64_t size, int prot, int fd)
{
	if (size < kHugeChunk)
		return mmap(nullptr, size, prot, MAP_SHARED, fd, 0);
	const uint64_t span = size + kHugeChunk;
	void *r = mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (r == MAP_FAILED)
		return r;
	const uintptr_t b = reinterpret_cast<uintptr_t>(r);
	const uintptr_t a = (b + kHugeChunk - 1) & ~(uintptr_t)(kHugeChunk - 1);
	void *p = mmap(reinterpret_cast<void *>(a), size, prot, MAP_SHARED | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED) {
		munmap(r, span);
		return p;
	}
	if (a > b)
		munmap(r, a - b);
	if (b + span > a + size)
		munmap(reinterpret_cast<void *>(a + size), b + span - (a + size));
	return p;
}

} // namespace strata

#endif
