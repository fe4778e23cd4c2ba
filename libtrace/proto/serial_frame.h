/*
 * serial_frame.h - the frames of a trace sent over a byte line (a serial
 * port, a FIFO, a pipe): docs/serial.md.  One implementation for both ends:
 * strata-consumerd encodes (consumerd/serial.cpp), `strata receive`
 * decodes (cli/cmd_receive.cpp).
 *
 * On the wire a frame is COBS(body) followed by one 0x00 byte.  COBS keeps
 * 0x00 out of the encoded body, so 0x00 only ever ends a frame and a
 * receiver re-finds the frame boundaries after any damage at the next 0x00
 * (the resync rule: whatever the corruption, the frame after the next
 * delimiter decodes).  The body, little-endian:
 *
 *   0   u8  version << 4 | type      (version 2; kAnnounce, kMetadata, kPacket, kEnd,
 *                                    kRewrite, kFile)
 *   1   u8  flags                    (0)
 *   2   u16 trace                    sub-trace number on this line
 *   4   u16 stream                   lane (kPacket), kMetaStream otherwise
 *   6   u16 reserved                 (0)
 *   8   u32 seq                      per (trace, stream): 0, 1, 2...
 *   12  u32 length                   payload bytes
 *   16  payload
 *   16+length u32 CRC-32C            (Castagnoli, reflected polynomial
 *                                    0x82F63B78, init and final xor
 *                                    0xFFFFFFFF) of bytes 0..16+length
 *
 * Everything decoded is hostile input: the decoder never reads outside
 * what it was given, bounds its buffer (kMaxBody) and hands out only
 * frames whose CRC and lengths check.
 */
#ifndef STRATA_PROTO_SERIAL_FRAME_H
#define STRATA_PROTO_SERIAL_FRAME_H

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace strata {
namespace serial {

// Version 2 (issue 49): packets of at most kPieceBytes, counted in
// records; END describes each lane.  Version 1 sent whole sub-buffers.
// The header, the CRC and the COBS framing are the same in every version,
// so a receiver recognises (CRC good, version other) a sender of another
// version and says so.
constexpr uint8_t kVersion = 2;
enum FrameType : uint8_t {
	// Payload: u64 link nonce, u32 metadata length so far, u16 path length,
	// path (relative: "ust/pid/comm-pid-date", "kernel"), u16 channel
	// length, channel ("channel0", "kernel"), u32 the content_size (bits)
	// of a packet without records in this sub-trace (the receiver's loss
	// marks).  Re-sent with the metadata.
	kAnnounce = 1,
	// Payload: u32 offset of these bytes in the TSDL text, u32 a length at
	// which the text is whole (the sender's text size when it sent this;
	// a receiver writes its metadata file only up to such lengths, so a
	// reader never sees half a block), the bytes.
	kMetadata = 2,
	// Payload: u32 metadata length the packet needs (its event classes are
	// declared within that prefix), u64 records of the lane before this
	// packet (every packet the sender cut, sent or refused), u32 records in
	// it, then one whole CTF packet of at most kPieceBytes (unless one
	// record is larger): the sender cuts each sub-buffer's packet at record
	// boundaries, and its packet_seq_num counts these packets.
	kPacket = 3,
	// Payload: the trace uuid (16 bytes), u16 n, then n lanes of 44 bytes:
	// u16 lane, u16 0, u32 stream_id, s32 vtid, u64 packets the sender
	// cut (the next packet_seq_num), u64 records in them, u64 the last
	// one's timestamp_end, u64 its events_discarded.  Sent (twice) when
	// the sub-trace's drain ends: the receiver marks what never arrived
	// after the last packet it has.
	kEnd = 4,
	// A clock follower's sub-trace put onto its reference's clock, sent at
	// each stop of the session once its drains ended (docs/clocks.md,
	// "Serial followers"): the sub-trace's whole metadata rewritten.
	// Payload: u32 offset of these bytes in the rewritten text, u32 its
	// length, u32 the length of the text as sent (kMetadata) that it
	// replaces, u32 the rewrite's generation (each stop a higher one), up
	// to kRewriteChunk bytes at an offset that is a multiple of it.  The
	// receiver replaces the sub-trace's metadata file (a rename) once it
	// holds every chunk of one generation.
	kRewrite = 5,
	// A file for the top of the received trace (clocks.json), sent before
	// the rewrites.  trace = kMetaStream (no sub-trace).  Payload: u32
	// offset, u32 total length, u32 generation, u8 name length, u8 0, the
	// name ("clocks.json", the only one), up to kRewriteChunk bytes at a
	// multiple of it.
	kFile = 6,
	// A receiver that does not know a kind counts its frames and skips
	// them (a receiver of before kRewrite counted them as bad contents):
	// they carry nothing a trace needs to be read.
};
constexpr size_t kRewriteChunk = 1024;
constexpr size_t kRewritePrefix = 16; // offset, total, base, generation
constexpr size_t kFilePrefix = 14;    // offset, total, generation, name length
// The largest packet the sender cuts: a damaged byte on the line costs the
// records of one such packet.
constexpr size_t kPieceBytes = 4096;
constexpr size_t kPacketPrefix = 16; // need, records before, records
constexpr size_t kEndLane = 44;
constexpr uint16_t kMetaStream = 0xFFFF;
constexpr size_t kHeaderSize = 16;
constexpr size_t kCrcSize = 4;
constexpr size_t kMaxPayload = (1u << 20) + 64; // a 1 MiB packet and its prefix
constexpr size_t kMaxBody = kHeaderSize + kMaxPayload + kCrcSize;
// COBS adds one byte per 254 and the first; plus the delimiter.
constexpr size_t encoded_max(size_t body)
{
	return body + body / 254 + 2;
}

uint32_t crc32c(const void *p, size_t n, uint32_t crc = 0);

// The line speeds a tty can be set to here (9600 ... 4000000 baud).
bool supported_baud(uint32_t baud);
// A tty in raw mode (8N1, no flow control, CLOCAL) at `baud`, both ways.
bool set_raw_tty(int fd, uint32_t baud, std::string &err);

// COBS: `n` bytes into `out` (appended), no 0x00 in what is appended.
void cobs_encode(const uint8_t *p, size_t n, std::vector<uint8_t> &out);
// Inverse; false on a malformed input (a 0x00 inside, a code past the end).
bool cobs_decode(const uint8_t *p, size_t n, std::vector<uint8_t> &out);

struct Frame {
	uint8_t type = 0;
	uint16_t trace = 0, stream = 0;
	uint32_t seq = 0;
	const uint8_t *payload = nullptr; // valid during the callback only
	size_t len = 0;
};

// Appends one whole frame (encoded body and its delimiter) to `out`; the
// payload is the concatenation of a and b (b may be empty).
void encode_frame(uint8_t type, uint16_t trace, uint16_t stream, uint32_t seq, const uint8_t *a, size_t na,
		  const uint8_t *b, size_t nb, std::vector<uint8_t> &out);

struct DecodeStats {
	uint64_t frames = 0;        // good frames handed out
	uint64_t bad_crc = 0;       // well-formed COBS, wrong CRC
	uint64_t malformed = 0;     // bad COBS, too short, lengths that disagree
	uint64_t other_version = 0; // CRC good, another wire format version
	uint8_t version_seen = 0;   // the last such version
	uint64_t oversized = 0;     // no delimiter within encoded_max(kMaxBody) bytes
	uint64_t bad_bytes = 0;     // bytes of everything rejected above
};

// Splits a byte stream at 0x00 delimiters and checks each frame.
class FrameDecoder {
public:
	using Sink = std::function<void(const Frame &)>;
	void feed(const uint8_t *p, size_t n, const Sink &sink);
	const DecodeStats &stats() const { return stats_; }

private:
	void frame_end(const Sink &sink);
	std::vector<uint8_t> raw_, body_;
	bool skipping_ = false; // an oversized run: drop until the next 0x00
	DecodeStats stats_;
};

// Sequence numbers per (trace, stream): frames missing between two that
// arrived.  A number at or below the last one seen means the sender started
// again (a new link); counting restarts there.
class SeqTracker {
public:
	// The number of frames lost just before this one (0 if none).
	uint64_t see(uint16_t trace, uint16_t stream, uint32_t seq);
	uint64_t lost(uint16_t trace, uint16_t stream) const;
	uint64_t lost_total() const;
	void forget_trace(uint16_t trace); // a new sub-trace under the same number
	const std::map<std::pair<uint16_t, uint16_t>, uint64_t> &lost_by_stream() const { return lost_; }

private:
	std::map<std::pair<uint16_t, uint16_t>, uint32_t> next_;
	std::map<std::pair<uint16_t, uint16_t>, uint64_t> lost_;
};

} // namespace serial
} // namespace strata
#endif
