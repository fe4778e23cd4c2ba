/*
 * relay_live.cpp - the link's live side (relay.h, docs/relay.md "Live"):
 * what tells a live reader that a stream has nothing new up to a time.  A
 * beacon (a SEND_INDEX of no packet) for a stream that has sent packets;
 * an empty packet (a header without records) to make a reader look at a
 * new sub-trace's streams (the nudge that ends publish()); the retired
 * streams, whose drains ended, beaconed forward at most once per live
 * period for the whole link.  Every exchange under the link's mutex (relay.cpp's contract).
 */
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "relay.h"
#include "relay_wire.h"
#include "strata_abi.h"

namespace strata {

using namespace relay_wire;

// mu_ held.
void RelayLink::nudge_locked(uint64_t retired_ts, uint64_t period_ns)
{
	// Relaxed: under mu_, which fail() holds when it sets broken_.
	if (broken_.load(std::memory_order_relaxed))
		return;
	// First move the retired streams' inactivity up to the new sub-trace's
	// opening: with no drain left to tick, they stay at their drain's end,
	// and babeltrace2 2.0.4 stops its round over a trace's streams at the
	// first one whose inactivity time did not change (it answers "again"
	// and starts over with that stream), so it would never ask for the
	// nudged stream's index (docs/relay.md, "Live").  Then the nudge, at the
	// nudged stream's latest stamp (that beacon, if it is a retired one).
	std::string err;
	if (advance_due_locked(period_ns) && !advance_locked(retired_ts, err))
		return;
	for (auto &[id, st] : streams_) { // by id: the oldest first
		if (st.next_seq == 0 || !st.has_empty)
			continue;
		send_empty_locked(id, st, st.safe_ts, err);
		return;
	}
}

bool RelayLink::send_empty(uint64_t id, uint64_t ts, std::string &err)
{
	std::lock_guard<std::mutex> g(mu_);
	auto it = streams_.find(id);
	if (it == streams_.end() || !it->second.has_empty) {
		err = "no empty packet for stream " + std::to_string(id);
		return false;
	}
	return send_empty_locked(id, it->second, ts, err);
}

// mu_ held.  The stream's empty packet stamped ts, with its last packet's
// sequence number (no packet between: none lost) and discarded count (a
// cumulative count), 0 for its first packet.
bool RelayLink::send_empty_locked(uint64_t id, const Stream &st, uint64_t ts, std::string &err)
{
	strata_packet_header ph = st.empty;
	ph.timestamp_begin = ph.timestamp_end = ts;
	ph.packet_seq_num = st.pseq;
	ph.events_discarded = st.discarded;
	return send_packet_locked(id, reinterpret_cast<const uint8_t *>(&ph), STRATA_PACKET_HEADER_SIZE, err);
}

bool RelayLink::send_beacon(uint64_t id, uint64_t ts, std::string &err)
{
	std::lock_guard<std::mutex> g(mu_);
	return send_beacon_locked(id, ts, err);
}

// mu_ held.
bool RelayLink::send_beacon_locked(uint64_t id, uint64_t ts, std::string &err)
{
	return send_beacons_locked({{id, ts}}, err);
}

// mu_ held.  Beacons pipelined: up to kBatch commands written at once, then
// their answers read (the relay answers a connection's commands in order),
// so that beaconing the retired streams of a long session costs one round
// trip per batch, not one per stream.
bool RelayLink::send_beacons_locked(const std::vector<Retired> &beacons, std::string &err)
{
	constexpr size_t kBatch = 128; // answers of 4 bytes: far below any socket buffer
	for (size_t at = 0; at < beacons.size(); at += kBatch) {
		const size_t n = std::min(kBatch, beacons.size() - at);
		std::string m;
		for (size_t i = at; i < at + n; i++)
			m += beacon_command(beacons[i].id, beacons[i].last_ts);
		if (broken_.load(std::memory_order_relaxed)) // under mu_, which fail() holds
			return fail(why_, err);
		uint8_t r[4 * kBatch];
		if (!send_bytes(ctrl_, m.data(), m.size(), "beacons", err) ||
		    !recv_bytes(ctrl_, r, 4 * n, "beacons", err))
			return false;
		// An ignored beacon is no loss: its answer's code is not checked.
		for (size_t i = at; i < at + n; i++) {
			Stream &st = streams_[beacons[i].id];
			st.safe_ts = std::max(st.safe_ts, beacons[i].last_ts);
		}
	}
	return true;
}

// mu_ held.  A whole SEND_INDEX control message saying "nothing before ts"
// for stream id.
std::string RelayLink::beacon_command(uint64_t id, uint64_t ts)
{
	Stream &st = streams_[id];
	std::string x;
	put64(x, id);
	put64(x, UINT64_MAX); // no packet
	put64(x, 0);          // packet_size 0: a beacon
	put64(x, 0);
	put64(x, 0);
	put64(x, ts); // timestamp_end: nothing before it is still to come
	put64(x, 0);
	put64(x, st.stream_class);
	if (minor_ >= 8) {
		put64(x, 0);
		put64(x, 0);
	}
	std::string m;
	put64(m, 0);
	put64(m, x.size());
	put32(m, kSendIndex);
	put32(m, 0);
	return m + x;
}

void RelayLink::retire(uint64_t id, uint64_t last_ts)
{
	std::lock_guard<std::mutex> g(mu_);
	retired_.push_back({id, last_ts});
}

// mu_ held.  The retired streams' beacons at about ts: below the lanes'
// beacons of a tick at ts (ts - lane), distinct per stream (babeltrace2
// warns when two streams' inactivity times are equal), and only forward
// (a stream's last beacon was its drain's end; an earlier one would go
// back in time).
std::vector<RelayLink::Retired> RelayLink::advance_retired_locked(uint64_t ts)
{
	constexpr uint64_t kRetiredOffsetNs = 1000;
	std::vector<Retired> todo;
	for (size_t i = 0; i < retired_.size(); i++) {
		const uint64_t t = ts - kRetiredOffsetNs - i;
		if (ts > kRetiredOffsetNs + i && t > retired_[i].last_ts) {
			retired_[i].last_ts = t;
			todo.push_back({retired_[i].id, t});
		}
	}
	retired_at_ = std::max(retired_at_, ts);
	return todo;
}

// mu_ held.  Whether the retired streams may be beaconed again: at most
// once per live period for the whole link (each time costs one beacon per
// retired stream, whoever asks: ticks, nudges, drains' ends).
bool RelayLink::advance_due_locked(uint64_t period_ns)
{
	// Relaxed: under mu_, which fail() holds when it sets broken_.
	return !broken_.load(std::memory_order_relaxed) && !retired_.empty() &&
	       now_ms() - advanced_ms_ >= static_cast<int64_t>(period_ns / 1000000);
}

// mu_ held.  The retired streams beaconed up to about ts.
bool RelayLink::advance_locked(uint64_t ts, std::string &err)
{
	advanced_ms_ = now_ms();
	const bool ok = send_beacons_locked(advance_retired_locked(ts), err);
	advanced_.notify_all();
	return ok;
}

void RelayLink::beacon_retired(uint64_t ts, uint64_t period_ns)
{
	std::lock_guard<std::mutex> g(mu_);
	std::string err;
	if (advance_due_locked(period_ns))
		advance_locked(ts, err);
}

void RelayLink::beacon_retired_by(uint64_t ts, uint64_t period_ns)
{
	std::unique_lock<std::mutex> g(mu_);
	// Waits at most one period, on the ending drain's thread: an advance
	// made meanwhile by another thread covers ts if it went at least as far,
	// which it does: it goes up to the latest end among the waiting drains
	// (their streams are all retired: nothing of them comes after).
	pending_by_ = std::max(pending_by_, ts);
	while (retired_at_ < ts) {
		// Relaxed: under mu_, which fail() holds when it sets broken_.
		if (broken_.load(std::memory_order_relaxed) || retired_.empty())
			return;
		if (advance_due_locked(period_ns)) {
			std::string err;
			advance_locked(std::max(ts, pending_by_), err);
			pending_by_ = 0;
			return;
		}
		const int64_t left = advanced_ms_ + static_cast<int64_t>(period_ns / 1000000) - now_ms();
		advanced_.wait_for(g, std::chrono::milliseconds(std::max<int64_t>(left, 1)));
	}
}

} // namespace strata
