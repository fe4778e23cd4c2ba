/*
 * Consumer-side closes (Reader::flush) while the producer keeps writing,
 * with the producer's clock BEHIND the consumer's (issue 4: the kernel
 * module stamps with ktime_get_mono_fast_ns(), a producer may use a clock
 * page the consumer calibrated).  The consumer's clock is a fake one, one
 * second ahead of the producer's CLOCK_MONOTONIC.  A close stamped with the
 * consumer's clock would end a packet "after" the next one begins, and the
 * Reader would refuse that next packet: recorded data lost.
 *
 * Oracles: no packet refused; per lane, timestamp_begin <= every record <=
 * timestamp_end <= the next packet's timestamp_begin; every record decodes;
 * records read + discarded == emitted.
 */
#define STRATA_DEFINE_PROVIDERS
#include "test_tp.h"

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "rb_test_util.h"

using namespace rbtest;

namespace {

uint64_t consumer_clock_ahead()
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec + 1000000000u;
}

struct LaneCheck {
	uint64_t records = 0, packets = 0, prev_end = 0;
	bool have = false;
};

// Reads every complete packet of `lane`; each must be accepted and ordered.
// only_consumer_closes: every packet was closed by a flush.
// Reads the lane's complete packets, at most max_packets of them: a writer
// that refills the ring as fast as this loop (under ASan) empties it would
// otherwise keep it here for ever, past its caller's deadline.
void read_lane(Slot &s, uint32_t lane, LaneCheck *lc, bool only_consumer_closes,
	       uint64_t max_packets = UINT64_MAX)
{
	std::vector<uint8_t> pkt;
	std::string err;
	strata::ReadStatus st;
	for (uint64_t n = 0;
	     n < max_packets && (st = s.reader->next_packet(lane, &pkt, &err)) != strata::ReadStatus::kEmpty;
	     n++) {
		ASSERT_EQ(st, strata::ReadStatus::kPacket) << "packet refused: " << err;
		s.refresh_events();
		std::vector<Record> recs;
		ASSERT_TRUE(decode_packet(pkt, s.events, &recs, &err)) << err;
		strata_packet_header ph = packet_header(pkt);
		EXPECT_LE(ph.timestamp_begin, ph.timestamp_end);
		if (lc->have) {
			EXPECT_GE(ph.timestamp_begin, lc->prev_end) << "packet " << ph.packet_seq_num;
		}
		for (const Record &r : recs) {
			EXPECT_GE(r.ts, ph.timestamp_begin);
			EXPECT_LE(r.ts, ph.timestamp_end) << "record after its packet's end";
		}
		if (only_consumer_closes && !recs.empty()) { // ends at the last record
			EXPECT_EQ(recs.back().ts, ph.timestamp_end);
		}
		lc->prev_end = ph.timestamp_end;
		lc->have = true;
		lc->records += recs.size();
		lc->packets++;
	}
}

void emit_mixed(uint64_t i)
{
	static const int16_t arr[3] = {1, -2, 3};
	static const uint32_t seq[5] = {5, 4, 3, 2, 1};
	static const char text[] = "abcdefghijklmnopqrstuvwxyz";
	if (i % 3 == 0)
		strata_tracepoint(rbtest, all, (int8_t)i, (uint16_t)i, (int64_t)i, 1.5, 2.5f, (int)(i % 6),
				  text + i % 26, arr, seq, (size_t)(i % 6), text, (size_t)(i % 7));
	else
		strata_tracepoint(rbtest, rec, 1u, i, checksum(1, i));
}

} // namespace

// Deterministic: close, write, close again, with nothing racing.
TEST(ConsumerClose, ProducerClockBehindConsumer)
{
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	s.reader->set_clock(consumer_clock_ahead);
	LaneCheck lc;
	uint64_t emitted = 0;
	for (int round = 0; round < 6; round++) {
		for (int k = 0; k < 5; k++)
			emit_mixed(emitted++);
		std::string msg;
		ASSERT_EQ(s.reader->flush(0, false, 1000, &msg), strata::FlushStatus::kDone) << msg;
		read_lane(s, 0, &lc, true);
	}
	EXPECT_EQ(lc.packets, 6u);
	EXPECT_EQ(lc.records, emitted);
	EXPECT_EQ(s.reader->lane_discarded(0), 0u);
	EXPECT_EQ(s.reader->stats().close_ts_fallbacks, 0u);
}

// The consumer's closes count apart from the producers' commits (ABI 3):
// after each flush of the lane this thread owns, commit[i] holds exactly
// the bytes the writer committed in the sub-buffer and ccommit[i] the
// padding the consumer added, and the writer reopens the sub-buffer in the
// next laps (its free check sums the two): three laps, nothing discarded.
TEST(ConsumerClose, ConsumerPaddingCountsApart)
{
	constexpr uint64_t S = 4096;
	constexpr uint32_t kSub = 4;
	Slot s(2, config(STRATA_MODE_DISCARD, 1, kSub, S), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	const size_t size = (size_t)lseek(s.fd, 0, SEEK_END);
	void *m = mmap(nullptr, size, PROT_READ, MAP_SHARED, s.fd, 0);
	ASSERT_NE(m, MAP_FAILED);
	const auto *hdr = (const strata_buffer_header *)m;
	const auto *lane = (const strata_lane_ctl *)((const uint8_t *)m + hdr->lanes_offset); // lane 0: owned
	LaneCheck lc;
	uint64_t emitted = 0, producer[kSub] = {}, consumer[kSub] = {};
	for (uint32_t round = 0; round < 3 * kSub; round++) {
		for (int k = 0; k < 3; k++)
			emit_mixed(emitted++);
		const uint64_t head = __atomic_load_n(&lane->head, __ATOMIC_ACQUIRE);
		const uint64_t off = head & (S - 1), i = (head / S) % kSub;
		ASSERT_NE(off, 0u);
		std::string msg;
		ASSERT_EQ(s.reader->flush(0, false, 1000, &msg), strata::FlushStatus::kDone) << msg;
		producer[i] += off;
		consumer[i] += S - off;
		EXPECT_EQ(__atomic_load_n(&lane->commit[i], __ATOMIC_ACQUIRE), producer[i])
			<< "round " << round;
		EXPECT_EQ(__atomic_load_n(&lane->ccommit[i], __ATOMIC_ACQUIRE), consumer[i])
			<< "round " << round;
		read_lane(s, 0, &lc, true);
	}
	EXPECT_EQ(lc.packets, 3u * kSub);
	EXPECT_EQ(lc.records, emitted);
	EXPECT_EQ(s.reader->lane_discarded(0), 0u);
	munmap(m, size);
}

// A writer thread runs through the closes (some land while it is between
// its reservation and its commit: the close completes later).
TEST(ConsumerClose, WhileWritersRun)
{
	Slot s(1, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	s.reader->set_clock(consumer_clock_ahead);
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> emitted{0};
	std::thread w([&] {
		// Acquire: pairs with the release store below (a stop flag only).
		for (uint64_t i = 0; !stop.load(std::memory_order_acquire); i++) {
			emit_mixed(i);
			emitted.store(i + 1, std::memory_order_relaxed); // read after join
		}
	});
	LaneCheck lc;
	// 300 packets read, most of them closed by us (bounded: 20 s).
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
	while (lc.packets < 300 && std::chrono::steady_clock::now() < deadline) {
		std::string msg;
		strata::FlushStatus fs = s.reader->flush(0, false, 1000, &msg);
		EXPECT_NE(fs, strata::FlushStatus::kDropped) << msg;
		read_lane(s, 0, &lc, false, 16); // the writer runs on: a bounded read
		if (::testing::Test::HasFatalFailure())
			break;
	}
	stop.store(true, std::memory_order_release);
	w.join();
	std::string msg;
	ASSERT_EQ(s.reader->flush(0, true, 1000, &msg), strata::FlushStatus::kDone) << msg;
	read_lane(s, 0, &lc, false);
	uint64_t disc = s.reader->lane_discarded(0);
	EXPECT_EQ(lc.records + disc, emitted.load(std::memory_order_relaxed));
	EXPECT_GE(lc.packets, 300u);
	EXPECT_EQ(s.reader->stats().close_ts_fallbacks, 0u);
	std::printf("%llu emitted, %llu read, %llu discarded, %llu packets\n",
		    (unsigned long long)emitted.load(), (unsigned long long)lc.records,
		    (unsigned long long)disc, (unsigned long long)lc.packets);
}
