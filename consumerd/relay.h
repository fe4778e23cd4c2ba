/*
 * relay.h - streaming a session to a running lttng-relayd (docs/relay.md).
 *
 * A RelayLink is one session's pair of TCP connections to the relay:
 * control (commands and their answers, metadata, packet indexes) and data
 * (packets, each behind a data header).  It speaks the subset of
 * lttng-relayd's protocol 2.x that a pre-2.11 peer uses (version 2.10:
 * streams carry their whole path, no trace chunks), written from reading
 * lttng-tools' headers; every field is big-endian.
 *
 * Contract:
 *   - made and destroyed on the daemon's main thread (CREATE, DESTROY);
 *     shared (shared_ptr) by the session and the RelayOutputs of its
 *     drains, whose threads call it concurrently: one mutex serialises
 *     every exchange, so a packet's data and its index leave in that order
 *     and answers are read by the thread that asked, and guards what the
 *     link keeps per stream (packets sent, latest stamps): a drain's
 *     stream also gets packets from other drains' threads (the nudge).  A
 *     live link's gate has a thread of its own that sends under the same
 *     mutex, and its bookkeeping a mutex of its own (relay_gate.cpp).
 *   - nothing blocks without bound: every send and every answer has a
 *     deadline (kIoTimeoutMs); a failure or timeout breaks the link for
 *     good (both sockets closed, the reason kept).  After that every call
 *     fails at once and the drains count their packets as lost.  No
 *     reconnection: the relay's stream state (ids, sequence numbers) died
 *     with the connection.
 *   - the relay's answers are hostile input: sizes are fixed, codes
 *     checked, nothing is trusted beyond them.
 */
#ifndef STRATA_CONSUMERD_RELAY_H
#define STRATA_CONSUMERD_RELAY_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "output.h"

namespace strata {

struct RelayTarget {
	std::string host;
	uint16_t ctrl_port = 5342;
	uint16_t data_port = 5343;
};

// "HOST[:CTRL[:DATA]]" (DATA defaults to CTRL+1 when CTRL is given).
// False with err on a malformed text.
bool parse_relay_target(const std::string &text, RelayTarget &t, std::string &err);

class RelayLink {
public:
	// Connect both sockets, negotiate the version, create the relay
	// session `session` for `hostname` (both path-safe names) with the
	// live timer `live_timer_us` (> 0: viewers may attach live).
	static std::shared_ptr<RelayLink> open(const RelayTarget &t, const std::string &session,
					       const std::string &hostname, uint32_t live_timer_us,
					       std::string &err);
	~RelayLink();

	// "HOSTNAME/SESSION-YYYYmmdd-HHMMSS": the trace's directory under the
	// relay's output directory; sub-traces add their relative path to it.
	const std::string &base() const { return base_; }
	const RelayTarget &target() const { return target_; }

	// A sub-trace shown whole, under the link's lock from its first
	// command to its last (no other drain's packet or beacon in between):
	// its metadata stream and text, one stream per entry of `channels`
	// (the ADD_STREAMs pipelined: one round trip), STREAMS_SENT, then, for
	// a live one (`empty` has a header per channel), each stream's packet
	// without records (set_empty) and the nudge at retired_ts.  A live
	// reader hears of the new streams with the first packet index it reads
	// after STREAMS_SENT (lttng-relayd 2.13.9), so everything it may have
	// read before is older than this call: other drains' packets sent while
	// the streams were being added one by one went past records the new
	// streams held, and babeltrace2 2.0.4 fails on such a late record
	// (docs/relay.md, "Live").
	struct Publication {
		std::string path, metadata;
		std::vector<std::string> channels;
		std::vector<strata_packet_header> empty; // live: one per channel, else none
		uint64_t retired_ts = 0, period_ns = 0;  // live: nudge(retired_ts, period_ns)
		uint64_t meta_id = 0;                    // out: the metadata stream
		std::vector<uint64_t> ids;               // out: the channels' streams
	};
	bool publish(Publication &p, std::string &err);
	bool send_metadata(uint64_t id, const std::string &text, std::string &err);
	// One whole packet (header first) on the data connection, then its
	// index on the control connection; the link numbers a stream's
	// packets (net sequence numbers 0, 1, 2...).
	bool send_packet(uint64_t id, const uint8_t *p, size_t n, std::string &err);
	// How many packets stream `id` has sent.
	uint64_t packets_sent(uint64_t id);
	// Live: "nothing new up to ts" for a stream that has sent packets (the
	// relay ignores it otherwise).
	bool send_beacon(uint64_t id, uint64_t ts, std::string &err);
	// Wait (bounded) until the relay stored packets up to last_seq.
	// Streams are not closed one by one: closing the link closes them.
	bool wait_stored(uint64_t id, uint64_t last_seq, std::string &err);

	// Live readers hear of new streams only with a packet of a stream they
	// read (lttng-relayd 2.13.9, docs/relay.md "Live").  A published
	// stream's packet without records is its Publication's `empty`; the
	// nudge that ends a publication first beacons the retired streams
	// forward to about retired_ts (below every record of the new
	// sub-trace: babeltrace2 2.0.4 reads no further stream of a trace
	// while one's inactivity time stands still) unless that was done less
	// than period_ns ago (beacon_retired), then sends such a packet on the
	// session's oldest stream that has packets, stamped at that stream's
	// latest packet end or beacon (every later record of it is at or after
	// that) with its latest sequence number and discarded count.
	// Stream id's empty packet stamped ts (its first packet, when a lane
	// has none at its first beacon: RelayOutput::beacon).
	bool send_empty(uint64_t id, uint64_t ts, std::string &err);

	// A stream whose drain ended, after its last beacon at last_ts: it stays
	// open on the relay (streams close with the link, docs/relay.md), and a
	// live reader would wait for it forever; beacon_retired() tells readers
	// it has nothing more.
	void retire(uint64_t id, uint64_t last_ts);
	// A beacon at about ts for every retired stream (ts less a small
	// per-stream offset, and only above the stream's last beacon), at most
	// once per period_ns for the whole link: called from every live drain's
	// tick.
	void beacon_retired(uint64_t ts, uint64_t period_ns);
	// The same at a drain's end, with nothing left to tick perhaps: returns
	// once the retired streams were beaconed up to ts or later, by this
	// call or another thread's, within one period_ns (it waits for the rate
	// limit rather than skip).
	void beacon_retired_by(uint64_t ts, uint64_t period_ns);

	// The gate (live links; docs/relay.md, "The gate"): a stream of no
	// events that every live reader knows from its attach, stamped only up
	// to a time W before which every record of the session is on a
	// published stream.  A reader shows nothing past a stream's latest
	// stamp, so it shows nothing past W, and it cannot have gone past a
	// process's first records before it heard of that process's streams
	// (babeltrace2 2.0.4 fails on such a late record).
	//   open_gate: main thread, once, at the session's creation: the gate's
	//   sub-trace (`metadata`, one stream) published, its first packet
	//   (`empty`) stamped ts, and its thread started.
	//   begin_publication: main thread, as each output of the link is made
	//   (before the producer's hand-over is read any further): an epoch, for
	//   end_publication once its streams are published, or it never will be.
	//   barrier: main thread, after reading every hand-over sent before ts
	//   was read (the records' clock): W may go to ts once every output
	//   begun up to now ended its publication.  The gate's thread stamps it.
	bool open_gate(const std::string &metadata, const strata_packet_header &empty, uint64_t ts,
		       std::string &err);
	uint64_t begin_publication();
	void end_publication(uint64_t epoch);
	void barrier(uint64_t ts);
	bool gated() const { return gate_thread_.joinable(); }

	bool broken() const { return broken_.load(std::memory_order_acquire); }
	std::string why_broken();
	// What the streams sent so far lost, as their packets say (what a disk
	// trace's reader counts): events discarded (each stream's last count)
	// and packets missing between those sent (gaps in their sequence).
	void loss(uint64_t &events, uint64_t &packets);

	// A clock follower's link (docs/clocks.md, "Relayed followers"): the
	// link keeps every sub-trace's metadata text as sent, each first text
	// through `at_open` (which says in its env that the clock is not mapped
	// yet).  Before the first add_stream.
	void keep_metadata(std::function<std::string(const std::string &)> at_open);
	// The session's last words on the link, after its drains ended (no
	// stream is published after them): each kept metadata text through
	// `rewrite`, sent whole on a new metadata stream of the same path that
	// is never published (the relay opens the file again, truncated: live
	// readers keep the text they read; lttng-relayd refuses RESET_METADATA
	// on a live session).  How many were sent; err: why not all.
	size_t rewrite_metadata(const std::function<std::string(const std::string &)> &rewrite,
				std::string &err);
	// A file `name` beside the trace's sub-traces (base()/name), as a data
	// stream that is never published (the relay writes it and an index of
	// one entry, base()/index/name.idx), stored when it returns true.
	bool put_file(const std::string &name, const std::string &bytes, std::string &err);

private:
	RelayLink() = default;
	bool fail(const std::string &why, std::string &err); // mu_ held
	void close_streams();                                // at the link's end, before the connections
	// What the link knows of a data stream, for the nudge and for the
	// stream's owner (RelayOutput) alike.
	struct Stream {
		uint64_t next_seq = 0;            // packets sent
		uint64_t stream_class = 0;        // of its last packet
		uint64_t safe_ts = 0;             // its latest packet end or beacon
		uint64_t pseq = 0, discarded = 0; // of its last packet
		uint64_t first_pseq = 0;          // of its first packet
		bool has_empty = false;
		strata_packet_header empty{};
	};
	struct Retired {
		uint64_t id, last_ts;
	};
	bool send_beacon_locked(uint64_t id, uint64_t ts, std::string &err);                // mu_ held
	bool send_beacons_locked(const std::vector<Retired> &beacons, std::string &err);    // mu_ held
	std::string beacon_command(uint64_t id, uint64_t ts);                               // mu_ held
	std::vector<Retired> advance_retired_locked(uint64_t ts);                           // mu_ held
	bool send_packet_locked(uint64_t id, const uint8_t *p, size_t n, std::string &err); // mu_ held
	bool add_stream_locked(const std::string &channel, const std::string &path, uint64_t &id,
			       std::string &err); // mu_ held
	bool add_streams_locked(const std::vector<std::string> &channels, const std::string &path,
				std::vector<uint64_t> &ids, std::string &err);                  // mu_ held
	bool send_kept_metadata_locked(uint64_t id, const std::string &text, std::string &err); // mu_ held
	bool streams_sent_locked(std::string &err);                                             // mu_ held
	void nudge_locked(uint64_t retired_ts, uint64_t period_ns);                             // mu_ held
	bool send_metadata_locked(uint64_t id, const std::string &text, std::string &err);      // mu_ held
	bool send_empty_locked(uint64_t id, const Stream &st, uint64_t ts, std::string &err);   // mu_ held
	bool command(uint32_t cmd, const std::string &payload, void *reply, size_t reply_len,
		     std::string &err);
	bool send_bytes(int fd, const void *p, size_t n, const char *what, std::string &err);
	bool recv_bytes(int fd, void *p, size_t n, const char *what, std::string &err);

	RelayTarget target_;
	std::string base_;
	uint32_t minor_ = 0;
	uint64_t relay_session_ = 0;
	std::mutex mu_;
	int ctrl_ = -1, data_ = -1;                    // guarded by mu_
	std::string why_;                              // guarded by mu_
	std::map<uint64_t, Stream> streams_;           // guarded by mu_: data streams by id
	std::vector<std::pair<uint64_t, bool>> added_; // guarded by mu_: every stream, metadata or not
	std::vector<Retired> retired_;                 // guarded by mu_
	// keep_metadata: metadata streams by id, their path and whole text.
	struct Kept {
		std::string path, text;
	};
	std::function<std::string(const std::string &)> at_open_; // guarded by mu_
	bool keep_ = false;                                       // guarded by mu_
	std::map<uint64_t, Kept> kept_;                           // guarded by mu_
	uint64_t retired_at_ = 0;             // guarded by mu_: the latest retired beacons' ts
	int64_t advanced_ms_ = INT64_MIN / 2; // guarded by mu_: when they went (CLOCK_MONOTONIC)
	std::condition_variable advanced_;    // with mu_: an advance went
	uint64_t pending_by_ = 0;             // guarded by mu_: the latest ts beacon_retired_by waits for
	bool advance_due_locked(uint64_t period_ns);        // mu_ held
	bool advance_locked(uint64_t ts, std::string &err); // mu_ held
	// Set under mu_ (release) when the link breaks; read without it
	// (acquire) so a broken link fails fast.
	std::atomic<bool> broken_{false};

	// The gate (relay_gate.cpp).  gate_mu_ is never held across I/O and
	// never taken under mu_'s I/O: the main thread only ever waits for it.
	void gate_run();                                   // the gate's thread
	void close_gate();                                 // main thread, at the link's end: the thread ended
	void gate_ready_locked();                          // gate_mu_ held: candidates now allowed
	uint64_t gate_id_ = 0;                             // the gate's stream (set before the thread starts)
	std::thread gate_thread_;                          // main thread: started and joined
	std::mutex gate_mu_;                               // guards the fields below
	std::condition_variable gate_cv_;                  // with gate_mu_: W may move, or quit
	uint64_t epoch_ = 0;                               // the epoch outputs begun now get
	std::map<uint64_t, uint64_t> open_;                // epoch -> outputs not yet published
	std::vector<std::pair<uint64_t, uint64_t>> cands_; // (epoch, ts) of barriers, oldest first
	uint64_t allowed_ = 0;                             // the latest W allowed (ts of a barrier)
	bool gate_quit_ = false;
};

// The relay output of one sub-trace: its streams ("metadata" and one per
// lane, all published at open()) under link->base() + `rel_path`.
std::unique_ptr<Output> relay_output(std::shared_ptr<RelayLink> link, const std::string &rel_path,
				     const std::string &channel, uint32_t n_lanes, uint32_t live_timer_us);

} // namespace strata
#endif
