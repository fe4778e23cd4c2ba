/*
 * reader_file.cpp - Reader::copy_out: a ring's bytes read from the
 * buffer's file rather than through the reader's mapping, where a first
 * touch of a page traps (docs/consumerd.md, "Reading the ring by its
 * file"), and the probe that tells.
 *
 * On a VM whose hypervisor shadows the guest's page tables (the PVM guest
 * of docs/benchmarks.md) every page a process touches for the first time
 * traps to the hypervisor, populated or not: 5-6 us a page for a reader
 * of a ring another process writes, which limited the daemon's first lap
 * to about 0.6 GB/s (the 2-thread whole-cost runs lost 2-9 % of their
 * events there).  pread(2) of the same memfd copies through the kernel's
 * own mapping, which traps nowhere: 0.3-0.5 us a page, against 0.12 for a
 * copy out of a mapping already touched.  So a reader there reads its
 * ring by file for its first kFileLaps laps, then by its mapping, which
 * by then costs less than the file would in the laps to come (the trap
 * paid once against 0.2 us more each lap: a ski rental), its pages
 * touched on the way, one for each kTouchShare read (touch_some).
 *
 * Contract: copy_out runs on the thread that drains the Reader (no state
 * shared with other Readers but the probe's one answer, computed once).
 * The bytes are the producer's, hostile either way: the caller validates
 * its copy, never the ring.  A file shorter than the mapping (a producer
 * truncated its memfd) yields zeros past its end, which the record walk
 * cuts.
 */
#include "reader.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "madv_populate.h"
#include "tsan.h"

namespace strata {

namespace {

uint64_t thread_cpu_ns()
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// One probe: 16 pages of a scratch memfd allocated by fallocate, mapped
// by a read populate (as map_ahead maps a ring's), then touched once each.
// CPU ns a page, or 0 where the probe could not run.
uint64_t touch_ns_per_page()
{
	constexpr size_t kPages = 16, kPage = 4096;
	const int fd = memfd_create("strata-touch-probe", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	uint64_t ns = 0;
	void *p = MAP_FAILED;
	if (fallocate(fd, 0, 0, kPages * kPage) == 0)
		p = mmap(nullptr, kPages * kPage, PROT_READ, MAP_SHARED, fd, 0);
	if (p != MAP_FAILED) {
		if (madvise(p, kPages * kPage, kMadvPopulateRead) == 0) {
			const volatile uint8_t *touch = static_cast<const uint8_t *>(p);
			const uint64_t t0 = thread_cpu_ns();
			for (size_t o = 0; o < kPages * kPage; o += kPage)
				(void)touch[o];
			ns = (thread_cpu_ns() - t0) / kPages;
		}
		munmap(p, kPages * kPage);
	}
	close(fd);
	return ns;
}

// Whether this process's readers read their rings by file: the
// environment's STRATA_READ_BY_FILE (0 or 1), else the probe, twice (a
// preemption inside one must not decide): a first touch of more than 1 us
// a page, where one without a trap costs 0.05-0.2.
bool read_by_file_here()
{
	if (const char *e = getenv("STRATA_READ_BY_FILE"))
		if ((e[0] == '0' || e[0] == '1') && e[1] == 0)
			return e[0] == '1';
	constexpr uint64_t kTrapNs = 1000;
	return touch_ns_per_page() > kTrapNs && touch_ns_per_page() > kTrapNs;
}

} // namespace

bool Reader::file_reading_wanted()
{
	static const bool wanted = read_by_file_here(); // thread-safe, once
	return wanted;
}

void Reader::read_by_file(bool on)
{
	by_file_ = on && make_fd_ >= 0;
	file_left_ = kFileLaps * (uint64_t)info_.n_lanes * info_.lane_stride;
	touched_ = 0;
}

void Reader::copy_out(const uint8_t *src, size_t n, uint8_t *dst)
{
	if (!by_file_ || make_fd_ < 0) {
		memcpy(dst, src, n);
		return;
	}
	size_t got = 0;
	while (got < n) {
		const ssize_t r = pread(make_fd_, dst + got, n - got, (off_t)(src - base_) + (off_t)got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) { // not the file's end: the mapping, from here on
			stats_.file_read += got;
			by_file_ = false;
			memcpy(dst + got, src + got, n - got);
			return;
		}
		if (r == 0)
			break;
		got += (size_t)r;
	}
	if (got < n) { // past the file's end: zeros, which the walk cuts
		memset(dst + got, 0, n - got);
		stats_.file_short += n - got;
	}
	stats_.file_read += got;
	// The ski rental's end: the mapping, once every page of it is touched.
	if (file_left_ > n) {
		file_left_ -= n;
		return;
	}
	file_left_ = 0;
	touch_some(n);
}

// The way from the file to the mapping: with every read past the budget,
// a page of the mapping touched for each kTouchShare read (the first
// touches spread over kTouchShare laps, each page's trap beside eight
// reads, where touching them all in one lap would hold the daemon to the
// trap's rate again), then the mapping.  Not under ThreadSanitizer, which
// would call a touch a race with the writer's bytes: the mapping at once.
void Reader::touch_some(size_t n)
{
#if !defined(STRATA_TSAN)
	constexpr uint64_t kPage = 4096;
	const uint64_t end = info_.data_offset + (uint64_t)info_.n_lanes * info_.lane_stride;
	if (touched_ < info_.data_offset)
		touched_ = info_.data_offset;
	const volatile uint8_t *touch = base_;
	const uint64_t pages = n / (kTouchShare * kPage) + 1; // at least one a read
	for (uint64_t k = 0; k < pages && touched_ < end; k++, touched_ += kPage)
		(void)touch[touched_];
	if (touched_ < end)
		return;
#else
	(void)n;
#endif
	by_file_ = false;
}

} // namespace strata
