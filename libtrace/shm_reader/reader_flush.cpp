/*
 * reader_flush.cpp - the reader's side of a stop (reader.h): the packets
 * a consumer closes itself (a pending close completed, or cut short after
 * its last whole record when its writers will not commit), the flush of a
 * lane whose producer is gone or slow, and overwrite mode's collection of
 * what the ring still holds.  The ordering pairs with the writer are named
 * at each atomic and listed in docs/ring-buffer.md.
 */
#include "reader.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "reader_lane.h"

namespace strata {
using namespace reader_lane;
namespace {

constexpr int kMaxCloseAttempts = 1000; // CAS retries against racing writers

} // namespace

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
		const uint64_t disc = strata_lane_discarded(lc);
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

// The complete packets of [from, end) that no writer lapped while they were
// copied, validated and accepted, onto *out.
void Reader::copy_laps(uint32_t lane, uint64_t from, uint64_t end, std::vector<std::vector<uint8_t>> *out,
		       std::string *msg)
{
	strata_lane_ctl *lc = lane_ctl(lane);
	LaneState &ls = lanes_[lane];
	const uint64_t S = info_.subbuf_size, stride = info_.lane_stride;
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
	const size_t first = out->size();
	const uint64_t cuts = stats_.cut_packets;
	const bool lead = !ls.have_packet;       // the lane's first packets
	const uint64_t expect_seq = ls.next_seq; // the first packet's, if nothing before it is lost
	uint64_t end = ls.rpos;
	// Writers still writing (a snapshot) may lap every packet while we copy
	// (a slow or preempted consumer): then again from their new head, a
	// few times, so that the lane's newest packets are kept where they can.
	for (int tries = 0; tries < 3 && out->size() == first; tries++) {
		const uint64_t lapped = stats_.lapped_packets;
		// Acquire: pairs with the writers' acq_rel CAS on head.
		end = std::max(end,
			       __atomic_load_n(&lc->head, __ATOMIC_ACQUIRE) & ~(S - 1)); // open: not taken
		copy_laps(lane, std::max(end >= stride ? end - stride : 0, ls.rpos), end, out, msg);
		if (stats_.lapped_packets == lapped)
			break; // nothing lapped: what there was is kept
	}
	ls.rpos = std::max(ls.rpos, end);
	count_overwritten(lane, records, out, first, stats_.cut_packets - cuts, lead, expect_seq);
	// Release: informational for overwrite mode (writers do not read it).
	if (!snapshot_)
		__atomic_store_n(&lc->consumed, ls.rpos, __ATOMIC_RELEASE);
	return out->size() - first; // with a leading packet (count_overwritten)
}

// A lane whose first packet would be the trailing one (every packet lost,
// the loss counted: trailing_loss_packet): babeltrace2 gives no count for
// a loss before a stream's first packet, so a header-only packet before
// it, one before in sequence with nothing discarded, makes the trailing
// packet's count a difference it reports (as count_overwritten's leading
// packet).  Call it right before trailing_loss_packet.
bool Reader::lead_loss_packet(uint32_t lane, std::vector<uint8_t> *out)
{
	if (lane >= info_.n_lanes)
		return false;
	LaneState &ls = lanes_[lane];
	const uint64_t seq = std::max(ls.next_seq, ls.rpos / info_.subbuf_size);
	if (ls.have_packet || seq == 0 ||
	    (!ls.overwritten_unsaid && ls.cut_events == 0 && lane_discarded(lane) <= ls.last_discarded))
		return false;
	strata_packet_header ph = empty_header(lane, now());
	ph.packet_seq_num = seq - 1;
	ph.events_discarded = ls.last_discarded;
	accept_packet(ls, ph);
	out->resize(kHdr);
	memcpy(out->data(), &ph, kHdr);
	return true;
}

static void add_discarded(std::vector<uint8_t> &pkt, uint64_t n)
{
	strata_packet_header ph;
	memcpy(&ph, pkt.data(), sizeof ph);
	ph.events_discarded += n;
	memcpy(pkt.data(), &ph, sizeof ph);
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
// Where `lost` lies among out[first..]: before the first packet when its
// sequence number is past expect_seq (the ring lapped what came before);
// else at the first gap among them (packets the writers lapped while they
// were being copied); else after the last (out->size(): a trailing packet
// says it).  Counted before a packet it follows, babeltrace2 would read
// the stream's first packet's count as a loss it cannot size ("may have
// discarded") and the packets after the gap as lost ones of no events.
static size_t loss_at(const std::vector<std::vector<uint8_t>> &out, size_t first, uint64_t lost,
		      uint64_t expect_seq)
{
	const auto seq = [&out](size_t i) {
		strata_packet_header ph;
		memcpy(&ph, out[i].data(), sizeof ph);
		return ph.packet_seq_num;
	};
	if (lost == 0 || first == out.size() || seq(first) != expect_seq)
		return first;
	for (size_t i = first + 1; i < out.size(); i++)
		if (seq(i) != seq(i - 1) + 1)
			return i;
	return out.size();
}

void Reader::count_overwritten(uint32_t lane, uint64_t records, std::vector<std::vector<uint8_t>> *out,
			       size_t first, uint64_t cuts, bool lead, uint64_t expect_seq)
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
	const size_t at = loss_at(*out, first, lost, expect_seq);
	if (at == out->size()) { // also first == out->size(): no packet says it yet
		ls.overwritten_unsaid = ls.overwritten_unsaid || lost != 0;
		for (size_t i = first; i < out->size(); i++)
			add_discarded((*out)[i], ls.overwritten - lost);
		return;
	}
	ls.overwritten_unsaid = false;
	for (size_t i = first; i < out->size(); i++)
		add_discarded((*out)[i], i < at ? ls.overwritten - lost : ls.overwritten);
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

} // namespace strata
