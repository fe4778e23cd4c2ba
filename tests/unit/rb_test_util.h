/*
 * rb_test_util.h - helpers of the libtrace unit tests: open a slot and
 * attach the real reader to it, decode the records of a packet with the
 * event descriptions the reader parsed (rb_decode.h).
 */
#ifndef STRATA_TESTS_RB_TEST_UTIL_H
#define STRATA_TESTS_RB_TEST_UTIL_H

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "rb_decode.h"
#include "reader.h"
#include "runtime.h"
#include "strata_kclock.h"

namespace rbtest {

// STRATA_TEST_CLOCK_PAGE=1 (the ".page" variants of the tests): the process
// stamps with a clock page, as under a daemon, so that the writer's fast
// path (strata_reserve, which takes a page read inline) is the one tested;
// without it the clock is clock_gettime and every reservation takes the
// general path.  A sealed memfd holding a valid page (TSC / 2.6 at
// ~2.6 GHz: any increasing mapping does), offered before the first slot
// opens; the runtime's own checks accept it as a consumer's page.
inline bool offer_test_clock_page()
{
	const char *e = getenv("STRATA_TEST_CLOCK_PAGE");
	if (!e || strcmp(e, "1") != 0)
		return false;
	strata_kclock k{};
	k.magic = STRATA_KCLOCK_MAGIC;
	k.version = 1;
	k.flags = STRATA_KCLOCK_VALID | STRATA_KCLOCK_USER;
	k.cycle_last = strata_kclock_rdtsc();
	k.mask = ~0ull;
	k.base_ns = 1000000000ull;
	k.mult = 1651910757u; // 2^32 / 2.6
	k.shift = 32;
	const int fd = memfd_create("test-clock", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, 4096) < 0 || pwrite(fd, &k, sizeof k, 0) != (ssize_t)sizeof k ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0 || strata_rt_clock_offer(fd) != 0 ||
	    strata_rt_clock_id() != STRATA_CLOCK_CONSUMER_PAGE)
		abort(); // asked for and not had: the variant would test nothing new
	close(fd);
	return true;
}
static const bool g_test_clock_page = offer_test_clock_page();
// These tests reason about which lane a record lands in: a thread claims
// its owned lane at its first record (the shared-lane start has tests of
// its own, RingBuffer.ShortLivedThreads*).
static const bool g_test_own_at_once = (strata_rt_set_own_after(0), true);

inline uint64_t checksum(uint32_t thread, uint64_t seq)
{
	uint64_t x = ((uint64_t)thread << 40) ^ seq ^ 0x9e3779b97f4a7c15ull;
	x ^= x >> 31;
	x *= 0xbf58476d1ce4e5b9ull;
	return x ^ (x >> 29);
}

inline strata_channel_config config(uint32_t mode, uint32_t lanes, uint32_t nsub, uint64_t size)
{
	strata_channel_config c{};
	strcpy(c.name, "channel0");
	c.stream_id = 0;
	c.mode = mode;
	c.n_lanes = lanes;
	c.n_subbuf = nsub;
	c.subbuf_size = size;
	return c;
}

inline strata_rule rule(const char *pattern, bool enable = true, int loglevel_max = -1)
{
	strata_rule r{};
	strncpy(r.pattern, pattern, sizeof r.pattern - 1);
	r.enable = enable;
	r.loglevel_max = loglevel_max;
	return r;
}

inline const uint8_t *test_uuid()
{
	static const uint8_t u[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
	return u;
}

// Opens `slot`, sets the rules, attaches a reader.  Closes the slot at end.
struct Slot {
	unsigned slot;
	int fd = -1;
	std::unique_ptr<strata::Reader> reader;
	std::map<uint32_t, strata::EventInfo> events;

	Slot(unsigned s, const strata_channel_config &cfg, std::vector<strata_rule> rules) : slot(s)
	{
		fd = strata_rt_slot_open(slot, &cfg, test_uuid());
		EXPECT_GE(fd, 0) << "slot_open: " << fd;
		if (fd < 0)
			return;
		EXPECT_EQ(0, strata_rt_slot_set_rules(slot, rules.data(), rules.size()));
		std::string err;
		reader = strata::Reader::attach(fd, &err);
		EXPECT_TRUE(reader) << err;
		refresh_events();
	}
	// A slot already open whose buffer `memfd` came from elsewhere (the
	// hand-off of strata_rt_slot_open_lazy): attach the reader only.
	Slot(unsigned s, int memfd) : slot(s), fd(memfd)
	{
		std::string err;
		reader = strata::Reader::attach(fd, &err);
		EXPECT_TRUE(reader) << err;
		if (reader)
			refresh_events();
	}
	~Slot()
	{
		if (fd >= 0)
			strata_rt_slot_close(slot);
	}
	void refresh_events()
	{
		std::vector<strata::EventInfo> evs;
		std::vector<std::string> errs;
		EXPECT_TRUE(reader->read_new_events(&evs, &errs));
		EXPECT_TRUE(errs.empty()) << errs[0];
		for (auto &e : evs)
			events[e.id] = e;
	}
};

inline strata_packet_header packet_header(const std::vector<uint8_t> &pkt)
{
	strata_packet_header ph;
	memcpy(&ph, pkt.data(), sizeof ph);
	return ph;
}

// Lane `lane` flushed and its first packet taken raw (peek_packet: the
// header as the writer closed it, the body as written, before any record
// check), then released.  False, after a failure said, if there is none.
inline bool raw_packet(Slot &s, uint32_t lane, strata_packet_header *ph, std::vector<uint8_t> *body)
{
	std::string msg;
	EXPECT_EQ(strata::FlushStatus::kDone, s.reader->flush(lane, false, 1000, &msg)) << msg;
	const uint8_t *b = nullptr;
	size_t len = 0;
	const strata::ReadStatus st = s.reader->peek_packet(lane, ph, &b, &len, &msg);
	EXPECT_EQ(strata::ReadStatus::kPacket, st) << msg;
	if (st != strata::ReadStatus::kPacket)
		return false;
	body->assign(b, b + len);
	s.reader->release(lane);
	return true;
}

using Packets = std::vector<std::vector<uint8_t>>;

// As many threads as s has owned lanes, one after the other, each
// `one(th)` (a record or a few) and exit: each claims a free owned lane at
// its first record and hands it back with its packet open.  The number of
// owned lanes (first_shared).
template <class F> uint32_t leave_owned_lanes_open(const Slot &s, F one)
{
	const uint32_t n = s.reader->info().first_shared;
	for (uint32_t th = 0; th < n; th++)
		std::thread([&one, th] { one(th); }).join();
	return n;
}

// Every lane flushed (the writers stopped) and its packets read, lane by lane.
inline void flush_and_read(Slot &s, std::vector<Packets> *lanes)
{
	lanes->assign(s.reader->info().n_lanes, Packets());
	for (uint32_t l = 0; l < lanes->size(); l++) {
		std::string msg;
		ASSERT_EQ(s.reader->flush(l, false, 5000, &msg), strata::FlushStatus::kDone) << msg;
		std::vector<uint8_t> pkt;
		std::string err;
		strata::ReadStatus st;
		while ((st = s.reader->next_packet(l, &pkt, &err)) != strata::ReadStatus::kEmpty) {
			ASSERT_EQ(st, strata::ReadStatus::kPacket) << err;
			(*lanes)[l].push_back(pkt);
		}
	}
}

// What check_lanes found in one slot.
struct Tally {
	uint64_t records = 0;
	uint64_t discarded = 0;
	uint64_t packets = 0;
	std::map<std::pair<std::string, uint32_t>, std::vector<uint64_t>> seqs; // (event, thread)
};

// What a lane nobody wrote holds (the other lanes of one-thread tests).
inline const Packets kNoPackets;

// Checks one slot's packets lane by lane and counts what it holds.
inline void check_lanes(const Slot &slot, const std::function<const Packets &(uint32_t)> &lane_packets,
			bool consecutive_seq, Tally *t)
{
	const strata::Reader &r = *slot.reader;
	// (event, thread) -> (timestamp, seq) over all lanes: a thread without
	// an owned lane writes the shared lane of whatever CPU it is on.
	std::map<std::pair<std::string, uint32_t>, std::vector<std::pair<uint64_t, uint64_t>>> all;
	for (uint32_t l = 0; l < r.info().n_lanes; l++) {
		const Packets &pk = lane_packets(l);
		std::map<std::pair<std::string, uint32_t>, uint64_t> lane_last; // position order
		uint64_t last_ts = 0, last_disc = 0;
		bool first = true;
		uint64_t prev_seq = 0;
		for (const auto &p : pk) {
			strata_packet_header ph = packet_header(p);
			ASSERT_EQ(ph.magic, STRATA_CTF_MAGIC);
			ASSERT_EQ(ph.lane_id, l);
			ASSERT_EQ(p.size() * 8, ph.packet_size);
			if (ph.packet_size == STRATA_PACKET_HEADER_SIZE * 8) // trailing-loss packet
				ASSERT_EQ(ph.content_size, STRATA_PACKET_HEADER_SIZE * 8u);
			else
				ASSERT_EQ(ph.content_size, ph.packet_size); // shrunk to the content
			ASSERT_GE(ph.timestamp_begin, last_ts) << "lane " << l;
			ASSERT_LE(ph.timestamp_begin, ph.timestamp_end);
			ASSERT_GE(ph.events_discarded, last_disc);
			if (!first) {
				ASSERT_GT(ph.packet_seq_num, prev_seq);
				if (consecutive_seq) {
					ASSERT_EQ(ph.packet_seq_num, prev_seq + 1);
				}
			}
			first = false;
			prev_seq = ph.packet_seq_num;
			std::vector<Record> recs;
			std::string err;
			ASSERT_TRUE(decode_packet(p, slot.events, &recs, &err)) << err;
			uint64_t ts = ph.timestamp_begin;
			for (const Record &rec : recs) {
				ASSERT_GE(rec.ts, ts) << "timestamps go backwards in lane " << l;
				ASSERT_LE(rec.ts, ph.timestamp_end);
				ts = rec.ts;
				uint32_t thread = (uint32_t)rec.fields.at(0).u;
				uint64_t seq = rec.fields.at(1).u;
				ASSERT_EQ(rec.fields.at(2).u, checksum(thread, seq)) << rec.name;
				auto key = std::make_pair(rec.name, thread);
				auto ll = lane_last.find(key);
				if (ll != lane_last.end()) {
					ASSERT_GT(seq, ll->second)
						<< rec.name << " thread " << thread << " lane " << l;
				}
				lane_last[key] = seq;
				all[key].push_back({rec.ts, seq});
			}
			last_ts = ph.timestamp_end;
			last_disc = ph.events_discarded;
			t->records += recs.size();
			t->packets++;
		}
		t->discarded += last_disc;
		// Overwrite mode: what the ring overwrote counts as discarded.
		EXPECT_EQ(last_disc, r.lane_discarded(l) + r.lane_overwritten(l)) << "lane " << l;
	}
	// Across lanes, in timestamp order (what a CTF reader merges by): a
	// thread's events keep their program order.  Equal timestamps (a
	// coarse clock) are put in seq order, which then cannot fail.
	for (auto &kv : all) {
		std::sort(kv.second.begin(), kv.second.end());
		std::vector<uint64_t> &seqs = t->seqs[kv.first];
		for (const auto &ts_seq : kv.second)
			seqs.push_back(ts_seq.second);
		for (size_t i = 1; i < seqs.size(); i++)
			ASSERT_GT(seqs[i], seqs[i - 1]) << kv.first.first << " thread " << kv.first.second;
	}
}

// Lane 0 of a one-lane slot flushed, then every record in it, decoded
// (new event descriptions learnt first).
std::vector<Record> drain_records(Slot &s)
{
	std::string msg;
	EXPECT_EQ(strata::FlushStatus::kDone, s.reader->flush(0, false, 1000, &msg)) << msg;
	s.refresh_events();
	std::vector<Record> out;
	std::vector<uint8_t> pkt;
	while (s.reader->next_packet(0, &pkt, &msg) == strata::ReadStatus::kPacket) {
		std::string err;
		EXPECT_TRUE(decode_packet(pkt, s.events, &out, &err)) << err;
	}
	return out;
}

// Drains every lane of some slots in a thread, like a consumer would.
class Drainer {
public:
	explicit Drainer(std::vector<Slot *> slots) : slots_(std::move(slots))
	{
		for (Slot *s : slots_)
			packets_.emplace_back(s->reader->info().n_lanes);
		thread_ = std::thread([this] { run(); });
	}
	// Writers are done: final flush, drain, trailing-loss packets.
	void finish()
	{
		stop_.store(true, std::memory_order_release); // pairs with run()'s acquire load
		thread_.join();
	}
	const Packets &lane(size_t slot, uint32_t lane) const { return packets_[slot][lane]; }
	const std::vector<std::string> &errors() const { return errors_; }

private:
	bool drain_once()
	{
		bool any = false;
		for (size_t s = 0; s < slots_.size(); s++) {
			strata::Reader &r = *slots_[s]->reader;
			for (uint32_t l = 0; l < r.info().n_lanes; l++) {
				std::vector<uint8_t> pkt;
				std::string err;
				strata::ReadStatus st;
				while ((st = r.next_packet(l, &pkt, &err)) != strata::ReadStatus::kEmpty) {
					any = true;
					if (st == strata::ReadStatus::kPacket)
						packets_[s][l].push_back(pkt);
					else
						errors_.push_back(err);
				}
			}
		}
		return any;
	}
	void run()
	{
		for (;;) {
			bool done = stop_.load(std::memory_order_acquire);
			if (drain_once())
				continue;
			if (done)
				break;
			strata::Reader &r0 = *slots_[0]->reader;
			uint32_t seq = r0.prepare_wait();
			if (!drain_once())
				r0.wait(seq, 2); // woken by a completed sub-buffer; 2 ms safety net
			r0.end_wait();
		}
		for (size_t s = 0; s < slots_.size(); s++) {
			strata::Reader &r = *slots_[s]->reader;
			for (uint32_t l = 0; l < r.info().n_lanes; l++) {
				std::string msg;
				if (r.flush(l, false, 5000, &msg) != strata::FlushStatus::kDone)
					errors_.push_back("flush: " + msg);
			}
		}
		drain_once();
		for (size_t s = 0; s < slots_.size(); s++) {
			strata::Reader &r = *slots_[s]->reader;
			for (uint32_t l = 0; l < r.info().n_lanes; l++) {
				std::vector<uint8_t> pkt;
				if (r.trailing_loss_packet(l, &pkt))
					packets_[s][l].push_back(pkt);
			}
		}
	}

	std::vector<Slot *> slots_;
	std::vector<std::vector<Packets>> packets_;
	std::vector<std::string> errors_;
	std::atomic<bool> stop_{false};
	std::thread thread_;
};

} // namespace rbtest
#endif
