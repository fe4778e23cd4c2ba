/*
 * output.h - where one drain's sub-trace goes: the local disk, an
 * lttng-relayd (relay.h), or a snapshot directory (a disk output of a
 * Drain that is never started).  docs/relay.md, "Outputs".
 *
 * Contract:
 *   - one Output belongs to one Drain and is called only from the thread
 *     that drains (the drain thread, or the main thread for a snapshot);
 *     an implementation shared between drains (RelayLink) locks inside.
 *   - packets arrive whole and validated (header first); write_packets
 *     stores a prefix of them whole and says how many: a sub-trace never
 *     holds a torn packet.  What it could not store the caller counts as
 *     lost (DrainCounters::errors) and the session reports it.
 *   - metadata is the TSDL text: open() gets the whole first text,
 *     append_metadata() later event blocks, always before any packet that
 *     uses them.
 *   - no call blocks without bound: the disk blocks as the file system
 *     does, the relay output bounds every send and answer by a timeout and
 *     then stops trying (relay.h).
 */
#ifndef STRATA_CONSUMERD_OUTPUT_H
#define STRATA_CONSUMERD_OUTPUT_H

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata_abi.h"

struct iovec;

namespace strata {

struct Owner;
class Reader;

class Output {
public:
	virtual ~Output() = default;
	// Create the sub-trace and store its metadata `text`.
	virtual bool open(const std::string &text, std::string &err) = 0;
	virtual bool append_metadata(const std::string &text, std::string &err) = 0;
	// Append n_pkts whole packets of `lane`: iov holds them in order,
	// ends[i] is the end of packet i counted from the first byte.
	// Returns how many were stored whole (a prefix); err says why not all.
	virtual size_t write_packets(uint32_t lane, const struct iovec *iov, int n_iov, const size_t *ends,
				     size_t n_pkts, std::string &err) = 0;
	// After open(): every packet's length a multiple of this (the drain
	// pads it, packet_size over zeros after content_size), so that the
	// output can write around the page cache (the disk: O_DIRECT,
	// docs/consumerd.md, "Writing around the page cache").  1: as they come.
	virtual size_t packet_align() const { return 1; }
	// Before each write_packets (to an output whose packet_align() is
	// above 1): whether the writers of any of the
	// drain's lanes are a whole sub-buffer or more ahead of it (it is
	// falling behind): the disk then writes to the page cache, whose rate
	// absorbs a burst.
	virtual void set_behind(bool behind) { (void)behind; }
	// Live outputs (relay): every live_period_ns() the drain closes the
	// lanes' open packets (consumer-side close, as lttng's live timer
	// flushes), sends what that completed, and calls beacon() for each lane
	// that had nothing: "no event of `lane` before ts_ns" (trace clock,
	// CLOCK_MONOTONIC ns), so live readers move on.  0: not live.
	virtual uint64_t live_period_ns() const { return 0; }
	virtual void beacon(uint32_t lane, uint64_t ts_ns) { (void)lane, (void)ts_ns; }
	// Live outputs, right before open(): for each lane, the header of a
	// packet without records (the drain's reader makes it), and the
	// producers' clock when the sub-trace opened.  The relay output shows
	// every lane's stream at open() and, for a lane still without packets
	// at a beacon(), sends such a packet stamped at the opening first
	// (docs/relay.md, "Live").
	virtual void set_empty_packets(std::vector<strata_packet_header> headers, uint64_t opened_ns)
	{
		(void)headers, (void)opened_ns;
	}
	// Once per live tick, after beacon(): an output shared with other
	// drains says "nothing before ts_ns" for what it still carries of the
	// drains that ended (relay: their streams, which stay open), so that
	// live readers do not wait for them while this drain goes on.
	virtual void tick(uint64_t ts_ns) { (void)ts_ns; }
	// Before open(): the drain's reader, for an output that cuts packets
	// at record boundaries (serial: Reader::cut_packet).  Valid until
	// close(); used only from the drain's thread, as the output is.
	virtual void set_reader(Reader *reader) { (void)reader; }
	// Flush and release; only beacon() may follow (the end of a live
	// drain).  Idempotent.
	virtual void close() = 0;
};

// Today's layout: `dir`/metadata and `dir`/<channel>_<lane>, created on the
// first packet, owned by `owner`.  resume: `dir` is a previous daemon's
// sub-trace of the same buffer (docs/crash.md): open() replaces its
// metadata (a new file renamed over it) and packets are appended to the
// stream files there.
std::unique_ptr<Output> disk_output(const std::string &dir, const std::string &channel, uint32_t n_lanes,
				    const Owner &owner, bool resume = false);

// STRATA_DIRECT_IO=1 in the daemon's environment (read once): disk outputs
// write around the page cache where they can, packets aligned.
bool direct_io_asked();

} // namespace strata
#endif
