/*
 * strata_rt_reserve_hold (libtrace/runtime/writer.cpp), the fast path of
 * strata_reserve for a record that ends a duration (the pthread preload's
 * mutex_held, preload/pt_hold.h strata_pt_held_at_record), with a clock
 * page (run with STRATA_TEST_CLOCK_PAGE=1: without one there is no fast
 * path).  Oracles: a duration longer than max_ticks (or the tracepoint
 * state it does not take) returns 0 and leaves the lane's head where it
 * was; a recent start returns 1 with the ticks since it; a start after the
 * record's read (skew) gives 0 ticks; the preload's payload reads back
 * field for field as the generated emitter's, and each record's timestamp
 * minus its hold is not before the previous record.
 */
#define STRATA_DEFINE_PROVIDERS
#include "pthread_tp.h"

#include "pt_hold.h"
#include "rb_test_util.h"

using namespace rbtest;

namespace {

std::vector<Record> read_all(Slot &s)
{
	std::string msg, err;
	EXPECT_EQ(s.reader->flush(0, false, 1000, &msg), strata::FlushStatus::kDone) << msg;
	std::vector<Record> all;
	std::vector<uint8_t> pkt;
	while (s.reader->next_packet(0, &pkt, &err) == strata::ReadStatus::kPacket) {
		s.refresh_events();
		std::vector<Record> recs;
		EXPECT_TRUE(decode_packet(pkt, s.events, &recs, &err)) << err;
		all.insert(all.end(), recs.begin(), recs.end());
	}
	return all;
}

// Whether the slot's buffer has an unlocked owner (STRATA_BUF_FAST_OWNER).
bool fast_owner(const Slot &s)
{
	const size_t size = (size_t)lseek(s.fd, 0, SEEK_END);
	void *m = mmap(nullptr, size, PROT_READ, MAP_SHARED, s.fd, 0);
	if (m == MAP_FAILED) {
		ADD_FAILURE() << "mmap of the buffer";
		return false;
	}
	const bool fast = ((const strata_buffer_header *)m)->flags & STRATA_BUF_FAST_OWNER;
	munmap(m, size);
	return fast;
}

} // namespace

TEST(ReserveHold, ShortHoldsTimedAtTheRecordLongOnesLeftUntouched)
{
	ASSERT_TRUE(g_test_clock_page) << "run with STRATA_TEST_CLOCK_PAGE=1";
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("pthread:mutex_held")});
	ASSERT_TRUE(s.reader);
	pt_clock = reinterpret_cast<uintptr_t>(strata_rt_clock_page());
	ASSERT_GT(pt_clock, 1u);
	ASSERT_EQ(1, strata_pt_hold_tsc()); // the page's scale read
	struct strata_tracepoint *tp = &STRATA__TP(pthread, mutex_held);
	ASSERT_EQ(1u, tp->state) << "slot 0 only, no probe, no filter";

	// The generated emitter first (it also claims the thread's lane).
	strata_tracepoint(pthread, mutex_held, 0x1234u, 7u, 99u);
	const uint64_t head = s.reader->lane_position(0);
	const uint64_t rec = STRATA_REC_COMPACT_SIZE + STRATA_PT_HELD_SIZE;

	// Too long: nothing reserved, the head where it was.
	struct strata_reservation r;
	uint64_t ticks = 42;
	EXPECT_EQ(0, strata_rt_reserve_hold(&r, tp, 0, STRATA_PT_HELD_SIZE, strata_kclock_rdtsc() - 1000, 0,
					    &ticks));
	EXPECT_EQ(0, strata_pt_held_at_record(tp, 0x1234u, 7u, strata_kclock_rdtsc() - (1ull << 40)));
	EXPECT_EQ(42u, ticks);
	EXPECT_EQ(head, s.reader->lane_position(0));
	// Not this slot's tracepoint state (two slots): the caller's own path.
	tp->state = 3;
	EXPECT_EQ(0, strata_pt_held_at_record(tp, 0x1234u, 7u, strata_kclock_rdtsc()));
	tp->state = 1;
	EXPECT_EQ(head, s.reader->lane_position(0));

	// No unlocked owner (no MEMBARRIER_CMD_GLOBAL_EXPEDITED here, or a TSan
	// build): no fast path, so never a record, the head unchanged.
	if (!fast_owner(s)) {
		EXPECT_EQ(0, strata_pt_held_at_record(tp, 0x1234u, 7u, strata_kclock_rdtsc()));
		EXPECT_EQ(head, s.reader->lane_position(0));
		GTEST_SKIP() << "no FAST_OWNER buffer: every hold takes the preload's own clock read";
	}

	// The payload the preload writes, with the emitter's values.
	ASSERT_EQ(1, strata_rt_reserve_hold(&r, tp, 0, STRATA_PT_HELD_SIZE, strata_kclock_rdtsc(), 1u << 20,
					    &ticks));
	EXPECT_LT(ticks, 1u << 20);
	EXPECT_EQ(rec, (uint32_t)r.size); // the low half: the record's bytes (the fast path packs more)
	strata_pt_held_write(r.rec, 0x1234u, 7u, 99u);
	strata_commit(&r);
	// A start after the record's clock read (skew): 0 ticks, even with max 0.
	ASSERT_EQ(1, strata_rt_reserve_hold(&r, tp, 0, STRATA_PT_HELD_SIZE,
					    strata_kclock_rdtsc() + (1ull << 40), 0, &ticks));
	EXPECT_EQ(0u, ticks);
	strata_pt_held_write(r.rec, 0x5678u, 8u, (uint32_t)ticks);
	strata_commit(&r);
	// Holds timed by the preload's own helper.
	for (int i = 0; i < 100; i++)
		ASSERT_EQ(1, strata_pt_held_at_record(tp, 0x9abcu, (uint32_t)i,
						      strata_kclock_rdtsc_unordered()));
	EXPECT_EQ(head + 102 * rec, s.reader->lane_position(0));

	std::vector<Record> recs = read_all(s);
	ASSERT_EQ(103u, recs.size());
	for (const Record &x : recs) {
		ASSERT_EQ("pthread:mutex_held", x.name);
		ASSERT_EQ(3u, x.fields.size());
	}
	for (int i = 0; i < 2; i++) {
		EXPECT_EQ(0x1234u, recs[i].fields[0].u);
		EXPECT_EQ(7u, recs[i].fields[1].u);
		EXPECT_EQ(99u, recs[i].fields[2].u);
	}
	EXPECT_EQ(0x5678u, recs[2].fields[0].u);
	EXPECT_EQ(0u, recs[2].fields[2].u);
	for (size_t i = 3; i < recs.size(); i++) {
		EXPECT_EQ(0x9abcu, recs[i].fields[0].u);
		EXPECT_EQ(i - 3, recs[i].fields[1].u);
		// The hold started after the previous record's clock read (its
		// ns, to the conversion's rounding) and ends at this record's.
		EXPECT_GE(recs[i].ts - recs[i].fields[2].u + 1, recs[i - 1].ts) << i;
		EXPECT_LT(recs[i].fields[2].u, 1000000u) << i;
	}
}
