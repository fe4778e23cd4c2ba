/*
 * serial_frame_test.cpp - the serial line's frame codec (libtrace/proto/
 * serial_frame.h, docs/serial.md): CRC-32C and COBS against known values,
 * round trips, and a corrupter (bit flips, dropped runs, inserted garbage)
 * whose every touched frame is known: exactly the untouched frames come
 * out, with their payloads, and the sequence gaps count exactly the
 * touched frames of each stream.
 */
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "proto/serial_frame.h"

using namespace strata::serial;

namespace {

std::vector<uint8_t> bytes(const std::string &s)
{
	return std::vector<uint8_t>(s.begin(), s.end());
}

struct Got {
	uint8_t type;
	uint16_t trace, stream;
	uint32_t seq;
	std::vector<uint8_t> payload;
};

std::vector<Got> decode_all(FrameDecoder &d, const std::vector<uint8_t> &wire, size_t chunk = 7)
{
	std::vector<Got> got;
	for (size_t i = 0; i < wire.size(); i += chunk)
		d.feed(wire.data() + i, std::min(chunk, wire.size() - i), [&](const Frame &f) {
			got.push_back({f.type, f.trace, f.stream, f.seq,
				       std::vector<uint8_t>(f.payload, f.payload + f.len)});
		});
	return got;
}

} // namespace

TEST(SerialFrame, Crc32cKnownValues)
{
	// The standard check value of CRC-32C (iSCSI, RFC 3720 B.4).
	EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
	std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
	EXPECT_EQ(crc32c(zeros.data(), 32), 0x8A9136AAu); // RFC 3720 B.4: 32 bytes of zeros
	EXPECT_EQ(crc32c(ones.data(), 32), 0x62A8AB43u);  // 32 bytes of 0xFF
	// Incremental equals whole.
	EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

TEST(SerialFrame, CobsKnownEncodings)
{
	auto enc = [](std::vector<uint8_t> in) {
		std::vector<uint8_t> out;
		cobs_encode(in.data(), in.size(), out);
		return out;
	};
	EXPECT_EQ(enc({}), (std::vector<uint8_t>{0x01}));
	EXPECT_EQ(enc({0x00}), (std::vector<uint8_t>{0x01, 0x01}));
	EXPECT_EQ(enc({0x00, 0x00}), (std::vector<uint8_t>{0x01, 0x01, 0x01}));
	EXPECT_EQ(enc({0x11, 0x22, 0x00, 0x33}), (std::vector<uint8_t>{0x03, 0x11, 0x22, 0x02, 0x33}));
	EXPECT_EQ(enc({0x11, 0x00, 0x00, 0x00}), (std::vector<uint8_t>{0x02, 0x11, 0x01, 0x01, 0x01}));
	// 254 non-zero bytes: one full block (0xFF) then an empty last one.
	std::vector<uint8_t> in(254);
	for (size_t i = 0; i < in.size(); i++)
		in[i] = static_cast<uint8_t>(i + 1);
	std::vector<uint8_t> out = enc(in);
	ASSERT_EQ(out.size(), 256u);
	EXPECT_EQ(out[0], 0xFF);
	EXPECT_EQ(out[255], 0x01);
	// Round trips of every length around the block size, zeros anywhere.
	std::mt19937 rng(1);
	for (size_t n = 0; n < 800; n++) {
		std::vector<uint8_t> v(n);
		for (auto &b : v)
			b = (rng() % 5 == 0) ? 0 : static_cast<uint8_t>(rng());
		std::vector<uint8_t> e = enc(v), back;
		EXPECT_EQ(memchr(e.data(), 0, e.size()), nullptr) << n;
		EXPECT_LE(e.size(), encoded_max(n) - 1) << n;
		ASSERT_TRUE(cobs_decode(e.data(), e.size(), back)) << n;
		EXPECT_EQ(back, v) << n;
	}
	std::vector<uint8_t> back;
	const uint8_t bad1[] = {0x05, 0x11}; // block runs past the end
	EXPECT_FALSE(cobs_decode(bad1, sizeof bad1, back));
	const uint8_t bad2[] = {0x03, 0x11, 0x00}; // a zero inside
	EXPECT_FALSE(cobs_decode(bad2, sizeof bad2, back));
}

TEST(SerialFrame, RoundTripAndLayout)
{
	std::vector<uint8_t> wire;
	const auto a = bytes("abc"), b = bytes(std::string("\0\0x", 3));
	encode_frame(kPacket, 7, 2, 41, a.data(), a.size(), b.data(), b.size(), wire);
	ASSERT_EQ(wire.back(), 0);
	EXPECT_EQ(memchr(wire.data(), 0, wire.size() - 1), nullptr);
	std::vector<uint8_t> body;
	ASSERT_TRUE(cobs_decode(wire.data(), wire.size() - 1, body));
	// The byte-level layout docs/serial.md draws.
	ASSERT_EQ(body.size(), 16u + 6 + 4);
	EXPECT_EQ(body[0], 0x23); // version 2, type 3
	EXPECT_EQ(body[2], 7);
	EXPECT_EQ(body[4], 2);
	EXPECT_EQ(body[8], 41);
	EXPECT_EQ(body[12], 6);
	uint32_t crc = crc32c(body.data(), 22);
	EXPECT_EQ(memcmp(&crc, body.data() + 22, 4), 0); // little-endian host
	FrameDecoder d;
	auto got = decode_all(d, wire, 1);
	ASSERT_EQ(got.size(), 1u);
	EXPECT_EQ(got[0].type, kPacket);
	EXPECT_EQ(got[0].trace, 7);
	EXPECT_EQ(got[0].stream, 2);
	EXPECT_EQ(got[0].seq, 41u);
	EXPECT_EQ(got[0].payload, bytes(std::string("abc\0\0x", 6)));
	EXPECT_EQ(d.stats().frames, 1u);
	EXPECT_EQ(d.stats().bad_bytes, 0u);
}

TEST(SerialFrame, EachKindOfDamageLosesOnlyItsFrame)
{
	// Five frames of one stream; frame 1 gets a bit flip, frame 3 loses a
	// run of bytes, garbage (no 0x00) is inserted before frame 4's start
	// (so it joins frame 4), and garbage ending in 0x00 after frame 2
	// (a frame of its own: lost alone).
	std::vector<std::vector<uint8_t>> frames(5);
	std::vector<uint8_t> payload(300);
	for (size_t i = 0; i < payload.size(); i++)
		payload[i] = static_cast<uint8_t>(i * 7);
	for (uint32_t i = 0; i < 5; i++)
		encode_frame(kPacket, 1, 0, i, payload.data(), payload.size(), nullptr, 0, frames[i]);
	frames[1][10] ^= 0x04;
	frames[3].erase(frames[3].begin() + 50, frames[3].begin() + 90);
	std::vector<uint8_t> wire;
	for (int i = 0; i < 5; i++) {
		if (i == 3)
			wire.insert(wire.end(), {0x55, 0x66, 0x00});
		if (i == 4)
			wire.insert(wire.end(), {0x12, 0x34, 0x56});
		wire.insert(wire.end(), frames[i].begin(), frames[i].end());
	}
	FrameDecoder d;
	SeqTracker seq;
	auto got = decode_all(d, wire);
	ASSERT_EQ(got.size(), 2u);
	EXPECT_EQ(got[0].seq, 0u);
	EXPECT_EQ(got[1].seq, 2u);
	EXPECT_EQ(got[0].payload, payload);
	for (auto &g : got)
		seq.see(g.trace, g.stream, g.seq);
	EXPECT_EQ(seq.lost(1, 0), 1u); // frame 1; frames 3 and 4 trail: unseen
	EXPECT_EQ(d.stats().frames, 2u);
	EXPECT_EQ(d.stats().bad_crc + d.stats().malformed, 4u); // 1, the garbage frame, 3, 4
	EXPECT_EQ(d.stats().bad_bytes, (frames[1].size()) + 3 + frames[3].size() + 3 + frames[4].size());
}

TEST(SerialFrame, OversizedRunIsSkippedToTheNextDelimiter)
{
	FrameDecoder d;
	std::vector<uint8_t> wire(encoded_max(kMaxBody) + 10, 0x41);
	wire.push_back(0);
	std::vector<uint8_t> f;
	const auto p = bytes("ok");
	encode_frame(kMetadata, 0, kMetaStream, 0, p.data(), p.size(), nullptr, 0, f);
	wire.insert(wire.end(), f.begin(), f.end());
	auto got = decode_all(d, wire, 4096);
	ASSERT_EQ(got.size(), 1u);
	EXPECT_EQ(got[0].payload, p);
	EXPECT_EQ(d.stats().oversized, 1u);
	EXPECT_EQ(d.stats().bad_bytes, encoded_max(kMaxBody) + 11);
}

TEST(SerialFrame, LengthFieldIsChecked)
{
	// A frame whose length field lies, with a CRC that matches the lie:
	// rejected as malformed, never read past.
	std::vector<uint8_t> body(16 + 4 + 4, 0);
	body[0] = 0x23;
	body[12] = 200; // says 200 bytes, carries 4
	uint32_t crc = crc32c(body.data(), 20);
	memcpy(body.data() + 20, &crc, 4);
	std::vector<uint8_t> wire;
	cobs_encode(body.data(), body.size(), wire);
	wire.push_back(0);
	FrameDecoder d;
	EXPECT_TRUE(decode_all(d, wire).empty());
	EXPECT_EQ(d.stats().malformed, 1u);
}

TEST(SerialFrame, AnotherVersionIsRecognised)
{
	// A sender of wire format 1 (whole sub-buffers in one frame): its
	// frames check (same framing, same CRC) but are not used, and the
	// decoder says which version it saw, so the receiver can say why.
	std::vector<uint8_t> body(16 + 4 + 4, 0);
	body[0] = 0x13; // version 1, PACKET
	body[12] = 4;
	uint32_t crc = crc32c(body.data(), 20);
	memcpy(body.data() + 20, &crc, 4);
	std::vector<uint8_t> wire;
	cobs_encode(body.data(), body.size(), wire);
	wire.push_back(0);
	body[21] ^= 1; // a damaged one is malformed, as ever
	cobs_encode(body.data(), body.size(), wire);
	wire.push_back(0);
	FrameDecoder d;
	EXPECT_TRUE(decode_all(d, wire).empty());
	EXPECT_EQ(d.stats().other_version, 1u);
	EXPECT_EQ(d.stats().version_seen, 1u);
	EXPECT_EQ(d.stats().malformed, 1u);
	EXPECT_EQ(d.stats().frames, 0u);
}

// A frame of random_frames() and where it is in the clean wire.
struct CleanFrame {
	uint16_t trace, stream;
	uint32_t seq;
	size_t start, end; // [start, end) in the clean wire, end includes the delimiter
	std::vector<uint8_t> payload;
};

// n packet frames of 2 traces x 3 streams, each stream numbered from 0,
// payloads of 0..599 random bytes (one in 8 a 0), encoded into *clean.
std::vector<CleanFrame> random_frames(std::mt19937 &rng, int n, std::vector<uint8_t> *clean)
{
	std::vector<CleanFrame> meta;
	uint32_t next_seq[2][3] = {};
	for (int i = 0; i < n; i++) {
		CleanFrame m;
		m.trace = static_cast<uint16_t>(rng() % 2);
		m.stream = static_cast<uint16_t>(rng() % 3);
		m.seq = next_seq[m.trace][m.stream]++;
		m.payload.resize(rng() % 600);
		for (auto &b : m.payload)
			b = (rng() % 8 == 0) ? 0 : static_cast<uint8_t>(rng());
		m.start = clean->size();
		encode_frame(kPacket, m.trace, m.stream, m.seq, m.payload.data(), m.payload.size(), nullptr,
			     0, *clean);
		m.end = clean->size();
		meta.push_back(std::move(m));
	}
	return meta;
}

// The corrupter: random damage at a known rate on a stream of frames of
// several streams, with the set of frames each damage touches recorded.
TEST(SerialFrame, RandomCorruptionLosesExactlyTheTouchedFrames)
{
	std::mt19937 rng(12345);
	constexpr int kFrames = 3000;
	std::vector<uint8_t> clean;
	const std::vector<CleanFrame> meta = random_frames(rng, kFrames, &clean);
	// Which frame holds clean byte b.
	std::vector<int> frame_of(clean.size());
	for (int i = 0; i < kFrames; i++)
		for (size_t b = meta[i].start; b < meta[i].end; b++)
			frame_of[b] = i;
	std::vector<bool> touched(kFrames, false);
	auto touch_byte = [&](size_t b) {
		const int f = frame_of[b];
		touched[f] = true;
		if (b == meta[f].end - 1 && f + 1 < kFrames)
			touched[f + 1] = true; // a damaged delimiter merges the next frame in
	};
	// About one damage per 4000 bytes, of three kinds.
	std::vector<uint8_t> wire;
	for (size_t b = 0; b < clean.size(); b++) {
		const uint32_t r = rng() % 4000;
		if (r == 0) { // flip one bit
			wire.push_back(clean[b] ^ static_cast<uint8_t>(1u << (rng() % 8)));
			touch_byte(b);
		} else if (r == 1) { // drop a run of 1..64 bytes
			const size_t n = std::min<size_t>(1 + rng() % 64, clean.size() - b);
			for (size_t k = 0; k < n; k++)
				touch_byte(b + k);
			b += n - 1;
		} else if (r == 2) { // insert 1..32 bytes of garbage before byte b
			const size_t n = 1 + rng() % 32;
			for (size_t k = 0; k < n; k++)
				wire.push_back(static_cast<uint8_t>(rng()));
			touched[frame_of[b]] = true;
			wire.push_back(clean[b]);
		} else {
			wire.push_back(clean[b]);
		}
	}
	FrameDecoder d;
	SeqTracker seq;
	auto got = decode_all(d, wire, 97);
	std::vector<int> expect;
	for (int i = 0; i < kFrames; i++)
		if (!touched[i])
			expect.push_back(i);
	const size_t n_touched = kFrames - expect.size();
	ASSERT_GT(n_touched, 300u); // the corrupter did something (about 1 damage per 1333 bytes)
	ASSERT_LT(n_touched, 1000u);
	ASSERT_EQ(got.size(), expect.size());
	for (size_t k = 0; k < got.size(); k++) {
		const CleanFrame &m = meta[expect[k]];
		ASSERT_EQ(got[k].trace, m.trace) << k;
		ASSERT_EQ(got[k].stream, m.stream) << k;
		ASSERT_EQ(got[k].seq, m.seq) << k;
		ASSERT_EQ(got[k].payload, m.payload) << k;
		seq.see(got[k].trace, got[k].stream, got[k].seq);
	}
	// Lost per stream: the touched frames before the stream's last good one.
	for (uint16_t t = 0; t < 2; t++)
		for (uint16_t s = 0; s < 3; s++) {
			int last_good = -1;
			for (int i : expect)
				if (meta[i].trace == t && meta[i].stream == s)
					last_good = i;
			uint64_t want = 0;
			for (int i = 0; i < last_good; i++)
				if (touched[i] && meta[i].trace == t && meta[i].stream == s)
					want++;
			EXPECT_EQ(seq.lost(t, s), want) << t << "/" << s;
		}
	EXPECT_EQ(d.stats().frames, expect.size());
}

TEST(SerialFrame, SeqTrackerRestartAndLateJoin)
{
	SeqTracker s;
	EXPECT_EQ(s.see(0, 0, 5), 5u); // joined late: 0..4 never came
	EXPECT_EQ(s.see(0, 0, 6), 0u);
	EXPECT_EQ(s.see(0, 0, 9), 2u);
	EXPECT_EQ(s.see(0, 0, 0), 0u); // the sender started again
	EXPECT_EQ(s.see(0, 0, 1), 0u);
	EXPECT_EQ(s.lost(0, 0), 7u);
	s.forget_trace(0);
	EXPECT_EQ(s.see(0, 0, 3), 3u);
	EXPECT_EQ(s.lost_total(), 10u);
}
