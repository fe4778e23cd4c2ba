// ctf_index_test.cpp - LTTng's CTF packet index (processor/ctf/ctf_index.h):
// entries written and read back exactly, every malformed index refused
// with its reason, hostile bytes never trusted, and an index made again
// from a stream file's headers.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "ctf_index.h"
#include "strata_abi.h"

namespace {

using strata::CtfIndexEntry;

strata_packet_header header(uint64_t bytes, uint64_t seq, uint64_t ts)
{
	strata_packet_header h{};
	h.magic = STRATA_CTF_MAGIC;
	h.stream_id = 3;
	h.stream_instance_id = 7;
	h.timestamp_begin = ts;
	h.timestamp_end = ts + 10;
	h.content_size = (bytes - 4) * 8;
	h.packet_size = bytes * 8;
	h.packet_seq_num = seq;
	h.events_discarded = seq * 2;
	h.lane_id = 5;
	h.vtid = static_cast<int32_t>(1000 + seq);
	return h;
}

// A Strata 1.1 index (80-byte entries) of packets of these sizes, back to back.
std::string index_of(const std::vector<uint64_t> &sizes)
{
	std::string s(strata::kCtfIndexHeaderSize, '\0');
	strata::ctf_index_header(reinterpret_cast<uint8_t *>(&s[0]));
	uint64_t off = 0;
	for (size_t i = 0; i < sizes.size(); i++) {
		uint8_t e[strata::kCtfIndexEntrySize];
		strata::ctf_index_entry(header(sizes[i], i, 100 * i), off, e);
		s.append(reinterpret_cast<char *>(e), sizeof e);
		off += sizes[i];
	}
	return s;
}

void put_be64(std::string &s, size_t at, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		s[at + i] = static_cast<char>(v >> (56 - 8 * i));
}

std::string why_not(const std::string &bytes)
{
	std::vector<CtfIndexEntry> es;
	std::string why;
	EXPECT_FALSE(strata::parse_ctf_index(bytes, &es, &why));
	return why;
}

TEST(CtfIndex, HeaderIsLttngs)
{
	const std::string s = index_of({});
	const unsigned char want[16] = {0xC1, 0xF1, 0xDC, 0xC1, 0, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0, 80};
	ASSERT_EQ(s.size(), 16u);
	EXPECT_EQ(memcmp(s.data(), want, 16), 0);
}

TEST(CtfIndex, EntriesReadBackExactly)
{
	std::vector<CtfIndexEntry> es;
	std::string why;
	ASSERT_TRUE(strata::parse_ctf_index(index_of({4096, 128, 8192}), &es, &why)) << why;
	ASSERT_EQ(es.size(), 3u);
	EXPECT_EQ(es[1].offset, 4096u);
	EXPECT_EQ(es[2].offset, 4224u);
	EXPECT_EQ(es[2].packet_size, 8192u * 8);
	EXPECT_EQ(es[2].content_size, 8188u * 8);
	EXPECT_EQ(es[2].ts_begin, 200u);
	EXPECT_EQ(es[2].ts_end, 210u);
	EXPECT_EQ(es[2].discarded, 4u);
	EXPECT_EQ(es[2].stream_id, 3u);
	EXPECT_EQ(es[2].instance, 7u);
	EXPECT_EQ(es[2].seq, 2u);
	EXPECT_TRUE(es[2].has_thread);
	EXPECT_EQ(es[2].lane, 5u);
	EXPECT_EQ(es[2].vtid, 1002);
}

// A two-packet index with entries cut to `len` bytes, of minor version
// `minor`, parsed (asserted valid).
std::vector<CtfIndexEntry> shorter_entries(uint32_t len, char minor)
{
	const std::string s = index_of({4096, 4096});
	std::string v = s.substr(0, 16);
	v[11] = minor;
	v[15] = static_cast<char>(len);
	v += s.substr(16, len) + s.substr(16 + strata::kCtfIndexEntrySize, len);
	std::vector<CtfIndexEntry> es;
	std::string why;
	EXPECT_TRUE(strata::parse_ctf_index(v, &es, &why)) << why;
	return es;
}

// LTTng's own 1.1 entries (72 bytes): read, without the threads.
TEST(CtfIndex, LttngEntriesHaveNoThread)
{
	const std::vector<CtfIndexEntry> es = shorter_entries(72, 1);
	ASSERT_EQ(es.size(), 2u);
	EXPECT_EQ(es[1].seq, 1u);
	EXPECT_FALSE(es[1].has_thread);
}

TEST(CtfIndex, Version10Entries)
{
	const std::vector<CtfIndexEntry> es = shorter_entries(56, 0);
	ASSERT_EQ(es.size(), 2u);
	EXPECT_EQ(es[1].offset, 4096u);
	EXPECT_EQ(es[1].seq, 0u); // not in 1.0
}

TEST(CtfIndex, MalformedRefusedWithReason)
{
	const std::string good = index_of({4096, 4096});
	EXPECT_EQ(why_not(good.substr(0, 10)), "shorter than its header (10 bytes)");
	std::string s = good;
	s[0] = 'X';
	EXPECT_EQ(why_not(s), "bad magic");
	s = good;
	s[7] = 2; // major 2
	EXPECT_EQ(why_not(s), "unknown version 2.1 or entry length 80");
	EXPECT_EQ(why_not(good.substr(0, good.size() - 30)),
		  "its 130 bytes of entries are not a whole number of 80-byte entries (torn)");
	s = good;
	put_be64(s, 16 + 80, 4000); // the second entry's offset
	EXPECT_EQ(why_not(s), "entry 1: offset 4000 where the entries before end at 4096");
	s = good;
	put_be64(s, 16 + 8, 4095); // packet size not whole bytes
	EXPECT_EQ(why_not(s), "entry 0: bad packet size");
	s = good;
	put_be64(s, 16 + 16, 4097 * 8); // content past the packet
	EXPECT_EQ(why_not(s), "entry 0: bad packet size");
	s = good;
	put_be64(s, 16 + 24, 50); // begins after it ends (at 10)
	EXPECT_EQ(why_not(s), "entry 0: ends before it begins");
}

TEST(CtfIndex, HostileBytesNeverTrusted)
{
	std::mt19937_64 rng(59);
	const std::string good = index_of({4096, 512, 4096, 64});
	size_t accepted = 0;
	for (int round = 0; round < 20000; round++) {
		std::string s = good;
		for (int k = 0; k < 1 + (int)(rng() % 4); k++)
			s[rng() % s.size()] ^= static_cast<char>(1u << (rng() % 8));
		if (rng() % 4 == 0)
			s.resize(rng() % (s.size() + 1));
		std::vector<CtfIndexEntry> es;
		std::string why;
		if (!strata::parse_ctf_index(s, &es, &why)) {
			EXPECT_FALSE(why.empty());
			continue;
		}
		accepted++;
		// What is accepted is consistent: contiguous from 0, whole bytes.
		uint64_t end = 0;
		for (const CtfIndexEntry &e : es) {
			EXPECT_EQ(e.offset, end);
			EXPECT_EQ(e.packet_size % 8, 0u);
			EXPECT_LE(e.content_size, e.packet_size);
			EXPECT_LE(e.ts_begin, e.ts_end);
			end += e.packet_size / 8;
		}
	}
	EXPECT_GT(accepted, 0u); // flips in timestamps and counts stay valid
}

TEST(CtfIndex, RebuiltFromHeadersAndSynced)
{
	char dir[] = "/tmp/strata-ctf-index-XXXXXX";
	ASSERT_NE(mkdtemp(dir), nullptr);
	const std::string stream = std::string(dir) + "/channel0_0";
	std::string bytes;
	const uint64_t sizes[3] = {256, 128, 512};
	for (int i = 0; i < 3; i++) {
		strata_packet_header h = header(sizes[i], i, 100 * i);
		std::string p(sizes[i], '\0');
		memcpy(&p[0], &h, sizeof h);
		bytes += p;
	}
	bytes += std::string(40, 'x'); // a torn tail
	std::ofstream(stream, std::ios::binary) << bytes;
	const uint64_t whole = 256 + 128 + 512;

	EXPECT_EQ(strata::sync_ctf_index(stream, whole), 0); // no index: nothing to do
	ASSERT_EQ(strata::rebuild_ctf_index(stream, bytes.size()), 0);
	const std::string idx = strata::ctf_index_path(stream);
	EXPECT_EQ(idx, std::string(dir) + "/index/channel0_0.idx");
	std::ifstream in(idx, std::ios::binary);
	const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
	EXPECT_EQ(got, index_of({256, 128, 512}));               // the torn tail has no entry
	EXPECT_EQ(strata::sync_ctf_index(stream, whole), 0);     // up to date
	EXPECT_EQ(strata::sync_ctf_index(stream, 256 + 128), 1); // cut back: made again
	std::ifstream in2(idx, std::ios::binary);
	const std::string cut((std::istreambuf_iterator<char>(in2)), std::istreambuf_iterator<char>());
	EXPECT_EQ(cut, index_of({256, 128}));
	EXPECT_EQ(system(("rm -rf " + std::string(dir)).c_str()), 0);
}

} // namespace
