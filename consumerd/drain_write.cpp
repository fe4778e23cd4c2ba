/*
 * drain_write.cpp - what a drain writes (drain.h has the contract;
 * drain.cpp its life and policy): packets copied out of the ring,
 * validated and written in batches, the malformed ones counted; live
 * outputs' ticks; the last flush of every lane and the final drain,
 * a flight recorder's ring collected whole.
 */
#include "drain.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>
#include <sys/uio.h>

#include "drain_internal.h"
#include "drain_pool.h"
#include "reader.h"

namespace strata {

using namespace drain_detail;

// Appends whole packets to the lane's output in one call: iov holds
// each packet's pieces in order, ends[i] is the end of packet i counted from
// the first byte.  The output stores a prefix whole; the rest is counted lost.
void Drain::write_packets(uint32_t lane, const struct iovec *iov, int n_iov, const size_t *ends,
			  size_t n_pkts)
{
	if (lane >= n_lanes_ || n_pkts == 0 || !out_)
		return;
	std::string err = meta_err_;
	const uint64_t t0 = mono_ns();
	const size_t whole =
		pending_meta_.empty() ? out_->write_packets(lane, iov, n_iov, ends, n_pkts, err) : 0;
	const uint64_t dt = mono_ns() - t0;
	write_ns_ += dt;
	write_max_ns_ = std::max(write_max_ns_, dt);
	written_bytes_ += whole ? ends[whole - 1] : 0;
	if (lane_sent_.size() != n_lanes_)
		lane_sent_.assign(n_lanes_, 0);
	lane_sent_[lane] += whole;
	counters_.packets.fetch_add(whole, std::memory_order_relaxed);
	counters_.bytes.fetch_add(whole ? ends[whole - 1] : 0, std::memory_order_relaxed);
	if (whole == n_pkts)
		return;
	counters_.errors.fetch_add(n_pkts - whole, std::memory_order_relaxed);
	// A lasting failure (a relay gone, a full disk) says so once; the
	// packets it costs after that are summed up at close.
	if (err == last_loss_) {
		quiet_losses_ += n_pkts - whole;
		return;
	}
	last_loss_ = err;
	warn(dir_, "lane " + std::to_string(lane) + ": " + std::to_string(n_pkts - whole) +
			   " packet(s) lost, " + err);
	set_problem("packets lost: " + err);
}

// A producer wrote what no honest writer writes (a corrupt packet, a record
// that does not decode): said once per buffer with the process named, the
// rest counted and summed up at close (a scribbler goes on scribbling).
void Drain::malformed(const std::string &what)
{
	counters_.malformed.fetch_add(1, std::memory_order_relaxed);
	if (malformed_++ == 0)
		warn(dir_,
		     "process " + comm_ + " (pid " + std::to_string(pid_) +
			     ") wrote malformed data into its trace buffer: " + what +
			     "; its other packets are checked and kept, the loss is counted in the trace");
}

void Drain::write_packet(uint32_t lane, const std::vector<uint8_t> &pkt)
{
	learn_align();
	std::vector<uint8_t> padded;
	const std::vector<uint8_t> *p = &pkt;
	if (align_ > 1 && pkt.size() % align_) {
		padded.resize(pkt.size() + align_);
		memcpy(padded.data(), pkt.data(), pkt.size());
		padded.resize(pad_packet(padded.data(), pkt.size()));
		p = &padded;
	}
	struct iovec iov = {const_cast<uint8_t *>(p->data()), p->size()};
	const size_t end = p->size();
	write_packets(lane, &iov, 1, &end, 1);
}

// Whether any lane's writers are a whole sub-buffer or more ahead of this
// drain (beyond the batch it took): it is falling behind somewhere, and a
// write that waits on the disk would let that lane's ring fill while the
// round is elsewhere (Output::set_behind).  A load of each lane's head.
bool Drain::behind() const
{
	const uint64_t s = reader_->info().subbuf_size;
	for (uint32_t lane = 0; lane < n_lanes_; lane++)
		if (reader_->lane_backlog(lane) > s)
			return true;
	return false;
}

// The output's packet alignment, once it is open (Output::packet_align).
void Drain::learn_align()
{
	if (!align_ && opened())
		align_ = out_ ? std::min(kMaxPacketAlign, std::max<size_t>(1, out_->packet_align())) : 1;
}

// A packet of `len` bytes at pkt, grown to the output's alignment: zeros
// after it, its packet_size the new length (content_size as it was, so
// that readers skip the zeros as any packet's padding).  The room after
// it is the caller's (batch_pad).  Returns the new length.
size_t Drain::pad_packet(uint8_t *pkt, size_t len) const
{
	if (align_ <= 1 || len < sizeof(strata_packet_header) || len % align_ == 0)
		return len;
	const size_t to = (len + align_ - 1) / align_ * align_;
	memset(pkt + len, 0, to - len);
	const uint64_t bits = static_cast<uint64_t>(to) * 8;
	memcpy(pkt + offsetof(strata_packet_header, packet_size), &bits, sizeof bits);
	return to;
}

// The first batch of a disk sub-trace is copied before the output opens
// (drain_once) and so before its alignment is known: its n packets padded
// now, moved up from the last (each starts at or after where it was).
// Returns the batch's new length; ends[] follow.
size_t Drain::repad(size_t *ends, size_t n)
{
	if (align_ <= 1 || n == 0)
		return n ? ends[n - 1] : 0;
	size_t to[kBatch];
	size_t at = 0;
	for (size_t i = 0; i < n; i++) {
		const size_t len = ends[i] - (i ? ends[i - 1] : 0);
		to[i] = at;
		at += len < sizeof(strata_packet_header) ? len : (len + align_ - 1) / align_ * align_;
	}
	for (size_t i = n; i-- > 0;) {
		const size_t from = i ? ends[i - 1] : 0, len = ends[i] - from;
		memmove(batch_ + to[i], batch_ + from, len);
		ends[i] = to[i] + pad_packet(batch_ + to[i], len);
	}
	return ends[n - 1];
}

// The copy buffer of one write (batch_), taken from the thread's cache at
// the first packet (begin_stream).  While the producer runs, a new
// buffer's pages are mapped at once in one system call rather than faulted
// in one by one while packets wait in the ring; a final drain (producer
// gone or session stopping) only faults in what it copies.
// refresh: a later turn's, on whichever thread runs it (the multiplexing
// driver moves a drain between workers): that thread's buffer, grown if
// it is too small, never shrunk for this drain.
void Drain::prepare_batch(bool refresh)
{
	// A packet is at most one sub-buffer, and one more is added only
	// below kBatchBytes (drain_once).  finish_: a hint only (drain thread).
	const CopyBuffer b = ready_batch(batch_need(reader_->info().subbuf_size),
					 !finish_.load(std::memory_order_relaxed), !refresh);
	batch_ = b.buf;
	batch_cap_ = b.cap;
}

// Events flow: the drain takes its copy buffer now, once (before the
// copy buffer's page faults and the first write).  Called at the first
// packet: drains of processes that never fill one keep the default
// (earlier, at the writers' first reservation, would move the sub-trace's
// file work into short processes' lives).
void Drain::begin_stream()
{
	if (stream_start_ns_) // begun already
		return;
	stream_start_ns_ = mono_ns();
	prepare_batch(false);
}

// A packet drain_once could not take: counted, and said (each time where
// its process died, else once per buffer as malformed).
void Drain::skipped(uint32_t lane, const std::string &err, bool died)
{
	counters_.errors.fetch_add(1, std::memory_order_relaxed);
	if (died)
		warn(dir_, "lane " + std::to_string(lane) + ": packet skipped: " + err);
	else
		malformed("lane " + std::to_string(lane) + ": packet skipped: " + err);
}

// drain_once's batch of n packets of `lane` (len bytes in batch_) written,
// the sub-trace opened first if it is not yet (its first batch then padded
// to the output's alignment).  False if it cannot be opened (said and
// counted: Done).
bool Drain::write_batch(uint32_t lane, size_t *ends, size_t n, size_t len)
{
	if (!opened()) {
		if (!open_once())
			return false;
		learn_align();
		len = repad(ends, n);
	}
	if (out_ && align_ > 1) // an output that may write around the page cache
		out_->set_behind(behind());
	struct iovec iov = {batch_, len};
	write_packets(lane, &iov, 1, ends, n);
	return true;
}

// One round over every lane.  True if anything was written.  Each packet
// is copied out of the ring (validated header, then body); up to
// kBatchBytes of whole packets then leave in one write, and only then are
// their sub-buffers released to the writers.  A daemon killed at any
// instant thus leaves every packet it did not write in the ring, where
// the next daemon finds it (docs/crash.md, "The daemon dies"): released
// before the write, the writers of a process whose daemon is dead would
// overwrite packets that were never on disk, an uncounted gap.  The ring
// is held for the copy and one write (to the page cache, or to the disk
// where it writes around it: docs/consumerd.md): the cost is in
// docs/crash.md.  (Writing straight from the mapping held it as long.)
// A streamed output (relay, serial; its write may wait on a network),
// which a restarted daemon does not continue, releases after the copy.
// A kernel buffer is continued like a process's (kernel_resume).
bool Drain::drain_once()
{
	if (opened()) // else open_trace reads every descriptor so far
		update_metadata();
	if (overwrite_)
		return false; // the ring is collected at the end
	learn_align();
	bool any = false;
	std::string err;
	size_t ends[kBatch];
	// Held until written (unless release_early_): at most half of a lane's
	// ring, so that its writers always have the other half meanwhile, and
	// kHeldBytes, so that each sub-buffer goes back after a short write.
	const BufferInfo &bi = reader_->info();
	const size_t max_n =
		release_early_ ? kBatch : std::max<size_t>(1, std::min<size_t>(kBatch, bi.n_subbuf / 2));
	const size_t max_bytes =
		release_early_ ? kBatchBytes : std::min<size_t>(kHeldBytes, bi.lane_stride / 2);
	for (uint32_t lane = 0; lane < n_lanes_; lane++) {
		for (unsigned k = 0; k < kPacketsPerRound;) {
			size_t n = 0;
			bool more = true;
			size_t len_now = 0;  // bytes in batch_
			bool peeked = false; // sub-buffers to release after the write
			for (; n < max_n && k < kPacketsPerRound && (n == 0 || len_now < max_bytes); k++) {
				strata_packet_header hdr;
				const uint8_t *body = nullptr;
				size_t len = 0;
				const uint64_t dropped = reader_->stats().incomplete_dropped;
				ReadStatus st = reader_->peek_packet(lane, &hdr, &body, &len, &err);
				if (st == ReadStatus::kEmpty) {
					more = false;
					break;
				}
				any = peeked = true;
				begin_stream();
				// validate_header bounds a packet by its sub-buffer; the
				// check keeps batch_ safe whatever a future reader allows.
				if (st == ReadStatus::kPacket &&
				    len_now + sizeof hdr + len > batch_cap_ - batch_pad()) {
					st = ReadStatus::kSkipped;
					err = "packet larger than its sub-buffer";
				}
				if (st != ReadStatus::kPacket) {
					skipped(lane, err, reader_->stats().incomplete_dropped != dropped);
					continue;
				}
				memcpy(batch_ + len_now, &hdr, sizeof hdr);
				reader_->copy_out(body, len, batch_ + len_now + sizeof hdr);
				if (release_early_) // not continued after a crash: the writers need it more
					reader_->release(lane);
				// The records, on our copy: what the producer changes in
				// the ring from now on cannot reach the trace.
				len_now += pad_packet(batch_ + len_now,
						      reader_->check_records(lane, batch_ + len_now,
									     sizeof hdr + len, &err));
				if (!err.empty()) {
					counters_.errors.fetch_add(1, std::memory_order_relaxed);
					malformed(err);
				}
				ends[n++] = len_now;
			}
			if (n && !write_batch(lane, ends, n, len_now))
				return false; // said and counted (Done): run() leaves the buffer
			if (peeked)           // written (or counted lost), or skipped
				reader_->release(lane);
			if (!more)
				break;
		}
	}
	return any;
}

// Live outputs: close every open packet now (the producers go on in the
// next sub-buffer), send what that completed, and tell the output which
// lanes had nothing.  The beacon's time is the producers' clock read before
// the closes, less a margin for a writer that read its clock just before
// and reserves just after (docs/relay.md, "Live"), and less the lane's
// index: babeltrace2 warns when two streams' next messages (here their
// inactivity times) are equal.
void Drain::live_tick(uint64_t now_ns)
{
	if (overwrite_)
		return; // the ring is collected at the end
	constexpr uint64_t kBeaconMarginNs = 1000000;
	constexpr int kLiveFlushMs = 20;
	if (lane_sent_.size() != n_lanes_)
		lane_sent_.assign(n_lanes_, 0);
	std::vector<uint64_t> before = lane_sent_;
	std::vector<bool> settled(n_lanes_);
	for (uint32_t lane = 0; lane < n_lanes_; lane++) {
		std::string msg;
		settled[lane] = reader_->flush(lane, false, kLiveFlushMs, &msg) == FlushStatus::kDone;
	}
	for (int round = 0; round < 64 && drain_once(); round++) {
	}
	for (uint32_t lane = 0; lane < n_lanes_; lane++)
		if (settled[lane] && lane_sent_[lane] == before[lane] && now_ns > kBeaconMarginNs)
			out_->beacon(lane, now_ns - kBeaconMarginNs - lane);
	if (now_ns > kBeaconMarginNs)
		out_->tick(now_ns - kBeaconMarginNs);
}

// The last flush of every lane.  All lanes are closed first and their
// commits awaited under one deadline: a stop that meets writers preempted
// inside reservations in every lane (a thousand threads on two CPUs) waits
// once, not once per lane.  Commits still in flight at the deadline: the
// records committed around them reach the trace, the rest is counted
// (Reader::cut_pending).
void Drain::flush_lanes(bool dead)
{
	std::vector<FlushStatus> fs(n_lanes_);
	std::vector<std::string> msg(n_lanes_);
	for (uint32_t lane = 0; lane < n_lanes_; lane++)
		fs[lane] = reader_->flush(lane, dead, 0, &msg[lane]); // the close, no wait
	const uint64_t deadline = mono_ns() + (uint64_t)kFlushTimeoutMs * 1000000u;
	for (uint32_t lane = 0; lane < n_lanes_; lane++) {
		if (fs[lane] != FlushStatus::kPending)
			continue;
		const uint64_t now = mono_ns();
		msg[lane].clear();
		fs[lane] = reader_->flush(lane, dead, now < deadline ? (int)((deadline - now) / 1000000u) : 0,
					  &msg[lane]);
	}
	for (uint32_t lane = 0; lane < n_lanes_; lane++) {
		const uint64_t cuts = reader_->stats().cut_short;
		std::string cut;
		if (fs[lane] == FlushStatus::kPending && reader_->cut_pending(lane, &cut))
			msg[lane] += "; " + cut;
		if ((fs[lane] != FlushStatus::kDone || reader_->stats().cut_short != cuts) &&
		    !msg[lane].empty())
			warn(dir_, "lane " + std::to_string(lane) + ": " + msg[lane]);
	}
}

void Drain::final_drain()
{
	const bool dead = producer_dead_.load(std::memory_order_relaxed);
	std::string msg;
	update_metadata();
	counters_.block_timeouts.store(reader_->block_timeouts(), std::memory_order_relaxed);
	if (overwrite_) {
		std::vector<std::vector<uint8_t>> pkts;
		for (uint32_t lane = 0; lane < n_lanes_; lane++) {
			pkts.clear();
			reader_->collect_overwrite(lane, kFlushTimeoutMs, &pkts, &msg);
			if (!msg.empty())
				warn(dir_, "lane " + std::to_string(lane) + ": " + msg);
			for (const auto &p : pkts)
				write_packet(lane, p);
		}
	} else {
		flush_lanes(dead);
		// Everything is closed now: drain to the end (bounded: at most
		// n_subbuf packets per lane can be complete, plus what a live
		// producer adds meanwhile, which we do not chase forever).
		for (int round = 0; round < 64 && drain_once(); round++) {
		}
	}
	std::vector<uint8_t> pkt;
	for (uint32_t lane = 0; lane < n_lanes_; lane++) {
		if (reader_->lead_loss_packet(lane, &pkt))
			write_packet(lane, pkt);
		if (reader_->trailing_loss_packet(lane, &pkt))
			write_packet(lane, pkt);
	}
}

} // namespace strata
