/*
 * reader.cpp - the validating consumer side of a trace buffer.  Contract in
 * reader.h; the ordering pairs with the writer are named at each atomic and
 * listed in docs/ring-buffer.md.
 */
#include "reader.h"
#include "tsan.h"

#include <errno.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <atomic>
#include <cstring>

#include "desc_rules.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 // Linux 5.14 uapi; glibc 2.36 headers lack it
#endif

namespace strata {
namespace {

constexpr int kMadvPopulateRead = MADV_POPULATE_READ;

constexpr uint64_t kHdr = STRATA_PACKET_HEADER_SIZE;
constexpr int kMaxCloseAttempts = 1000; // CAS retries against racing writers
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

uint64_t monotonic_now()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

// A string of the record at `off`, NUL-terminated inside the record.
const char *record_str(const uint8_t *rec, uint32_t size, uint32_t off)
{
	if (off >= size || !memchr(rec + off, 0, size - off))
		return nullptr;
	return (const char *)rec + off;
}

} // namespace

namespace {
// A sub-buffer's committed bytes: what its producers added (commit[i]) and
// what consumers added closing packets themselves (ccommit[i], see
// strata_abi.h).  Acquire on both: pairs with the producers' release adds
// (commit_bytes in writer.cpp, the kernel's strata_commit_bytes) and with
// the release add of the consumer that closed (finish_close, maybe in
// another process): a complete count means every byte of the sub-buffer,
// closing fields included, is written.
uint64_t committed(const strata_lane_ctl *lc, uint64_t idx)
{
	return __atomic_load_n(&lc->commit[idx], __ATOMIC_ACQUIRE) +
	       __atomic_load_n(&lc->ccommit[idx], __ATOMIC_ACQUIRE);
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
	void *p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
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
	// Acquire: pairs with nothing stronger than the writers' relaxed adds;
	// read after the producer stopped, coherence gives the final value.
	return __atomic_load_n(&lane_ctl(lane)->events_discarded, __ATOMIC_ACQUIRE);
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
		memcpy(out->data() + sizeof ph, body, n);
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
	const uint64_t from = std::max({ls.ahead, ls.mapped, (head + kMargin + kPage - 1) & ~(kPage - 1)});
	if (from >= end)
		return 0;
	const uint64_t n = std::min(end - from, *budget & ~(kPage - 1));
	if (n == 0)
		return end - from;
	// Lap 0: positions are offsets into the lane's data.  A read populate
	// of a shared memfd mapping allocates the pages (shmem has no shared
	// zero page) and maps them in our read-only mapping, where map_ahead
	// finds them when the packets are read.
	uint8_t *p = const_cast<uint8_t *>(subbuf_at(lane, 0)) + from;
	madvise(p, n, kMadvPopulateRead);
	*budget -= n;
	ls.ahead = from + n;
	return end - ls.ahead;
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
		memcpy(hdr, sb, sizeof *hdr); // validate a private copy, never the live header
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
	__atomic_store_n(&lane_ctl(lane)->consumed, lanes_[lane].rpos, __ATOMIC_RELEASE);
}

// Completes the lane's pending consumer-side close once every writer that
// reserved in the packet has committed: timestamp_end = the packet's
// largest record timestamp, then the closing fields, then our commit of
// the rest of the sub-buffer.  True when nothing is pending any more.
// give_up (dead producer, the stop's deadline passed, or we detach):
// complete it now; a packet whose writers did not all commit is cut after
// its last whole committed record (cut_short).
bool Reader::finish_close(uint32_t lane, bool give_up, std::string *msg)
{
	LaneState &ls = lanes_[lane];
	if (!ls.close_pending)
		return true;
	const uint64_t S = info_.subbuf_size, start = ls.close_start, off = ls.close_off;
	if (ls.rpos > start) { // dropped meanwhile (its dead producer never completed it)
		ls.close_pending = false;
		return true;
	}
	strata_lane_ctl *lc = lane_ctl(lane);
	const uint64_t idx = (start / S) & (info_.n_subbuf - 1);
	// Every byte before `off` was reserved by a writer before our close
	// CAS: the sub-buffer's count reaches lap * S + off when all of them
	// committed.  Acquire (committed()): pairs with their release adds
	// (commit_bytes): the records we walk below are complete.
	const uint64_t want = start / info_.lane_stride * S + off;
	const uint64_t c = committed(lc, idx);
	if (c < want && !give_up)
		return false;
	if (c < want)
		return cut_short(lane, c - std::min(c, want - off), msg);
	auto *ph = (strata_packet_header *)subbuf_at(lane, start);
	uint64_t ts = 0;
	bool walked = false;
	// off < the header: no writer opens a packet so (a scribbled head);
	// found by tests/fuzz (crashers/close-inside-header).
	if (c == want && off >= kHdr) { // nobody writes [start, start + off) any more: copy it
		std::vector<uint8_t> copy(subbuf_at(lane, start), subbuf_at(lane, start) + off); // off < S
		memcpy(&ts, copy.data() + offsetof(strata_packet_header, timestamp_begin), sizeof ts);
		const char *why;
		walked = walk_records(copy.data(), off, lane >= info_.first_shared, UINT64_MAX, &ts, &why) ==
			 off;
	}
	if (!walked) {
		// Corrupt, or abandoned by a live producer as we detach (its
		// packet is not read back by us): keep CTF's ordering as far
		// as our clock allows, and say so.
		ts = std::max(ts, now());
		stats_.close_ts_fallbacks++;
		*msg = "lane " + std::to_string(lane) + " packet " + std::to_string(start / S) +
		       ": records do not decode; closed with the consumer's clock";
	}
	uint64_t content = off * 8, psize = S * 8, disc = ls.close_disc;
	memcpy(&ph->timestamp_end, &ts, 8);
	memcpy(&ph->content_size, &content, 8);
	memcpy(&ph->packet_size, &psize, 8);
	memcpy(&ph->events_discarded, &disc, 8);
	// Release: the closing fields before the padding's commit, which
	// completes the sub-buffer; pairs with the acquire loads of
	// committed() and of the writers' subbuf_free().  Into ccommit[], never
	// commit[]: a lane's owner adds to commit[] without a locked
	// instruction, and a give_up close may run while a live writer of the
	// packet still has to commit (strata_abi.h).
	__atomic_add_fetch(&lc->ccommit[idx], S - off, __ATOMIC_RELEASE);
	ls.close_pending = false;
	return true;
}

// A close of ours whose writers did not all commit and never will (a
// writer killed, stopped or left inside its reservation: a slot closed
// under it writes into private pages, slots.cpp), `in` of its `off`
// reserved bytes committed.  The common case is one reservation stuck: a
// hole of off - in bytes with committed records on both sides (other
// writers of a shared lane, or a signal handler's record after the one it
// interrupted), the opener's with the packet header when it never
// committed it.  close_hole finds that hole and takes it out: the packet
// keeps every record committed, the stuck one counts as one discarded
// event.  When no single hole explains the bytes (several reservations
// stuck), the packet keeps the records that walk whole from its start, and
// the rest counts as one discarded event (at least one was lost; the
// message says how many bytes).  Either way the count is in this packet
// and, through the lane's count, every later one and the lane's final
// count (trailing_loss_packet).  The sub-buffer is completed with the rest
// of the lap: a late commit would take it past its lap (next_packet says
// so), never into a packet already read.  A packet with no header and no
// hole to take out is left incomplete (next_packet reports it dropped),
// its loss counted the same way.
bool Reader::cut_short(uint32_t lane, uint64_t in, std::string *msg)
{
	LaneState &ls = lanes_[lane];
	const uint64_t S = info_.subbuf_size, start = ls.close_start, off = ls.close_off;
	const uint64_t idx = (start / S) & (info_.n_subbuf - 1);
	ls.close_pending = false;
	if (in > off || off > S)
		return true; // more than was reserved: not a writer's (next_packet says so)
	// Relaxed: a count that only grows, as a writer's discard(); the
	// next packet's closer reads it after our commit below.
	__atomic_add_fetch(&lane_ctl(lane)->events_discarded, 1, __ATOMIC_RELAXED);
	stats_.cut_short++;
	const std::string what =
		"lane " + std::to_string(lane) + " packet " + std::to_string(start / S) + ": " +
		std::to_string(off - in) + " of its " + std::to_string(off) +
		" reserved bytes never committed (a writer stopped, killed or left inside its "
		"reservation): ";
	std::vector<uint8_t> pkt;
	uint64_t ts = 0;
	const bool hole = close_hole(lane, in, &pkt, &ts);
	if (!hole && in >= kHdr) {
		pkt.assign(subbuf_at(lane, start), subbuf_at(lane, start) + in);
		memcpy(&ts, pkt.data() + offsetof(strata_packet_header, timestamp_begin), sizeof ts);
		const char *why = nullptr;
		pkt.resize(walk_records(pkt.data(), in, lane >= info_.first_shared, UINT64_MAX, &ts, &why));
	} else if (!hole) {
		*msg = what + "its header among them, and no record after it found whole: the packet is "
			      "dropped, counted as one discarded event";
		return true;
	}
	const uint64_t keep = pkt.size();
	memcpy((uint8_t *)subbuf_at(lane, start), pkt.data(), keep); // keep <= off: ours since the close
	auto *ph = (strata_packet_header *)subbuf_at(lane, start);
	const uint64_t content = keep == kHdr ? header_only_content() : keep * 8, psize = S * 8;
	memcpy(&ph->timestamp_end, &ts, 8);
	memcpy(&ph->content_size, &content, 8);
	memcpy(&ph->packet_size, &psize, 8);
	// The cut reservation is counted from the next packet on (the
	// trailing-loss packet when none follows), not in this one: a CTF
	// reader gives no count for a loss inside a stream's first packet
	// ("may have discarded"), and a difference between two packets it does.
	const uint64_t disc = ls.close_disc;
	memcpy(&ph->events_discarded, &disc, 8);
	*msg = what +
	       (hole ? "one reservation, taken out; the " + std::to_string(keep) +
				" bytes of header and records around it kept, it counted as one discarded "
				"event"
		     : "cut after its last whole record at byte " + std::to_string(keep) +
				", the rest counted as one discarded event");
	// Release: the closing fields before the commit that completes the
	// sub-buffer, as finish_close's.
	__atomic_add_fetch(&lane_ctl(lane)->ccommit[idx], S - in, __ATOMIC_RELEASE);
	return true;
}

// cut_short's one hole: the packet at the lane's pending close, `in` of
// its `off` reserved bytes committed.  Every record before the hole is
// whole, so the hole starts at a record boundary of the walk from the
// header: the point where that walk stops, or, when bytes in the hole
// decode (the zeroed pages of a first lap, stale records of an earlier
// one), one of the boundaries before it; the last kMaxTries are tried, the
// latest first, then 0 (the header written, its commit not made).  The
// opener's header missing (not the magic, sequence number and stream the
// opener writes), the hole starts at 0 and the header is ours: the
// previous packet's end as timestamp_begin (no record of this one is
// before it, and a writer's compact bound lies at or before it), only when
// we read that packet.  A start is taken when the records after the hole
// walk whole to exactly `off`: *pkt is then the packet without it, *ts its
// last timestamp.  At most max(8 packets, 4 MiB) of bytes are walked.
bool Reader::close_hole(uint32_t lane, uint64_t in, std::vector<uint8_t> *pkt, uint64_t *ts)
{
	constexpr size_t kMaxTries = 64;
	LaneState &ls = lanes_[lane];
	const uint64_t S = info_.subbuf_size, start = ls.close_start, off = ls.close_off, gap = off - in;
	const bool shared = lane >= info_.first_shared;
	if (gap == 0 || off < kHdr)
		return false;
	std::vector<uint8_t> copy(subbuf_at(lane, start), subbuf_at(lane, start) + off);
	strata_packet_header ph;
	memcpy(&ph, copy.data(), sizeof ph);
	const bool opened = ph.magic == STRATA_CTF_MAGIC && ph.packet_seq_num == start / S &&
			    ph.lane_id == lane && ph.stream_id == info_.lane_stream_id(lane) &&
			    memcmp(ph.uuid, info_.uuid, sizeof ph.uuid) == 0;
	std::vector<uint64_t> at; // where the hole may start, the last tried first
	if (opened) {
		at.push_back(0);
		uint64_t t = ph.timestamp_begin;
		at.push_back(walk_starts(copy.data(), off, shared, &t, &at));
	} else {
		if (!ls.have_packet || ls.next_seq != start / S)
			return false;
		ph = empty_header(lane, ls.last_ts_end);
		ph.packet_seq_num = start / S;
		if (!shared) // an owned lane's packets are its claimer's
			ph.vtid = (int32_t)__atomic_load_n(&lane_ctl(lane)->owner_tid, __ATOMIC_RELAXED);
		at.push_back(0);
	}
	// at[0] is 0, the boundaries follow: the last kMaxTries of them, then 0.
	std::vector<uint64_t> tries;
	for (size_t i = at.size() - 1; i > 0 && tries.size() < kMaxTries; i--)
		tries.push_back(at[i]);
	tries.push_back(0);
	// Bytes walked: a hostile producer's large packet costs at most 8 walks of it.
	const uint64_t budget = std::max<uint64_t>(8 * off, 4u << 20);
	uint64_t walked = 0;
	for (uint64_t x : tries) {
		if (x + gap > off || (x == 0 && gap < kHdr))
			continue;
		if ((walked += off - gap) > budget)
			break;
		pkt->assign(copy.begin(), copy.begin() + std::max(x, kHdr));
		memcpy(pkt->data(), &ph, kHdr);
		pkt->insert(pkt->end(), copy.begin() + x + gap, copy.end());
		*ts = ph.timestamp_begin;
		const char *why = nullptr;
		if (walk_records(pkt->data(), pkt->size(), shared, UINT64_MAX, ts, &why) == pkt->size() &&
		    !why)
			return true;
	}
	return false;
}

// The stop's last flush of a lane found commits in flight at its deadline:
// a close of ours still waiting is cut (cut_short).  True when one was.
bool Reader::cut_pending(uint32_t lane, std::string *msg)
{
	if (lane >= info_.n_lanes || !lanes_[lane].close_pending)
		return false;
	const uint64_t before = stats_.cut_short;
	finish_close(lane, true, msg);
	return stats_.cut_short != before;
}

namespace {

// flush()'s wait between two looks at an external process's progress (it
// has a deadline).
void flush_pause()
{
	struct timespec ts = {0, 200000};
	nanosleep(&ts, nullptr);
}

} // namespace

// A FAST_OWNER owned lane: its owner changes head with unlocked cmpxchg
// unless close_req is set.  Raise it, make the owner's CPU see it (or make
// its busy window visible to us: asymmetric Dekker, the membarrier is the
// owner's missing fence), then wait for the window to close; from then on
// the owner locks, as we do (docs/ring-buffer.md).  False (close_req
// lowered again, *msg why) when that cannot be done by the deadline.
bool Reader::owner_handshake(uint32_t lane, strata_lane_ctl *lc, uint64_t deadline, std::string *msg)
{
	__atomic_add_fetch(&lc->close_req, 1, __ATOMIC_SEQ_CST);
	if (syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) != 0) {
		__atomic_sub_fetch(&lc->close_req, 1, __ATOMIC_RELEASE);
		*msg = "lane " + std::to_string(lane) + ": membarrier: " + strerror(errno) + "; not closed";
		return false;
	}
	// Acquire: the owner's head update before its dec (program order,
	// stores in order) is visible once we see the window closed.
	while (__atomic_load_n(&lc->owner_busy, __ATOMIC_ACQUIRE) != 0) {
		if (monotonic_now() >= deadline) {
			__atomic_sub_fetch(&lc->close_req, 1, __ATOMIC_RELEASE);
			*msg = "lane " + std::to_string(lane) +
			       ": its owner stayed inside a reservation; not closed";
			return false;
		}
		flush_pause();
	}
	return true;
}

// Closes the lane's open packet, if any, by moving head to the next
// sub-buffer: the close is then ours (ls.close_*), finished by
// finish_close once its writers have committed.  The head seen last.
uint64_t Reader::close_open_packet(LaneState &ls, strata_lane_ctl *lc)
{
	const uint64_t S = info_.subbuf_size;
	// Acquire (and on CAS failure): pairs with the writers' acq_rel CAS.
	// Our close takes no clock: finish_close stamps it with the packet's
	// own last timestamp.  A writer that reserves after it loaded the
	// head our CAS stored, and read its clock after that load (writer.cpp,
	// kmod/strata_kbuf.c), so its timestamp is >= that of every record
	// reserved before our CAS: packets stay ordered.
	uint64_t head = __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE);
	for (int i = 0; i < kMaxCloseAttempts; i++) {
		uint64_t off = head & (S - 1);
		if (off == 0)
			break;
		uint64_t start = head - off;
		// Relaxed, read after the load of head that showed the packet
		// open and before our close CAS (acq_rel), as a writer's close
		// (writer.cpp, load_discarded): the next packet's closer loaded
		// head from our CAS or a later one, so our load happens before
		// its load, and coherence on a counter that only grows gives it
		// a count not smaller than ours.  Read after the CAS, a count
		// could exceed the next packet's (writers open, fill and close
		// it, then discard, while we are delayed).  What is discarded
		// between this load and the CAS goes to the next packet.
		const uint64_t disc = __atomic_load_n(&lc->events_discarded, __ATOMIC_RELAXED);
		if (__atomic_compare_exchange_n(&lc->head, &head, start + S, false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			// We are this packet's closer: the closing fields are ours,
			// written once its writers have committed.
			ls.close_pending = true;
			ls.close_start = start;
			ls.close_off = off;
			if (start < info_.lane_stride) // lap 0: not the writers' bytes (lane_busy)
				ls.closed_gap += S - off;
			ls.close_disc = disc;
			head = start + S;
			break;
		}
	}
	return head;
}

// Which packet in [from, head) still waits for commits, and for how many
// bytes (" (packet at byte ...)"), or empty: a writer stalled inside its
// reservation, or a commit that never comes, read the same here.
std::string Reader::waiting_packet(const LaneState &ls, const strata_lane_ctl *lc, uint64_t from,
				   uint64_t head) const
{
	const uint64_t S = info_.subbuf_size, stride = info_.lane_stride;
	for (uint64_t p = from; p < head; p += S) {
		const uint64_t expected = (p / stride + 1) * S;
		const uint64_t got = committed(lc, (p / S) & (info_.n_subbuf - 1));
		if (got >= expected)
			continue;
		// This lap's bytes in: the writers' (and, once theirs are all in,
		// the closer's rest; a close of ours waits for them).
		const uint64_t lap0 = expected - S, in = got > lap0 ? got - lap0 : 0;
		const bool ours = ls.close_pending && ls.close_start == p;
		return " (packet at byte " + std::to_string(p) + ": " + std::to_string(in) + " of " +
		       std::to_string(ours ? ls.close_off : S) + " bytes committed" +
		       (ours ? ", the rest closed by us" : "") + ")";
	}
	return std::string();
}

FlushStatus Reader::flush(uint32_t lane, bool producer_dead, int timeout_ms, std::string *msg)
{
	if (lane >= info_.n_lanes) {
		*msg = "no such lane";
		return FlushStatus::kDone;
	}
	LaneState &ls = lanes_[lane];
	// A retired buffer (its slot closed, its mapping private) is written
	// no more, as a dead producer's: nothing to wait for.
	ls.producer_dead = ls.producer_dead || producer_dead || producer_retired();
	strata_lane_ctl *lc = lane_ctl(lane);
	const uint64_t S = info_.subbuf_size, stride = info_.lane_stride;
	const uint64_t deadline = monotonic_now() + (uint64_t)std::max(timeout_ms, 0) * 1000000u;
	// An earlier close of ours still waiting for its writers comes first:
	// one pending close per lane.
	while (!finish_close(lane, ls.producer_dead, msg)) {
		if (monotonic_now() >= deadline) {
			*msg = "lane " + std::to_string(lane) + ": an earlier close still waits for commits";
			return FlushStatus::kPending;
		}
		flush_pause();
	}
	// A dead producer writes nothing: no handshake.
	const bool handshake = fast_owner_ && lane < info_.first_shared && !ls.producer_dead;
	if (handshake && !owner_handshake(lane, lc, deadline, msg))
		return FlushStatus::kPending;
	const uint64_t head = close_open_packet(ls, lc);
	// Release: our CAS before the owner's next unlocked one.
	if (handshake)
		__atomic_sub_fetch(&lc->close_req, 1, __ATOMIC_RELEASE);
	if ((head & (S - 1)) != 0) {
		*msg = "lane " + std::to_string(lane) + ": writers kept the packet open; not closed";
		return FlushStatus::kPending;
	}
	// Wait (bounded) until our close is done and every closed packet from
	// rpos to head is complete.
	uint64_t from = head - ls.rpos > stride ? head - stride : ls.rpos;
	for (;;) {
		bool all = finish_close(lane, false, msg);
		for (uint64_t p = from; p < head && all; p += S) {
			uint64_t expected = (p / stride + 1) * S;
			all = committed(lc, (p / S) & (info_.n_subbuf - 1)) >= expected;
		}
		if (all)
			return FlushStatus::kDone;
		if (monotonic_now() >= deadline)
			break;
		flush_pause();
	}
	if (ls.producer_dead) {
		if (cut_pending(lane, msg))
			return FlushStatus::kDone; // what was committed is kept; *msg says the cut
		*msg = "lane " + std::to_string(lane) +
		       ": a packet never completed (its producer gone between reserve and commit); it is "
		       "dropped";
		return FlushStatus::kDropped;
	}
	*msg = "lane " + std::to_string(lane) + ": commits still in flight at the deadline" +
	       waiting_packet(ls, lc, from, head);
	return FlushStatus::kPending;
}

strata_packet_header Reader::empty_header(uint32_t lane, uint64_t ts) const
{
	strata_packet_header ph{};
	ph.magic = STRATA_CTF_MAGIC;
	memcpy(ph.uuid, info_.uuid, 16);
	ph.stream_id = info_.lane_stream_id(lane);
	ph.stream_instance_id = lane;
	ph.timestamp_begin = ph.timestamp_end = ts;
	ph.vtid = info_.record_format == STRATA_REC_COMPACT && lane < info_.first_shared ? 0 : -1;
	ph.content_size = header_only_content();
	ph.packet_size = kHdr * 8;
	ph.lane_id = lane;
	return ph;
}

bool Reader::trailing_loss_packet(uint32_t lane, std::vector<uint8_t> *out)
{
	if (lane >= info_.n_lanes)
		return false;
	LaneState &ls = lanes_[lane];
	uint64_t d = lane_discarded(lane);
	if (d > ls.last_discarded && d - ls.last_discarded > loss_bound(ls, now())) {
		stats_.bad_loss_counts++; // scribbled: says nothing (docs/ring-buffer.md)
		d = ls.last_discarded;
	}
	// Packets skipped after the last one returned (corrupt, or never
	// completed) show as a gap in the sequence numbers: babeltrace2
	// reports them as discarded packets.
	const uint64_t seq = std::max(ls.next_seq, ls.rpos / info_.subbuf_size);
	if (d < ls.last_discarded)
		d = ls.last_discarded; // never backwards (a scribbled counter)
	if (d == ls.last_discarded && seq == ls.next_seq && !ls.overwritten_unsaid)
		return false;
	strata_packet_header ph = empty_header(lane, ls.have_packet ? ls.last_ts_end : now());
	ph.packet_seq_num = seq;
	ph.events_discarded = d;
	accept_packet(ls, ph);
	ph.events_discarded += ls.cut_events + ls.overwritten; // the trace's count (check_records)
	ls.overwritten_unsaid = false;
	out->resize(kHdr);
	memcpy(out->data(), &ph, kHdr);
	return true;
}

bool Reader::stream_overwrite(bool producer_dead)
{
	// Every producer of ABI 2 knows the flag (ABI 1.2 introduced it).
	if (info_.mode != STRATA_MODE_OVERWRITE)
		return false;
	auto *h = (strata_buffer_header *)base_;
	// Seq_cst: before the loads of head and the stores of consumed below;
	// pairs with the writers' acquire load of flags in subbuf_free.
	__atomic_fetch_or(&h->flags, STRATA_BUF_STREAMED, __ATOMIC_SEQ_CST);
	const uint64_t S = info_.subbuf_size, stride = info_.lane_stride;
	for (uint32_t l = 0; l < info_.n_lanes; l++) {
		LaneState &ls = lanes_[l];
		// Acquire: as in peek_packet.  B: the open sub-buffer.  The ring
		// holds [B - stride + S, B]; its oldest is what the next open
		// reuses (a writer that loaded the flag before we set it may still
		// do so), so start one after it, unless the producer is dead.
		const uint64_t head = __atomic_load_n(&lane_ctl(l)->head, __ATOMIC_ACQUIRE);
		const uint64_t B = head & ~(S - 1);
		const uint64_t keep = producer_dead ? stride : stride - S; // nobody can reuse the oldest
		ls.rpos = B + S > keep ? B + S - keep : 0;
		ls.next_seq = ls.rpos / S;
		// Release: pairs with the writers' acquire load of consumed.
		__atomic_store_n(&lane_ctl(l)->consumed, ls.rpos, __ATOMIC_RELEASE);
	}
	info_.mode = STRATA_MODE_DISCARD;
	return true;
}

size_t Reader::collect_overwrite(uint32_t lane, int timeout_ms, std::vector<std::vector<uint8_t>> *out,
				 std::string *msg)
{
	if (lane >= info_.n_lanes)
		return 0;
	strata_lane_ctl *lc = lane_ctl(lane);
	// Before our close (count_overwritten).  Acquire: with the writers'
	// release adds of the commits that follow their adds to it.
	const uint64_t records = __atomic_load_n(&lc->records, __ATOMIC_ACQUIRE);
	flush(lane, false, timeout_ms, msg);
	LaneState &ls = lanes_[lane];
	const uint64_t S = info_.subbuf_size, stride = info_.lane_stride;
	// Acquire: pairs with the writers' acq_rel CAS on head.
	uint64_t head = __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE);
	uint64_t end = head & ~(S - 1); // a packet still open at `end` is not taken
	uint64_t from = end >= stride ? end - stride : 0;
	from = std::max(from, ls.rpos);
	const size_t first = out->size();
	const uint64_t cuts = stats_.cut_packets;
	const bool lead = !ls.have_packet; // the lane's first packets
	std::vector<uint8_t> pkt;
	for (uint64_t p = from; p < end; p += S) { // at most n_subbuf iterations
		const uint64_t expected = (p / stride + 1) * S;
		// Complete for p's lap, bytes visible (committed(): acquire).
		if (committed(lc, (p / S) & (info_.n_subbuf - 1)) != expected) {
			stats_.lapped_packets++;
			continue;
		}
		pkt.assign(subbuf_at(lane, p), subbuf_at(lane, p) + S);
		// Seqlock check.  Acquire fence: pairs with the writer's release
		// fence after its head CAS; if our copy saw any byte of a writer's
		// next lap, this head load sees that writer's CAS.
		std::atomic_thread_fence(std::memory_order_acquire);
		if (__atomic_load_n(&lc->head, __ATOMIC_RELAXED) > p + stride) {
			stats_.lapped_packets++;
			continue;
		}
		std::string err;
		if (!validate_packet(lane, p, &pkt, &err)) {
			if (msg->empty())
				*msg = err;
			continue;
		}
		strata_packet_header ph;
		memcpy(&ph, pkt.data(), sizeof ph);
		accept_packet(ls, ph);
		pkt.resize(check_records(lane, pkt.data(), pkt.size(), &err));
		if (!err.empty() && msg->empty())
			*msg = err;
		out->push_back(pkt);
	}
	ls.rpos = std::max(ls.rpos, end);
	count_overwritten(lane, records, out, first, stats_.cut_packets - cuts, lead);
	// Release: informational for overwrite mode (writers do not read it).
	if (!snapshot_)
		__atomic_store_n(&lc->consumed, ls.rpos, __ATOMIC_RELEASE);
	return out->size() - first; // with a leading packet (count_overwritten)
}

// What the ring overwrote in `lane` up to the packets collect_overwrite
// just appended to *out (from `first` on): the lane's `records` count
// (writers add it before each commit, ABI 3.2 COMPACT buffers), read
// before our close, minus the records accounted before and the records of
// those packets.  Every record counted then lies before the close, so this
// is exact once the writers are quiet (a stop, a snapshot between bursts)
// and never more than was lost while they write (what they commit
// meanwhile is not counted).  A packet cut at a bad record (`cuts` of
// them) already counts one event of what it lost.  The count is the
// producer's: one beyond a record per 4 bytes written (the smallest
// record) or going backwards is ignored (bad_loss_counts), as a scribbled
// events_discarded is.
void Reader::count_overwritten(uint32_t lane, uint64_t records, std::vector<std::vector<uint8_t>> *out,
			       size_t first, uint64_t cuts, bool lead)
{
	if (info_.record_format != STRATA_REC_COMPACT || info_.abi_minor < 2)
		return;
	LaneState &ls = lanes_[lane];
	uint64_t kept = 0;
	for (size_t i = first; i < out->size(); i++)
		kept += count_records(lane, (*out)[i].data(), (*out)[i].size());
	// Acquire: as lane_position's.
	const uint64_t bound =
		__atomic_load_n(&lane_ctl(lane)->head, __ATOMIC_ACQUIRE) / STRATA_REC_COMPACT_SIZE;
	uint64_t lost = 0;
	if (records > bound || records < ls.records_seen) {
		stats_.bad_loss_counts++;
		ls.records_seen += kept;
	} else {
		lost = records - ls.records_seen >= kept ? records - ls.records_seen - kept : 0;
		lost -= std::min(lost, cuts);
		ls.records_seen = std::max(records, ls.records_seen + kept);
	}
	ls.overwritten += lost;
	if (first == out->size()) {
		ls.overwritten_unsaid = ls.overwritten_unsaid || lost != 0;
		return;
	}
	ls.overwritten_unsaid = false;
	for (size_t i = first; i < out->size(); i++) {
		strata_packet_header ph;
		memcpy(&ph, (*out)[i].data(), sizeof ph);
		ph.events_discarded += ls.overwritten;
		memcpy((*out)[i].data(), &ph, sizeof ph);
	}
	// babeltrace2 gives no count for a loss before a stream's first
	// packet ("may have discarded"): a header-only packet before it, the
	// one before in sequence, with nothing discarded, makes the first
	// packet's count a difference it reports.
	strata_packet_header ph;
	memcpy(&ph, (*out)[first].data(), sizeof ph);
	if (!lead || ph.packet_seq_num == 0 || ph.events_discarded == 0)
		return;
	strata_packet_header lp = empty_header(lane, ph.timestamp_begin);
	lp.packet_seq_num = ph.packet_seq_num - 1;
	std::vector<uint8_t> pkt(kHdr);
	memcpy(pkt.data(), &lp, kHdr);
	out->insert(out->begin() + (ptrdiff_t)first, std::move(pkt));
}

void Reader::set_snapshot()
{
	snapshot_ = true;
	for (LaneState &ls : lanes_) {
		ls.rpos = 0;
		ls.next_seq = 0;
	}
}

namespace {

// An enumeration's labels (df.n_labels at df.labels_off of the record) into
// f->labels, a RANGE_END label closing the range its predecessor opened;
// false when they do not check.
bool parse_enum_labels(const uint8_t *rec, uint32_t size, const strata_desc_field &df, FieldInfo *f)
{
	bool ok = df.n_labels >= 1 && df.labels_off % 8 == 0 &&
		  df.n_labels <= size / sizeof(strata_desc_enum_label) && df.labels_off <= size &&
		  (uint64_t)df.n_labels * sizeof(strata_desc_enum_label) <= size - df.labels_off;
	for (uint32_t l = 0; ok && l < df.n_labels; l++) {
		strata_desc_enum_label el;
		memcpy(&el, rec + df.labels_off + l * sizeof el, sizeof el);
		if (el.flags == STRATA_DESC_LABEL_RANGE_END) {
			ok = !f->labels.empty() && f->labels.back().first == f->labels.back().last &&
			     el.value > f->labels.back().first;
			if (ok)
				f->labels.back().last = el.value;
			continue;
		}
		const char *lab = record_str(rec, size, el.label_off);
		ok = el.flags == 0 && lab && valid_label(lab, size - el.label_off);
		if (ok)
			f->labels.push_back(EnumLabel{lab, el.value, el.value});
	}
	return ok;
}

// Whether field df's type, element bits, base and length (or labels)
// describe a field this reader can walk; f takes its length and labels.
bool parse_field_type(const uint8_t *rec, uint32_t size, const strata_desc_field &df, FieldInfo *f)
{
	const bool ints = valid_int_bits(df.elem_bits) && df.is_signed <= 1;
	switch (df.type) {
	case STRATA_FT_INTEGER:
	case STRATA_FT_SEQUENCE:
		return ints && valid_base(df.base);
	case STRATA_FT_ARRAY:
		f->length = df.length;
		return ints && valid_base(df.base) && df.length >= 1 && df.length <= kMaxArrayLength;
	case STRATA_FT_FLOAT:
		return df.elem_bits == 32 || df.elem_bits == 64;
	case STRATA_FT_STRING:
		return df.elem_bits == 8;
	case STRATA_FT_ENUM:
		return ints && parse_enum_labels(rec, size, df, f);
	default:
		return false;
	}
}

} // namespace

bool Reader::parse_descriptor(const uint8_t *rec, uint32_t size, EventInfo *ev, std::string *err)
{
	strata_desc_event de;
	memcpy(&de, rec, sizeof de);
	const char *prov = record_str(rec, size, de.provider_off);
	const char *name = record_str(rec, size, de.name_off);
	if (!prov || !name || !valid_identifier(prov, size - de.provider_off) ||
	    !valid_identifier(name, size - de.name_off)) {
		*err = "bad provider or event name";
		return false;
	}
	std::string where = std::string(prov) + ":" + name + ": ";
	if (de.id > 0xfffe || std::find(seen_ids_.begin(), seen_ids_.end(), de.id) != seen_ids_.end()) {
		*err = where + "bad or duplicate event id " + std::to_string(de.id);
		return false;
	}
	if (de.loglevel > 15 || de.n_fields > STRATA_DESC_MAX_FIELDS ||
	    sizeof de + (uint64_t)de.n_fields * sizeof(strata_desc_field) > size) {
		*err = where + "bad loglevel or field count";
		return false;
	}
	ev->id = de.id;
	ev->provider = prov;
	ev->name = name;
	ev->loglevel = de.loglevel;
	ev->fields.clear();
	for (uint32_t i = 0; i < de.n_fields; i++) {
		strata_desc_field df;
		memcpy(&df, rec + sizeof de + i * sizeof df, sizeof df);
		const char *fname = record_str(rec, size, df.name_off);
		if (!fname || !valid_identifier(fname, size - df.name_off)) {
			*err = where + "bad field name";
			return false;
		}
		FieldInfo f;
		f.name = fname;
		f.type = df.type;
		f.elem_bits = df.elem_bits;
		f.is_signed = df.is_signed != 0;
		f.base = df.base;
		const std::string fw = where + "field " + f.name + ": ";
		for (const FieldInfo &g : ev->fields)
			if (g.name == f.name) {
				*err = fw + "duplicate field name";
				return false;
			}
		if (!parse_field_type(rec, size, df, &f)) {
			*err = fw + "bad type description (type " + std::to_string(df.type) + ")";
			return false;
		}
		ev->fields.push_back(std::move(f));
	}
	seen_ids_.push_back(de.id);
	return true;
}

// Parses the records appended to the table since the last call into
// known_ (errors kept for the caller).  False once the table is broken.
bool Reader::absorb_descriptors()
{
	if (desc_broken_)
		return false;
	auto *h = (strata_buffer_header *)base_;
	// Acquire: pairs with the producer's release store of desc_used after
	// it appended the records (publish_descriptors).
	uint64_t used = __atomic_load_n(&h->desc_used, __ATOMIC_ACQUIRE);
	const uint8_t *table = base_ + info_.desc_offset;
	auto broken = [&](const std::string &why) {
		desc_broken_ = true;
		stats_.descriptor_errors++;
		desc_errors_.push_back("descriptor table at byte " + std::to_string(desc_read_) + ": " + why +
				       "; no further events of this buffer can be described");
		return false;
	};
	if (used > info_.desc_capacity || used < desc_read_ || used % 8 != 0)
		return broken("bad desc_used " + std::to_string(used));
	std::vector<uint8_t> rec;
	while (desc_read_ < used) { // each round advances by >= 24 bytes, or stops
		uint64_t left = used - desc_read_;
		uint32_t size;
		if (left < sizeof(strata_desc_event))
			return broken("truncated record");
		memcpy(&size, table + desc_read_, sizeof size);
		if (size < sizeof(strata_desc_event) || size % 8 != 0 || size > STRATA_DESC_MAX_RECORD ||
		    size > left)
			return broken("bad record_size " + std::to_string(size));
		rec.assign(table + desc_read_, table + desc_read_ + size); // copy, then validate
		memcpy(&rec[0], &size, sizeof size); // the size we bounded, whatever changed since
		EventInfo ev;
		std::string err;
		if (parse_descriptor(rec.data(), size, &ev, &err)) {
			if (by_id_.size() <= ev.id) // ids are <= 0xfffe (parse_descriptor)
				by_id_.resize(ev.id + 1, -1);
			by_id_[ev.id] = (int32_t)known_.size();
			walk_.add(ev);
			known_.push_back(std::move(ev));
		} else {
			stats_.descriptor_errors++;
			desc_errors_.push_back("descriptor at byte " + std::to_string(desc_read_) + ": " +
					       err);
		}
		desc_read_ += size;
	}
	return true;
}

void Reader::peek_events(size_t from, std::vector<EventInfo> *out)
{
	absorb_descriptors(); // its errors stay for read_new_events
	if (from < known_.size())
		out->insert(out->end(), known_.begin() + (ptrdiff_t)from, known_.end());
}

bool Reader::read_new_events(std::vector<EventInfo> *out, std::vector<std::string> *errors)
{
	bool ok = absorb_descriptors();
	out->insert(out->end(), known_.begin() + (ptrdiff_t)known_returned_, known_.end());
	known_returned_ = known_.size();
	errors->insert(errors->end(), desc_errors_.begin(), desc_errors_.end());
	desc_errors_.clear();
	return ok;
}

} // namespace strata
