/*
 * Reader::cut_packet (the serial line's small packets, docs/serial.md,
 * "Small packets"): a checked packet cut at record boundaries into pieces
 * whose records take at most N bytes.  Oracle: each piece, made a packet
 * as the serial output makes it (the header's timestamps from the piece,
 * records at the header's end), decodes with the test's own decoder
 * (rb_decode.h, as a CTF reader does: compact timestamps rebuilt from the
 * previous one) to exactly its count of records, and the pieces' records
 * in order are the whole packet's, field by field and timestamp by
 * timestamp; pieces fit N unless one record is larger.
 */
#define STRATA_DEFINE_PROVIDERS
#include "test_tp.h"

#include "rb_test_util.h"

using namespace rbtest;

namespace {

std::vector<uint8_t> piece_packet(const std::vector<uint8_t> &pkt, const strata::Reader::Piece &pc)
{
	constexpr size_t kHdr = STRATA_PACKET_HEADER_SIZE;
	strata_packet_header h;
	memcpy(&h, pkt.data(), kHdr);
	const uint64_t n = pc.end - pc.begin;
	h.timestamp_begin = pc.ts_begin;
	h.timestamp_end = pc.ts_end;
	h.content_size = h.packet_size = (kHdr + n) * 8;
	std::vector<uint8_t> out(kHdr + n);
	memcpy(out.data(), &h, kHdr);
	memcpy(out.data() + kHdr, pkt.data() + pc.begin, n);
	return out;
}

bool same(const Record &a, const Record &b)
{
	if (a.id != b.id || a.ts != b.ts || a.tid != b.tid || a.fields.size() != b.fields.size())
		return false;
	for (size_t i = 0; i < a.fields.size(); i++)
		if (a.fields[i].u != b.fields[i].u || a.fields[i].s != b.fields[i].s ||
		    a.fields[i].elems != b.fields[i].elems)
			return false;
	return true;
}

// Every packet of lane 0 cut at each size: the pieces give the packet back.
void check_cuts(Slot &s, size_t want_packets)
{
	std::string err, msg;
	s.reader->flush(0, false, 1000, &msg);
	s.refresh_events();
	std::vector<uint8_t> pkt;
	size_t packets = 0;
	while (s.reader->next_packet(0, &pkt, &err) == strata::ReadStatus::kPacket) {
		ASSERT_TRUE(err.empty()) << err;
		std::vector<Record> whole;
		ASSERT_TRUE(decode_packet(pkt, s.events, &whole, &err)) << err;
		packets++;
		for (size_t max : {1, 40, 100, 333, 4096 - 88, 1 << 20}) {
			std::vector<strata::Reader::Piece> pieces;
			s.reader->cut_packet(0, pkt.data(), pkt.size(), max, &pieces);
			ASSERT_FALSE(pieces.empty());
			std::vector<Record> got;
			uint64_t prev_end = pieces[0].ts_begin;
			for (const auto &pc : pieces) {
				std::vector<Record> recs;
				ASSERT_TRUE(decode_packet(piece_packet(pkt, pc), s.events, &recs, &err))
					<< err << " (max " << max << ")";
				EXPECT_EQ(recs.size(), pc.records);
				EXPECT_TRUE(pc.end - pc.begin <= std::max<size_t>(max, 16) || pc.records == 1)
					<< pc.end - pc.begin << " bytes, max " << max;
				EXPECT_GE(pc.ts_begin, prev_end); // the pieces follow each other
				EXPECT_LE(pc.ts_begin, pc.ts_end);
				prev_end = pc.ts_end;
				got.insert(got.end(), recs.begin(), recs.end());
			}
			const strata_packet_header ph = *(const strata_packet_header *)pkt.data();
			EXPECT_EQ(pieces.front().ts_begin, ph.timestamp_begin);
			EXPECT_EQ(pieces.back().ts_end, ph.timestamp_end);
			ASSERT_EQ(got.size(), whole.size()) << "max " << max;
			for (size_t i = 0; i < got.size(); i++)
				ASSERT_TRUE(same(got[i], whole[i])) << "record " << i << ", max " << max;
			if (max == (1u << 20)) {
				EXPECT_EQ(pieces.size(), 1u);
			}
		}
	}
	EXPECT_EQ(packets, want_packets);
}

} // namespace

TEST(CutPacket, FixedSizeRecords)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 8, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	for (uint64_t i = 0; i < 400; i++)
		strata_tracepoint(rbtest, rec, 1u, i, checksum(1, i));
	check_cuts(s, 3);
}

TEST(CutPacket, VariableRecordsAndExtendedHeaders)
{
	Slot s(1, config(STRATA_MODE_DISCARD, 1, 8, 4096), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	const int16_t h[3] = {1, -2, 3};
	const uint32_t seq[4] = {1, 2, 3, 4};
	const uint8_t bytes[2] = {0xde, 0xad};
	for (int i = 0; i < 150; i++) {
		strata_tracepoint(rbtest, all, -5, 0xbeef, i, 2.5, -1.25f, 3, i % 3 ? "hello" : "", h, seq,
				  i % 5, bytes, i % 3);
		strata_tracepoint(rbtest, noargs);
		if (i % 50 == 0) // a gap longer than a compact timestamp: an extended header
			usleep(140000);
	}
	check_cuts(s, 3);
}

TEST(CutPacket, HeaderOnlyPacketIsOnePiece)
{
	Slot s(2, config(STRATA_MODE_DISCARD, 1, 8, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	strata_packet_header h = s.reader->empty_header(0, 1234);
	std::vector<uint8_t> pkt(sizeof h);
	memcpy(pkt.data(), &h, sizeof h);
	std::vector<strata::Reader::Piece> pieces;
	s.reader->cut_packet(0, pkt.data(), pkt.size(), 100, &pieces);
	ASSERT_EQ(pieces.size(), 1u);
	EXPECT_EQ(pieces[0].records, 0u);
	EXPECT_EQ(pieces[0].begin, pieces[0].end);
}
