/*
 * relay_gate.cpp - a live link's gate (relay.h, docs/relay.md "The gate"):
 * a stream of no events, published with the session, that a live reader
 * cannot read past, stamped forward only to a time W before which every
 * record of the session is on a stream the relay has published.
 *
 * W moves by barriers.  The main thread reads the records' clock (ts),
 * then reads every process hand-over already sent (Processes::serve_pending:
 * a hand-over sent before ts is in a socket by then; a streamed session's
 * buffer attaches on the main thread, not the attacher's), making each
 * one's output, which begins a publication in the current epoch; then it calls
 * barrier(ts), which closes the epoch.  A process's records are all read
 * from its clock after its hand-over was sent (the runtime hands a buffer
 * over before the first event that made it reads the clock), so a record
 * stamped at or before ts belongs to a publication begun in that epoch or
 * an earlier one, and W may go to ts once every publication of those
 * epochs ended.
 *
 * Contract:
 *   - roles: the main thread opens the gate, begins publications (as it
 *     makes outputs), sets barriers, and ends the gate's thread at the
 *     link's end; a drain's thread ends a publication (its output's open,
 *     or its end unopened); the gate's thread stamps the gate;
 *   - gate_mu_ guards the epochs, the publications still open, the
 *     barriers waiting (cands_) and allowed_; it is held for bookkeeping
 *     only, never across I/O, so the main thread never waits on the relay
 *     here;
 *   - the gate's thread takes mu_ (every exchange of the link) without
 *     gate_mu_ to send a beacon; gate_id_ is written before the thread
 *     starts and read-only after.
 */
#include <algorithm>
#include <string>

#include "relay.h"

namespace strata {

bool RelayLink::open_gate(const std::string &metadata, const strata_packet_header &empty, uint64_t ts,
			  std::string &err)
{
	Publication p;
	p.path = base_ + "/live-gate";
	p.metadata = metadata;
	p.channels = {"gate"};
	if (!publish(p, err))
		return false;
	{
		std::lock_guard<std::mutex> g(mu_);
		Stream &st = streams_[p.ids[0]];
		st.empty = empty;
		st.has_empty = true;
		if (!send_empty_locked(p.ids[0], st, ts, err))
			return false;
	}
	// Its beacons count once the relay stored this first packet.
	if (!wait_stored(p.ids[0], 0, err))
		return false;
	gate_id_ = p.ids[0];
	{
		std::lock_guard<std::mutex> g(gate_mu_);
		allowed_ = ts;
	}
	gate_thread_ = std::thread(&RelayLink::gate_run, this);
	return true;
}

uint64_t RelayLink::begin_publication()
{
	std::lock_guard<std::mutex> g(gate_mu_);
	open_[epoch_]++;
	return epoch_;
}

void RelayLink::end_publication(uint64_t epoch)
{
	std::lock_guard<std::mutex> g(gate_mu_);
	auto it = open_.find(epoch);
	if (it != open_.end() && --it->second == 0)
		open_.erase(it);
	gate_ready_locked();
}

void RelayLink::barrier(uint64_t ts)
{
	std::lock_guard<std::mutex> g(gate_mu_);
	cands_.emplace_back(epoch_, ts);
	epoch_++;
	gate_ready_locked();
}

// gate_mu_ held.  Every barrier whose epoch and earlier ones have no
// publication open any more lets W go to its ts.
void RelayLink::gate_ready_locked()
{
	const uint64_t oldest = open_.empty() ? UINT64_MAX : open_.begin()->first;
	size_t n = 0;
	uint64_t w = allowed_;
	for (; n < cands_.size() && cands_[n].first < oldest; n++)
		w = std::max(w, cands_[n].second);
	cands_.erase(cands_.begin(), cands_.begin() + static_cast<std::ptrdiff_t>(n));
	if (w > allowed_) {
		allowed_ = w;
		gate_cv_.notify_all();
	}
}

// The gate's thread: a beacon at each new W (at most one per barrier).  A
// beacon the relay ignores (the gate's nudge packet still in flight) is
// made good by the next one.
void RelayLink::gate_run()
{
	std::unique_lock<std::mutex> g(gate_mu_);
	uint64_t sent = allowed_;
	for (;;) {
		gate_cv_.wait(g, [&] { return gate_quit_ || allowed_ > sent; });
		if (gate_quit_)
			return;
		const uint64_t w = allowed_;
		g.unlock();
		std::string err;
		bool ok;
		{
			std::lock_guard<std::mutex> l(mu_);
			ok = send_beacon_locked(gate_id_, w, err);
		}
		g.lock();
		if (!ok) // the link is broken: nothing more goes out on it
			return;
		sent = w;
	}
}

void RelayLink::close_gate()
{
	if (!gate_thread_.joinable())
		return;
	{
		std::lock_guard<std::mutex> g(gate_mu_);
		gate_quit_ = true;
	}
	gate_cv_.notify_all();
	gate_thread_.join();
}

} // namespace strata
