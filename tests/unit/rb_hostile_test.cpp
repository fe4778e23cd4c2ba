/*
 * The reader against hostile buffers: descriptor tables round-tripped, then
 * fuzzed and truncated; buffer headers with every field wrong and with
 * random bytes; packets scribbled on.  The oracle is "a clean error, never
 * a crash or a read outside the mapping" (run under ASan by the suite), and
 * exact expectations wherever the damage is known.
 */
#define STRATA_DEFINE_PROVIDERS
#include "test_tp.h"

/* Events of one field, whose payload is the caller's own bytes. */
STRATA_EVENT(rbtest, msg, STRATA_LOGLEVEL_INFO, strata_string(text))
STRATA_EVENT(rbtest, digest, STRATA_LOGLEVEL_INFO, strata_array(uint8_t, d, 100))

#include <fcntl.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <random>

#include "desc_rules.h"
#include "rb_test_util.h"
#include "tsan.h"
#include "huge_chunks.h"
#include "madv_populate.h"

using namespace rbtest;

namespace {

// The test's own view of a slot's shared memory, to scribble on.
struct Scribbler {
	uint8_t *base = nullptr;
	size_t size = 0;
	explicit Scribbler(int fd)
	{
		size = (size_t)lseek(fd, 0, SEEK_END);
		base = (uint8_t *)mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		EXPECT_NE(base, MAP_FAILED);
	}
	~Scribbler() { munmap(base, size); }
	strata_buffer_header *hdr() { return (strata_buffer_header *)base; }
	uint8_t *desc() { return base + hdr()->desc_offset; }
	strata_lane_ctl *lane(uint32_t l) { return (strata_lane_ctl *)(base + hdr()->lanes_offset) + l; }
	// The header of sub-buffer n's packet in a buffer of one lane.
	strata_packet_header *packet(uint64_t n)
	{
		return (strata_packet_header *)(base + hdr()->data_offset + n * hdr()->subbuf_size);
	}
};

// n records of rbtest:rec (24 bytes each, 167 per 4 KiB packet).
void emit_recs(uint64_t n)
{
	for (uint64_t i = 0; i < n; i++)
		strata_tracepoint(rbtest, rec, 1u, i, checksum(1, i));
}

// The header of a packet the reader handed out.
strata_packet_header header_of(const std::vector<uint8_t> &p)
{
	strata_packet_header ph;
	memcpy(&ph, p.data(), sizeof ph);
	return ph;
}

// Lane 0's open packet, closed by a flush and read: whole, no complaint.
void read_closed_packet(Slot &s, std::vector<uint8_t> *p)
{
	std::string msg, err;
	ASSERT_EQ(strata::FlushStatus::kDone, s.reader->flush(0, false, 1000, &msg)) << msg;
	ASSERT_EQ(strata::ReadStatus::kPacket, s.reader->next_packet(0, p, &err)) << err;
	EXPECT_TRUE(err.empty()) << err;
}

const strata::EventInfo *find(const std::map<uint32_t, strata::EventInfo> &evs, const char *name)
{
	for (auto &kv : evs)
		if (kv.second.name == name)
			return &kv.second;
	return nullptr;
}

} // namespace

TEST(Descriptors, RoundTripEveryFieldKind)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("*")});
	ASSERT_TRUE(s.reader);
	const strata::EventInfo *all = find(s.events, "all");
	ASSERT_TRUE(all);
	EXPECT_EQ(all->provider, "rbtest");
	EXPECT_EQ(all->loglevel, (uint32_t)STRATA_LOGLEVEL_WARNING);
	struct Want {
		const char *name;
		uint8_t type, bits;
		bool sign;
		uint8_t base;
		uint32_t length;
	} want[] = {
		{"a", STRATA_FT_INTEGER, 8, true, 10, 0},    {"b", STRATA_FT_INTEGER, 16, false, 16, 0},
		{"c", STRATA_FT_INTEGER, 64, true, 8, 0},    {"d", STRATA_FT_FLOAT, 64, true, 10, 0},
		{"e", STRATA_FT_FLOAT, 32, true, 10, 0},     {"f", STRATA_FT_ENUM, 32, true, 10, 0},
		{"g", STRATA_FT_STRING, 8, false, 10, 0},    {"h", STRATA_FT_ARRAY, 16, true, 10, 3},
		{"i", STRATA_FT_SEQUENCE, 32, false, 10, 0}, {"j", STRATA_FT_SEQUENCE, 8, false, 16, 0},
	};
	ASSERT_EQ(all->fields.size(), sizeof want / sizeof want[0]);
	for (size_t i = 0; i < all->fields.size(); i++) {
		const strata::FieldInfo &f = all->fields[i];
		EXPECT_EQ(f.name, want[i].name);
		EXPECT_EQ(f.type, want[i].type) << f.name;
		EXPECT_EQ(f.elem_bits, want[i].bits) << f.name;
		EXPECT_EQ(f.is_signed, want[i].sign) << f.name;
		EXPECT_EQ(f.base, want[i].base) << f.name;
		EXPECT_EQ(f.length, want[i].length) << f.name;
	}
	const auto &labels = all->fields[5].labels;
	ASSERT_EQ(labels.size(), 3u);
	EXPECT_EQ(labels[0].label, "red");
	EXPECT_EQ(labels[0].first, 0);
	EXPECT_EQ(labels[0].last, 0);
	EXPECT_EQ(labels[1].label, "warm");
	EXPECT_EQ(labels[1].first, 1);
	EXPECT_EQ(labels[1].last, 5);
	EXPECT_EQ(labels[2].label, "minus one");
	EXPECT_EQ(labels[2].first, -1);
	const strata::EventInfo *noargs = find(s.events, "noargs");
	ASSERT_TRUE(noargs);
	EXPECT_TRUE(noargs->fields.empty());
	EXPECT_EQ(noargs->loglevel, (uint32_t)STRATA_LOGLEVEL_ERR);

	// Values written by the generated code read back through the descriptors.
	const int16_t h[3] = {1, -2, 3};
	const uint32_t seq[4] = {7, 8, 9, 10};
	const uint8_t bytes[2] = {0xde, 0xad};
	strata_tracepoint(rbtest, all, -5, 0xbeef, -123456789, 2.5, -1.25f, 3, "hello", h, seq, 4, bytes, 2);
	strata_tracepoint(rbtest, all, 0, 0, 0, 0.0, 0.0f, 0, NULL, h, seq, 0, bytes, 0);
	strata_tracepoint(rbtest, noargs);
	std::string msg;
	ASSERT_EQ(strata::FlushStatus::kDone, s.reader->flush(0, false, 1000, &msg)) << msg;
	std::vector<uint8_t> pkt;
	ASSERT_EQ(strata::ReadStatus::kPacket, s.reader->next_packet(0, &pkt, &msg)) << msg;
	std::vector<Record> recs;
	ASSERT_TRUE(decode_packet(pkt, s.events, &recs, &msg)) << msg;
	ASSERT_EQ(recs.size(), 3u);
	const auto &v = recs[0].fields;
	EXPECT_EQ((int8_t)v[0].u, -5);
	EXPECT_EQ(v[1].u, 0xbeefu);
	EXPECT_EQ((int64_t)v[2].u, -123456789);
	EXPECT_EQ(v[3].f, 2.5);
	EXPECT_EQ(v[4].f, -1.25);
	EXPECT_EQ((int32_t)v[5].u, 3);
	EXPECT_EQ(v[6].s, "hello");
	EXPECT_EQ(v[7].elems, (std::vector<uint64_t>{1, 0xfffe, 3}));
	EXPECT_EQ(v[8].elems, (std::vector<uint64_t>{7, 8, 9, 10}));
	EXPECT_EQ(v[9].elems, (std::vector<uint64_t>{0xde, 0xad}));
	EXPECT_EQ(recs[1].fields[6].s, "(null)");
	EXPECT_TRUE(recs[1].fields[8].elems.empty());
	EXPECT_EQ(recs[2].name, "rbtest:noargs");
	EXPECT_EQ(recs[2].tid, (uint32_t)gettid());
}

TEST(Descriptors, TruncatedTablesStopCleanly)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("*")});
	ASSERT_TRUE(s.reader);
	Scribbler sc(s.fd);
	const uint64_t used = sc.hdr()->desc_used;
	// Record boundaries, from the record sizes.
	std::vector<uint64_t> bounds{0};
	while (bounds.back() < used) {
		uint32_t size;
		memcpy(&size, sc.desc() + bounds.back(), 4);
		bounds.push_back(bounds.back() + size);
	}
	ASSERT_EQ(bounds.back(), used);
	for (uint64_t k = 0; k <= used; k += 8) {
		sc.hdr()->desc_used = k;
		std::string err;
		auto r = strata::Reader::attach(s.fd, &err);
		ASSERT_TRUE(r) << err;
		std::vector<strata::EventInfo> evs;
		std::vector<std::string> errors;
		bool ok = r->read_new_events(&evs, &errors);
		size_t whole = std::upper_bound(bounds.begin(), bounds.end(), k) - bounds.begin() - 1;
		EXPECT_EQ(evs.size(), whole) << "desc_used " << k;
		bool on_boundary = std::binary_search(bounds.begin(), bounds.end(), k);
		EXPECT_EQ(ok, on_boundary) << "desc_used " << k;
		EXPECT_EQ(errors.empty(), on_boundary) << "desc_used " << k;
	}
	sc.hdr()->desc_used = used;
}

TEST(Descriptors, FuzzedTablesAlwaysCleanErrors)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("*")});
	ASSERT_TRUE(s.reader);
	Scribbler sc(s.fd);
	const uint64_t used = sc.hdr()->desc_used, cap = sc.hdr()->desc_capacity;
	const std::vector<uint8_t> orig(sc.desc(), sc.desc() + used);
	std::mt19937_64 rng(12345);
	size_t errors_seen = 0, events_seen = 0;
	for (int iter = 0; iter < 3000; iter++) {
		memcpy(sc.desc(), orig.data(), used);
		sc.hdr()->desc_used = used;
		int kind = iter % 4;
		if (kind == 0) { // a few random bytes anywhere in the records
			for (int n = 1 + (int)(rng() % 4); n > 0; n--)
				sc.desc()[rng() % used] = (uint8_t)rng();
		} else if (kind == 1) { // a random desc_used
			sc.hdr()->desc_used = rng() % 3 == 0 ? rng() : rng() % (cap + 64);
		} else if (kind == 2) { // a random field of a random record header
			uint64_t at = (rng() % (used / 8)) * 8;
			uint32_t v = (uint32_t)rng();
			memcpy(sc.desc() + at + 4 * (rng() % 6), &v, 4);
		} else { // all random
			for (uint64_t i = 0; i < used; i++)
				sc.desc()[i] = (uint8_t)rng();
		}
		std::string err;
		auto r = strata::Reader::attach(s.fd, &err);
		ASSERT_TRUE(r) << err; // the header was not touched
		std::vector<strata::EventInfo> evs;
		std::vector<std::string> errors;
		bool ok = r->read_new_events(&evs, &errors);
		if (kind == 3) {
			EXPECT_TRUE(!ok || !errors.empty()) << "random bytes accepted";
		}
		// Whatever was accepted is safe to put in TSDL.
		for (const auto &e : evs) {
			ASSERT_TRUE(strata::valid_identifier(e.provider.c_str()));
			ASSERT_TRUE(strata::valid_identifier(e.name.c_str()));
			for (const auto &f : e.fields) {
				ASSERT_TRUE(strata::valid_identifier(f.name.c_str()));
				ASSERT_TRUE(f.type >= STRATA_FT_INTEGER && f.type <= STRATA_FT_SEQUENCE);
				for (const auto &l : f.labels) {
					ASSERT_TRUE(strata::valid_label(l.label.c_str()));
					ASSERT_LE(l.first, l.last);
				}
			}
		}
		errors_seen += errors.size();
		events_seen += evs.size();
	}
	memcpy(sc.desc(), orig.data(), used);
	sc.hdr()->desc_used = used;
	EXPECT_GT(errors_seen, 1000u);
	EXPECT_GT(events_seen, 1000u);
}

TEST(BufferHeader, EveryBadFieldIsRejected)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 2, 4, 4096), {});
	ASSERT_TRUE(s.reader);
	Scribbler sc(s.fd);
	const strata_buffer_header good = *sc.hdr();
	using H = strata_buffer_header;
	std::vector<std::pair<const char *, std::function<void(H &)>>> cases = {
		{"magic", [](H &h) { h.magic ^= 1; }},
		{"endian", [](H &h) { h.endian_check = 0x04030201; }},
		{"abi_major", [](H &h) { h.abi_major = STRATA_ABI_MAJOR + 1; }},
		{"header_size small", [](H &h) { h.header_size = 8; }},
		{"header_size huge", [](H &h) { h.header_size = 0xffffffff; }},
		{"total_size", [](H &h) { h.total_size += 4096; }},
		{"n_lanes 0", [](H &h) { h.n_lanes = 0; }},
		{"n_lanes big", [](H &h) { h.n_lanes = STRATA_MAX_LANES + 1; }},
		{"n_subbuf 3", [](H &h) { h.n_subbuf = 3; }},
		{"n_subbuf 1", [](H &h) { h.n_subbuf = 1; }},
		{"n_subbuf 128", [](H &h) { h.n_subbuf = 128; }},
		{"subbuf_size odd", [](H &h) { h.subbuf_size = 4097; }},
		{"subbuf_size huge", [](H &h) { h.subbuf_size = 1ull << 40; }},
		{"mode", [](H &h) { h.mode = 9; }},
		{"lane_stride", [](H &h) { h.lane_stride *= 2; }},
		{"desc_offset huge", [](H &h) { h.desc_offset = 1ull << 63; }},
		{"desc wraps", [](H &h) { h.desc_capacity = ~0ull - 7; }},
		{"desc unaligned", [](H &h) { h.desc_offset += 4; }},
		{"lanes past end", [](H &h) { h.lanes_offset = h.total_size - 64; }},
		{"data past end", [](H &h) { h.data_offset += 4096; }},
		{"data over lanes", [](H &h) { h.data_offset = h.lanes_offset; }},
		{"desc over header", [](H &h) { h.desc_offset = 0; }},
		{"more lanes than data", [](H &h) { h.n_lanes = 4; }},
		{"comm unterminated", [](H &h) { memset(h.comm, 'x', sizeof h.comm); }},
		{"channel unterminated", [](H &h) { memset(h.channel, 'x', sizeof h.channel); }},
	};
	for (auto &c : cases) {
		*sc.hdr() = good;
		c.second(*sc.hdr());
		std::string err;
		EXPECT_FALSE(strata::Reader::attach(s.fd, &err)) << c.first;
		EXPECT_FALSE(err.empty()) << c.first;
	}
	*sc.hdr() = good;
	std::string err;
	EXPECT_TRUE(strata::Reader::attach(s.fd, &err)) << err;
}

TEST(BufferHeader, RandomHeadersAndFilesNeverCrash)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 2, 4, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	for (uint64_t i = 0; i < 500; i++)
		strata_tracepoint(rbtest, rec, 1u, i, checksum(1, i));
	Scribbler sc(s.fd);
	const strata_buffer_header good = *sc.hdr();
	std::mt19937_64 rng(777);
	int accepted = 0;
	for (int iter = 0; iter < 2000; iter++) {
		*sc.hdr() = good;
		auto *bytes = (uint8_t *)sc.hdr();
		for (int n = 1 + (int)(rng() % 3); n > 0; n--)
			bytes[rng() % sizeof good] = (uint8_t)rng();
		std::string err;
		auto r = strata::Reader::attach(s.fd, &err);
		if (!r) {
			EXPECT_FALSE(err.empty());
			continue;
		}
		accepted++;
		// Whatever geometry was accepted, reading stays inside the mapping.
		std::vector<strata::EventInfo> evs;
		std::vector<std::string> errors;
		r->read_new_events(&evs, &errors);
		for (uint32_t l = 0; l < r->info().n_lanes; l++) {
			std::vector<uint8_t> pkt;
			for (int k = 0; k < 8 && r->next_packet(l, &pkt, &err) != strata::ReadStatus::kEmpty;
			     k++) {
			}
		}
	}
	*sc.hdr() = good;
	EXPECT_GT(accepted, 0); // bytes like the pid or comm do not matter

	// Not a buffer at all: random bytes, a truncated file, a pipe.
	int fd = memfd_create("junk", MFD_CLOEXEC);
	std::vector<uint8_t> junk(65536);
	for (auto &b : junk)
		b = (uint8_t)rng();
	ASSERT_EQ((ssize_t)junk.size(), write(fd, junk.data(), junk.size()));
	std::string err;
	EXPECT_FALSE(strata::Reader::attach(fd, &err));
	ASSERT_EQ(0, ftruncate(fd, 100));
	EXPECT_FALSE(strata::Reader::attach(fd, &err));
	close(fd);
	int p[2];
	ASSERT_EQ(0, pipe(p));
	EXPECT_FALSE(strata::Reader::attach(p[0], &err));
	close(p[0]);
	close(p[1]);
}

TEST(Packets, ScribbledPacketsAreSkippedAndReported)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 8, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	emit_recs(1085); // 6 packets and an open one
	Scribbler sc(s.fd);
	sc.packet(0)->magic = 0;
	sc.packet(1)->content_size = sc.packet(1)->packet_size * 2;
	sc.packet(2)->packet_seq_num = 99;
	sc.packet(3)->timestamp_end = sc.packet(3)->timestamp_begin - 1;
	sc.lane(0)->commit[4] += 8; // committed more than the sub-buffer holds
	std::vector<strata::ReadStatus> got;
	std::vector<std::string> errs;
	for (int k = 0; k < 10; k++) {
		std::vector<uint8_t> pkt;
		std::string err;
		auto st = s.reader->next_packet(0, &pkt, &err);
		if (st == strata::ReadStatus::kEmpty)
			break;
		got.push_back(st);
		errs.push_back(err);
	}
	using RS = strata::ReadStatus;
	ASSERT_EQ(got, (std::vector<RS>{RS::kSkipped, RS::kSkipped, RS::kSkipped, RS::kSkipped, RS::kSkipped,
					RS::kPacket}));
	EXPECT_NE(errs[0].find("magic"), std::string::npos) << errs[0];
	EXPECT_NE(errs[1].find("content_size"), std::string::npos) << errs[1];
	EXPECT_NE(errs[2].find("seq"), std::string::npos) << errs[2];
	EXPECT_NE(errs[3].find("timestamp"), std::string::npos) << errs[3];
	EXPECT_NE(errs[4].find("commit"), std::string::npos) << errs[4];
	EXPECT_EQ(s.reader->stats().corrupt_packets, 5u);

	// A head thrown far ahead: one resynchronisation, no endless loop, and
	// the writer keeps writing inside its ring whatever head says.
	sc.lane(0)->head = 0x00dead00beef1234ull;
	std::vector<uint8_t> pkt;
	std::string err;
	EXPECT_EQ(RS::kSkipped, s.reader->next_packet(0, &pkt, &err));
	for (uint64_t i = 0; i < 2000; i++)
		strata_tracepoint(rbtest, rec, 1u, i, checksum(1, i));
	for (int k = 0; k < 100 && s.reader->next_packet(0, &pkt, &err) != RS::kEmpty; k++) {
	}
	sc.lane(0)->consumed = ~0ull; // "consumed ahead of head" reads as full: discards
	uint64_t before = s.reader->lane_discarded(0);
	for (uint64_t i = 0; i < 2000; i++)
		strata_tracepoint(rbtest, rec, 1u, i, checksum(1, i));
	EXPECT_GT(s.reader->lane_discarded(0), before);
}

// A packet whose events_discarded is below the previous packet's (a shared
// lane's closer delayed after its close read a later count than the next
// closer: writer.cpp, close_packet) is read, its count raised to the
// previous one: a cumulative count says "no new discards", not damage.
TEST(Packets, DiscardCountBelowThePreviousIsRaisedNotSkipped)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 8, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	emit_recs(600); // 3 packets and an open one
	Scribbler sc(s.fd);
	sc.packet(0)->events_discarded = 7;
	sc.packet(1)->events_discarded = 5; // the delayed closer's order
	sc.packet(2)->events_discarded = 9;
	using RS = strata::ReadStatus;
	std::vector<uint64_t> disc;
	for (int k = 0; k < 3; k++) {
		std::vector<uint8_t> pkt;
		std::string err;
		ASSERT_EQ(RS::kPacket, s.reader->next_packet(0, &pkt, &err)) << k << ": " << err;
		EXPECT_TRUE(err.empty()) << err;
		disc.push_back(header_of(pkt).events_discarded);
	}
	EXPECT_EQ(disc, (std::vector<uint64_t>{7, 7, 9}));
	EXPECT_EQ(s.reader->stats().corrupt_packets, 0u);
	EXPECT_EQ(s.reader->stats().discards_clamped, 1u);
}

// Zero-copy reading (peek_packet/release, the consumer daemon's path): the
// header handed out is a validated private copy, the body points into the
// ring, and the sub-buffers stay the reader's until release.
TEST(Packets, PeekedPacketsStayTheReadersUntilReleased)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	emit_recs(585); // 3 complete packets, one open (24-byte records)
	using RS = strata::ReadStatus;
	strata_packet_header ph[3];
	Scribbler sc(s.fd);
	const auto &h = *sc.hdr();
	std::string err;
	for (int n = 0; n < 3; n++) {
		const uint8_t *body = nullptr;
		size_t len = 0;
		ASSERT_EQ(RS::kPacket, s.reader->peek_packet(0, &ph[n], &body, &len, &err)) << err;
		const uint8_t *sb = sc.base + h.data_offset + (uint64_t)n * h.subbuf_size;
		EXPECT_EQ(ph[n].packet_seq_num, (uint64_t)n);
		EXPECT_EQ(ph[n].packet_size, ph[n].content_size); // shrunk to the content
		EXPECT_EQ(len, ph[n].content_size / 8 - sizeof ph[n]);
		// The body is the ring's: the same bytes as the test's own mapping.
		EXPECT_EQ(0, memcmp(body, sb + sizeof ph[n], len));
	}
	// Scribbling on the shared header afterwards changes nothing handed out.
	auto *live = (strata_packet_header *)(sc.base + h.data_offset);
	live->magic = 0;
	EXPECT_EQ(ph[0].magic, STRATA_CTF_MAGIC);
	strata_packet_header spare;
	const uint8_t *body = nullptr;
	size_t len = 0;
	EXPECT_EQ(RS::kEmpty, s.reader->peek_packet(0, &spare, &body, &len, &err)); // 4th still open
	// Not released: the writer finishes the 4th sub-buffer, then discards.
	EXPECT_EQ(0u, s.reader->lane_discarded(0));
	emit_recs(333);
	const uint64_t lost = s.reader->lane_discarded(0);
	EXPECT_GT(lost, 0u);
	EXPECT_LT(lost, 333u);
	// The lane is the writer's own: its discards are its owner's count
	// (ABI 3.7, unlocked), and the reader's count is the sum.
	EXPECT_EQ(sc.lane(0)->owner_discarded, lost);
	EXPECT_EQ(sc.lane(0)->events_discarded, 0u);
	// Released: the three sub-buffers are the writers' again.
	s.reader->release(0);
	emit_recs(250);
	EXPECT_EQ(lost, s.reader->lane_discarded(0));
	// And the stream goes on with the 4th packet, validated and whole.
	std::vector<uint8_t> pkt;
	ASSERT_EQ(RS::kPacket, s.reader->next_packet(0, &pkt, &err)) << err;
	std::vector<Record> recs;
	ASSERT_TRUE(decode_packet(pkt, s.events, &recs, &err)) << err;
	EXPECT_GT(recs.size(), 0u);
}

// Reading the ring by its file (copy_out, docs/consumerd.md "Reading the
// ring by its file"): the same bytes as the mapping, the header and the
// body; counted; then, after kFileLaps laps of the buffer's data read so
// and the mapping's pages touched on the way, the mapping again (the ski
// rental's end), still the same bytes.
TEST(Packets, ReadByFileGivesTheMappingsBytesThenTheMapping)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	s.reader->read_by_file(true);
	ASSERT_TRUE(s.reader->reads_by_file());
	emit_recs(585); // 3 complete packets, one open
	Scribbler sc(s.fd);
	const auto &h = *sc.hdr();
	using RS = strata::ReadStatus;
	strata_packet_header ph;
	const uint8_t *body = nullptr;
	size_t len = 0;
	std::string err;
	ASSERT_EQ(RS::kPacket, s.reader->peek_packet(0, &ph, &body, &len, &err)) << err;
	EXPECT_EQ(ph.packet_seq_num, 0u);
	const uint8_t *sb = sc.base + h.data_offset;
	std::vector<uint8_t> got(len), want(sb + sizeof ph, sb + sizeof ph + len);
	s.reader->copy_out(body, len, got.data());
	EXPECT_EQ(got, want);
	EXPECT_EQ(s.reader->stats().file_read, sizeof ph + len); // the header was read so too
	EXPECT_EQ(s.reader->stats().file_short, 0u);
	// The rest of the budget: kFileLaps laps of the data of every lane (the
	// owned one and the shared ones), 4 x 4 KiB each.
	const uint64_t budget = strata::Reader::kFileLaps * h.n_lanes * h.lane_stride;
	uint64_t read = s.reader->stats().file_read;
	int copies = 0;
	while (s.reader->reads_by_file() && copies++ < 100000) {
		std::fill(got.begin(), got.end(), 0);
		s.reader->copy_out(body, len, got.data());
		ASSERT_EQ(got, want);
		read += len;
	}
	EXPECT_FALSE(s.reader->reads_by_file());
	EXPECT_EQ(s.reader->stats().file_read, read);
	EXPECT_GE(read, budget);
	// Past the budget, a page of the mapping touched a read (len < 8
	// pages): one read for each of the data's pages (none under TSan).
	const uint64_t pages = h.n_lanes * h.lane_stride / 4096;
#if defined(STRATA_TSAN)
	EXPECT_LT(read, budget + len);
#else
	EXPECT_GE(read, budget + (pages - 1) * len);
	EXPECT_LT(read, budget + (pages + 1) * len);
#endif
	// From the mapping now: the same bytes, not counted as read by file.
	std::fill(got.begin(), got.end(), 0);
	s.reader->copy_out(body, len, got.data());
	EXPECT_EQ(got, want);
	EXPECT_EQ(s.reader->stats().file_read, read);
	// And the next packets read whole and valid.
	s.reader->release(0);
	std::vector<uint8_t> pkt;
	ASSERT_EQ(RS::kPacket, s.reader->next_packet(0, &pkt, &err)) << err;
	std::vector<Record> recs;
	ASSERT_TRUE(decode_packet(pkt, s.events, &recs, &err)) << err;
	EXPECT_GT(recs.size(), 0u);
}

// A buffer file cut short under the reader (a producer's unsealed file):
// read by file, the bytes past the end are zeros, counted, and nothing
// faults, where a copy out of the mapping there would take a SIGBUS.
TEST(Packets, ReadByFilePastATruncatedEndGivesZeros)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	emit_recs(200); // the first packet complete, the second open
	// An unsealed copy of the buffer, which the test may cut.
	const off_t size = lseek(s.fd, 0, SEEK_END);
	std::vector<uint8_t> bytes((size_t)size);
	ASSERT_EQ((ssize_t)size, pread(s.fd, bytes.data(), bytes.size(), 0));
	const int fd = memfd_create("rbtest-unsealed", MFD_CLOEXEC);
	ASSERT_GE(fd, 0);
	ASSERT_EQ((ssize_t)size, pwrite(fd, bytes.data(), bytes.size(), 0));
	std::string err;
	auto r = strata::Reader::attach(fd, &err);
	ASSERT_TRUE(r) << err;
	r->read_by_file(true);
	strata_packet_header ph;
	const uint8_t *body = nullptr;
	size_t len = 0;
	ASSERT_EQ(strata::ReadStatus::kPacket, r->peek_packet(0, &ph, &body, &len, &err)) << err;
	ASSERT_GT(len, 1000u);
	const auto *h = (const strata_buffer_header *)bytes.data();
	const off_t body_off = (off_t)h->data_offset + (off_t)sizeof ph;
	const size_t keep = 1000;
	ASSERT_EQ(0, ftruncate(fd, body_off + (off_t)keep));
	std::vector<uint8_t> got(len, 0xa5);
	r->copy_out(body, len, got.data());
	EXPECT_EQ(0, memcmp(got.data(), bytes.data() + body_off, keep));
	EXPECT_TRUE(std::all_of(got.begin() + keep, got.end(), [](uint8_t b) { return b == 0; }));
	EXPECT_EQ(r->stats().file_short, len - keep);
	r.reset();
	close(fd);
}

// Record bodies are checked on the reader's copy (check_records, issue 32):
// a record of an undescribed event, one whose timestamp leaves the packet,
// a header stamped in the future or claiming absurd losses.  Each bad
// packet is cut after its last good record, the cut counted as one
// discarded event there and in every later packet; a skipped packet shows
// as a gap in the sequence numbers of the trailing-loss packet.
TEST(Packets, BadRecordsAreCutAndCounted)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 8, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	emit_recs(167 * 5 + 10); // 24-byte records, 167 per packet: 5 packets and an open one
	Scribbler sc(s.fd);
	const auto &h = *sc.hdr();
	auto pkt = [&](int n) { return sc.base + h.data_offset + (uint64_t)n * h.subbuf_size; };
	auto rec = [&](int n, int k) { return pkt(n) + STRATA_PACKET_HEADER_SIZE + (uint64_t)k * 24; };
	uint32_t unknown = s.events.rbegin()->first + 1; // no such event
	ASSERT_LT(unknown, 31u);
	*rec(0, 10) = (uint8_t)((*rec(0, 10) & ~31u) | unknown);
	// Low timestamp bits below the previous record's: rebuilt 2^27 ns
	// later, past the packet's end.
	uint32_t w;
	memcpy(&w, rec(1, 4), 4);
	w = (w & 31u) | ((((w >> 5) - 1) & ((1u << 27) - 1)) << 5);
	memcpy(rec(1, 5), &w, 4);
	auto *ph2 = (strata_packet_header *)pkt(2);
	ph2->timestamp_end += 100000000000ull; // 100 s ahead of every clock here
	auto *ph3 = (strata_packet_header *)pkt(3);
	ph3->events_discarded = 14866436420603507214ull;       // the issue's
	*rec(4, 0) = (uint8_t)((*rec(4, 0) & ~31u) | unknown); // nothing of it left

	using RS = strata::ReadStatus;
	std::vector<uint8_t> p;
	std::string err;
	auto hdr = [&p] { return header_of(p); };
	ASSERT_EQ(RS::kPacket, s.reader->next_packet(0, &p, &err));
	EXPECT_NE(err.find("undescribed event id"), std::string::npos) << err;
	EXPECT_EQ(p.size(), STRATA_PACKET_HEADER_SIZE + 10 * 24);
	EXPECT_EQ(hdr().content_size, p.size() * 8);
	EXPECT_EQ(hdr().events_discarded, 1u);
	ASSERT_EQ(RS::kPacket, s.reader->next_packet(0, &p, &err));
	EXPECT_NE(err.find("after the packet's end"), std::string::npos) << err;
	EXPECT_EQ(p.size(), STRATA_PACKET_HEADER_SIZE + 5 * 24);
	EXPECT_EQ(hdr().events_discarded, 2u);
	ASSERT_EQ(RS::kSkipped, s.reader->next_packet(0, &p, &err));
	EXPECT_NE(err.find("future"), std::string::npos) << err;
	ASSERT_EQ(RS::kSkipped, s.reader->next_packet(0, &p, &err));
	EXPECT_NE(err.find("faster than writers"), std::string::npos) << err;
	ASSERT_EQ(RS::kPacket, s.reader->next_packet(0, &p, &err));
	EXPECT_NE(err.find("undescribed"), std::string::npos) << err;
	EXPECT_EQ(p.size(), STRATA_PACKET_HEADER_SIZE); // no record left: header only
	EXPECT_EQ(hdr().content_size, STRATA_PACKET_HEADER_SIZE * 8);
	EXPECT_EQ(hdr().events_discarded, 3u);
	EXPECT_EQ(RS::kEmpty, s.reader->next_packet(0, &p, &err));
	EXPECT_EQ(s.reader->stats().cut_packets, 3u);
	// A whole good packet after the cuts: kept whole, the count carried.
	read_closed_packet(s, &p);
	EXPECT_GT(p.size(), STRATA_PACKET_HEADER_SIZE);
	EXPECT_EQ(hdr().content_size, p.size() * 8);
	EXPECT_EQ(hdr().events_discarded, 3u);
	// A scribbled final loss counter is ignored, counted.
	sc.lane(0)->events_discarded = 14866436420603507214ull;
	EXPECT_FALSE(s.reader->trailing_loss_packet(0, &p));
	EXPECT_EQ(s.reader->stats().bad_loss_counts, 1u);
}

// Records of an event with a string, an array and sequences are walked
// field by field (the plan of make_plan, validate.cpp): a sequence whose
// length runs past the packet's content cuts the packet before its record,
// whichever of the event's two sequences it is, counted as one discarded
// event there and in every later packet; a string whose NUL was
// overwritten runs into the fields after it, which then run past the
// content, and cuts it too; a whole packet stays whole, its fields read
// back by the test's own decoder.
TEST(Packets, VariableRecordsAreWalkedFieldByField)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 8, 4096), {rule("rbtest:all")});
	ASSERT_TRUE(s.reader);
	const int16_t h[3] = {1, -2, 3};
	const uint32_t seq[4] = {0x5eed0001, 0x5eed0002, 0x5eed0003, 0x5eed0004};
	const uint8_t bytes[2] = {0xde, 0xad};
	for (int i = 0; i < 200; i++) // about 60 per packet: 3 packets and an open one
		strata_tracepoint(rbtest, all, -5, 0xbeef, i, 2.5, -1.25f, 3, "hello", h, seq, 4, bytes, 2);
	Scribbler sc(s.fd);
	const auto &hd = *sc.hdr();
	auto pkt = [&](int n) { return sc.base + hd.data_offset + (uint64_t)n * hd.subbuf_size; };
	// The k-th record's first sequence element in packet n, found by value.
	auto elem = [&](int n, int k) -> uint8_t * {
		uint8_t *p = pkt(n) + STRATA_PACKET_HEADER_SIZE, *end = pkt(n) + hd.subbuf_size;
		for (int found = 0; p + 4 <= end; p++)
			if (!memcmp(p, &seq[0], 4) && found++ == k)
				return p;
		return nullptr;
	};
	ASSERT_TRUE(elem(0, 0) && elem(0, 1) && elem(2, 0));
	// The cuts expected below are at record boundaries 88 + k * rsize: so
	// every record up to the scribbled ones has a compact header (same
	// size), and each packet's record 0 starts at the same offset.
	const uint64_t rsize = (uint64_t)(elem(0, 1) - elem(0, 0));
	for (int n = 0; n < 2; n++) {
		ASSERT_EQ(elem(n, 0) - pkt(n), elem(0, 0) - pkt(0));
		ASSERT_EQ((uint64_t)(elem(n, 7) - elem(n, 0)), 7 * rsize);
	}
	const uint32_t huge = 0x40000000, all_ones = 0xffffffff;
	memcpy(elem(0, 5) - 4, &huge, 4);       // record 5's `i` length
	memcpy(elem(1, 7) + 16, &all_ones, 4);  // record 7's `j` length
	memset(elem(2, 0) - 4 - 6 - 6, 'x', 6); // record 0's "hello" and its NUL
	memset(elem(2, 0) - 4 - 6, 0x7f, 6);    // and `h`, so that no byte ends it
	memset(elem(2, 0) - 4, 0x7f, 1);        // nor `i`'s length (127 elements: past the end)

	using RS = strata::ReadStatus;
	std::vector<uint8_t> p;
	std::string err;
	auto hdr = [&p] { return header_of(p); };
	ASSERT_EQ(RS::kPacket, s.reader->next_packet(0, &p, &err));
	EXPECT_NE(err.find("a field beyond the packet's content"), std::string::npos) << err;
	EXPECT_EQ(p.size(), STRATA_PACKET_HEADER_SIZE + 5 * rsize);
	EXPECT_EQ(hdr().content_size, p.size() * 8);
	EXPECT_EQ(hdr().events_discarded, 1u);
	ASSERT_EQ(RS::kPacket, s.reader->next_packet(0, &p, &err));
	EXPECT_NE(err.find("a field beyond the packet's content"), std::string::npos) << err;
	EXPECT_EQ(p.size(), STRATA_PACKET_HEADER_SIZE + 7 * rsize);
	EXPECT_EQ(hdr().events_discarded, 2u);
	ASSERT_EQ(RS::kPacket, s.reader->next_packet(0, &p, &err));
	EXPECT_NE(err.find("a field beyond the packet's content"), std::string::npos) << err;
	EXPECT_EQ(p.size(), STRATA_PACKET_HEADER_SIZE); // no record left: header only
	EXPECT_EQ(hdr().events_discarded, 3u);
	EXPECT_EQ(s.reader->stats().cut_packets, 3u);
	read_closed_packet(s, &p);
	std::vector<Record> recs;
	ASSERT_TRUE(decode_packet(p, s.events, &recs, &err)) << err;
	ASSERT_GT(recs.size(), 0u);
	EXPECT_EQ(recs.back().fields[6].s, "hello");
	EXPECT_EQ(recs.back().fields[8].elems,
		  (std::vector<uint64_t>{0x5eed0001, 0x5eed0002, 0x5eed0003, 0x5eed0004}));
	EXPECT_EQ((int64_t)recs.back().fields[2].u, 199);
	EXPECT_EQ(hdr().events_discarded, 3u);
}

// The walk of variable-size records (record_walk.h): an event that is one
// string between fixed fields is walked by its shape (two skips and the
// NUL), others by their plan, and the last one's shape is kept for a run
// of it.  Records of four events interleaved (fixed; u32, string, u16;
// a string alone; two strings: a plan), strings of 0 to 40 bytes, in a
// packet cut at every byte: the walk stops at the last record boundary at
// or before the cut, says why exactly where the cut is not one, hands over
// the records before it in order, and reads no byte past the cut (each
// cut is a heap copy of its own length: ASan's run).
TEST(Packets, VariableRecordsAreWalkedToEveryCut)
{
	using strata::FieldInfo;
	strata::RecordWalk w(STRATA_REC_COMPACT);
	auto field = [](uint8_t type, uint8_t bits) {
		FieldInfo f;
		f.type = type;
		f.elem_bits = bits;
		return f;
	};
	const FieldInfo u16 = field(STRATA_FT_INTEGER, 16), u32 = field(STRATA_FT_INTEGER, 32),
			u64 = field(STRATA_FT_INTEGER, 64), str = field(STRATA_FT_STRING, 8);
	auto event = [&](uint32_t id, std::vector<FieldInfo> fields) {
		strata::EventInfo ev;
		ev.id = id;
		ev.provider = "walk";
		ev.name = "e" + std::to_string(id);
		ev.fields = std::move(fields);
		w.add(ev);
	};
	event(1, {u32, u64});      // 12 bytes
	event(2, {u32, str, u16}); // one string: 4 before, 2 after
	event(3, {str});           // one string alone
	event(4, {str, str});      // a plan
	std::vector<uint8_t> pkt(STRATA_PACKET_HEADER_SIZE, 0);
	std::vector<uint64_t> ends; // each record's end
	std::vector<uint32_t> ids;
	uint32_t ts = 0;
	auto put = [&pkt](const void *p, size_t n) {
		pkt.insert(pkt.end(), (const uint8_t *)p, (const uint8_t *)p + n);
	};
	auto put_str = [&](size_t n) {
		pkt.insert(pkt.end(), n, (uint8_t)('a' + n % 26));
		pkt.push_back(0);
	};
	const uint8_t order[] = {2, 2, 1, 2, 3, 3, 4, 2, 1, 1, 4, 4, 3, 2};
	const uint8_t fixed[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}; // the fixed fields
	for (size_t n = 0; n <= 40; n++) {
		const uint32_t id = order[n % sizeof order], hdr = id | (++ts << 5);
		put(&hdr, 4);
		if (id == 1)
			put(fixed, 12);
		if (id == 2)
			put(fixed, 4);
		if (id != 1)
			put_str(n);
		if (id == 4)
			put_str(40 - n);
		if (id == 2)
			put(fixed, 2);
		ends.push_back(pkt.size());
		ids.push_back(id);
	}
	struct Seen : strata::RecordWalk::NoVisit {
		std::vector<uint32_t> ids;
		std::vector<uint64_t> ends;
		void record(const strata::WalkedRecord &r)
		{
			ids.push_back(r.id);
			ends.push_back(r.end);
		}
	};
	for (uint64_t cut = STRATA_PACKET_HEADER_SIZE; cut <= pkt.size(); cut++) {
		std::unique_ptr<uint8_t[]> copy(new uint8_t[cut]);
		memcpy(copy.get(), pkt.data(), cut);
		size_t whole = 0; // records wholly before the cut
		while (whole < ends.size() && ends[whole] <= cut)
			whole++;
		const uint64_t boundary = whole ? ends[whole - 1] : STRATA_PACKET_HEADER_SIZE;
		Seen v;
		uint64_t t = 0;
		const char *why = nullptr;
		const uint64_t good = w.walk(copy.get(), cut, false, UINT64_MAX, &t, &why, v);
		ASSERT_EQ(good, boundary) << "cut at " << cut;
		EXPECT_EQ(why == nullptr, cut == boundary) << "cut at " << cut << ": " << (why ? why : "-");
		EXPECT_EQ(v.ids, std::vector<uint32_t>(ids.begin(), ids.begin() + whole)) << cut;
		EXPECT_EQ(v.ends, std::vector<uint64_t>(ends.begin(), ends.begin() + whole)) << cut;
		EXPECT_EQ(t, whole) << "the last good record's timestamp, cut at " << cut;
	}
}

// A string field of every length from 0 to 160 (the walk scans sixteen
// bytes a step while they lie inside the content, past 128 by memchr, the
// last ones byte by byte: record_walk.h, walk_find_nul) is walked to its NUL,
// its record read back whole; a last string whose NUL and every byte
// after it to the content's end were overwritten (37 bytes, then the rest
// of its record: no step of sixteen lands on the end) is cut with its
// record, nothing read past it.  The records of strings up to 17 bytes
// (payloads up to STRATA_WRITE_MAX) are written by strata_write from the
// emitter's stack, the longer ones reserved and written in place: both
// paths' records read back field by field.
TEST(Packets, StringsOfEveryLengthAreWalkedToTheirNul)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 8, 65536), {rule("rbtest:all")});
	ASSERT_TRUE(s.reader);
	const int16_t h[3] = {1, 2, 3};
	const uint32_t seq[1] = {7};
	const uint8_t bytes[1] = {9};
	std::vector<std::string> strs;
	for (size_t n = 0; n <= 160; n++)
		strs.push_back(std::string(n, (char)('a' + n % 26)));
	strs.push_back(std::string(37, 'Z'));
	for (const std::string &g : strs)
		strata_tracepoint(rbtest, all, 1, 2, 3, 4.0, 5.0f, 1, g.c_str(), h, seq, 1, bytes, 1);
	Scribbler sc(s.fd);
	uint8_t *pkt = sc.base + sc.hdr()->data_offset;
	const uint64_t content = sc.lane(0)->head; // one packet, still open
	ASSERT_LT(content, sc.hdr()->subbuf_size);
	uint8_t *last = std::search(pkt, pkt + content, strs.back().begin(), strs.back().end());
	ASSERT_NE(last, pkt + content);
	memset(last, 'y', (size_t)(pkt + content - last));
	std::string msg, err;
	std::vector<uint8_t> p;
	ASSERT_EQ(strata::FlushStatus::kDone, s.reader->flush(0, false, 1000, &msg)) << msg;
	ASSERT_EQ(strata::ReadStatus::kPacket, s.reader->next_packet(0, &p, &err)) << err;
	EXPECT_NE(err.find("a field beyond the packet's content"), std::string::npos) << err;
	EXPECT_EQ(header_of(p).events_discarded, 1u);
	// Cut at the last record's start: its compact header and the 27
	// bytes of fields a to f before its string.
	EXPECT_EQ(p.size(), (uint64_t)(last - pkt) - 27 - STRATA_REC_COMPACT_SIZE);
	std::vector<Record> recs;
	ASSERT_TRUE(decode_packet(p, s.events, &recs, &err)) << err;
	ASSERT_EQ(recs.size(), strs.size() - 1);
	for (size_t i = 0; i + 1 < strs.size(); i++)
		EXPECT_EQ(recs[i].fields[6].s, strs[i]) << i;
}

// An event whose one field is a string or a fixed array hands the caller's
// bytes to strata_write as they are, whatever their size (tracepoint.h,
// STRATA__LONE): strings of every length from 0 to 300 (a null one as
// "(null)"), between them arrays of 100 bytes, every record read back
// field by field, byte for byte.
TEST(Packets, OneFieldEventsRecordTheCallersBytesWhole)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 8, 65536), {rule("rbtest:msg"), rule("rbtest:digest")});
	ASSERT_TRUE(s.reader);
	std::vector<std::string> strs;
	for (size_t n = 0; n <= 300; n++)
		strs.push_back(std::string(n, (char)('a' + n % 26)));
	uint8_t d[100];
	for (size_t i = 0; i < strs.size(); i++) {
		strata_tracepoint(rbtest, msg, strs[i].c_str());
		if (i % 100 == 0) {
			for (unsigned j = 0; j < sizeof d; j++)
				d[j] = (uint8_t)(i + j * 7);
			strata_tracepoint(rbtest, digest, d);
		}
	}
	strata_tracepoint(rbtest, msg, (const char *)nullptr);
	std::string msg, err;
	std::vector<uint8_t> p;
	ASSERT_EQ(strata::FlushStatus::kDone, s.reader->flush(0, false, 1000, &msg)) << msg;
	ASSERT_EQ(strata::ReadStatus::kPacket, s.reader->next_packet(0, &p, &err)) << err;
	EXPECT_EQ(header_of(p).events_discarded, 0u);
	std::vector<Record> recs;
	ASSERT_TRUE(decode_packet(p, s.events, &recs, &err)) << err;
	ASSERT_EQ(recs.size(), strs.size() + 4 + 1);
	size_t r = 0;
	for (size_t i = 0; i < strs.size(); i++) {
		ASSERT_EQ(recs[r].id, strata__tp__rbtest__msg.id) << i;
		EXPECT_EQ(recs[r++].fields[0].s, strs[i]) << i;
		if (i % 100 == 0) {
			ASSERT_EQ(recs[r].id, strata__tp__rbtest__digest.id) << i;
			ASSERT_EQ(recs[r].fields[0].elems.size(), sizeof d);
			for (unsigned j = 0; j < sizeof d; j++)
				EXPECT_EQ(recs[r].fields[0].elems[j], (uint8_t)(i + j * 7)) << i << " " << j;
			r++;
		}
	}
	EXPECT_EQ(recs[r].fields[0].s, "(null)");
}

// The trailing-loss packet shows packets skipped at the end of a lane as a
// gap in the sequence numbers, whatever the loss counter says.
TEST(Packets, SkippedLastPacketsShowInTheTrailingPacket)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 8, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	emit_recs(167 * 3 + 10);
	Scribbler sc(s.fd);
	const auto &h = *sc.hdr();
	((strata_packet_header *)(sc.base + h.data_offset + 2 * h.subbuf_size))->magic = 0;
	std::vector<uint8_t> p;
	std::string err;
	using RS = strata::ReadStatus;
	EXPECT_EQ(RS::kPacket, s.reader->next_packet(0, &p, &err));
	EXPECT_EQ(RS::kPacket, s.reader->next_packet(0, &p, &err));
	EXPECT_EQ(RS::kSkipped, s.reader->next_packet(0, &p, &err));
	EXPECT_EQ(RS::kEmpty, s.reader->next_packet(0, &p, &err));
	ASSERT_TRUE(s.reader->trailing_loss_packet(0, &p));
	strata_packet_header ph;
	memcpy(&ph, p.data(), sizeof ph);
	EXPECT_EQ(ph.packet_seq_num, 3u); // 2 was skipped
	EXPECT_EQ(ph.events_discarded, 0u);
	EXPECT_FALSE(s.reader->trailing_loss_packet(0, &p)); // once
}

// A snapshot copies while the writers write: a packet they lap meanwhile
// is lost (a gap in the sequence numbers), and the records it held are
// counted at the packet after the gap, not on the packets before it: on a
// stream's first packet babeltrace2 reads a count as a loss it cannot size
// ("may have discarded"), and the count would precede the loss.
TEST(Packets, OverwriteLossLappedDuringTheCopyIsCountedAfterTheGap)
{
	constexpr uint64_t S = 4096, kEvents = 167 * 3 + 80; // packets 0-2 complete, 3 open
	Slot s(0, config(STRATA_MODE_OVERWRITE, 1, 4, S), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	s.reader->set_snapshot();
	emit_recs(kEvents);
	ASSERT_LT(s.reader->lane_position(0), 4 * S); // no lap
	// Packet 1's commit count as of its next lap: the copy finds it
	// lapped, as when the writers overwrote it while it was copied.
	Scribbler sc(s.fd);
	sc.lane(0)->commit[1] += S;
	std::vector<std::vector<uint8_t>> pk;
	std::string msg;
	ASSERT_EQ(3u, s.reader->collect_overwrite(0, 1000, &pk, &msg)) << msg;
	uint64_t kept[3] = {};
	for (size_t i = 0; i < 3; i++)
		kept[i] = (header_of(pk[i]).content_size / 8 - STRATA_PACKET_HEADER_SIZE) / 24;
	EXPECT_EQ(header_of(pk[0]).packet_seq_num, 0u); // no header-only packet before seq 0
	EXPECT_EQ(header_of(pk[0]).events_discarded, 0u);
	EXPECT_EQ(header_of(pk[1]).packet_seq_num, 2u); // 1 lost
	EXPECT_EQ(header_of(pk[1]).events_discarded, kEvents - kept[0] - kept[1] - kept[2]);
	EXPECT_EQ(header_of(pk[2]).events_discarded, header_of(pk[1]).events_discarded);
	EXPECT_GT(header_of(pk[1]).events_discarded, 100u); // packet 1's records, about 167
	EXPECT_EQ(s.reader->lane_overwritten(0), header_of(pk[1]).events_discarded);
	std::vector<uint8_t> trailing;
	EXPECT_FALSE(s.reader->trailing_loss_packet(0, &trailing)); // said already
}

// Every packet lapped while it was copied: nothing kept, and the loss said
// by the trailing packet, after a zero-count one so that babeltrace2 can
// size it (on a stream's first packet it reads a count as "may have
// discarded").
TEST(Packets, OverwriteLaneWhollyLappedSaysItsLossCountably)
{
	constexpr uint64_t S = 4096, kEvents = 167 * 3 + 80;
	Slot s(0, config(STRATA_MODE_OVERWRITE, 1, 4, S), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	s.reader->set_snapshot();
	emit_recs(kEvents);
	Scribbler sc(s.fd);
	for (int i = 0; i < 4; i++)
		sc.lane(0)->commit[i] += S; // each a lap ahead, the open one's close included
	std::vector<std::vector<uint8_t>> pk;
	std::string msg;
	EXPECT_EQ(0u, s.reader->collect_overwrite(0, 1000, &pk, &msg)) << msg;
	std::vector<uint8_t> lead, trailing;
	ASSERT_TRUE(s.reader->lead_loss_packet(0, &lead));
	ASSERT_TRUE(s.reader->trailing_loss_packet(0, &trailing));
	EXPECT_EQ(header_of(lead).events_discarded, 0u);
	EXPECT_EQ(header_of(lead).packet_seq_num + 1, header_of(trailing).packet_seq_num);
	EXPECT_EQ(header_of(trailing).events_discarded, kEvents); // every record, counted
	EXPECT_FALSE(s.reader->lead_loss_packet(0, &lead));       // once
}

namespace {
// Pages of [off, off + len) of the buffer resident in the memfd (mincore
// on the test's mapping: shmem pages count whoever made them).
size_t resident(const Scribbler &sc, uint64_t off, uint64_t len)
{
	const uint64_t pg = 4096;
	std::vector<unsigned char> v(len / pg);
	EXPECT_EQ(0, mincore(sc.base + off, len, v.data()));
	size_t n = 0;
	for (unsigned char c : v)
		n += c & 1;
	return n;
}
// Lane 0 of a buffer of 2 lanes x 8 x 128 KiB sub-buffers, after an idle
// writer's few events (its first page, prefault_first).
struct FirstLap : ::testing::Test {
	static constexpr uint64_t S = 128u << 10, kPage = 4096, stride = 8 * S;
	Slot s{0, config(STRATA_MODE_DISCARD, 2, 8, S), {rule("rbtest:rec")}};
	std::unique_ptr<Scribbler> sc;
	uint64_t data = 0;
	void SetUp() override
	{
		ASSERT_TRUE(s.reader);
		sc = std::make_unique<Scribbler>(s.fd);
		data = sc->hdr()->data_offset;
		ASSERT_GE(sc->size, data + 2 * stride);
		emit_recs(20);
		ASSERT_LT(s.reader->lane_position(0), kPage);
	}
};
} // namespace

// The consumer's populate ahead of a busy writer's first lap (issue 38,
// docs/ring-buffer.md "A busy writer's first lap"): nothing for an idle
// lane (an idle process keeps its few pages), the pages from a margin past
// the writer to the end of its next sub-buffer for a busy one, bounded by
// the budget, and never past the lane's first lap whatever `head` says.
TEST_F(FirstLap, PagesAheadOfBusyLanesOnly)
{
	Scribbler &sc = *this->sc;
	uint64_t budget = UINT64_MAX;
	bool busy = true;
	EXPECT_EQ(0u, s.reader->populate_ahead(0, &budget, &busy));
	EXPECT_FALSE(busy);
	EXPECT_EQ(budget, UINT64_MAX);
	EXPECT_EQ(1u, resident(sc, data, stride)) << "an idle lane keeps its first page only";
	EXPECT_EQ(0u, resident(sc, data + stride, stride));

	// Busy: past kBusyBytes.  Its own pages are the writer's up to head.
	emit_recs(strata::Reader::kBusyBytes * 5 / 4 / 24); // 24-byte records
	const uint64_t head = s.reader->lane_position(0);
	ASSERT_GE(head, strata::Reader::kBusyBytes);
	ASSERT_LT(head, S);
	EXPECT_EQ((head + kPage - 1) / kPage, resident(sc, data, stride));
	// A budget of 16 pages makes 16 pages, and says what is left.
	budget = 16 * kPage;
	const uint64_t left = s.reader->populate_ahead(0, &budget, &busy);
	EXPECT_TRUE(busy);
	EXPECT_EQ(0u, budget);
	EXPECT_GT(left, 0u);
	EXPECT_EQ((head + kPage - 1) / kPage + 16, resident(sc, data, stride));
	// Allocated in the memfd by fallocate (the cheaper way: reader.h),
	// the 16 pages exactly.
	EXPECT_EQ(16 * kPage, s.reader->stats().ahead_allocated);
	budget = UINT64_MAX;
	EXPECT_EQ(0u, s.reader->populate_ahead(0, &budget, &busy));
	// Everything up to the end of the next sub-buffer now, but the margin
	// left to the writer's own faults; nothing further.
	const uint64_t from = (head + (16u << 10) + kPage - 1) & ~(kPage - 1);
	EXPECT_EQ((2 * S - from) / kPage, resident(sc, data + from, 2 * S - from));
	EXPECT_EQ(0u, resident(sc, data + 2 * S, stride - 2 * S));
	EXPECT_EQ(0u, s.reader->populate_ahead(0, &budget, &busy)) << "caught up: nothing more";

	// A scribbled head: in the last sub-buffer of lap 0, at most the lap's
	// end; beyond the lap (or absurd), nothing.  Never the next lane.
	strata_lane_ctl *lc = sc.lane(0);
	const uint64_t real = lc->head;
	for (uint64_t h : {stride + 5, UINT64_MAX - 7, stride * 3}) {
		lc->head = h;
		budget = UINT64_MAX;
		EXPECT_EQ(0u, s.reader->populate_ahead(0, &budget, &busy));
		EXPECT_FALSE(busy);
	}
	EXPECT_EQ(0u, resident(sc, data + 2 * S, stride - 2 * S));
	lc->head = 7 * S + 100;
	budget = UINT64_MAX;
	EXPECT_EQ(0u, s.reader->populate_ahead(0, &budget, &busy));
	EXPECT_TRUE(busy);
	const uint64_t from7 = (7 * S + 100 + (16u << 10) + kPage - 1) & ~(kPage - 1);
	EXPECT_EQ((stride - from7) / kPage, resident(sc, data + 7 * S, S));
	EXPECT_EQ(0u, resident(sc, data + stride, stride)) << "the next lane untouched";
	lc->head = real;
}

// Lane 0 of a buffer of 2 lanes x n x S sub-buffers, for the 2 MiB-page
// tests, and its packets read out (their count; *records, their records').
struct HugeLane {
	Slot s;
	Scribbler sc;
	uint64_t data;
	HugeLane(uint64_t S, uint32_t n)
	    : s{0, config(STRATA_MODE_DISCARD, 2, n, S), {rule("rbtest:rec")}}, sc(s.fd),
	      data(sc.hdr()->data_offset)
	{
	}
	// The writer a little past the consumer's busy mark, still before
	// `lead` less the consumer's 16 KiB margin: its position.
	uint64_t busy_in_lead(uint64_t lead)
	{
		emit_recs(strata::Reader::kBusyBytes * 5 / 4 / 24);
		const uint64_t head = s.reader->lane_position(0);
		EXPECT_GE(head, strata::Reader::kBusyBytes);
		EXPECT_LT(head, lead - (16u << 10));
		return head;
	}
	// The first page the consumer makes past a writer at `head`.
	static uint64_t ahead_from(uint64_t head) { return (head + (16u << 10) + 4095) & ~uint64_t{4095}; }
	uint64_t read_packets(uint64_t *records)
	{
		std::vector<uint8_t> p;
		std::string err, msg;
		uint64_t packets = 0;
		*records = 0;
		while (s.reader->next_packet(0, &p, &err) == strata::ReadStatus::kPacket) {
			std::vector<Record> recs;
			EXPECT_TRUE(decode_packet(p, s.events, &recs, &msg)) << msg;
			packets++;
			*records += recs.size();
		}
		EXPECT_EQ(0u, s.reader->stats().corrupt_packets) << err;
		return packets;
	}
};

// A busy lane of whole 2 MiB chunks (huge_chunks.h): the writer places
// each lane's byte huge_lead(S) on a chunk boundary, and the consumer
// makes the chunks ahead of the writer as 2 MiB pages (MADV_COLLAPSE; 4
// KiB pages before the first one, as above).  The records the writer then
// writes into them are read back whole.  A kernel that refuses the
// collapse (before 6.1) leaves 4 KiB pages: then only the placement and
// the small pages are checked.
TEST(FirstLapHuge, WholeChunksAheadAreHugePages)
{
	constexpr uint64_t S = 512u << 10, kPage = 4096, stride = 8 * S, lead = strata::huge_lead(S);
	constexpr uint64_t C = strata::kHugeChunk;
	HugeLane h(S, 8);
	ASSERT_TRUE(h.s.reader);
	Slot &s = h.s;
	const Scribbler &sc = h.sc;
	const uint64_t data = h.data;
	EXPECT_EQ(0u, (data + lead) % C) << "lane 0's byte huge_lead(S) on a chunk boundary";
	EXPECT_EQ(0u, stride % C);
	const uint64_t head = h.busy_in_lead(lead);
	uint64_t budget = UINT64_MAX;
	bool busy = false;
	for (int turn = 0; turn < 8 && s.reader->populate_ahead(0, &budget, &busy); turn++)
		budget = UINT64_MAX;
	EXPECT_TRUE(busy);
	// Small pages from the margin past the writer to the first chunk.
	const uint64_t from = HugeLane::ahead_from(head);
	EXPECT_EQ((lead - from) / kPage, resident(sc, data + from, lead - from));
	const uint64_t huge = s.reader->stats().ahead_huge;
	if (huge == 0) {
		EXPECT_EQ((2 * S - from) / kPage, resident(sc, data + from, 2 * S - from))
			<< "refused: small pages";
		GTEST_SKIP() << "MADV_COLLAPSE refused here: 4 KiB pages only";
	}
	// Up to the chunk after the one holding the end of the sub-buffer
	// after the writer's, and no further.
	EXPECT_EQ(2 * C, huge);
	EXPECT_EQ(2 * C / kPage, resident(sc, data + lead, 2 * C));
	EXPECT_EQ(0u, resident(sc, data + lead + 2 * C, S));
	// The lane's last chunk holds the next lane's lead: made with it while
	// nobody wrote there; the rest of that lane untouched.
	EXPECT_EQ(0u, resident(sc, data + stride + lead, stride - lead));
	// The writer fills its sub-buffers in the huge pages; every record
	// comes back, in whole packets.
	emit_recs((3 * S) / 24);
	uint64_t records = 0;
	EXPECT_EQ(3u, h.read_packets(&records));
	EXPECT_GE(records, 3 * ((S - kPage) / 24)) << "whole packets";
}

// A chunk that begins inside the writer's open sub-buffer (S = 1 MiB: the
// lead is 512 KiB, the sub-buffer ends at 1 MiB): the consumer makes that
// sub-buffer's rest in small pages first, the writer's pages for the time
// its collapse waits (the LRU drain's work on the writer's CPU), then
// collapses the chunk with those pages in it, and the records written
// there before and after come back whole.  Without the small pages first
// the writer faulted fresh ones in while the collapse waited (a short run
// 45-60 ns an event against 28-30, docs/consumerd.md).
TEST(FirstLapHuge, AChunkInTheOpenSubBufferIsMadeSmallFirst)
{
	constexpr uint64_t S = 1u << 20, kPage = 4096, lead = strata::huge_lead(S);
	constexpr uint64_t C = strata::kHugeChunk;
	HugeLane h(S, 8);
	ASSERT_TRUE(h.s.reader);
	ASSERT_LT(lead, S) << "the first chunk starts inside the first sub-buffer";
	ASSERT_EQ(0u, (h.data + lead) % C);
	const uint64_t head = h.busy_in_lead(lead);
	// One turn's budget: the small pages to the sub-buffer's end and the
	// chunk's collapse.
	uint64_t budget = UINT64_MAX;
	bool busy = false;
	(void)h.s.reader->populate_ahead(0, &budget, &busy);
	EXPECT_TRUE(busy);
	const uint64_t from = HugeLane::ahead_from(head);
	EXPECT_EQ(S - from, h.s.reader->stats().ahead_allocated)
		<< "small pages to the open sub-buffer's end, past the chunk's start";
	EXPECT_EQ((S - from) / kPage, resident(h.sc, h.data + from, S - from));
	if (h.s.reader->stats().ahead_huge == 0)
		GTEST_SKIP() << "MADV_COLLAPSE refused here: 4 KiB pages only";
	EXPECT_EQ(C, h.s.reader->stats().ahead_huge) << "the chunk, with our small pages in it";
	EXPECT_EQ(C / kPage, resident(h.sc, h.data + lead, C));
	emit_recs((3 * S) / 24);
	uint64_t records = 0;
	EXPECT_EQ(3u, h.read_packets(&records));
	EXPECT_GE(records, 3 * ((S - kPage) / 24)) << "whole packets";
}

// The writer's side (collapse_ahead): with no consumer making pages ahead
// (a late one), a busy writer's lap-0 opens collapse the chunks starting in
// their sub-buffers themselves, the first one at the second sub-buffer's
// open, with what it wrote there kept; an idle lane's lead stays 4 KiB
// pages.
TEST(FirstLapHuge, TheWriterCollapsesItsChunksAtItsOpens)
{
	constexpr uint64_t S = 256u << 10, kPage = 4096, stride = 16 * S, lead = strata::huge_lead(S);
	constexpr uint64_t C = strata::kHugeChunk;
	HugeLane h(S, 16);
	ASSERT_TRUE(h.s.reader);
	const Scribbler &sc = h.sc;
	const uint64_t data = h.data;
	ASSERT_EQ(lead, S) << "the first chunk starts at the second sub-buffer";
	ASSERT_EQ(0u, (data + lead) % C);
	emit_recs((S - kPage) / 24); // the first sub-buffer, not yet its end
	EXPECT_EQ(0u, resident(sc, data + lead, C)) << "nothing past the first sub-buffer yet";
	emit_recs((S / 2) / 24); // into the second: its open collapsed the first chunk
	const size_t made = resident(sc, data + lead, C);
	if (made < C / kPage) {
		EXPECT_EQ(made, S / kPage) << "refused: the second sub-buffer's pages only (prefault_open)";
		GTEST_SKIP() << "MADV_COLLAPSE refused here: 4 KiB pages only";
	}
	EXPECT_EQ(0u, resident(sc, data + lead + C, stride - lead - C)) << "the next chunk at its own open";
	emit_recs((8 * S) / 24); // into the sub-buffer where the second chunk starts (9 S)
	EXPECT_EQ(C / kPage, resident(sc, data + lead + C, C));
	uint64_t records = 0;
	EXPECT_EQ(9u, h.read_packets(&records));
	EXPECT_GE(records, 9 * ((S - kPage) / 24)) << "whole packets";
}

// An idle lane read to its end (a stop's final drain, a live tick: our
// close of its open packet, then the packet's copy): the reader maps the
// pages its writer made and no other, so an idle process keeps its few
// pages after a stop; the close's jump of `head` to the next sub-buffer
// does not make the lane busy.
TEST_F(FirstLap, IdleLaneReadToItsEndKeepsItsPages)
{
	const Scribbler &sc = *this->sc;
	ASSERT_EQ(1u, resident(sc, data, stride));
	std::vector<uint8_t> p;
	std::string err;
	using RS = strata::ReadStatus;
	EXPECT_EQ(RS::kEmpty, s.reader->next_packet(0, &p, &err)) << "open: its pages mapped";
	EXPECT_EQ(1u, resident(sc, data, stride)) << "only the page its writer made";
	std::string msg;
	ASSERT_EQ(strata::FlushStatus::kDone, s.reader->flush(0, false, 1000, &msg)) << msg;
	ASSERT_EQ(S, s.reader->lane_position(0)) << "our close moved head to the next sub-buffer";
	uint64_t budget = UINT64_MAX;
	bool busy = true;
	EXPECT_EQ(0u, s.reader->populate_ahead(0, &budget, &busy));
	EXPECT_FALSE(busy) << "a close of ours does not make the lane busy";
	ASSERT_EQ(RS::kPacket, s.reader->next_packet(0, &p, &err)) << err;
	EXPECT_EQ(RS::kEmpty, s.reader->next_packet(0, &p, &err));
	EXPECT_EQ(1u, resident(sc, data, stride)) << "the packet read: still its one page";
	EXPECT_EQ(0u, resident(sc, data + stride, stride));
	// The process writes again (it never learned of the stop): its writer
	// opens the next packet, whose pages it touches, not its sub-buffer.
	emit_recs(1);
	ASSERT_GT(s.reader->lane_position(0), S);
	EXPECT_EQ(2u, resident(sc, data, stride)) << "the next packet: the one page its writer wrote";
}

namespace {
// Pages of [p, p + len) present in this process's page table
// (/proc/self/pagemap, bit 63), whatever the file holds.
size_t mapped(const void *p, uint64_t len)
{
	const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	EXPECT_GE(fd, 0);
	size_t n = 0;
	for (uint64_t off = 0; off < len; off += 4096) {
		uint64_t e = 0;
		const off_t at = (off_t)((reinterpret_cast<uintptr_t>(p) + off) / 4096 * 8);
		EXPECT_EQ((ssize_t)sizeof e, pread(fd, &e, sizeof e, at));
		n += (e >> 63) & 1;
	}
	close(fd);
	return n;
}
// The kernel's fault-around in bytes where debugfs says it, else its
// default (64 KiB).
uint64_t fault_around_bytes()
{
	uint64_t v = 65536;
	if (FILE *f = fopen("/sys/kernel/debug/fault_around_bytes", "r")) {
		if (fscanf(f, "%lu", &v) != 1)
			v = 65536;
		fclose(f);
	}
	return v;
}
} // namespace

// A writer's packet open in lap 0 maps what the consumer made (writer_lane.h):
// made_prefix finds how far the making got (the consumer makes in order),
// map_made maps those pages by a read a fault-around window, allocating
// nothing.  On a fresh mapping of the buffer, as a writer's.
TEST_F(FirstLap, WriterMapsTheMadePrefixByReading)
{
	Scribbler &sc = *this->sc;
	auto *m = static_cast<char *>(mmap(nullptr, sc.size, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd, 0));
	ASSERT_NE(m, MAP_FAILED);
	char *sb1 = m + data + S, *sb2 = sb1 + S;
	// The consumer's making (Reader::populate_ahead): a write populate on
	// its own mapping.  fallocate alone leaves pages a fault-around skips
	// and mincore does not count (not up to date until written).
	auto make = [&](uint64_t off, uint64_t len) {
		ASSERT_EQ(0, madvise(sc.base + data + off, len, strata::kMadvPopulateWrite));
	};
	make(S, 5 * kPage);
	EXPECT_EQ(5 * kPage, strata::made_prefix(sb1, S));
	EXPECT_EQ(0u, strata::made_prefix(sb2, S)) << "nothing made";
	make(S + 5 * kPage, S - 5 * kPage);
	EXPECT_EQ(S, strata::made_prefix(sb1, S));
	EXPECT_EQ(S / kPage, resident(sc, data + S, S));
	EXPECT_EQ(0u, mapped(sb1, S)) << "made, not mapped";
	strata::map_made(sb1, S);
	EXPECT_EQ(0u, resident(sc, data + 2 * S, S)) << "nothing allocated past the range";
	// Every read window's page is mapped; with the default fault-around
	// (or any of at least 64 KiB), every page of the sub-buffer.
	for (uint64_t off = 0; off < S; off += 64u << 10)
		EXPECT_EQ(1u, mapped(sb1 + off, kPage)) << off;
	if (fault_around_bytes() >= (64u << 10)) {
		EXPECT_EQ(S / kPage, mapped(sb1, S));
	}
	ASSERT_EQ(0, munmap(m, sc.size));
}

// The lane's first packet open wakes the consumer (its first-lap looks
// start there, Drain::populate_ahead), once: the next wake is the first
// packet's completion, not the second packet's open.
TEST_F(FirstLap, FirstOpenWakesTheConsumerOnce)
{
	Scribbler &sc = *this->sc;
	EXPECT_EQ(1u, sc.hdr()->wake_seq) << "SetUp's first record opened the lane";
	emit_recs(100);
	EXPECT_EQ(1u, sc.hdr()->wake_seq);
	emit_recs(S / 24); // the first packet complete, the second opened
	ASSERT_GT(s.reader->lane_position(0), S);
	ASSERT_LT(s.reader->lane_position(0), 2 * S);
	EXPECT_EQ(2u, sc.hdr()->wake_seq);
}

// A busy lane's first sub-buffer, whose pages the consumer made: the
// writer's fast path stops at each 64 KiB fault-around window, where the
// general path maps the next window by one read (PerSlot::limit,
// set_limit) instead of a write fault a page.  Counted in this thread's
// minor faults over the sub-buffer: at most the pages before the first
// window boundary (up to 15) and a fault a window, where each page faulted
// alone before (31).
TEST_F(FirstLap, FirstSubBufferMappedAWindowAtATime)
{
#ifdef STRATA_TSAN
	GTEST_SKIP() << "ThreadSanitizer's shadow pages fault at every page written (270 here)";
#endif
	Scribbler &sc = *this->sc;
	ASSERT_EQ(0, madvise(sc.base + data, S, strata::kMadvPopulateWrite)); // the consumer's making
	rusage before{}, after{};
	ASSERT_EQ(0, getrusage(RUSAGE_THREAD, &before));
	emit_recs((S - 2 * kPage) / 24);
	ASSERT_EQ(0, getrusage(RUSAGE_THREAD, &after));
	ASSERT_LT(s.reader->lane_position(0), S) << "still the first packet";
	const long faults = after.ru_minflt - before.ru_minflt;
	EXPECT_LE(faults, static_cast<long>((64u << 10) / kPage - 1 + S / (64u << 10) + 1)) << faults;
}

// A packet's opener says on which CPU it ran (writer_cpu, ABI 3.6): the
// reader gives it back as the CPU number, and -1 for what no cpu_set_t
// holds (0: unknown; a scribbled word).  The consumer's worker keeps off
// those CPUs (sched_policy.h, step_off), so a lie moves only it.
TEST_F(FirstLap, WriterCpuIsAHintReadWithinBounds)
{
	Scribbler &sc = *this->sc;
	// The first packet was opened in SetUp on some CPU; pin this thread
	// and open the next one here.
	const int cpu = sched_getcpu();
	ASSERT_GE(cpu, 0);
	cpu_set_t was, one;
	ASSERT_EQ(0, sched_getaffinity(0, sizeof was, &was));
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	ASSERT_EQ(0, sched_setaffinity(0, sizeof one, &one));
	sc.lane(0)->writer_cpu = 0;
	EXPECT_EQ(-1, s.reader->lane_writer_cpu(0)) << "0: unknown";
	emit_recs(S / 24); // past the first packet: the second opened on `cpu`
	ASSERT_EQ(0, sched_setaffinity(0, sizeof was, &was));
	ASSERT_GT(s.reader->lane_position(0), S);
	EXPECT_EQ(static_cast<uint32_t>(cpu) + 1, sc.lane(0)->writer_cpu);
	EXPECT_EQ(cpu, s.reader->lane_writer_cpu(0));
	EXPECT_EQ(-1, s.reader->lane_writer_cpu(1)) << "a lane nobody opened";
	EXPECT_EQ(-1, s.reader->lane_writer_cpu(2)) << "no such lane";
	for (uint32_t v : {static_cast<uint32_t>(CPU_SETSIZE) + 1, UINT32_MAX}) {
		sc.lane(0)->writer_cpu = v;
		EXPECT_EQ(-1, s.reader->lane_writer_cpu(0)) << v;
	}
	sc.lane(0)->writer_cpu = CPU_SETSIZE;
	EXPECT_EQ(CPU_SETSIZE - 1, s.reader->lane_writer_cpu(0)) << "the last a cpu_set_t holds";
}
