/*
 * Nested writers at every step of the writer's path (issue 16).
 *
 * A signal handler may interrupt strata_reserve/strata_commit between any
 * two instructions and write into the same lane.  Catching a real signal
 * at a chosen instruction is a matter of luck, so this test links
 * libstrata-hooked (the same sources with writer_hooks.h on) and, at one
 * named step at a time, runs nested writers on the same thread from the
 * hook: exactly what a handler arriving at that step does.  Records of
 * varying size move the sub-buffer boundaries, so every step of the switch
 * path (close, boundary check, open) is interrupted many times, by nested
 * writers that themselves close and open packets.
 *
 * Oracle, per step: with a consumer that keeps up (it drains after every
 * outer event) nothing is discarded, every outer and nested record is read
 * back decoded with its checksum, per-writer sequences have no gap, and
 * packets and timestamps are in order (check_lanes).  Up to the nesting
 * limit (4 reservations per thread) nothing is lost; one level deeper,
 * exactly the too-deep reservations are counted as discarded.  Both ways
 * a record is written are interrupted, as outer and as nested writers:
 * strata_reserve + strata_commit (rbtest:big) and strata_write (rbtest:sig,
 * an event of fixed-size fields).
 */
#define STRATA_DEFINE_PROVIDERS
#include "test_tp.h"

/* rbtest:sig's fields with a variable-size tail, to move the boundaries. */
STRATA_EVENT(rbtest, big, STRATA_LOGLEVEL_DEBUG, strata_int(uint32_t, thread), strata_int(uint64_t, seq),
	     strata_hex(uint64_t, check), strata_bytes(tail))

#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>

#include "rb_test_util.h"
#include "rt_internal.h"
#include "writer_hooks.h"

using namespace rbtest;

namespace {

// Each writer is interrupted once, at the first time it reaches its step:
// the outer one at `step`, the nested ones at `inner` (a writer that retries
// reaches a step again; interrupting every retry would be a signal storm
// that fills the ring, a different test).
struct Plan {
	strata_writer_step step;
	strata_writer_step inner;
	unsigned fanout; // nested events per interruption
	unsigned levels; // nesting levels the hook adds under the outer event
};

Plan g_plan;
unsigned g_level;      // hook-made nesting level now running
uint64_t g_seq[8];     // next sequence number per level
uint64_t g_emitted[8]; // events emitted per level (0: outer)
bool g_armed[8];       // the writer running at this level may still be interrupted
uint64_t g_fired;      // interruptions of the outer writer at its step
uint8_t g_tail[2048];

size_t tail_len(uint64_t seq, unsigned level)
{
	// Sizes that walk every alignment against 4 KiB sub-buffers.
	return (size_t)((seq * 7919u + level * 313u) % (level ? 1200u : 1500u));
}

void emit(unsigned level)
{
	uint64_t seq = g_seq[level]++;
	g_emitted[level]++;
	g_armed[level] = true;
	if (seq % 2)
		strata_tracepoint(rbtest, big, level, seq, checksum(level, seq), g_tail,
				  tail_len(seq, level));
	else
		strata_tracepoint(rbtest, sig, level, seq, checksum(level, seq));
}

void hook(strata_writer_step step)
{
	if (step != (g_level ? g_plan.inner : g_plan.step) || !g_armed[g_level] || g_level >= g_plan.levels)
		return;
	g_armed[g_level] = false;
	if (g_level == 0)
		g_fired++;
	g_level++;
	for (unsigned k = 0; k < g_plan.fanout; k++)
		emit(g_level);
	g_level--;
}

struct Outcome {
	Tally tally;
	uint64_t emitted = 0;
	uint64_t too_deep = 0; // emitted below the nesting limit
};

void run_plan(const Plan &plan, Outcome *out)
{
	constexpr uint64_t kOuter = 600;
	g_plan = plan;
	g_level = 0;
	g_fired = 0;
	for (auto &v : g_seq)
		v = 0;
	for (auto &v : g_emitted)
		v = 0;
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 16, 4096), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	Packets pk;
	auto drain = [&] {
		std::vector<uint8_t> pkt;
		std::string err;
		strata::ReadStatus st;
		while ((st = s.reader->next_packet(0, &pkt, &err)) != strata::ReadStatus::kEmpty) {
			ASSERT_EQ(st, strata::ReadStatus::kPacket) << err;
			pk.push_back(pkt);
		}
	};
	strata_test_writer_hook = hook;
	for (uint64_t i = 0; i < kOuter; i++) {
		// The outer writer: thread 0 in the records; as the nested ones,
		// rbtest:big (reserve, write, commit) of varying size and
		// rbtest:sig (fixed fields: strata_write's one call) in turn.
		emit(0);
		drain();
	}
	strata_test_writer_hook = nullptr;
	std::string msg;
	ASSERT_EQ(s.reader->flush(0, false, 5000, &msg), strata::FlushStatus::kDone) << msg;
	drain();
	std::vector<uint8_t> loss;
	if (s.reader->trailing_loss_packet(0, &loss))
		pk.push_back(loss);
	EXPECT_GT(g_fired, 0u) << "the hook never reached step " << plan.step;
	for (unsigned l = 0; l < 8; l++) {
		out->emitted += g_emitted[l];
		if (l >= strata::kMaxDepth)
			out->too_deep += g_emitted[l];
	}
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return l == 0 ? pk : kNoPackets; }, true,
		&out->tally);
}

std::string step_name(strata_writer_step s)
{
	static const char *const names[] = {
		"TscRead",  "HeadLoaded",   "ClockRead", "BeforeReserveCas", "BeforeCloseCas",
		"CloseWon", "CloseWritten", "Closed",    "AtBoundary",       "FreeChecked",
		"OpenWon",  "OpenWritten",  "Reserved",  "BeforeCommit"};
	static_assert(sizeof names / sizeof names[0] == STRATA_W_N_STEPS, "a name per step");
	return names[s];
}

class NestedAtStep : public ::testing::TestWithParam<int> {};

// Two nested events at each hit of the step, nested two levels deep (so a
// nested writer is itself interrupted at the same step): nothing is lost.
TEST_P(NestedAtStep, NothingDiscardedWhileSubBuffersAreFree)
{
	Outcome r;
	const auto step = (strata_writer_step)GetParam();
	run_plan({step, step, 2, 2}, &r);
	if (HasFatalFailure())
		return;
	EXPECT_EQ(r.tally.discarded, 0u);
	EXPECT_EQ(r.tally.records, r.emitted);
}

// One nested event per level down to the nesting limit (outer + 3 = 4
// reservations): still nothing lost.  One level more: exactly the fifth
// reservations are discarded, and counted.
TEST_P(NestedAtStep, UpToTheNestingLimitThenCounted)
{
	Outcome r;
	// Nested writers are interrupted once they reserved (every successful
	// reservation gets there), so the chain reaches the limit every time.
	const auto step = (strata_writer_step)GetParam();
	run_plan({step, STRATA_W_RESERVED, 1, strata::kMaxDepth - 1}, &r);
	if (HasFatalFailure())
		return;
	EXPECT_EQ(r.too_deep, 0u);
	EXPECT_EQ(r.tally.discarded, 0u);
	EXPECT_EQ(r.tally.records, r.emitted);

	Outcome deeper;
	run_plan({step, STRATA_W_RESERVED, 1, strata::kMaxDepth}, &deeper);
	if (HasFatalFailure())
		return;
	EXPECT_GT(deeper.too_deep, 0u);
	EXPECT_EQ(deeper.tally.discarded, deeper.too_deep);
	EXPECT_EQ(deeper.tally.records + deeper.tally.discarded, deeper.emitted);
}

// A FAST_OWNER lane (strata_abi.h): a consumer that closes while the owner
// is inside its busy window (here: the hook, between the owner's head load
// and its unlocked cmpxchg) must not CAS.  It raises close_req, finds the
// window open, gives up at its deadline (kPending) and takes its request
// back; the owner's reservation then completes, a later flush closes, and
// every record reads back.
struct FastOwnerProbe {
	Slot *s = nullptr;
	const strata_lane_ctl *lane = nullptr;
	bool armed = false;
	uint64_t busy = 0, req_after = 0;
	strata::FlushStatus st = strata::FlushStatus::kDone;
	std::string msg;
};
FastOwnerProbe g_probe;

void probe_hook(strata_writer_step step)
{
	if (step != STRATA_W_BEFORE_RESERVE_CAS || !g_probe.armed)
		return;
	g_probe.armed = false;
	g_probe.busy = __atomic_load_n(&g_probe.lane->owner_busy, __ATOMIC_RELAXED);
	g_probe.st = g_probe.s->reader->flush(0, false, 20, &g_probe.msg);
	g_probe.req_after = __atomic_load_n(&g_probe.lane->close_req, __ATOMIC_RELAXED);
}

// Lane 0's packets, flushed already, decoded: lane 0's records in order,
// checked to be rbtest:sig with seqs 0..n-1, and nothing discarded.
void expect_lane0_records(Slot &s, uint64_t n)
{
	std::vector<uint8_t> pkt;
	std::string err;
	std::vector<Record> recs;
	while (s.reader->next_packet(0, &pkt, &err) == strata::ReadStatus::kPacket) {
		s.refresh_events();
		ASSERT_TRUE(decode_packet(pkt, s.events, &recs, &err)) << err;
	}
	ASSERT_EQ(recs.size(), n);
	for (uint64_t i = 0; i < n; i++)
		EXPECT_EQ(recs[i].fields[1].u, i);
	EXPECT_EQ(s.reader->lane_discarded(0), 0u);
}

// strata_write copies the caller's payload by size class (overlapping
// moves, writer.cpp's copy_payload): every size from 0 to past
// STRATA_WRITE_MAX lands byte for byte, and not one byte past its record.
// Each record is interrupted once it is reserved, before its copy (the
// hook at STRATA_W_RESERVED, as a signal handler there), by a nested
// strata_write whose record lies right after it: a copy past the outer
// record's end would overwrite that record's header or payload.  Read raw
// (the payloads are not rbtest:noargs' fields, which next_packet's record
// check would cut).
constexpr unsigned kWriteMax = STRATA_WRITE_MAX + 200; // a one-field event's payload, any size
uint8_t write_byte(unsigned key, unsigned j)
{
	return (uint8_t)(key * 37u + j * 11u + 1u);
}
int write_pattern(unsigned key, unsigned n)
{
	uint8_t payload[kWriteMax];
	for (unsigned j = 0; j < n; j++)
		payload[j] = write_byte(key, j);
	strata_reservation r;
	r.rec = (char *)payload;
	return strata_write(&r, &strata__tp__rbtest__noargs, 2, n);
}
struct WriteNest {
	bool armed = false;
	unsigned key = 0, n = 0;
	int written = 0;
};
WriteNest g_wnest;
void write_nest_hook(strata_writer_step step)
{
	if (step != STRATA_W_RESERVED || !g_wnest.armed)
		return;
	g_wnest.armed = false;
	g_wnest.written = write_pattern(g_wnest.key, g_wnest.n);
}

TEST(Write, PayloadsOfEverySizeLandExactly)
{
	Slot s(2, config(STRATA_MODE_DISCARD, 1, 2, 131072), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	std::vector<std::pair<unsigned, unsigned>> want; // (key, size), in the lane's order
	strata_test_writer_hook = write_nest_hook;
	for (unsigned n = 0; n <= kWriteMax; n++) {
		const unsigned nested = (n * 29u + 7u) % (kWriteMax + 1);
		g_wnest = {true, 1000 + n, nested, 0};
		ASSERT_EQ(1, write_pattern(n, n)) << n;
		ASSERT_EQ(1, g_wnest.written) << "the nested record inside " << n;
		want.emplace_back(n, n);
		want.emplace_back(1000 + n, nested);
	}
	strata_test_writer_hook = nullptr;
	strata_packet_header ph;
	std::vector<uint8_t> b;
	ASSERT_TRUE(raw_packet(s, 0, &ph, &b));
	ASSERT_EQ(ph.events_discarded, 0u);
	const size_t end = ph.content_size / 8 - STRATA_PACKET_HEADER_SIZE;
	ASSERT_LE(end, b.size());
	size_t at = 0;
	for (const auto &[key, n] : want) {
		ASSERT_LE(at + STRATA_REC_COMPACT_SIZE, end) << key;
		uint32_t w;
		memcpy(&w, &b[at], sizeof w);
		const uint32_t id = w & 31u;
		if (id == STRATA_REC_EXTENDED_ID) {
			at += STRATA_REC_EXTENDED_SIZE;
		} else {
			ASSERT_EQ(id, strata__tp__rbtest__noargs.id) << "record " << key << " at " << at;
			at += STRATA_REC_COMPACT_SIZE;
		}
		ASSERT_LE(at + n, end) << key;
		for (unsigned j = 0; j < n; j++)
			ASSERT_EQ(b[at + j], write_byte(key, j))
				<< "record " << key << " (" << n << " bytes), byte " << j;
		at += n;
	}
	EXPECT_EQ(at, end); // the packet ends with the last record
}

namespace {
// The handler of SharerCount: two records of thread 8 inside thread 7's
// countdown, the second of which runs the count out and claims.
bool g_count_armed;
void claim_inside_count(strata_writer_step step)
{
	if (step != STRATA_W_SHARER_COUNT || !g_count_armed)
		return;
	g_count_armed = false;
	for (uint64_t i = 0; i < 2; i++)
		strata_tracepoint(rbtest, sig, 8u, i, checksum(8, i));
}
} // namespace

// A sharer's countdown (promote_lane) stores its count without a nesting
// level: a handler that claims an owned lane between its load and its
// store leaves a count behind it on an owned lane.  That stale count, run
// out at the thread's next general-path record (a packet switch), must not
// claim a second lane (the first leaked, taken till the thread exits):
// every record after the claim goes to the one lane.  Every owned lane is
// handed back with its packet open first, so that the writer shares (as
// rb_concurrency_test's AFirstEventLooksForACleanLaneAgainAfterAMiss).
TEST(SharerCount, AHandlerThatClaimsInsideTheCountLeavesOneLane)
{
	constexpr uint64_t kAfter = 400; // 4 KiB packets: several switches
	strata_rt_set_own_after(0);
	Slot s(3, config(STRATA_MODE_DISCARD, 4, 8, 4096), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	const uint32_t first_shared = leave_owned_lanes_open(
		s, [](uint32_t th) { strata_tracepoint(rbtest, sig, 100 + th, 0u, checksum(100 + th, 0)); });
	strata_rt_set_own_after(2); // the first record shares, counting 3 -> 2
	std::thread([] {
		strata_tracepoint(rbtest, sig, 7u, 0u, checksum(7, 0));
		g_count_armed = true;
		strata_test_writer_hook = claim_inside_count;
		strata_tracepoint(rbtest, sig, 7u, 1u, checksum(7, 1)); // count 2 loaded: the handler
		strata_test_writer_hook = nullptr;
		for (uint64_t i = 2; i < 2 + kAfter; i++)
			strata_tracepoint(rbtest, sig, 7u, i, checksum(7, i));
	}).join();
	strata_rt_set_own_after(64);
	EXPECT_FALSE(g_count_armed) << "the countdown's step was never reached";
	std::vector<Packets> lanes;
	ASSERT_NO_FATAL_FAILURE(flush_and_read(s, &lanes));
	std::map<uint32_t, uint64_t> owned; // owned lane -> records of 7 and 8
	uint64_t records = 0;
	for (uint32_t l = 0; l < lanes.size(); l++) {
		EXPECT_EQ(s.reader->lane_discarded(l), 0u) << "lane " << l;
		for (const auto &pkt : lanes[l]) {
			std::vector<Record> recs;
			std::string err;
			ASSERT_TRUE(decode_packet(pkt, s.events, &recs, &err)) << err;
			for (const Record &r : recs) {
				const uint64_t who = r.fields.at(0).u;
				const bool ours = who == 7 || who == 8; // the thread's and its handler's
				records += ours;
				if (ours && l < first_shared)
					owned[l]++;
			}
		}
	}
	EXPECT_EQ(records, 2 + 2 + kAfter);
	ASSERT_EQ(owned.size(), 1u) << "thread 7's records after its claim in " << owned.size()
				    << " owned lanes";
	EXPECT_GE(owned.begin()->second, kAfter);
}

TEST(FastOwner, ConsumerWaitsForTheOwnersWindow)
{
	Slot s(1, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	const size_t size = (size_t)lseek(s.fd, 0, SEEK_END);
	void *m = mmap(nullptr, size, PROT_READ, MAP_SHARED, s.fd, 0);
	ASSERT_NE(m, MAP_FAILED);
	const auto *hdr = (const strata_buffer_header *)m;
	if (!(hdr->flags & STRATA_BUF_FAST_OWNER)) {
		munmap(m, size);
		GTEST_SKIP() << "no MEMBARRIER_CMD_GLOBAL_EXPEDITED here (or a TSan build): owners lock";
	}
	g_probe = FastOwnerProbe();
	g_probe.s = &s;
	g_probe.lane = (const strata_lane_ctl *)((const uint8_t *)m + hdr->lanes_offset); // lane 0: owned
	for (uint64_t i = 0; i < 3; i++)
		strata_tracepoint(rbtest, sig, 0u, i, checksum(0, i));
	g_probe.armed = true;
	strata_test_writer_hook = probe_hook;
	strata_tracepoint(rbtest, sig, 0u, (uint64_t)3, checksum(0, 3));
	strata_test_writer_hook = nullptr;
	EXPECT_FALSE(g_probe.armed) << "the hook never ran";
	EXPECT_EQ(g_probe.busy, 1u) << "the owner's window was not open at its CAS";
	EXPECT_EQ(g_probe.st, strata::FlushStatus::kPending) << g_probe.msg;
	EXPECT_NE(g_probe.msg.find("stayed inside a reservation"), std::string::npos) << g_probe.msg;
	EXPECT_EQ(g_probe.req_after, 0u) << "the consumer kept its close request";
	EXPECT_EQ(__atomic_load_n(&g_probe.lane->owner_busy, __ATOMIC_RELAXED), 0u);
	std::string msg;
	ASSERT_EQ(s.reader->flush(0, false, 1000, &msg), strata::FlushStatus::kDone) << msg;
	expect_lane0_records(s, 4);
	munmap(m, size);
}

// A writer descheduled inside its owner window when its process closed the
// slot (a stop) left owner_busy raised in the shared buffer for good: its
// decrement lands in the private pages that replaced the mapping.  The
// consumer used to wait for the window until its deadline (500 ms at a
// stop) and then leave the open packet unclosed, its records neither
// written nor counted.  The close marks the buffer retired, and the last
// flush closes the lane at once: every committed record reaches the trace.
TEST(FastOwner, RetiredBufferIsFlushedWithoutWaitingForTheOwner)
{
	Slot s(1, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	const size_t size = (size_t)lseek(s.fd, 0, SEEK_END);
	void *m = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, s.fd, 0);
	ASSERT_NE(m, MAP_FAILED);
	auto *hdr = (strata_buffer_header *)m;
	if (!(hdr->flags & STRATA_BUF_FAST_OWNER)) {
		munmap(m, size);
		GTEST_SKIP() << "no MEMBARRIER_CMD_GLOBAL_EXPEDITED here (or a TSan build): owners lock";
	}
	auto *lane = (strata_lane_ctl *)((uint8_t *)m + hdr->lanes_offset); // lane 0: owned
	for (uint64_t i = 0; i < 3; i++)
		strata_tracepoint(rbtest, sig, 0u, i, checksum(0, i));
	// The owner's window, as a writer descheduled inside it leaves it.
	__atomic_add_fetch(&lane->owner_busy, 1u, __ATOMIC_RELAXED);
	std::string msg;
	EXPECT_EQ(s.reader->flush(0, false, 0, &msg), strata::FlushStatus::kPending) << msg;
	strata_rt_slot_close(1);
	EXPECT_NE(__atomic_load_n(&hdr->flags, __ATOMIC_ACQUIRE) & STRATA_BUF_RETIRED, 0u);
	const auto now_ms = [] {
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	};
	const int64_t t0 = now_ms();
	msg.clear();
	ASSERT_EQ(s.reader->flush(0, false, 20000, &msg), strata::FlushStatus::kDone) << msg;
	EXPECT_LT(now_ms() - t0, 10000) << "the flush waited for the owner's window";
	expect_lane0_records(s, 3);
	munmap(m, size);
}

// The discard count a packet's closer stores: the lane's cumulative count
// read before its close CAS, so that the counts along a lane never go
// backwards.  A closer that read it after its CAS, when interrupted between
// the two (here: at STRATA_W_CLOSE_WON, by a nested writer on a two-packet
// ring no consumer drains) stored a count above the next packet's: the
// nested writer opens the next packet, fills it and closes it (nothing
// discarded yet), then finds the ring full and discards; the outer close
// then read those discards into the older packet.  Readers had to raise
// the next packet's count (Reader: discards_clamped), babeltrace2 sees a
// count that decreases.
struct DiscardOrder {
	Slot *s = nullptr;
	bool armed = false;
	uint64_t nested = 0;       // events the nested writer emitted
	uint64_t seen_in_hook = 0; // the lane's discards when the nested writer returned
};
DiscardOrder g_dorder;

void discard_order_hook(strata_writer_step step)
{
	if (step != STRATA_W_CLOSE_WON || !g_dorder.armed)
		return;
	g_dorder.armed = false;
	// Until the ring is full and a few events are discarded (bounded).
	for (uint64_t i = 0; i < 1000 && g_dorder.s->reader->lane_discarded(0) < 3; i++) {
		strata_tracepoint(rbtest, sig, 1u, i, checksum(1, i));
		g_dorder.nested++;
	}
	g_dorder.seen_in_hook = g_dorder.s->reader->lane_discarded(0);
}

TEST(DiscardCount, NeverBackwardsWhenTheCloserIsInterrupted)
{
	constexpr uint64_t S = 4096;
	Slot s(2, config(STRATA_MODE_DISCARD, 1, 2, S), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	const size_t size = (size_t)lseek(s.fd, 0, SEEK_END);
	void *m = mmap(nullptr, size, PROT_READ, MAP_SHARED, s.fd, 0);
	ASSERT_NE(m, MAP_FAILED);
	const auto *hdr = (const strata_buffer_header *)m;
	g_dorder = DiscardOrder();
	g_dorder.s = &s;
	g_dorder.armed = true;
	// The outer writer (lane 0, owned) fills packet 0 until an event does
	// not fit: its close of packet 0 is interrupted once it won the CAS.
	uint64_t outer = 0;
	strata_test_writer_hook = discard_order_hook;
	while (g_dorder.armed && outer < 1000) {
		strata_tracepoint(rbtest, rec, 0u, outer, checksum(0, outer));
		outer++;
	}
	strata_test_writer_hook = nullptr;
	ASSERT_FALSE(g_dorder.armed) << "the outer writer never closed a packet";
	ASSERT_GT(g_dorder.seen_in_hook, 0u) << "the nested writer discarded nothing: the ring was not full";
	// Packets 0 (the outer writer's) and 1 (the nested one's), complete:
	// their headers as the writers left them in the buffer.
	const auto *ph0 = (const strata_packet_header *)((const uint8_t *)m + hdr->data_offset);
	const auto *ph1 = (const strata_packet_header *)((const uint8_t *)m + hdr->data_offset + S);
	ASSERT_EQ(ph0->packet_seq_num, 0u);
	ASSERT_EQ(ph1->packet_seq_num, 1u);
	EXPECT_EQ(ph1->events_discarded, 0u) << "packet 1 was closed before any discard";
	EXPECT_LE(ph0->events_discarded, ph1->events_discarded)
		<< "packet 0 carries the discards counted after packet 1's close";

	std::string msg;
	ASSERT_EQ(s.reader->flush(0, false, 1000, &msg), strata::FlushStatus::kDone) << msg;
	Packets pk;
	std::vector<uint8_t> pkt;
	strata::ReadStatus st;
	while ((st = s.reader->next_packet(0, &pkt, &msg)) != strata::ReadStatus::kEmpty) {
		ASSERT_EQ(st, strata::ReadStatus::kPacket) << msg;
		pk.push_back(pkt);
	}
	if (s.reader->trailing_loss_packet(0, &pkt))
		pk.push_back(pkt);
	EXPECT_EQ(s.reader->stats().discards_clamped, 0u) << "the reader had to raise a packet's count";
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return l == 0 ? pk : kNoPackets; }, true, &t);
	EXPECT_GE(t.packets, 3u); // 0, 1 and the trailing loss
	EXPECT_GT(t.discarded, 0u);
	EXPECT_EQ(t.records + t.discarded, outer + g_dorder.nested);
	munmap(m, size);
}

// A session's stop closes the slot while a writer is inside its
// reservation (reserved, not yet committed).  A close replaces the shared
// pages by private ones (slots.cpp, retire_mapping): a record written after
// that, and its commit, never reach the buffer, and the packet it was
// reserved in never completes.  The consumer's flush then waited for the
// commit until its deadline and the stop left the whole packet out of the
// trace, with every record committed before it.  tp-async applies a stop
// in a signal handler, which may interrupt a writer of its own thread
// there.
enum class Inside { kHandler, kDescheduled, kStopped };
struct CloseInside {
	unsigned slot = 0;
	Inside how = Inside::kHandler;
	bool armed = false;               // the writer's thread only
	std::atomic<bool> inside{false};  // the other thread's writer reached the step
	std::atomic<bool> release{false}; // kStopped: the test lets it go on
};
CloseInside g_close;

void close_inside_hook(strata_writer_step step)
{
	if (step != STRATA_W_RESERVED || !g_close.armed)
		return;
	g_close.armed = false;
	if (g_close.how == Inside::kHandler) { // a handler on this thread stops the session
		strata_rt_slot_close(g_close.slot);
		return;
	}
	// Release: pairs with the test's acquire load (the writer reserved).
	g_close.inside.store(true, std::memory_order_release);
	if (g_close.how == Inside::kDescheduled) { // for a while: the close waits for it
		struct timespec t = {0, 30000000};
		nanosleep(&t, nullptr);
		return;
	}
	// Stopped (SIGSTOP) past the close's bound and the stop's flush.
	// Acquire: pairs with the test's release store.
	while (!g_close.release.load(std::memory_order_acquire))
		std::this_thread::yield();
}

// Three records, then a fourth whose reservation the slot's close meets
// (`how`); the lane's packets after the stop (flushed; cut, *cut, if the
// flush found commits in flight at its deadline).
Packets stop_inside(unsigned slot, Inside how, bool *cut, uint64_t *cuts)
{
	Slot s(slot, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("rbtest:*")});
	EXPECT_TRUE(s.reader);
	if (!s.reader)
		return {};
	g_close.slot = slot;
	g_close.how = how;
	g_close.inside.store(false, std::memory_order_relaxed);
	g_close.release.store(false, std::memory_order_relaxed);
	strata_test_writer_hook = close_inside_hook;
	std::thread w([] {
		for (uint64_t i = 0; i < 3; i++)
			strata_tracepoint(rbtest, sig, 0u, i, checksum(0, i));
		g_close.armed = true;
		strata_tracepoint(rbtest, sig, 0u, (uint64_t)3, checksum(0, 3));
		EXPECT_FALSE(g_close.armed) << "the hook never ran";
	});
	if (how != Inside::kHandler) {
		// Acquire: pairs with the hook's release store.
		while (!g_close.inside.load(std::memory_order_acquire))
			std::this_thread::yield();
		strata_rt_slot_close(slot);
	}
	std::string msg;
	if (how != Inside::kStopped)
		w.join();
	// A retired buffer's flush cuts by itself (docs/ring-buffer.md, "A
	// retired buffer"); else the close stays pending for the stop's cut.
	const uint64_t cuts0 = s.reader->stats().cut_short;
	if (s.reader->flush(0, false, 50, &msg) == strata::FlushStatus::kPending)
		s.reader->cut_pending(0, &msg);
	*cut = s.reader->stats().cut_short != cuts0;
	if (how == Inside::kStopped) {
		// Release: pairs with the hook's acquire load.
		g_close.release.store(true, std::memory_order_release);
		w.join();
	}
	strata_test_writer_hook = nullptr;
	Packets pk;
	std::vector<uint8_t> pkt;
	while (s.reader->next_packet(0, &pkt, &msg) == strata::ReadStatus::kPacket)
		pk.push_back(pkt);
	if (s.reader->trailing_loss_packet(0, &pkt))
		pk.push_back(pkt);
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return l == 0 ? pk : kNoPackets; }, true, &t);
	*cuts = s.reader->stats().cut_short;
	EXPECT_EQ(t.records + t.discarded, 4u) << "recorded + discarded == emitted";
	return pk;
}

// One packet: whole (nothing discarded), or cut after the three records
// committed (the fourth counted discarded).
void expect_stop_inside(unsigned slot, Inside how, bool want_cut)
{
	bool cut = !want_cut;
	uint64_t cuts = 0;
	const Packets pk = stop_inside(slot, how, &cut, &cuts);
	EXPECT_EQ(cut, want_cut);
	EXPECT_EQ(cuts, want_cut ? 1u : 0u);
	// A cut's loss is counted from the next packet on: here the
	// trailing-loss packet after it.
	ASSERT_EQ(pk.size(), want_cut ? 2u : 1u);
	EXPECT_EQ(packet_header(pk[0]).events_discarded, 0u);
	EXPECT_EQ(packet_header(pk.back()).events_discarded, want_cut ? 1u : 0u);
}

// The handler's close leaves the mapping to the writer it interrupted
// (retired at a later control call): every record reaches the trace.
TEST(StopInsideReservation, AHandlerOnTheWritersThread)
{
	expect_stop_inside(4, Inside::kHandler, false);
}

// A writer of another thread, descheduled inside its reservation: the
// close waits for its commit, and every record reaches the trace.
TEST(StopInsideReservation, AnotherThreadsWriterDescheduled)
{
	expect_stop_inside(5, Inside::kDescheduled, false);
}

// A writer stopped inside its reservation past every bound: the packet is
// cut after the last committed record, the reservation counted discarded.
TEST(StopInsideReservation, AWriterStoppedThere)
{
	expect_stop_inside(6, Inside::kStopped, true);
}

// The opener of a packet stopped between its open CAS and the commit of
// its header (at `step`), while another thread's records go in after its
// reservation in the same shared lane and commit.  The stop's flush finds
// the opener's bytes missing: the packet keeps the other thread's records
// (a header of the consumer's when the opener never wrote its own), the
// opener's record counts as one discarded event.
struct OpenerStop {
	strata_writer_step step = STRATA_W_OPEN_WON;
	std::atomic<bool> inside{false}, release{false};
};
OpenerStop g_opener;
thread_local bool t_opener_armed;

void opener_hook(strata_writer_step step)
{
	if (step != g_opener.step || !t_opener_armed)
		return;
	t_opener_armed = false;
	// Release/acquire: pair with the test's loads and store.
	g_opener.inside.store(true, std::memory_order_release);
	while (!g_opener.release.load(std::memory_order_acquire))
		std::this_thread::yield();
}

void expect_opener_stopped(unsigned slot, strata_writer_step step, uint64_t first_seq)
{
	constexpr uint64_t kOthers = 5;
	Slot s(slot, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	// This thread takes the one owned lane: the writers below share lane 1,
	// whose first packet the stopped opener opens.  A packet of it before
	// (first_seq > 0) gives a stopped opener's header a timestamp_begin.
	strata_tracepoint(rbtest, sig, 9u, 0u, checksum(9, 0));
	std::thread pre([first_seq] {
		for (uint64_t i = 0; i < first_seq; i++)
			strata_tracepoint(rbtest, sig, 3u, i, checksum(3, i));
	});
	pre.join();
	std::string msg;
	Packets lane1, lane0;
	std::vector<uint8_t> pkt;
	if (first_seq) { // that packet closed and read
		ASSERT_EQ(s.reader->flush(1, false, 1000, &msg), strata::FlushStatus::kDone) << msg;
		while (s.reader->next_packet(1, &pkt, &msg) == strata::ReadStatus::kPacket)
			lane1.push_back(pkt);
		ASSERT_EQ(lane1.size(), 1u) << msg;
	}
	g_opener.step = step;
	g_opener.inside.store(false, std::memory_order_relaxed);
	g_opener.release.store(false, std::memory_order_relaxed);
	strata_test_writer_hook = opener_hook;
	std::thread opener([] {
		t_opener_armed = true;
		strata_tracepoint(rbtest, sig, 1u, 0u, checksum(1, 0));
	});
	while (!g_opener.inside.load(std::memory_order_acquire))
		std::this_thread::yield();
	std::thread others([] {
		for (uint64_t i = 0; i < kOthers; i++)
			strata_tracepoint(rbtest, sig, 2u, i, checksum(2, i));
	});
	others.join();
	strata_rt_slot_close(slot); // waits its bound for the opener, then retires the mapping
	// Retired: the flush cuts by itself (as stop_inside).
	const uint64_t cuts0 = s.reader->stats().cut_short;
	if (s.reader->flush(1, false, 50, &msg) == strata::FlushStatus::kPending)
		s.reader->cut_pending(1, &msg);
	EXPECT_EQ(s.reader->stats().cut_short, cuts0 + 1) << msg;
	EXPECT_NE(msg.find("one reservation, taken out"), std::string::npos) << msg;
	g_opener.release.store(true, std::memory_order_release);
	opener.join();
	strata_test_writer_hook = nullptr;
	while (s.reader->next_packet(1, &pkt, &msg) == strata::ReadStatus::kPacket)
		lane1.push_back(pkt);
	if (s.reader->trailing_loss_packet(1, &pkt))
		lane1.push_back(pkt);
	EXPECT_EQ(s.reader->flush(0, false, 1000, &msg), strata::FlushStatus::kDone) << msg;
	while (s.reader->next_packet(0, &pkt, &msg) == strata::ReadStatus::kPacket)
		lane0.push_back(pkt);
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return l == 1 ? lane1 : lane0; }, true, &t);
	EXPECT_EQ(t.records + t.discarded, 1 + first_seq + 1 + kOthers) << "recorded + discarded == emitted";
	EXPECT_EQ(t.discarded, 1u);                             // the opener's record
	EXPECT_EQ((t.seqs[{"rbtest:sig", 2}].size()), kOthers); // every record committed after it kept
	// The salvaged packet, then the trailing-loss packet that counts the
	// opener's record (a count a CTF reader reports, also at sequence 0).
	ASSERT_EQ(lane1.size(), first_seq ? 3u : 2u);
	EXPECT_EQ(packet_header(lane1[lane1.size() - 2]).events_discarded, 0u);
	EXPECT_EQ(packet_header(lane1.back()).events_discarded, 1u);
	EXPECT_EQ(packet_header(lane1.back()).packet_seq_num, first_seq ? 2u : 1u);
}

// The header written, its commit not made: the packet keeps it.
TEST(StopInsideReservation, AnOpenerStoppedBeforeItsHeadersCommit)
{
	expect_opener_stopped(7, STRATA_W_OPEN_WRITTEN, 0);
}

// Not even written: a later packet of the lane gets the consumer's header
// (the first has none to take the time from, ring-buffer.md).
TEST(StopInsideReservation, AnOpenerStoppedBeforeItsHeader)
{
	expect_opener_stopped(8, STRATA_W_OPEN_WON, 10);
}

INSTANTIATE_TEST_SUITE_P(EveryStep, NestedAtStep, ::testing::Range(0, (int)STRATA_W_N_STEPS),
			 [](const ::testing::TestParamInfo<int> &i) {
				 return step_name((strata_writer_step)i.param);
			 });

} // namespace
