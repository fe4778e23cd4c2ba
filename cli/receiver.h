/*
 * receiver.h - `strata receive`'s Receiver: the CTF trace a session sends
 * over a byte line (`--serial`, docs/serial.md) rebuilt from its frames
 * (receiver.cpp; its report at the end, receiver_report.cpp).  The
 * command, its options and its line: cmd_receive.cpp.
 *
 * Frames come from libtrace/proto/serial_frame.h's decoder: only frames
 * whose CRC checks are used, so no damaged byte reaches the trace.  Each
 * sub-trace the sender announces becomes DIR/<its path> (ust/pid/...,
 * kernel) with its metadata and one stream file per lane.  While frames
 * arrive the trace is always readable: the metadata file grows only up to
 * lengths at which the text is whole, and a packet is appended (one write)
 * only once the metadata it needs is in the file; packets that wait for
 * metadata are held in memory (bounded, kMaxHeld) and dropped, counted, if
 * it never comes.  Missing packets (lost on the line, refused by the
 * sender, dropped here) are marked in the trace where they were: an empty
 * packet whose packet_seq_num leaves a gap and whose events_discarded
 * counts their events (LaneOut, mark(); docs/serial.md, "Loss marks").
 * Frames lost are counted per stream, from the frames' own sequence
 * numbers, in the report on stderr at the end (EOF, or SIGINT/SIGTERM for
 * a tty), with the packets and events missing.
 */
#ifndef STRATA_CLI_RECEIVER_H
#define STRATA_CLI_RECEIVER_H

#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>
#include <unistd.h>

#include "proto/serial_frame.h"
#include "strata_abi.h"

namespace strata {
namespace receive {

constexpr size_t kMaxHeld = 16u << 20;       // packets waiting for their metadata, all sub-traces
constexpr size_t kMaxText = 16u << 20;       // a sub-trace's metadata (a kernel's is about 180 KB)
constexpr size_t kMaxAssembling = 32u << 20; // rewrites and files being assembled, all together
constexpr size_t kHdr = STRATA_PACKET_HEADER_SIZE;

// mkdir -p: 0, or -errno.
int mkdirs(const std::string &path);

// A packet from the line: the CTF packet and what its frame says of it.
struct Piece {
	uint64_t no = 0; // arrival number (the oldest held is dropped first)
	uint16_t lane = 0;
	uint32_t need = 0;    // metadata length it needs
	uint64_t before = 0;  // records of the lane before it (sender's count)
	uint32_t records = 0; // in it
	std::vector<uint8_t> pkt;
};

// What the END frame says of one lane (serial_frame.h).
struct LaneEnd {
	uint32_t stream_id = 0;
	int32_t vtid = 0;
	uint64_t packets = 0, records = 0, ts_end = 0, discarded = 0;
};

// One lane's stream file as rebuilt.  The sender numbers its packets
// (packet_seq_num) and counts records; the trace's packet_seq_num is the
// sender's plus the marks written before it, so that a mark (an empty
// packet) stands where the missing packets were and every other packet
// follows its predecessor without a gap.
struct LaneOut {
	int fd = -1;
	bool have = false;                       // a packet of the sender written
	uint64_t next_seq = 0;                   // the sender's number after the last written
	uint64_t records = 0;                    // the sender's record count after it
	uint64_t marks = 0;                      // empty packets written
	uint64_t added = 0;                      // events added to events_discarded (what is missing)
	uint64_t last_disc = 0;                  // the last written packet's events_discarded as sent
	uint64_t ts_end = 0;                     // the last packet's timestamp_end in the file
	strata_packet_header tmpl{};             // the last written packet's header
	uint64_t written = 0;                    // packets of the sender written
	uint64_t lost_pkts = 0, lost_events = 0; // marked in the trace
	uint64_t held = 0;                       // packets waiting for metadata
	bool trailed = false;                    // the END frame's mark done
};

// A text sent in chunks of one generation (kRewrite, kFile): whole once
// every chunk came.
struct Assembly {
	uint32_t gen = 0, applied = 0; // collected, last written
	uint32_t total = 0, base = 0;
	std::string text;
	std::vector<bool> have;
	size_t missing = 0;
};

struct SubTrace {
	bool announced = false;
	uint64_t nonce = 0;
	uint32_t empty_bits = kHdr * 8; // content_size of a packet without records
	std::string path, channel, dir;
	std::string text;   // contiguous TSDL received from offset 0
	size_t whole = 0;   // largest length <= text.size() at which the text is whole
	size_t written = 0; // bytes of it in DIR/path/metadata
	int meta_fd = -1;
	std::map<uint16_t, LaneOut> lanes;
	std::deque<Piece> held;
	std::set<size_t> boundaries; // whole lengths announced beyond text.size()
	bool ended = false;          // its kEnd frame came
	bool trailed = false;        // trail() done
	uint8_t uuid[16] = {};
	std::map<uint16_t, LaneEnd> end; // from it
	Assembly rw;                     // its metadata rewritten at the sender's stop
	bool rewritten = false;          // DIR/path/metadata is a rewrite (rw.applied)
	bool rw_correlated = false;      // ... saying sync_state = "correlated"
};

class Receiver {
public:
	explicit Receiver(const std::string &out) : out_(out) {}
	~Receiver()
	{
		for (auto &kv : traces_)
			close_files(kv.second);
	}
	void frame(const serial::Frame &f);
	void finish(); // drops what still waits for metadata, marks what is missing
	void report(FILE *o, const serial::DecodeStats &ds);
	void report_streams(FILE *o);
	void report_clocks(FILE *o);
	// Every file closed: nothing more is written (the split may run).
	void close_all()
	{
		for (auto &kv : traces_)
			close_files(kv.second);
	}
	// The sub-trace directories this receiver made.
	std::vector<std::string> dirs() const
	{
		std::vector<std::string> v;
		for (const auto &kv : traces_)
			if (!kv.second.dir.empty())
				v.push_back(kv.second.dir);
		return v;
	}
	// Whether a clocks.json came whole and was written at DIR's top.
	bool clocks_written() const
	{
		const auto it = files_.find("clocks.json");
		return it != files_.end() && it->second.applied;
	}
	bool failed() const { return !error_.empty(); }
	const std::string &error() const { return error_; }

private:
	void announce(uint16_t id, const serial::Frame &f);
	void metadata(SubTrace &t, const serial::Frame &f);
	void packet(SubTrace &t, const serial::Frame &f);
	void end(SubTrace &t, uint16_t id, const serial::Frame &f);
	void rewrite(SubTrace &t, const serial::Frame &f);
	void file(const serial::Frame &f);
	bool chunk(Assembly &a, uint32_t off, uint32_t total, uint32_t base, uint32_t gen, const uint8_t *p,
		   size_t n);
	// A's text into *text once every chunk of a generation not yet
	// written came (and nothing failed); false otherwise.
	bool take(Assembly &a, std::string *text)
	{
		if (a.missing || a.gen <= a.applied || failed())
			return false;
		a.applied = a.gen;
		assembling_ -= a.text.size();
		text->swap(a.text);
		a.text.clear();
		a.have.clear();
		return true;
	}
	bool replace(const std::string &path, const std::string &text, int *keep_fd);
	void flush_metadata(SubTrace &t);
	void release(SubTrace &t);
	void store(SubTrace &t, Piece &p);
	void mark(SubTrace &t, uint16_t lane, LaneOut &L, strata_packet_header h, uint64_t ts_begin,
		  uint64_t ts_end, uint64_t seq, uint64_t disc, uint64_t gap_pkts, uint64_t gap_events);
	void trail(SubTrace &t);
	bool append(SubTrace &t, uint16_t lane, LaneOut &L, const void *p, size_t n);
	void close_files(SubTrace &t)
	{
		if (t.meta_fd >= 0)
			close(t.meta_fd);
		t.meta_fd = -1;
		for (auto &l : t.lanes)
			if (l.second.fd >= 0)
				close(l.second.fd);
		t.lanes.clear();
	}
	void fail(const std::string &why)
	{
		if (error_.empty())
			error_ = why;
	}

	std::string out_;
	std::map<uint16_t, SubTrace> traces_;
	serial::SeqTracker seq_;
	size_t held_bytes_ = 0;
	uint64_t dropped_held_ = 0, bad_packets_ = 0, bad_meta_ = 0, unknown_ = 0;
	std::map<std::string, Assembly> files_;                    // kFile: by name
	size_t assembling_ = 0;                                    // bytes of every Assembly's text
	std::map<std::pair<uint16_t, uint16_t>, uint64_t> frames_; // good frames per stream
	std::deque<std::pair<uint64_t, uint16_t>> held_order_;     // (Piece::no, sub-trace), oldest first
	uint64_t arrivals_ = 0;
	std::map<std::string, int> suffix_; // DIR/path.N: the next N to try
	std::string error_;
};

} // namespace receive
} // namespace strata

#endif
