/*
 * reader.cpp - the validating consumer side of a trace buffer.  Contract in
 * reader.h; the ordering pairs with the writer are named at each atomic and
 * listed in docs/ring-buffer.md.
 */
#include "reader.h"
#include "huge_chunks.h"
#include "madv_populate.h"
#include "tsan.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstddef>
#include <atomic>
#include <cstring>

#include "reader_lane.h"

namespace strata {
using namespace reader_lane;
namespace {

// How far a producer's timestamps may be ahead of the reader's clock (the
// same clock, or the producers' own: set_clock): a clock page read a few
// microseconds ahead passes; a scribbled one, which would stall the lane
// (every later packet "goes backwards") or overflow a CTF reader, does not.
constexpr uint64_t kFutureSlackNs = 2000000000ull;
// Discards are increments of one counter per lane, a locked add on one
// cache line each: on no machine more than one per nanosecond.  The slack
// covers a close that reads the counter after its timestamp.
constexpr uint64_t kLossSlack = 1ull << 24;

bool pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

// [off, off + len) lies inside [0, size) with 8-byte alignment, no overflow.
bool region_ok(uint64_t off, uint64_t len, uint64_t size)
{
	return off % 8 == 0 && off <= size && len <= size - off;
}

bool disjoint(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen)
{
	return a + alen <= b || b + blen <= a; // sums bounded by size (region_ok)
}

std::string cstr(const char *s, size_t n)
{
	return std::string(s, strnlen(s, n));
}

const char *check_header(const strata_buffer_header &h, uint64_t size)
{
	if (h.magic != STRATA_ABI_MAGIC)
		return "bad magic (not a strata buffer)";
	if (h.endian_check != 0x01020304u)
		return "endianness mismatch";
	if (h.abi_major != STRATA_ABI_MAJOR)
		return "unsupported ABI major version";
	if (h.header_size < sizeof(strata_buffer_header) || h.header_size > size)
		return "bad header_size";
	if (h.total_size != size)
		return "total_size does not match the file size";
	if (h.n_lanes == 0 || h.n_lanes > STRATA_MAX_LANES)
		return "bad n_lanes";
	if (!pow2(h.n_subbuf) || h.n_subbuf < 2 || h.n_subbuf > STRATA_MAX_SUBBUF)
		return "bad n_subbuf";
	if (!pow2(h.subbuf_size) || h.subbuf_size < STRATA_MIN_SUBBUF_SIZE ||
	    h.subbuf_size > STRATA_MAX_SUBBUF_SIZE)
		return "bad subbuf_size";
	if (h.mode != STRATA_MODE_DISCARD && h.mode != STRATA_MODE_OVERWRITE)
		return "bad mode";
	if (h.lane_stride != (uint64_t)h.n_subbuf * h.subbuf_size)
		return "lane_stride != n_subbuf * subbuf_size";
	uint64_t lanes_len = (uint64_t)h.n_lanes * sizeof(strata_lane_ctl);
	uint64_t data_len = (uint64_t)h.n_lanes * h.lane_stride; // <= 2^40
	if (!region_ok(h.desc_offset, h.desc_capacity, size))
		return "descriptor table outside the buffer";
	if (!region_ok(h.lanes_offset, lanes_len, size))
		return "lane control blocks outside the buffer";
	if (!region_ok(h.data_offset, data_len, size))
		return "lane data outside the buffer";
	if (!disjoint(0, h.header_size, h.desc_offset, h.desc_capacity) ||
	    !disjoint(0, h.header_size, h.lanes_offset, lanes_len) ||
	    !disjoint(0, h.header_size, h.data_offset, data_len) ||
	    !disjoint(h.desc_offset, h.desc_capacity, h.lanes_offset, lanes_len) ||
	    !disjoint(h.desc_offset, h.desc_capacity, h.data_offset, data_len) ||
	    !disjoint(h.lanes_offset, lanes_len, h.data_offset, data_len))
		return "buffer regions overlap";
	if (!memchr(h.comm, 0, sizeof h.comm) || !memchr(h.channel, 0, sizeof h.channel))
		return "comm or channel not NUL-terminated";
	if (h.record_format == STRATA_REC_COMPACT) {
		if (h.n_shared_lanes == 0 || h.n_shared_lanes > h.n_lanes)
			return "bad n_shared_lanes";
		if (h.stream_id == UINT32_MAX)
			return "bad stream_id (no room for the shared lanes' class)";
	} else if (h.record_format != STRATA_REC_WIDE) {
		return "unknown record_format";
	}
	return nullptr;
}

} // namespace

namespace {
// The descriptors Readers keep for populate_ahead's fallocate, at most
// kMaxMakeFds in a process at once: a daemon with a buffer per process for
// thousands of processes must not spend a descriptor more on each (its
// limit is budgeted per connection, docs/consumerd.md); a buffer attached
// beyond them makes its pages the older way.  Relaxed: a count.
constexpr int kMaxMakeFds = 256;
std::atomic<int> g_make_fds{0};

int take_make_fd(int fd)
{
	if (g_make_fds.fetch_add(1, std::memory_order_relaxed) < kMaxMakeFds) {
		const int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);
		if (d >= 0)
			return d;
	}
	g_make_fds.fetch_sub(1, std::memory_order_relaxed);
	return -1;
}

void drop_make_fd(int *fd)
{
	if (*fd < 0)
		return;
	close(*fd);
	*fd = -1;
	g_make_fds.fetch_sub(1, std::memory_order_relaxed);
}
} // namespace

std::unique_ptr<Reader> Reader::attach(int fd, std::string *err)
{
	struct stat st;
	if (fstat(fd, &st) != 0) {
		*err = std::string("fstat: ") + strerror(errno);
		return nullptr;
	}
	if (!S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(strata_buffer_header)) {
		*err = "not a strata buffer (too small or not a regular file)";
		return nullptr;
	}
	uint64_t size = (uint64_t)st.st_size;
	void *p = map_chunk_aligned(size, PROT_READ | PROT_WRITE, fd);
	if (p == MAP_FAILED) {
		*err = std::string("mmap: ") + strerror(errno);
		return nullptr;
	}
	strata_buffer_header h;
	memcpy(&h, p, sizeof h); // validate a private copy, never the live header
	if (const char *why = check_header(h, size)) {
		munmap(p, size);
		*err = why;
		return nullptr;
	}
	std::unique_ptr<Reader> r(new Reader());
	r->base_ = (uint8_t *)p;
	r->map_size_ = size;
	r->make_fd_ = take_make_fd(fd); // -1: populate_ahead's read populate
	r->huge_refused_ = huge_pages_off();

	BufferInfo &i = r->info_;
	i.abi_major = h.abi_major;
	i.abi_minor = h.abi_minor;
	i.total_size = size;
	i.pid = h.pid;
	i.uid = h.uid;
	i.comm = cstr(h.comm, sizeof h.comm);
	i.channel = cstr(h.channel, sizeof h.channel);
	memcpy(i.uuid, h.trace_uuid, 16);
	i.stream_id = h.stream_id;
	i.mode = h.mode;
	i.n_lanes = h.n_lanes;
	i.record_format = h.record_format;
	r->walk_ = RecordWalk(h.record_format);
	r->fast_owner_ = (h.flags & STRATA_BUF_FAST_OWNER) != 0;
	i.first_shared = h.record_format == STRATA_REC_COMPACT ? h.n_lanes - h.n_shared_lanes : h.n_lanes;
	i.n_subbuf = h.n_subbuf;
	i.subbuf_size = h.subbuf_size;
	i.clock_id = h.clock_id;
	i.desc_offset = h.desc_offset;
	i.desc_capacity = h.desc_capacity;
	i.lanes_offset = h.lanes_offset;
	i.data_offset = h.data_offset;
	i.lane_stride = h.lane_stride;
	r->lanes_.resize(h.n_lanes);
	// copy_out reads the file where first touches trap (reader_file.cpp).
	r->read_by_file(file_reading_wanted());
	for (uint32_t l = 0; l < h.n_lanes; l++) {
		// Relaxed: a starting point only (a re-attaching consumer); the
		// positions are validated against the commit counters anyway.
		uint64_t c = __atomic_load_n(&r->lane_ctl(l)->consumed, __ATOMIC_RELAXED);
		uint64_t hd = __atomic_load_n(&r->lane_ctl(l)->head, __ATOMIC_RELAXED);
		c = std::min(c, hd) & ~(h.subbuf_size - 1);
		r->lanes_[l].rpos = c;
		r->lanes_[l].next_seq = c / h.subbuf_size;
	}
	return r;
}

Reader::~Reader()
{
	// A close still waiting for a live writer is completed now: in
	// overwrite mode the writers could not reuse its sub-buffer otherwise.
	std::string msg;
	for (uint32_t l = 0; base_ && l < lanes_.size(); l++)
		finish_close(l, true, &msg);
	if (base_)
		munmap(base_, map_size_);
	if (wait_fd_ >= 0)
		close(wait_fd_);
	drop_make_fd(&make_fd_);
}

strata_lane_ctl *Reader::lane_ctl(uint32_t lane) const
{
	return (strata_lane_ctl *)(base_ + info_.lanes_offset + (uint64_t)lane * sizeof(strata_lane_ctl));
}

const uint8_t *Reader::subbuf_at(uint32_t lane, uint64_t pos) const
{
	return base_ + info_.data_offset + (uint64_t)lane * info_.lane_stride +
	       (pos & (info_.lane_stride - 1) & ~(info_.subbuf_size - 1));
}

uint64_t Reader::now() const
{
	return clock_ ? clock_() : monotonic_now();
}

uint64_t Reader::lane_discarded(uint32_t lane) const
{
	if (lane >= info_.n_lanes)
		return 0;
	// Read after the producer stopped: coherence gives the final value
	// (the writers' adds are relaxed, so an acquire here paired with none).
	return strata_lane_discarded(lane_ctl(lane));
}

uint32_t Reader::block_timeouts() const
{
	const auto *h = reinterpret_cast<const strata_buffer_header *>(base_);
	// Relaxed: a count, ordering nothing (the writers' relaxed add).
	return h ? __atomic_load_n(&h->block_timeouts, __ATOMIC_RELAXED) : 0;
}

uint64_t Reader::lane_position(uint32_t lane) const
{
	if (lane >= info_.n_lanes)
		return 0;
	// Acquire: pairs with the writers' acq_rel CAS of head.  A snapshot
	// trigger (consumerd/trigger.cpp) relies on it: whatever a writer did
	// before reserving here (its record of the same event in a lower slot,
	// committed) happens before what the caller does after seeing the new
	// position.  Statistics need no more than relaxed; acquire is free on
	// x86 and harmless elsewhere.
	return __atomic_load_n(&lane_ctl(lane)->head, __ATOMIC_ACQUIRE);
}

bool Reader::producer_retired() const
{
	auto *h = (strata_buffer_header *)base_;
	// Acquire: pairs with the producer's release fetch_or in
	// retire_mapping, after which none of its writers reaches a lane.
	return __atomic_load_n(&h->flags, __ATOMIC_ACQUIRE) & STRATA_BUF_RETIRED;
}

bool Reader::producer_exited() const
{
	auto *h = (strata_buffer_header *)base_;
	// Acquire: pairs with the producer's release fetch_or in mark_exited.
	return __atomic_load_n(&h->flags, __ATOMIC_ACQUIRE) & STRATA_BUF_PRODUCER_EXITED;
}

uint32_t Reader::prepare_wait()
{
	auto *h = (strata_buffer_header *)base_;
	// Seq_cst store then seq_cst load: the Dekker pair with the writer's
	// seq_cst wake_seq increment then consumer_waiting load (wake_consumer).
	__atomic_store_n(&h->consumer_waiting, 1u, __ATOMIC_SEQ_CST);
	return __atomic_load_n(&h->wake_seq, __ATOMIC_SEQ_CST);
}

const uint32_t *Reader::wake_word() const
{
	return &reinterpret_cast<const strata_buffer_header *>(base_)->wake_seq;
}

void Reader::set_wait_fd(int fd)
{
	if (wait_fd_ >= 0)
		close(wait_fd_);
	wait_fd_ = fd;
}

void Reader::wait(uint32_t seq, int timeout_ms, const std::atomic<uint32_t> *stop)
{
	if (wait_fd_ >= 0) {
		// The module's readiness is its own look at the lanes (no seq):
		// a sub-buffer completed after our last check keeps the fd
		// readable, so no wakeup is lost between the check and here.
		struct pollfd pfd = {wait_fd_, POLLIN, 0};
		poll(&pfd, 1, timeout_ms);
		return;
	}
	auto *h = (strata_buffer_header *)base_;
	struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
	// Relaxed: a hint shared by every drain; pairs with nothing.
	static std::atomic<bool> no_waitv{false};
	if (stop && !no_waitv.load(std::memory_order_relaxed)) {
		// Both words at once: the buffer's (shared: the writers are
		// another process) and the caller's stop word (private).  An
		// absolute CLOCK_MONOTONIC deadline, as futex_waitv takes it.
		struct futex_waitv w[2] = {};
		w[0].val = seq;
		w[0].uaddr = (uintptr_t)&h->wake_seq;
		w[0].flags = FUTEX_32;
		w[1].val = 0;
		w[1].uaddr = (uintptr_t)stop;
		w[1].flags = FUTEX_32 | FUTEX_PRIVATE_FLAG;
		struct timespec end;
		clock_gettime(CLOCK_MONOTONIC, &end);
		end.tv_sec += ts.tv_sec;
		end.tv_nsec += ts.tv_nsec;
		if (end.tv_nsec >= 1000000000) {
			end.tv_sec++;
			end.tv_nsec -= 1000000000;
		}
		if (syscall(SYS_futex_waitv, w, 2, 0, &end, CLOCK_MONOTONIC) >= 0 || errno == EAGAIN ||
		    errno == ETIMEDOUT || errno == EINTR)
			return;
		// ENOSYS before Linux 5.16, or refused (a seccomp filter): the
		// plain wait from now on, never a loop of failing calls.
		no_waitv.store(true, std::memory_order_relaxed);
	}
	// Shared futex (no FUTEX_PRIVATE_FLAG): the writers are another process.
	syscall(SYS_futex, &h->wake_seq, FUTEX_WAIT, seq, &ts, nullptr, 0);
}

void Reader::end_wait()
{
	auto *h = (strata_buffer_header *)base_;
	__atomic_store_n(&h->consumer_waiting, 0u, __ATOMIC_RELAXED); // a hint only
}

// Checks the private copy *hdr of the header of the packet at `pos`; on
// success shrinks its packet_size to the content: only the content goes to
// the file, the packet ends where it ends.
bool Reader::validate_header(uint32_t lane, uint64_t pos, strata_packet_header *hdr, std::string *err)
{
	const LaneState &ls = lanes_[lane];
	const uint64_t S = info_.subbuf_size;
	const strata_packet_header &ph = *hdr;
	const char *why = nullptr;
	// Closers used to read the lane's discard count after their close
	// took the packet: in a shared lane, one delayed there could read a
	// count larger than the next packet's closer read before it (seen
	// under TSan: 3 good packets refused, 429 events lost).  Closers now
	// read it before their close CAS (writer.cpp, load_discarded), so a
	// current producer never does this; older producers (their runtime
	// is the application's) and a scribbled small count still may.  Not
	// damage: the count is cumulative, so the packet says no new discards
	// (the next ones carry them).
	if (hdr->events_discarded < ls.last_discarded) {
		hdr->events_discarded = ls.last_discarded;
		stats_.discards_clamped++;
	}
	if (ph.magic != STRATA_CTF_MAGIC)
		why = "bad packet magic";
	else if (memcmp(ph.uuid, info_.uuid, 16) != 0)
		why = "packet uuid differs from the buffer's";
	else if (ph.stream_id != info_.lane_stream_id(lane))
		why = "bad stream_id";
	else if (ph.stream_instance_id != lane || ph.lane_id != lane)
		why = "packet of another lane";
	else if (ph.packet_size != S * 8)
		why = "bad packet_size";
	else if (ph.content_size % 8 != 0 || ph.content_size < kHdr * 8 || ph.content_size > ph.packet_size)
		why = "bad content_size";
	else if (ph.packet_seq_num != pos / S)
		why = "bad packet_seq_num";
	else if (ph.timestamp_end < ph.timestamp_begin)
		why = "timestamp_end before timestamp_begin";
	else if (ls.have_packet && ph.timestamp_begin < ls.last_ts_end)
		why = "timestamps go backwards from the previous packet";
	else if (!no_future_check_ && ph.timestamp_end > now() + kFutureSlackNs)
		why = "timestamp_end in the future";
	else if (ph.events_discarded - ls.last_discarded > loss_bound(ls, ph.timestamp_end))
		why = "events_discarded grew faster than writers can discard";
	if (why) {
		*err = "lane " + std::to_string(lane) + " packet " + std::to_string(pos / S) + ": " + why;
		stats_.corrupt_packets++;
		return false;
	}
	hdr->packet_size = hdr->content_size;
	return true;
}

// validate_header on a copied packet, which is then cut to its content.
bool Reader::validate_packet(uint32_t lane, uint64_t pos, std::vector<uint8_t> *pkt, std::string *err)
{
	strata_packet_header ph;
	memcpy(&ph, pkt->data(), sizeof ph);
	if (!validate_header(lane, pos, &ph, err))
		return false;
	memcpy(pkt->data(), &ph, sizeof ph);
	pkt->resize(ph.content_size / 8);
	return true;
}

// The most events a lane's writers can have discarded between its last
// packet and time `ts` (kLossSlack): at most one a nanosecond since the last
// packet's end (since the clock's zero before the first).
uint64_t Reader::loss_bound(const LaneState &ls, uint64_t ts) const
{
	const uint64_t since = ls.have_packet ? ls.last_ts_end : 0;
	const uint64_t dt = ts > since ? ts - since : 0;
	return dt > UINT64_MAX - kLossSlack ? UINT64_MAX : dt + kLossSlack;
}

void Reader::accept_packet(LaneState &ls, const strata_packet_header &ph)
{
	ls.last_ts_end = ph.timestamp_end;
	ls.last_discarded = ph.events_discarded;
	ls.next_seq = ph.packet_seq_num + 1;
	ls.have_packet = true;
	stats_.packets++;
}

ReadStatus Reader::next_packet(uint32_t lane, std::vector<uint8_t> *out, std::string *err)
{
	strata_packet_header ph;
	const uint8_t *body = nullptr;
	size_t n = 0;
	ReadStatus st = peek_packet(lane, &ph, &body, &n, err);
	out->clear();
	if (st == ReadStatus::kPacket) {
		out->resize(sizeof ph + n);
		memcpy(out->data(), &ph, sizeof ph);
		copy_out(body, n, out->data() + sizeof ph);
		std::string cut;
		out->resize(check_records(lane, out->data(), out->size(), &cut));
		if (!cut.empty())
			*err = cut;
	}
	if (st != ReadStatus::kEmpty)
		release(lane);
	return st;
}

// The first lap: map the pages the writers made in our mapping with one
// system call (MADV_POPULATE_READ) rather than a fault per page as the
// copy touches them: 1-14 us per page on a VM with software page tables
// (docs/benchmarks.md), 1-3.5 ms per MiB.  Done up to `upto` (a position,
// rounded up to a page; lap 0 only), also in the sub-buffer a writer is
// still filling, so that a drain that waits for it pays this while it
// waits, not after, when the writer is already ahead.  Later laps are
// mapped.
//
// Only pages that exist: a read populate of a shared memfd allocates the
// pages it finds missing (shmem has no shared zero page), so the callers
// never name a page the writers did not make (or populate_ahead for a busy
// lane): an idle lane's first sub-buffer has its first page (prefault_first,
// writer.cpp) and what its writer faulted in, and mapping the rest would
// give an idle process the whole sub-buffer (docs/ring-buffer.md, "The
// buffer memory of an idle process").  `upto` may come from the hostile
// `head` or header: nothing past the lane's first lap is touched.
void Reader::map_ahead(uint32_t lane, LaneState &ls, uint64_t upto)
{
	const uint64_t S = info_.subbuf_size, stride = info_.lane_stride;
	constexpr uint64_t kPage = 4096;
	// What we read past (attached late, resynchronised) stays as it was:
	// from a later lap on, nothing is populated.
	ls.mapped = std::max(ls.mapped, ls.rpos & ~(S - 1));
	upto = upto > stride ? stride : (upto + kPage - 1) & ~(kPage - 1);
	if (ls.mapped >= upto)
		return;
	if (by_file_) { // copy_out reads the file: our mapping's pages are not touched
		ls.mapped = upto;
		return;
	}
	// Lap 0: positions are offsets into the lane's data.
	uint8_t *const p = const_cast<uint8_t *>(subbuf_at(lane, 0)) + ls.mapped;
	const uint64_t n = upto - ls.mapped;
	madvise(p, n, kMadvPopulateRead);
	// And touch each page: on a VM with shadow page tables the first
	// access still traps after the populate (0.4-3.8 ms per MiB here).
	// One byte a page, of a sub-buffer writers may still fill: the value
	// is never used.  Not under ThreadSanitizer, which would call that
	// read a race with the writer's bytes.
#if !defined(STRATA_TSAN)
	const volatile uint8_t *touch = p;
	for (uint64_t o = 0; o < n; o += kPage)
		(void)touch[o];
#endif
	ls.mapped = upto;
}

// Busy: the lane's writers wrote kBusyBytes (or one sub-buffer) in its
// first lap.  What they wrote is `head` less the rests of the packets our
// closes ended early (closed_gap): a consumer close moves `head` to the
// next sub-buffer, and an idle lane whose first packet a stop or a live
// tick closed is not busy for that.
bool Reader::lane_busy(const LaneState &ls, uint64_t head) const
{
	const uint64_t written = head > ls.closed_gap ? head - ls.closed_gap : 0;
	return head < info_.lane_stride && written >= std::min<uint64_t>(kBusyBytes, info_.subbuf_size);
}

// One 2 MiB chunk of the file at `off` (a multiple of kHugeChunk, inside
// our mapping) made as one huge page (huge_chunks.h): only where no page
// of it past its first `made` bytes (ours, made small just before:
// populate_ahead) exists yet (someone's pages there stay theirs: a
// collapse would copy them under their writer); in an empty one, one
// small page allocated first (the
// kernel refuses to collapse an empty range; fallocate's page is not up
// to date, so a writer's mincore does not see it and maps none of it
// before the collapse), then MADV_COLLAPSE: 0.2-0.3 ms a chunk on the
// PVM guest, at times 2-8 ms (fresh memory, lru_add_drain_all's wait for
// every CPU), against 1 ms for 512 small pages' making and 2.5-8 ms of
// the writer's traps at their first touch.  A kernel that
// does not know it (EINVAL: before 6.1, or a file it cannot collapse, as
// a kernel buffer) is not asked again; no memory (ENOMEM) or a page busy
// (EAGAIN) leaves this chunk to 4 KiB pages.
bool Reader::make_huge_chunk(uint64_t off, uint64_t made)
{
	if (off % kHugeChunk != 0 || off + kHugeChunk > map_size_ ||
	    reinterpret_cast<uintptr_t>(base_) % kHugeChunk != 0)
		return false;
	uint8_t *p = base_ + off;
	unsigned char v[kHugeChunk / 4096];
	if (mincore(p, kHugeChunk, v) != 0)
		return false;
	for (size_t i = made / 4096; i < sizeof v; i++)
		if (v[i] & 1)
			return false;
	if (made == 0 && (make_fd_ < 0 || fallocate(make_fd_, 0, (off_t)off, 4096) != 0) &&
	    madvise(p, 4096, kMadvPopulateWrite) != 0)
		return false;
	if (madvise(p, kHugeChunk, kMadvCollapse) == 0) {
		stats_.ahead_huge += kHugeChunk;
		return true;
	}
	if (errno == EINVAL || errno == ENOSYS || errno == EPERM)
		huge_refused_ = true;
	return false;
}

// Starts a margin past the writer's position, where its own faults are
// not: two threads populating one page wait for each other.
uint64_t Reader::populate_ahead(uint32_t lane, uint64_t *budget, bool *busy)
{
	*busy = false;
	if (lane >= info_.n_lanes)
		return 0;
	LaneState &ls = lanes_[lane];
	const uint64_t S = info_.subbuf_size, stride = info_.lane_stride;
	constexpr uint64_t kMargin = 16u << 10, kPage = 4096;
	// Relaxed: a hint about how far the writer got; the pages it names
	// are only mapped, never read here.
	const uint64_t head = __atomic_load_n(&lane_ctl(lane)->head, __ATOMIC_RELAXED);
	if (!lane_busy(ls, head))
		return 0; // idle so far, or its first lap is over
	*busy = true;
	const uint64_t end = std::min(stride, (head & ~(S - 1)) + 2 * S);
	uint64_t from = std::max({ls.ahead, ls.mapped, (head + kMargin + kPage - 1) & ~(kPage - 1)});
	// A chunk refused (below) past the writer's sub-buffer is the writer's
	// to collapse at its next open (collapse_ahead, writer_lane.h): pages
	// made there meanwhile would only make that collapse copy them, or
	// fail (EAGAIN) while we make them.
	if (from >= ls.leave_from && from < ls.small_until)
		from = ls.small_until;
	// From the first chunk boundary of the file at or past `from`, whole
	// chunks while they start before `end` or the chunk after it (made
	// ahead of the writer's own populate at its packet's open): one huge
	// page each, at most one a turn (kHugeCost, the whole budget).  Before
	// it, and in a chunk refused, 4 KiB pages up to `end`.
	const uint64_t lane_off = static_cast<uint64_t>(subbuf_at(lane, 0) - base_);
	const uint64_t chunk =
		std::max(((lane_off + from + kHugeChunk - 1) & ~(kHugeChunk - 1)) - lane_off, ls.small_until);
	const bool chunks =
		!huge_refused_ && stride >= kHugeChunk && chunk < end + kHugeChunk && chunk < stride;
	const uint64_t limit = chunks ? std::min(stride, chunk + kHugeChunk) : end;
	if (from >= limit)
		return 0;
	// A chunk that begins in the writer's open sub-buffer: its part up to
	// that sub-buffer's end is made in small pages first, then the chunk
	// collapsed (copying them).  The collapse begins with the kernel's
	// LRU drain, whose work item on the writer's CPU waits for the
	// writer's slice (3.4 ms seen on the PVM guest): the writer then maps
	// our pages meanwhile instead of faulting fresh ones in.
	const uint64_t open_end = (head & ~(S - 1)) + S;
	const uint64_t first_part =
		chunks && chunk < open_end ? std::min(open_end, chunk + kHugeChunk) : chunk;
	uint64_t small_end = chunks ? std::min(first_part, end) : end;
	if (from < ls.leave_from && ls.leave_from < small_end)
		small_end = ls.leave_from;
	const uint64_t n = small_end > from ? std::min(small_end - from, *budget & ~(kPage - 1)) : 0;
	if (n)
		make_small(lane, from, n);
	*budget -= n;
	ls.ahead = from + n;
	if (!chunks || ls.ahead < chunk)
		return end > ls.ahead ? end - ls.ahead : 0;
	if (*budget == 0)
		return limit - ls.ahead;
	*budget -= std::min(*budget, kHugeCost);
	if (make_huge_chunk(lane_off + chunk, ls.ahead > chunk ? ls.ahead - chunk : 0)) {
		ls.ahead = limit;
		return end + kHugeChunk > ls.ahead ? 1 : 0; // perhaps the next chunk
	}
	// Refused (the writer got there first, no memory): this chunk's pages
	// up to the end of the writer's sub-buffer are small ones, the rest
	// the writer's; the next chunk is asked for in its turn.
	ls.small_until = chunk + kHugeChunk;
	ls.leave_from = std::max(chunk, (head & ~(S - 1)) + S);
	return end > ls.ahead ? end - ls.ahead : 1;
}

// Lap 0: positions are offsets into the lane's data.  The pages are
// allocated in the buffer's file and mapped in our mapping, where
// map_ahead finds them when the packets are read: fallocate then a
// write populate (our mapping is writable; shmem pages are dirty
// anyway), 1.8-1.9 us a page on the AMD EPYC VM measured, against
// 2.3-2.6 for a read populate of the hole, which allocates them too
// (shmem has no shared zero page) one fault at a time.  The read
// populate stays the fallback: a file fallocate refuses (then never
// asked again), or a write populate refused.
void Reader::make_small(uint32_t lane, uint64_t from, uint64_t n)
{
	uint8_t *p = const_cast<uint8_t *>(subbuf_at(lane, 0)) + from;
	bool made = false;
	if (make_fd_ >= 0) {
		if (fallocate(make_fd_, 0, (off_t)(p - base_), (off_t)n) == 0) {
			stats_.ahead_allocated += n;
			// Mapped here even where copy_out reads the file: the
			// populate makes the pages up to date, which mincore then
			// reports and the writer maps (map_made); fallocate's pages
			// are not yet (measured: none of them resident).
			made = madvise(p, n, kMadvPopulateWrite) == 0;
		} else {
			drop_make_fd(&make_fd_);
		}
	}
	if (!made)
		madvise(p, n, kMadvPopulateRead);
}

int Reader::lane_writer_cpu(uint32_t lane) const
{
	if (lane >= info_.n_lanes)
		return -1;
	// Relaxed: a hint (the writer's relaxed store at a packet's open).
	const uint32_t v = __atomic_load_n(&lane_ctl(lane)->writer_cpu, __ATOMIC_RELAXED);
	return v == 0 || v > CPU_SETSIZE ? -1 : static_cast<int>(v - 1);
}

uint64_t Reader::lane_backlog(uint32_t lane) const
{
	if (lane >= info_.n_lanes)
		return 0;
	const uint64_t head = lane_position(lane), rpos = lanes_[lane].rpos;
	return head > rpos ? head - rpos : 0;
}

bool Reader::has_packet() const
{
	for (uint32_t l = 0; l < info_.n_lanes; l++) {
		// Acquire: as peek_packet's load of head.
		const uint64_t head = __atomic_load_n(&lane_ctl(l)->head, __ATOMIC_ACQUIRE);
		if (head >= lanes_[l].rpos + info_.subbuf_size)
			return true;
	}
	return false;
}

ReadStatus Reader::peek_packet(uint32_t lane, strata_packet_header *hdr, const uint8_t **body,
			       size_t *body_len, std::string *err)
{
	if (lane >= info_.n_lanes) {
		*err = "no such lane";
		return ReadStatus::kEmpty;
	}
	LaneState &ls = lanes_[lane];
	strata_lane_ctl *lc = lane_ctl(lane);
	const uint64_t S = info_.subbuf_size, stride = info_.lane_stride;
	std::string close_msg;
	finish_close(lane, ls.producer_dead, &close_msg); // a flush that timed out
	// Acquire: orders our later reads after the writer's closing CAS.
	uint64_t head = __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE);
	if (head < ls.rpos + S) {   // the packet at rpos is open or not started
		if (head > ls.rpos) // open: the pages its writers reached, or we made ahead
			map_ahead(lane, ls, std::min(ls.rpos + S, std::max(head, ls.ahead)));
		return ReadStatus::kEmpty;
	}
	ReadStatus st = ReadStatus::kSkipped;
	if (head - ls.rpos > stride) {
		// Discard-mode writers never get further than one ring ahead of
		// `consumed`: someone scribbled head (or the buffer is overwrite).
		*err = "lane " + std::to_string(lane) + ": writer more than a ring ahead; resynchronised";
		stats_.corrupt_packets++;
		ls.rpos = (head & ~(S - 1)) - stride + S;
		ls.next_seq = ls.rpos / S;
		return st;
	}
	const uint64_t expected = (ls.rpos / stride + 1) * S;
	const uint64_t c = committed(lc, (ls.rpos / S) & (info_.n_subbuf - 1));
	if (c < expected && !ls.producer_dead) {
		// Closed by its writers (they reached its end), or by us where
		// they were.
		const bool ours = ls.close_pending && ls.close_start == ls.rpos;
		map_ahead(lane, ls,
			  std::min(ls.rpos + S, std::max(ls.ahead, ls.rpos + (ours ? ls.close_off : S))));
		return ReadStatus::kEmpty; // a commit is still in flight
	}
	const uint8_t *sb = subbuf_at(lane, ls.rpos);
	if (c < expected) {
		*err = "lane " + std::to_string(lane) + " packet " + std::to_string(ls.rpos / S) +
		       ": never completed by the dead producer (killed between reserve and commit); dropped";
		stats_.incomplete_dropped++;
	} else if (c > expected) {
		*err = "lane " + std::to_string(lane) + ": commit counter beyond its sub-buffer; skipped";
		stats_.corrupt_packets++;
	} else {
		copy_out(sb, sizeof *hdr, (uint8_t *)hdr); // validate a private copy, never the live header
		// Lap 0 only: its content's pages (a close of ours ended it where
		// its writers were), bounded by the sub-buffer whatever it says.
		const uint64_t content = std::min<uint64_t>(S, hdr->content_size / 8);
		map_ahead(lane, ls, std::min(ls.rpos + S, std::max(ls.ahead, ls.rpos + content)));
		if (validate_header(lane, ls.rpos, hdr, err)) {
			accept_packet(ls, *hdr);
			// content_size is bounded by the sub-buffer (validate_header).
			*body = sb + sizeof *hdr;
			*body_len = hdr->content_size / 8 - sizeof *hdr;
			st = ReadStatus::kPacket;
		}
	}
	ls.rpos += S;
	return st;
}

bool Reader::resume(uint32_t lane, uint64_t last_seq, uint64_t last_discarded, uint64_t last_ts_end)
{
	if (lane >= info_.n_lanes || last_seq >= UINT64_MAX / info_.subbuf_size)
		return false;
	LaneState &ls = lanes_[lane];
	const uint64_t S = info_.subbuf_size;
	const uint64_t next = (last_seq + 1) * S;
	// Acquire: pairs with the writers' release of head (as lane_position).
	const uint64_t head = __atomic_load_n(&lane_ctl(lane)->head, __ATOMIC_ACQUIRE);
	// The previous consumer released only what it wrote (drain.cpp), so
	// `next` is at or after our start (consumed), and never beyond what
	// the writers reached.  Before it (a write that failed: counted lost
	// then), the sequence numbers show the gap.
	if (next > ((head + S - 1) & ~(S - 1)))
		return false;
	if (next > ls.rpos) {
		ls.rpos = next;
		release(lane); // on disk already: the writers may have them back
	}
	ls.next_seq = std::max(next, ls.rpos) / S;
	ls.last_ts_end = last_ts_end;
	ls.last_discarded = last_discarded;
	ls.have_packet = true;
	return true;
}

void Reader::release(uint32_t lane)
{
	if (lane >= info_.n_lanes)
		return;
	// Release: everything we read of the sub-buffers up to rpos (copies,
	// write(2) from the mapping) is done before a writer may reuse them;
	// pairs with the writer's acquire load in subbuf_free().
	strata_lane_ctl *lc = lane_ctl(lane);
	__atomic_store_n(&lc->consumed, lanes_[lane].rpos, __ATOMIC_RELEASE);
	// Blocking mode's sleepers (ABI 3.5): our store, a seq_cst fence, then
	// their count, against a writer's seq_cst add to the count, fence, and
	// last look at `consumed` (block_wait, writer.cpp): either it sees our
	// store or we see it counted.  A count a hostile producer left set
	// costs a wake-up call per release, nothing more.
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	// Relaxed: ordered by the fence above.
	if (__builtin_expect(__atomic_load_n(&lc->writers_waiting, __ATOMIC_RELAXED) != 0, 0))
		syscall(SYS_futex,
			reinterpret_cast<uint32_t *>(&lc->consumed) +
				(__BYTE_ORDER__ == __ORDER_BIG_ENDIAN__ ? 1 : 0),
			FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

} // namespace strata
