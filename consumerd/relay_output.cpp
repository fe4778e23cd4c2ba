/*
 * relay_output.cpp - a drain's Output over a RelayLink (relay.h): each lane
 * of a sub-trace a stream of the relay, published with the sub-trace's
 * metadata at open; packets sent as the drain hands them over; the lanes'
 * beacons at the drain's ticks while a live reader may wait on them; at
 * close, a wait until the relay stored every packet sent.  A broken link
 * fails every call at once (relay.h's contract; docs/relay.md).
 */
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>
#include <sys/uio.h>

#include "log.h"
#include "relay.h"
#include "strata_abi.h"

namespace strata {

namespace {

class RelayOutput : public Output {
public:
	RelayOutput(std::shared_ptr<RelayLink> link, const std::string &path, const std::string &channel,
		    uint32_t n_lanes, uint32_t live_timer_us)
	    : link_(std::move(link)), path_(path), channel_(channel), lanes_(n_lanes),
	      period_ns_(static_cast<uint64_t>(live_timer_us) * 1000)
	{
		// Made on the main thread, as the producer's hand-over is read:
		// the gate stays below this sub-trace's records until open()
		// published it (relay_gate.cpp).
		if (link_->gated()) {
			epoch_ = link_->begin_publication();
			gating_ = true;
		}
	}
	~RelayOutput() override
	{
		close();
		published();
	}

	// The relay hears of the whole sub-trace at once: its metadata stream
	// and every lane's stream in one STREAMS_SENT, then the metadata text.
	// (babeltrace2 2.0.4's live reader, given a trace's metadata stream
	// alone, never reads the data streams published after it.)  Not with
	// each lane's first packet, as before: a live reader that does not know
	// a stream yet shows other streams' later events, and the stream's
	// first packet, published after them, is then in its past: it fails
	// ("Message's timestamp is less than lttng-live's message iterator's
	// last returned timestamp", reported by babeltrace2 2.0.4 as a clock
	// value of 2^63 that overflows).  A stream it knows and that has no
	// packet yet makes it wait instead (docs/relay.md, "Live").  For the
	// same reason in one exchange that no other drain's packet or beacon
	// interleaves (RelayLink::publish), with the nudge that makes readers
	// look.
	bool open(const std::string &text, std::string &err) override
	{
		const bool ok = publish(text, err);
		published(); // or never will be: the gate goes on without it
		return ok;
	}

	bool publish(const std::string &text, std::string &err)
	{
		// Tests only: each sub-trace's publication held up, as a drain's
		// on a loaded machine (control.relay_live, session S).
		daemon_impl::delay_for_tests("STRATA_TEST_PUBLISH_DELAY_MS");
		if (link_->broken())
			return fail_broken(err);
		RelayLink::Publication p;
		p.path = path_;
		p.metadata = text;
		for (size_t lane = 0; lane < lanes_.size(); lane++)
			p.channels.push_back(channel_ + "_" + std::to_string(lane));
		if (has_empty_) {
			p.empty = std::move(empty_);
			// The retired streams' beacons go up to just below this
			// sub-trace's empty packets (opened_ns less the lane).
			p.retired_ts = opened_ns_ > lanes_.size() ? opened_ns_ - lanes_.size() : 0;
			p.period_ns = period_ns_;
		}
		if (!link_->publish(p, err))
			return false;
		meta_id_ = p.meta_id;
		for (size_t lane = 0; lane < lanes_.size(); lane++)
			lanes_[lane].id = p.ids[lane];
		return true;
	}

	bool append_metadata(const std::string &text, std::string &err) override
	{
		return link_->send_metadata(meta_id_, text, err);
	}

	// Before open(), which publishes them with the streams.
	void set_empty_packets(std::vector<strata_packet_header> headers, uint64_t opened_ns) override
	{
		headers.resize(lanes_.size());
		empty_ = std::move(headers);
		has_empty_ = true;
		opened_ns_ = opened_ns;
	}

	size_t write_packets(uint32_t lane, const struct iovec *iov, int n_iov, const size_t *ends,
			     size_t n_pkts, std::string &err) override
	{
		if (lane >= lanes_.size() || n_pkts == 0)
			return 0;
		Lane &l = lanes_[lane];
		// The packets, contiguous (drain.cpp hands one piece today).
		const uint8_t *base;
		if (n_iov == 1) {
			base = static_cast<const uint8_t *>(iov[0].iov_base);
		} else {
			flat_.clear();
			for (int i = 0; i < n_iov; i++)
				flat_.insert(flat_.end(), static_cast<const uint8_t *>(iov[i].iov_base),
					     static_cast<const uint8_t *>(iov[i].iov_base) + iov[i].iov_len);
			base = flat_.data();
		}
		size_t at = 0, k = 0;
		for (; k < n_pkts; at = ends[k++]) {
			const size_t len = ends[k] - at;
			if (!link_->send_packet(l.id, base + at, len, err))
				break;
		}
		return k;
	}

	uint64_t live_period_ns() const override { return period_ns_; }

	void beacon(uint32_t lane, uint64_t ts_ns) override
	{
		if (lane >= lanes_.size() || link_->broken())
			return;
		Lane &l = lanes_[lane];
		std::string err;
		// The relay ignores beacons of streams without packets, and a
		// live reader waits for such a stream: a packet without records
		// first, stamped when the sub-trace opened (before the stream was
		// shown; its lane had no record then, and had none at this
		// beacon either: a later record is later than the opening unless
		// its writer stood between its clock read and its reservation
		// from before the opening until now, at least one live period).
		// Then the beacon, once the relay stored that packet (a beacon
		// while a packet is in flight is ignored too).
		uint64_t sent = link_->packets_sent(l.id);
		if (sent == 0 && has_empty_) {
			if (!link_->send_empty(
				    l.id, std::min(ts_ns, opened_ns_ > lane ? opened_ns_ - lane : 0), err) ||
			    !link_->wait_stored(l.id, 0, err))
				return;
			sent = 1;
		}
		if (sent > 0) {
			link_->send_beacon(l.id, ts_ns, err);
			// After close(): the drain's last word on this stream; the
			// session's other drains beacon it from now on.
			if (closed_)
				link_->retire(l.id, ts_ns);
		}
		// The drain's end (its last lane's last beacon): the streams of
		// drains that ended before go up to here too, now.  A live
		// reader shows no event past a stream's latest beacon, and with
		// no drain left to tick (this was the only one recording) they
		// would stay at their own ends: this drain's events would wait
		// for the next sub-trace, or the session's end (docs/relay.md).
		if (closed_ && lane + 1 == lanes_.size())
			link_->beacon_retired_by(ts_ns, period_ns_);
	}

	void tick(uint64_t ts_ns) override { link_->beacon_retired(ts_ns, period_ns_); }

	// The streams stay open on the relay until the session's link closes
	// (DESTROY): lttng-relayd 2.13 drops a closed stream of a pre-2.11
	// peer from under a live reader that has not read it all.  Here only
	// wait until the relay stored every packet sent (a stop's promise).
	void close() override
	{
		std::string err;
		if (closed_)
			return;
		closed_ = true;
		for (Lane &l : lanes_) {
			const uint64_t sent = link_->packets_sent(l.id);
			if (sent > 0 && !link_->broken() && !link_->wait_stored(l.id, sent - 1, err))
				fprintf(stderr, "strata-consumerd: relay: %s: %s\n", path_.c_str(),
					err.c_str());
		}
	}

private:
	void published()
	{
		if (gating_)
			link_->end_publication(epoch_);
		gating_ = false;
	}

	struct Lane {
		uint64_t id = 0; // the relay's stream (its packets are counted by the link)
	};

	bool fail_broken(std::string &err)
	{
		err = "relay link down: " + link_->why_broken();
		return false;
	}

	std::shared_ptr<RelayLink> link_;
	std::string path_, channel_;
	std::vector<Lane> lanes_;
	std::vector<uint8_t> flat_;
	bool has_empty_ = false;                  // set_empty_packets
	std::vector<strata_packet_header> empty_; // until open()
	uint64_t opened_ns_ = 0;
	uint64_t meta_id_ = 0;
	bool closed_ = false; // close() waited; beacons may still follow (drain.cpp)
	uint64_t period_ns_;
	uint64_t epoch_ = 0;  // of the gate's publications (relay.h)
	bool gating_ = false; // begun, not ended yet
};

} // namespace

std::unique_ptr<Output> relay_output(std::shared_ptr<RelayLink> link, const std::string &rel_path,
				     const std::string &channel, uint32_t n_lanes, uint32_t live_timer_us)
{
	std::string path = link->base() + rel_path;
	return std::make_unique<RelayOutput>(std::move(link), path, channel, n_lanes, live_timer_us);
}

} // namespace strata
