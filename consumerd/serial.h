/*
 * serial.h - streaming a session over a byte line: a serial port, a FIFO,
 * a pipe or a file (docs/serial.md).  The frames are
 * libtrace/proto/serial_frame.h's; `strata receive` rebuilds the trace.
 *
 * A SerialLink is one session's line: the open device, a bounded queue of
 * encoded frames and the thread that writes them.  Contract:
 *   - made and destroyed on the daemon's main thread (CREATE, DESTROY);
 *     shared (shared_ptr) by the session and the serial outputs of its
 *     drains, whose threads call it concurrently: one mutex guards the
 *     queue, the token bucket, the sub-trace table and the counters.
 *   - each serial output cuts its drain's packets at record boundaries
 *     into packets of at most serial::kPieceBytes (Reader::cut_packet) and
 *     encodes their frames on the drain's thread; the link queues the
 *     frames of one sub-buffer's packet all or none.
 *   - never blocks a drain: a packet is queued whole if the line's token
 *     bucket (baud / 10 bytes per second: 8N1 costs 10 bits a byte) holds
 *     its encoded size and the queue has room, otherwise refused at once
 *     and counted (the drain counts it as lost, like a failed write).
 *     Metadata and sub-trace announcements are always queued (a receiver
 *     needs them) and charged to the bucket.
 *   - the writer thread alone touches the device: non-blocking writes
 *     bounded by poll; a device that takes nothing for kStallMs breaks the
 *     link (the reason kept; later packets are refused and counted).
 *   - every sub-trace's announcement and whole metadata are sent again
 *     periodically (resend_period), so a receiver that started late or lost
 *     a metadata frame recovers.
 */
#ifndef STRATA_CONSUMERD_SERIAL_H
#define STRATA_CONSUMERD_SERIAL_H

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "output.h"

namespace strata {

struct SerialTarget {
	std::string device; // a path ("-" is resolved by the strata command)
	uint32_t baud = 115200;
};

// "serial:DEVICE[,BAUD]", the form CREATE's relay field carries.
constexpr const char *kSerialPrefix = "serial:";
bool is_serial_target(const std::string &relay_field);
bool parse_serial_target(const std::string &relay_field, SerialTarget &t, std::string &err);
// A serial session's sub-buffer size when none was asked: the largest
// power of two within one second of line, 4 KiB to 128 KiB, so that a
// packet crosses the line in about a second and the queue flushes fast.
uint64_t serial_subbuf_size(const SerialTarget &t);

class SerialLink {
public:
	// Opens the device (a tty is put in raw mode at `baud`; a FIFO needs a
	// reader already).  uid >= 0: a root daemon working for that user
	// refuses a device the user does not own.
	// subbuf_size: the session's sub-buffer size, the largest packet the
	// line must be able to pass.
	static std::shared_ptr<SerialLink> open(const SerialTarget &t, int64_t uid, uint64_t subbuf_size,
						std::string &err);
	~SerialLink();

	const SerialTarget &target() const { return target_; }
	uint64_t line_bytes_per_s() const { return target_.baud / 10; }

	// A new sub-trace: its number on the line.  empty_bits: the
	// content_size of its packets without records (announced).
	uint16_t add_trace(const std::string &path, const std::string &channel, uint32_t empty_bits);
	// Appends to the sub-trace's metadata text; its length on the line
	// after it (what its packets then need).  The first text of each
	// sub-trace passes through the opening filter, if one is set.
	uint32_t metadata(uint16_t trace, const std::string &text);
	// A clock follower's session (docs/clocks.md, "Serial followers"):
	// each sub-trace's first metadata text goes out through `f` (its env
	// saying the clock is this machine's until a stop rewrites it).  Set
	// before any drain opens.
	void set_opening_filter(std::function<std::string(const std::string &)> f);
	// At a stop, the drains ended: `file` (clocks.json) for the top of the
	// received trace, then, with `rewrite`, every sub-trace's metadata text
	// as sent, rewritten (kRewrite frames), all of one new generation;
	// twice when it takes at most a second of line.  The number of
	// sub-traces rewritten; false (err) on a broken line.
	bool clock_rewrite(const std::string &file_name, const std::string &file,
			   const std::function<std::string(const std::string &)> *rewrite, size_t *n,
			   std::string &err);
	// The encoded frames of the packets one sub-buffer was cut into
	// (`pkts` packets, `bytes` of CTF), queued all or none; false:
	// refused (line full, link broken), err says why.
	bool send(std::vector<std::vector<uint8_t>> &frames, uint64_t pkts, uint64_t bytes, std::string &err);
	// Packets not offered to send() (after a refused one in a batch: the
	// output stores a prefix): counted as refused too.
	void refused(uint64_t pkts, uint64_t bytes);
	// The sub-trace's drain ended: its END frame's payload (sent twice).
	void end(uint16_t trace, const std::vector<uint8_t> &payload);
	// "N packet(s) sent (...), M refused over capacity (...); the session
	// offered R B/s, P% of the line" (STOP's answer, describe()).
	std::string stats();

	// "serial DEVICE BAUD baud (N B/s): ..." for STATUS and logs.
	std::string describe();
	bool broken() const { return broken_.load(std::memory_order_acquire); }
	std::string why_broken();

private:
	SerialLink() = default;
	struct Trace {
		std::string path, channel, text;
		uint32_t meta_seq = 0;
		uint32_t empty_bits = 0;
	};
	void run();
	void refill(uint64_t now_ns);                 // mu_ held
	void queue_meta(uint16_t trace, size_t from); // mu_ held: announce + text[from..]
	void resend_meta_if_due(uint64_t now);        // mu_ held: every sub-trace's metadata again
	void push(std::vector<uint8_t> &&frame);      // mu_ held
	// mu_ held: kFile or kRewrite frames of `text` (prefix: the payload's
	// fixed part before the chunk, its offset filled in per chunk).
	void queue_chunks(uint8_t type, uint16_t trace, uint32_t &seq, const std::string &prefix,
			  const std::string &text);

	SerialTarget target_;
	int fd_ = -1;
	uint64_t nonce_ = 0;
	std::mutex mu_;
	std::condition_variable cv_;
	std::deque<std::vector<uint8_t>> queue_; // guarded by mu_
	size_t queued_ = 0, queue_cap_ = 0;      // bytes; guarded by mu_
	double tokens_ = 0, depth_ = 0;          // guarded by mu_
	uint64_t refilled_ns_ = 0, resent_ns_ = 0, start_ns_ = 0;
	std::vector<Trace> traces_;                               // guarded by mu_
	std::function<std::string(const std::string &)> opening_; // guarded by mu_
	uint32_t rewrite_gen_ = 0;                                // guarded by mu_
	uint32_t file_seq_ = 0; // kFile frames' seq (trace kMetaStream); guarded by mu_
	bool stop_ = false;     // guarded by mu_
	std::string why_;       // guarded by mu_
	// Counters, guarded by mu_.
	uint64_t pkts_sent_ = 0, pkt_bytes_sent_ = 0, wire_bytes_ = 0;
	uint64_t pkts_refused_ = 0, pkt_bytes_refused_ = 0, meta_resends_ = 0;
	uint64_t unsent_frames_ = 0; // still queued when the flush at DESTROY gave up
	// Set under mu_ (release) when the device fails; read without it
	// (acquire) so that a broken link refuses at once.
	std::atomic<bool> broken_{false};
	std::thread thread_;
};

// The serial output of one sub-trace (`rel_path`: "ust/pid/...", "kernel").
std::unique_ptr<Output> serial_output(std::shared_ptr<SerialLink> link, const std::string &rel_path,
				      const std::string &channel, uint32_t n_lanes);

} // namespace strata
#endif
