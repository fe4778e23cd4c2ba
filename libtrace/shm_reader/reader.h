/*
 * reader.h - the consumer side of a trace buffer (strata_abi.h): attach to a
 * buffer's memfd, read its event descriptors, copy complete packets out of
 * its lanes, close packets the producer left open, account for loss.
 *
 * The mapping is HOSTILE: the producer (or anything else holding the fd)
 * may write any byte at any time.  The reader validates a private copy of
 * the header once at attach and never re-reads geometry from shared memory;
 * every packet and descriptor is copied out before it is validated; every
 * offset is bounded with overflow-safe arithmetic; every loop is bounded.
 * A bad packet or descriptor is skipped and reported, never trusted.
 *
 * Threading: one Reader per buffer, used by one thread at a time (the
 * consumer's drain thread).  Writers in the producer run concurrently.
 *
 * Usage (discard mode, streaming):
 *     auto r = strata::Reader::attach(fd, &err);
 *     loop: r->read_new_events(&events, &errors)  (before packets: a packet
 *           may use an event id first described in the same round)
 *           for each lane: while (r->next_packet(lane, &pkt, &err) != kEmpty) ...
 *           r->wait(seq, timeout) with seq = r->prepare_wait() taken before
 *           the round's last check
 *     stop / producer exit: for each lane: r->flush(lane, dead, timeout),
 *           drain as above, r->trailing_loss_packet(lane, &pkt)
 * Overwrite mode (flight recorder): at stop, r->collect_overwrite(lane, ...)
 * then r->trailing_loss_packet(lane, &pkt).
 */
#ifndef STRATA_LIBTRACE_READER_H
#define STRATA_LIBTRACE_READER_H

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata_abi.h"
#include "event_info.h"
#include "record_walk.h"

namespace strata {

// The validated geometry and identity of a buffer (a private copy).
struct BufferInfo {
	uint32_t abi_major = 0, abi_minor = 0;
	uint64_t total_size = 0;
	uint32_t pid = 0, uid = 0;
	std::string comm;
	std::string channel;
	uint8_t uuid[16] = {};
	uint32_t stream_id = 0; // of owned lanes; shared lanes: stream_id + 1 (COMPACT)
	uint32_t mode = 0;      // enum strata_channel_mode
	uint32_t n_lanes = 0;
	uint32_t record_format = STRATA_REC_WIDE;
	uint32_t first_shared = 0; // COMPACT: lanes from here on are shared
	// The CTF stream class of a lane's packets.
	uint32_t lane_stream_id(uint32_t lane) const
	{
		return record_format == STRATA_REC_COMPACT && lane >= first_shared ? stream_id + 1
										   : stream_id;
	}
	uint32_t n_subbuf = 0;
	uint64_t subbuf_size = 0;
	uint32_t clock_id = 0; // enum strata_clock_id
	uint64_t desc_offset = 0, desc_capacity = 0;
	uint64_t lanes_offset = 0, data_offset = 0, lane_stride = 0;
};

enum class ReadStatus {
	kPacket,  // *out holds one validated packet, ready to append to the stream file
	kEmpty,   // nothing complete right now
	kSkipped, // a packet was dropped (corrupt, or incomplete after its producer died); see err
};

enum class FlushStatus {
	kDone,    // nothing open, or closed and every commit arrived
	kPending, // producer alive, some commit still in flight at the deadline
	kDropped, // producer dead, an incomplete packet will be skipped (reported)
};

struct ReaderStats {
	uint64_t packets = 0;            // returned as kPacket (synthesized ones included)
	uint64_t corrupt_packets = 0;    // failed validation, skipped
	uint64_t discards_clamped = 0;   // events_discarded below the last packet's: raised to it
	uint64_t incomplete_dropped = 0; // never completed by a dead producer, skipped
	uint64_t lapped_packets = 0;     // overwrite mode: overwritten while being copied
	uint64_t descriptor_errors = 0;  // bad descriptor records
	uint64_t close_ts_fallbacks = 0; // consumer closes whose records did not decode:
					 // timestamp_end from the consumer's clock (reported)
	uint64_t cut_packets = 0;        // cut at a bad record (check_records)
	uint64_t cut_short = 0;          // our closes cut at the last committed record (cut_short)
	uint64_t bad_loss_counts = 0;    // a lane's final events_discarded out of bounds: ignored
	uint64_t ahead_allocated = 0;    // bytes populate_ahead allocated with fallocate
	uint64_t ahead_huge = 0;         // bytes populate_ahead made as 2 MiB pages (MADV_COLLAPSE)
	uint64_t file_read = 0;          // bytes copy_out read from the buffer's file (pread)
	uint64_t file_short = 0;         // bytes past the buffer's file's end (a producer
					 // truncated it): zeros in the copy, cut by its walk
};

class Reader {
public:
	// Maps the buffer (the fd may be closed afterwards).  nullptr and *err
	// on a buffer that is not a valid strata buffer of this ABI major.
	static std::unique_ptr<Reader> attach(int fd, std::string *err);
	// Whether this process's readers read rings by their files
	// (reader_file.cpp): the first call probes a first touch's cost (0.5-2
	// ms on the PVM guest), so a daemon asks at start-up, before it says
	// it is ready; asked first by an attach, the probe made a busy writer's
	// first lap run 0.5-2 ms past the pages made ahead of it.
	static bool file_reading_wanted();
	~Reader();
	Reader(const Reader &) = delete;
	Reader &operator=(const Reader &) = delete;

	const BufferInfo &info() const { return info_; }

	// Descriptors appended since the last call, validated.  A bad record is
	// skipped with a message in *errors; a record whose size is unusable
	// stops the table for good (it cannot be resynchronised).  Returns
	// false if the table is broken.
	bool read_new_events(std::vector<EventInfo> *out, std::vector<std::string> *errors);
	// The events described so far from the `from`-th on (after reading
	// the new descriptors), without taking them from read_new_events: the
	// drain shares them with the daemon's filter checks before any packet.
	void peek_events(size_t from, std::vector<EventInfo> *out);

	// Copy the next complete packet of `lane` (discard mode streaming),
	// validate it, shrink packet_size to the content, release the
	// sub-buffer to the writers.
	ReadStatus next_packet(uint32_t lane, std::vector<uint8_t> *out, std::string *err);

	// The same without the copy: *hdr receives the validated header (a
	// private copy, packet_size shrunk to the content) and *body points at
	// the rest of the content IN THE MAPPING (hostile bytes, like the
	// records of a copied packet).  The sub-buffer stays unavailable to the
	// writers until release(lane): write the body out before.  Successive
	// calls return successive packets; release(lane) frees them all, the
	// skipped ones too.
	// The n bytes at `src` (a body peek_packet returned, or any range of
	// the mapping) into dst: read from the buffer's file where the first
	// touch of a page in our mapping traps (a VM whose hypervisor shadows
	// the guest's page tables: 5-6 us a page there, pread 0.3-0.5 us;
	// docs/consumerd.md, "Reading the ring by its file"), else copied from
	// the mapping.  The same hostile bytes either way.
	void copy_out(const uint8_t *src, size_t n, uint8_t *dst);
	// True while copy_out reads the file (it stops after kFileLaps laps of
	// the buffer's data, and a page of the mapping touched every
	// kTouchShare read after them: from then on, the mapping's first
	// touches cost less than the file's reads still would).
	bool reads_by_file() const { return by_file_; }
	static constexpr uint64_t kFileLaps = 32, kTouchShare = 8;
	// Choose for this Reader, whatever the probe said (tests, tools): on
	// (where its buffer's file is at hand) for another kFileLaps laps, or off.
	void read_by_file(bool on);

	ReadStatus peek_packet(uint32_t lane, strata_packet_header *hdr, const uint8_t **body,
			       size_t *body_len, std::string *err);
	void release(uint32_t lane);

	// The records of a packet copied out of the ring (pkt: the header as
	// peek_packet returned it, then the body copied from the mapping; len
	// bytes, the content), decoded with the stream's descriptors exactly as
	// a CTF reader will: each record inside the content, of a described
	// event id, its fields inside the content (strings terminated,
	// sequence lengths in bounds), its timestamp not before the previous
	// record's (timestamp_begin for the first) nor after timestamp_end.
	// The packet is cut after its last good record (content_size and
	// packet_size rewritten; *err says where and why, else it is
	// cleared): the rest is counted as one discarded event, carried in
	// this packet's events_discarded and every later one's (and the
	// trailing-loss packet's).  Returns the packet's length now.  The
	// stream resumes at the next packet that passes (docs/ring-buffer.md,
	// "Records are never trusted").  next_packet and collect_overwrite
	// call it; a peek_packet caller calls it on its own copy.
	size_t check_records(uint32_t lane, uint8_t *pkt, size_t len, std::string *err);
	// A checked packet (check_records passed it, header included) cut at
	// record boundaries into pieces whose records take at most max_bytes
	// each (a record larger than that is a piece of its own), for an
	// output that carries small packets (the serial line, docs/serial.md,
	// "Small packets").  Appends to *out, in order: [begin, end) the bytes
	// of the piece's records in pkt (begin aligned as the records are, so
	// that they keep their alignment at the packet offset kHdr), ts_begin
	// the timestamp a packet of them starts at (the packet's
	// timestamp_begin for the first, the previous record's timestamp for
	// the others: the reference a CTF reader rebuilds a compact timestamp
	// from), ts_end the last record's (the packet's timestamp_end for the
	// last piece), records their number.  A packet without records is one
	// piece without records.
	struct Piece {
		uint64_t begin = 0, end = 0, ts_begin = 0, ts_end = 0, records = 0;
	};
	void cut_packet(uint32_t lane, const uint8_t *pkt, size_t len, size_t max_bytes,
			std::vector<Piece> *out);
	// Some lane's writers are a whole sub-buffer past our read position
	// (peek_packet would give a packet, a skip, or wait for a commit in
	// flight).  No side effect: for a drain that waits for its first packet.
	bool has_packet() const;

	// Consumer-side close of the lane's open packet (stop, producer exit),
	// then wait up to timeout_ms for in-flight commits.  With
	// producer_dead, packets that never complete are dropped by the next
	// next_packet calls (counted, reported).
	// The close's timestamp_end comes from the producers' side, never from
	// our clock: the largest record timestamp of the packet, found by
	// walking its records with the descriptors once every writer that
	// reserved in it has committed (the close's own commit waits for that,
	// here or in a later next_packet/flush).  So timestamp_begin <=
	// timestamp_end <= the next packet's timestamp_begin whatever the
	// offset between the producers' clock and ours (docs/ring-buffer.md).
	FlushStatus flush(uint32_t lane, bool producer_dead, int timeout_ms, std::string *msg);
	// After a flush that returned kPending, as the lane is left (a stop):
	// our close whose writers did not all commit by then (one stopped,
	// killed or left inside its reservation) is cut after its last whole
	// committed record, the rest counted as one discarded event, so that
	// the records before it reach the trace.  True when it cut (*msg).
	bool cut_pending(uint32_t lane, std::string *msg);

	// If events were discarded after the last packet returned for `lane`,
	// a header-only packet (88 bytes; content_size 84*8: it ends after
	// lane_id, the last field the metadata declares) carrying the final
	// cumulative count, so that recorded + discarded == emitted holds in
	// babeltrace2.  Call last.
	bool trailing_loss_packet(uint32_t lane, std::vector<uint8_t> *out);
	// Before trailing_loss_packet: the zero-count packet that lets
	// babeltrace2 count a lane's loss when the trailing packet would be its
	// stream's first (reader_flush.cpp).
	bool lead_loss_packet(uint32_t lane, std::vector<uint8_t> *out);
	// The header of a packet of `lane` without records, as
	// trailing_loss_packet makes it, stamped ts (begin and end), sequence
	// number 0, no discarded count; the reader's state is untouched.  For
	// an output that must show a lane's stream before its first packet
	// (relay.cpp, docs/relay.md "Live").
	strata_packet_header empty_header(uint32_t lane, uint64_t ts) const;

	// Overwrite mode: close the open packet, then copy the newest complete
	// sub-buffers of the lane, oldest first, dropping any the writers lap
	// while they are being copied.  Returns the number appended to *out.
	// The records the ring overwrote before them (the lane's `records`
	// count, ABI 3.2, minus the records this reader took) are counted as
	// discarded from the first packet appended on (or by the trailing-loss
	// packet when none is), as check_records counts a cut; before the
	// lane's first packet with a count and a sequence number above 0, a
	// header-only packet (the sequence number before, nothing discarded),
	// so that a CTF reader reports the count.
	size_t collect_overwrite(uint32_t lane, int timeout_ms, std::vector<std::vector<uint8_t>> *out,
				 std::string *msg);

	// A second reader of an overwrite-mode buffer taking a snapshot (the
	// drain's reader stays the consumer): collect_overwrite then starts
	// from the oldest data whatever `consumed` says, and never stores
	// `consumed`.  Call right after attach.
	void set_snapshot();

	// An overwrite-mode buffer from now on drained as it fills, keeping
	// its history: sets STRATA_BUF_STREAMED (writers then wait for
	// `consumed` as in discard mode), and starts each lane one sub-buffer
	// after the oldest still in the ring (that one is the next a writer
	// unaware of the flag could reuse; with producer_dead, at the oldest:
	// nobody writes any more); next_packet/peek_packet then read
	// from there.  What the ring overwrote before is counted by the first
	// packet's sequence number.  Call once, before reading packets.
	// False (nothing changed) for a discard-mode buffer, or a producer of
	// ABI minor < 2, which does not know the flag.
	bool stream_overwrite(bool producer_dead = false);

	// A consumer that takes over a buffer another consumer drained (the
	// daemon restarted, docs/crash.md): `lane` continues a stream file
	// whose last whole packet is `last_seq`, with cumulative
	// `last_discarded` and `last_ts_end`.  The next packet returned is
	// last_seq + 1 (the ones before it are on disk: released, not read
	// again), and its counters must follow on.  Call right after attach,
	// before reading; false (nothing changed) if last_seq + 1 lies beyond
	// the lane's write position (not this buffer's stream).
	bool resume(uint32_t lane, uint64_t last_seq, uint64_t last_discarded, uint64_t last_ts_end);
	// Cumulative events the writers discarded in `lane` (shared counter).
	uint64_t lane_discarded(uint32_t lane) const;
	// Overwrite mode: the events the ring overwrote in `lane` as
	// collect_overwrite counted them so far (in the packets it returned).
	uint64_t lane_overwritten(uint32_t lane) const
	{
		return lane < info_.n_lanes ? lanes_[lane].overwritten : 0;
	}
	// The lane's write position (`head`, shared, unvalidated; acquire, see
	// reader.cpp): statistics and snapshot triggers.  Safe to call from
	// another thread than the one reading packets.
	uint64_t lane_position(uint32_t lane) const;
	// The producers' blocking waits that ran to their timeout so far
	// (strata_abi.h, block_timeouts; 0 from a producer before ABI 3.3).
	uint32_t block_timeouts() const;
	bool producer_exited() const;
	// STRATA_BUF_RETIRED: the producer closed the slot and none of its
	// writers reaches a lane any more (flush() then waits for none).
	bool producer_retired() const;

	// The first lap of a busy lane: the shared memory's pages allocated
	// ahead of its writer (docs/ring-buffer.md, "A busy writer's first
	// lap"), so that the writer's own populate or fault of a page only
	// maps a page that exists, about half the cost of allocating and
	// zeroing it.  A lane is busy once its `head` passed kBusyBytes (or
	// one sub-buffer, if smaller): an idle process's lanes (a few events)
	// keep their few pages.  Up to the end of the sub-buffer after the
	// writer's, never past the lane's first lap (`head` is hostile: only
	// the validated geometry bounds the range), at most *budget bytes now
	// (decreased by what was done).  Returns the bytes still to do (0:
	// caught up, or nothing to do: not busy, past lap 0); *busy says
	// whether the lane proved busy.  The pages are allocated by
	// fallocate(2) on the buffer's file and mapped by a write populate:
	// 1.8-1.9 us a page on the AMD EPYC VM measured, against 2.3-2.6 for
	// the read populate that allocates them one fault at a time (its
	// fallback: a file that cannot be allocated so).
	// Where the range reaches whole 2 MiB chunks of the file, each is made
	// as one huge page instead (huge_chunks.h; make_huge_chunk), counted
	// as kHugeCost of the budget.
	static constexpr uint64_t kBusyBytes = 64u << 10;
	static constexpr uint64_t kHugeCost = 1u << 20;
	uint64_t populate_ahead(uint32_t lane, uint64_t *budget, bool *busy);
	// Bytes the writers of `lane` are ahead of this reader (`head`, hostile,
	// less the next position to read): 0 if `head` is behind it.
	uint64_t lane_backlog(uint32_t lane) const;
	// The CPU the writer that opened `lane`'s newest packet ran on
	// (writer_cpu, ABI 3.6; shared, hostile: only a hint), or -1: unknown
	// (0, an older producer), or not a CPU number a cpu_set_t can hold.
	int lane_writer_cpu(uint32_t lane) const;

	// Waiting for data without polling: call prepare_wait() (sets
	// consumer_waiting, returns the current wake_seq), re-check every lane,
	// then wait(seq, timeout_ms) sleeps until a writer completes a
	// sub-buffer or the timeout; end_wait() clears consumer_waiting.
	uint32_t prepare_wait();
	// stop (optional): a private word of the caller's that another thread
	// sets non-zero and FUTEX_WAKEs (FUTEX_PRIVATE_FLAG) to end the wait
	// early; the wait then returns at once while it is non-zero (one
	// futex_waitv(2), Linux >= 5.16: no wake-up is lost between the
	// caller's last check and the sleep).  Without futex_waitv, or with
	// a wait fd, only the timeout ends such a wait.
	void wait(uint32_t seq, int timeout_ms, const std::atomic<uint32_t> *stop = nullptr);
	void end_wait();
	// The shared word wait() sleeps on (the header's wake_seq, in the
	// producer's memory): for a caller that waits on it by other means
	// (an io_uring futex wait, consumerd/drain_pool.cpp), with the value
	// prepare_wait() returned.  Valid while the Reader lives.
	const uint32_t *wake_word() const;
	// A wait fd was set (set_wait_fd): wake_word() is then not the way.
	bool has_wait_fd() const { return wait_fd_ >= 0; }
	// Buffers whose producers cannot FUTEX_WAKE (the kernel module's):
	// wait() then polls `fd` for POLLIN instead (the wait fd of
	// STRATA_IOC_KBUF_OPEN, readable while some lane has a complete
	// sub-buffer at its consumed position).  Takes ownership of fd.
	void set_wait_fd(int fd);

	const ReaderStats &stats() const { return stats_; }

	// Clock used to stamp synthesized packets (a trailing-loss packet of a
	// lane that returned none) and, as a reported fallback, a consumer
	// close whose records do not decode; CLOCK_MONOTONIC unless set.
	void set_clock(uint64_t (*now)()) { clock_ = now; }
	// Packets whose timestamp_end lies ahead of now() are accepted: for a
	// buffer read out of a crash image, whose writers' clock is not ours.
	void skip_future_check() { no_future_check_ = true; }

private:
	struct LaneState {
		uint64_t rpos = 0;   // next position to read (private copy)
		uint64_t mapped = 0; // first lap: [0, mapped) populated in our mapping (map_ahead)
		uint64_t ahead = 0;  // first lap: populated up to here ahead of the writer (populate_ahead)
		uint64_t small_until = 0; // a chunk refused: 4 KiB pages up to here (populate_ahead)
		uint64_t leave_from = 0;  // ... but none made from here (the writer's collapse)
		uint64_t closed_gap =
			0; // first lap: bytes our closes cut off the packets they ended (lane_busy)
		uint64_t last_ts_end = 0;
		uint64_t last_discarded = 0; // events_discarded of the last packet returned
		uint64_t next_seq = 0;       // seq of the next packet to return
		bool have_packet = false;
		bool producer_dead = false;
		// A consumer-side close whose closing fields and commit wait for
		// the writers' commits (finish_close): packet at close_start,
		// close_off bytes reserved, the lane's events_discarded read
		// before the close CAS (a later close reads a count at least as
		// large).  One at a time per lane.
		bool close_pending = false;
		uint64_t close_start = 0, close_off = 0, close_disc = 0;
		uint64_t cut_events = 0; // events lost to cut packets (check_records), cumulative
		// Overwrite mode (collect_overwrite): the lane's `records` count
		// accounted for so far, the records the ring overwrote
		// (cumulative, in every later packet's events_discarded), and
		// whether the last of them is in no packet yet.
		uint64_t records_seen = 0, overwritten = 0;
		bool overwritten_unsaid = false;
	};

	Reader() = default;
	bool validate_header(uint32_t lane, uint64_t pos, strata_packet_header *ph, std::string *err);
	bool validate_packet(uint32_t lane, uint64_t pos, std::vector<uint8_t> *pkt, std::string *err);
	void accept_packet(LaneState &ls, const strata_packet_header &ph);
	bool parse_descriptor(const uint8_t *rec, uint32_t size, EventInfo *ev, std::string *err);
	bool absorb_descriptors();
	bool finish_close(uint32_t lane, bool give_up, std::string *msg);
	// flush()'s steps.
	bool owner_handshake(uint32_t lane, strata_lane_ctl *lc, uint64_t deadline, std::string *msg);
	uint64_t close_open_packet(LaneState &ls, strata_lane_ctl *lc);
	std::string waiting_packet(const LaneState &ls, const strata_lane_ctl *lc, uint64_t from,
				   uint64_t head) const;
	bool cut_short(uint32_t lane, uint64_t in, std::string *msg);
	bool close_hole(uint32_t lane, uint64_t in, std::vector<uint8_t> *pkt, uint64_t *ts);
	uint64_t count_records(uint32_t lane, const uint8_t *pkt, size_t len); // validate.cpp
	uint64_t walk_starts(const uint8_t *pkt, uint64_t end, bool shared, uint64_t *ts,
			     std::vector<uint64_t> *at); // validate.cpp
	void copy_laps(uint32_t lane, uint64_t from, uint64_t end, std::vector<std::vector<uint8_t>> *out,
		       std::string *msg);
	void count_overwritten(uint32_t lane, uint64_t records, std::vector<std::vector<uint8_t>> *out,
			       size_t first, uint64_t cuts, bool lead, uint64_t expect_seq);
	bool snapshot_ = false;   // set_snapshot()
	bool fast_owner_ = false; // STRATA_BUF_FAST_OWNER at attach: flush() shakes hands with owners
	// validate.cpp: the record walk of check_records and finish_close
	// (record_walk.h, shared with the trace file reader); Absorb, its
	// visitor (and cut_packet's visitor's base), reads the descriptors
	// appended since when an id is undescribed.
	struct Absorb;
	uint64_t walk_records(const uint8_t *pkt, uint64_t end, bool shared, uint64_t ts_max, uint64_t *ts,
			      const char **why);
	uint64_t header_only_content() const; // content_size (bits) of a packet without records
	uint64_t loss_bound(const LaneState &ls, uint64_t ts) const;
	void map_ahead(uint32_t lane, LaneState &ls, uint64_t upto);
	bool lane_busy(const LaneState &ls, uint64_t head) const;
	bool make_huge_chunk(uint64_t off, uint64_t made); // made: bytes of ours at its start
	void make_small(uint32_t lane, uint64_t from, uint64_t n);
	bool huge_refused_ = false; // MADV_COLLAPSE refused (EINVAL): not asked again
	strata_lane_ctl *lane_ctl(uint32_t lane) const;
	const uint8_t *subbuf_at(uint32_t lane, uint64_t pos) const;
	uint64_t now() const;

	uint8_t *base_ = nullptr;
	uint64_t map_size_ = 0;
	BufferInfo info_;
	std::vector<LaneState> lanes_;
	uint64_t desc_read_ = 0;
	bool desc_broken_ = false;
	std::vector<uint32_t> seen_ids_;
	// Every valid descriptor read so far (the close walks records with
	// them), by_id_[id] its index or -1; the caller has seen known_[0,
	// known_returned_) and not yet desc_errors_.
	std::vector<EventInfo> known_;
	std::vector<int32_t> by_id_;
	RecordWalk walk_{STRATA_REC_WIDE}; // knows known_ (set to the buffer's format at attach)
	size_t known_returned_ = 0;
	std::vector<std::string> desc_errors_;
	ReaderStats stats_;
	uint64_t (*clock_)() = nullptr;
	bool no_future_check_ = false;
	int wait_fd_ = -1;
	// The buffer's file, for populate_ahead's fallocate (a descriptor of
	// our own: attach's caller may close its); -1 once it failed there, or
	// where kMaxMakeFds Readers of this process held one (reader.cpp).
	int make_fd_ = -1;
	// copy_out reads make_fd_ (first touches trap here: reader.cpp's
	// probe, or STRATA_READ_BY_FILE), until file_left_ bytes were read.
	bool by_file_ = false;
	uint64_t file_left_ = 0;
	uint64_t touched_ = 0; // the mapping's pages touched after the budget, up to here
	void touch_some(size_t n);
};

} // namespace strata
#endif
