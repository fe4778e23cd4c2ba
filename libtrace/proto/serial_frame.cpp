/*
 * serial_frame.cpp - CRC-32C, COBS and the frame codec (serial_frame.h,
 * docs/serial.md).
 */
#include "serial_frame.h"

#include <cerrno>
#include <cstring>
#include <termios.h>

namespace strata {
namespace serial {

namespace {

struct CrcTable {
	uint32_t t[256];
	CrcTable()
	{
		for (uint32_t i = 0; i < 256; i++) {
			uint32_t c = i;
			for (int k = 0; k < 8; k++)
				c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
			t[i] = c;
		}
	}
};
const CrcTable kCrc;

void put16(uint8_t *p, uint16_t v)
{
	p[0] = static_cast<uint8_t>(v);
	p[1] = static_cast<uint8_t>(v >> 8);
}
void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint16_t get16(const uint8_t *p)
{
	return static_cast<uint16_t>(p[0] | p[1] << 8);
}
uint32_t get32(const uint8_t *p)
{
	return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
	       static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}

bool baud_constant(uint32_t baud, speed_t &s)
{
	static const struct {
		uint32_t baud;
		speed_t s;
	} kTable[] = {{9600, B9600},       {19200, B19200},     {38400, B38400},     {57600, B57600},
		      {115200, B115200},   {230400, B230400},   {460800, B460800},   {500000, B500000},
		      {576000, B576000},   {921600, B921600},   {1000000, B1000000}, {1152000, B1152000},
		      {1500000, B1500000}, {2000000, B2000000}, {2500000, B2500000}, {3000000, B3000000},
		      {3500000, B3500000}, {4000000, B4000000}};
	for (const auto &e : kTable)
		if (e.baud == baud) {
			s = e.s;
			return true;
		}
	return false;
}

} // namespace

bool supported_baud(uint32_t baud)
{
	speed_t s;
	return baud_constant(baud, s);
}

bool set_raw_tty(int fd, uint32_t baud, std::string &err)
{
	speed_t s;
	struct termios tio;
	if (!baud_constant(baud, s)) {
		err = "unsupported speed " + std::to_string(baud) + " baud";
		return false;
	}
	if (tcgetattr(fd, &tio) != 0) {
		err = std::string("cannot read the line settings: ") + strerror(errno);
		return false;
	}
	cfmakeraw(&tio);
	tio.c_cflag |= CLOCAL | CREAD;
	tio.c_cflag &= ~CRTSCTS;
	cfsetospeed(&tio, s);
	cfsetispeed(&tio, s);
	if (tcsetattr(fd, TCSANOW, &tio) != 0) {
		err = "cannot set raw mode at " + std::to_string(baud) + " baud: " + strerror(errno);
		return false;
	}
	return true;
}

uint32_t crc32c(const void *p, size_t n, uint32_t crc)
{
	const uint8_t *b = static_cast<const uint8_t *>(p);
	crc = ~crc;
	for (size_t i = 0; i < n; i++)
		crc = kCrc.t[(crc ^ b[i]) & 0xFF] ^ (crc >> 8);
	return ~crc;
}

void cobs_encode(const uint8_t *p, size_t n, std::vector<uint8_t> &out)
{
	size_t code_at = out.size();
	out.push_back(0);
	uint8_t code = 1;
	for (size_t i = 0; i < n; i++) {
		if (p[i] == 0) {
			out[code_at] = code;
			code_at = out.size();
			out.push_back(0);
			code = 1;
			continue;
		}
		out.push_back(p[i]);
		if (++code == 0xFF) {
			out[code_at] = code;
			code_at = out.size();
			out.push_back(0);
			code = 1;
		}
	}
	out[code_at] = code;
}

bool cobs_decode(const uint8_t *p, size_t n, std::vector<uint8_t> &out)
{
	out.clear();
	size_t i = 0;
	while (i < n) {
		const uint8_t code = p[i++];
		if (code == 0 || i + code - 1 > n)
			return false;
		for (uint8_t k = 1; k < code; k++) {
			if (p[i] == 0)
				return false;
			out.push_back(p[i++]);
		}
		// A block shorter than 254 data bytes ends with an implied zero,
		// except the last block.
		if (code != 0xFF && i < n)
			out.push_back(0);
	}
	return true;
}

void encode_frame(uint8_t type, uint16_t trace, uint16_t stream, uint32_t seq, const uint8_t *a, size_t na,
		  const uint8_t *b, size_t nb, std::vector<uint8_t> &out)
{
	std::vector<uint8_t> body(kHeaderSize + na + nb + kCrcSize);
	uint8_t *h = body.data();
	h[0] = static_cast<uint8_t>(kVersion << 4 | (type & 0xF));
	h[1] = 0;
	put16(h + 2, trace);
	put16(h + 4, stream);
	put16(h + 6, 0);
	put32(h + 8, seq);
	put32(h + 12, static_cast<uint32_t>(na + nb));
	if (na)
		memcpy(h + kHeaderSize, a, na);
	if (nb)
		memcpy(h + kHeaderSize + na, b, nb);
	put32(h + kHeaderSize + na + nb, crc32c(h, kHeaderSize + na + nb));
	out.reserve(out.size() + encoded_max(body.size()));
	cobs_encode(body.data(), body.size(), out);
	out.push_back(0);
}

void FrameDecoder::feed(const uint8_t *p, size_t n, const Sink &sink)
{
	constexpr size_t kMaxRaw = encoded_max(kMaxBody);
	while (n) {
		const uint8_t *z = static_cast<const uint8_t *>(memchr(p, 0, n));
		const size_t run = z ? static_cast<size_t>(z - p) : n;
		if (skipping_) {
			stats_.bad_bytes += run;
		} else if (raw_.size() + run > kMaxRaw) {
			stats_.oversized++;
			stats_.bad_bytes += raw_.size() + run;
			raw_.clear();
			skipping_ = true;
		} else {
			raw_.insert(raw_.end(), p, p + run);
		}
		if (!z)
			return;
		if (skipping_) {
			stats_.bad_bytes++; // the delimiter that ends the run
			skipping_ = false;
		} else {
			frame_end(sink);
		}
		raw_.clear();
		p = z + 1;
		n -= run + 1;
	}
}

void FrameDecoder::frame_end(const Sink &sink)
{
	if (raw_.empty())
		return; // consecutive delimiters: the sender's resync bytes
	const size_t bad = raw_.size() + 1;
	if (!cobs_decode(raw_.data(), raw_.size(), body_) || body_.size() < kHeaderSize + kCrcSize) {
		stats_.malformed++;
		stats_.bad_bytes += bad;
		return;
	}
	const uint8_t *h = body_.data();
	if (h[0] >> 4 != kVersion) {
		// Every version frames and checks the same way: a good CRC says
		// the sender speaks another version (the receiver reports it).
		if (crc32c(h, body_.size() - kCrcSize) == get32(h + body_.size() - kCrcSize)) {
			stats_.other_version++;
			stats_.version_seen = static_cast<uint8_t>(h[0] >> 4);
		} else {
			stats_.malformed++;
		}
		stats_.bad_bytes += bad;
		return;
	}
	const uint32_t len = get32(h + 12);
	if (len != body_.size() - kHeaderSize - kCrcSize) {
		// Either damage or a length that is a lie; the CRC decides which
		// one we report, but both are rejected.
		if (crc32c(h, body_.size() - kCrcSize) != get32(h + body_.size() - kCrcSize))
			stats_.bad_crc++;
		else
			stats_.malformed++;
		stats_.bad_bytes += bad;
		return;
	}
	if (crc32c(h, kHeaderSize + len) != get32(h + kHeaderSize + len)) {
		stats_.bad_crc++;
		stats_.bad_bytes += bad;
		return;
	}
	Frame f;
	f.type = h[0] & 0xF;
	f.trace = get16(h + 2);
	f.stream = get16(h + 4);
	f.seq = get32(h + 8);
	f.payload = h + kHeaderSize;
	f.len = len;
	stats_.frames++;
	sink(f);
}

uint64_t SeqTracker::see(uint16_t trace, uint16_t stream, uint32_t seq)
{
	const auto key = std::make_pair(trace, stream);
	auto it = next_.find(key);
	uint64_t gap = 0;
	if (it == next_.end())
		gap = seq; // frames 0..seq-1 of this stream never arrived
	else if (seq >= it->second)
		gap = seq - it->second;
	// else: a number already passed: the sender started again
	next_[key] = seq + 1;
	if (gap)
		lost_[key] += gap;
	return gap;
}

uint64_t SeqTracker::lost(uint16_t trace, uint16_t stream) const
{
	auto it = lost_.find(std::make_pair(trace, stream));
	return it == lost_.end() ? 0 : it->second;
}

uint64_t SeqTracker::lost_total() const
{
	uint64_t t = 0;
	for (const auto &kv : lost_)
		t += kv.second;
	return t;
}

void SeqTracker::forget_trace(uint16_t trace)
{
	for (auto it = next_.begin(); it != next_.end();)
		it = it->first.first == trace ? next_.erase(it) : std::next(it);
}

} // namespace serial
} // namespace strata
