/*
 * The runtime's control side and edge cases: slot geometry validation,
 * rules (globs, loglevels, last rule wins), registration (dedup, late
 * modules, unregister, rejected tracepoints), nesting depth overflow,
 * oversized records, flush with an in-flight or dead writer, trailing loss,
 * fork, the thread id each record names.
 */
#define STRATA_DEFINE_PROVIDERS
#include "test_tp.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <thread>

#include "rb_test_util.h"

using namespace rbtest;

namespace {

uint32_t state_of(const strata_tracepoint &tp)
{
	return __atomic_load_n(&tp.state, __ATOMIC_RELAXED);
}

#define TP(ev) strata__tp__rbtest__##ev

uint32_t armed(unsigned slot, std::vector<strata_rule> rules)
{
	// Bit per event: rec 1, sig 2, all 4, noargs 8.
	EXPECT_EQ(0, strata_rt_slot_set_rules(slot, rules.data(), rules.size()));
	uint32_t bit = 1u << slot, m = 0;
	if (state_of(TP(rec)) & bit)
		m |= 1;
	if (state_of(TP(sig)) & bit)
		m |= 2;
	if (state_of(TP(all)) & bit)
		m |= 4;
	if (state_of(TP(noargs)) & bit)
		m |= 8;
	return m;
}

std::vector<uint8_t> one_packet(Slot &s, uint32_t lane = 0)
{
	std::string msg;
	EXPECT_EQ(strata::FlushStatus::kDone, s.reader->flush(lane, false, 1000, &msg)) << msg;
	std::vector<uint8_t> pkt;
	EXPECT_EQ(strata::ReadStatus::kPacket, s.reader->next_packet(lane, &pkt, &msg)) << msg;
	return pkt;
}

// Every record of every lane, flushed: (the rec event's `thread`, the
// kernel id the record names) in the order the lanes hold them.
std::vector<std::pair<uint32_t, uint32_t>> thread_ids(Slot &s)
{
	std::vector<std::pair<uint32_t, uint32_t>> out;
	std::string msg;
	for (uint32_t l = 0; l < s.reader->info().n_lanes; l++) {
		EXPECT_EQ(strata::FlushStatus::kDone, s.reader->flush(l, false, 1000, &msg)) << msg;
		std::vector<uint8_t> pkt;
		strata::ReadStatus st;
		while ((st = s.reader->next_packet(l, &pkt, &msg)) != strata::ReadStatus::kEmpty) {
			EXPECT_EQ(st, strata::ReadStatus::kPacket) << msg;
			std::vector<Record> recs;
			EXPECT_TRUE(decode_packet(pkt, s.events, &recs, &msg)) << msg;
			for (const Record &r : recs)
				out.emplace_back((uint32_t)r.fields[0].u, r.tid);
		}
	}
	return out;
}

// A forked child exited 0; `bits` names the bits of its exit code.
void expect_child_exits_0(pid_t pid, const char *bits)
{
	ASSERT_GT(pid, 0);
	int status = 0;
	ASSERT_EQ(pid, waitpid(pid, &status, 0));
	ASSERT_TRUE(WIFEXITED(status));
	EXPECT_EQ(WEXITSTATUS(status), 0) << bits;
}

size_t count_records(Slot &s, const std::vector<uint8_t> &pkt)
{
	std::vector<Record> recs;
	std::string err;
	EXPECT_TRUE(decode_packet(pkt, s.events, &recs, &err)) << err;
	return recs.size();
}

} // namespace

TEST(Slots, GeometryIsValidated)
{
	const uint8_t *u = test_uuid();
	auto bad = [&](strata_channel_config c) { return strata_rt_slot_open(3, &c, u); };
	EXPECT_EQ(-EINVAL, bad(config(STRATA_MODE_DISCARD, 0, 3, 0)));
	EXPECT_EQ(-EINVAL, bad(config(STRATA_MODE_DISCARD, 0, 1, 0)));
	EXPECT_EQ(-EINVAL, bad(config(STRATA_MODE_DISCARD, 0, 128, 0)));
	EXPECT_EQ(-EINVAL, bad(config(STRATA_MODE_DISCARD, 0, 0, 1000)));
	EXPECT_EQ(-EINVAL, bad(config(STRATA_MODE_DISCARD, 0, 0, 2048)));
	EXPECT_EQ(-EINVAL, bad(config(STRATA_MODE_DISCARD, 0, 0, 128ull << 20)));
	EXPECT_EQ(-EINVAL, bad(config(STRATA_MODE_DISCARD, 257, 0, 0)));
	EXPECT_EQ(-EINVAL, bad(config(5, 0, 0, 0)));
	strata_channel_config c = config(STRATA_MODE_DISCARD, 0, 0, 0);
	EXPECT_EQ(-EINVAL, strata_rt_slot_open(STRATA_MAX_SLOTS, &c, u));
	memset(c.name, 'x', sizeof c.name);
	EXPECT_EQ(-EINVAL, strata_rt_slot_open(3, &c, u));

	// Defaults.
	Slot s(3, config(STRATA_MODE_OVERWRITE, 0, 0, 0), {});
	ASSERT_TRUE(s.reader);
	const strata::BufferInfo &i = s.reader->info();
	long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	// Owned lanes (2 per CPU, at least 8) and half as many shared ones,
	// at most one a CPU.
	const long owned = std::max<long>(8, 2 * ncpu);
	const long shared = std::min<long>(std::max<long>(1, owned / 2), ncpu);
	EXPECT_EQ(i.n_lanes, (uint32_t)std::min<long>(owned + shared, STRATA_MAX_LANES));
	EXPECT_EQ(i.first_shared, (uint32_t)(i.n_lanes - shared));
	EXPECT_EQ(i.record_format, STRATA_REC_COMPACT);
	EXPECT_EQ(i.n_subbuf, 8u);
	EXPECT_EQ(i.subbuf_size, 128u * 1024);
	EXPECT_EQ(i.mode, (uint32_t)STRATA_MODE_OVERWRITE);
	EXPECT_EQ(i.pid, (uint32_t)getpid());
	EXPECT_EQ(i.channel, "channel0");
	EXPECT_EQ(0, memcmp(i.uuid, test_uuid(), 16));
	EXPECT_EQ(s.events.size(), 4u);
	EXPECT_EQ(-EEXIST, strata_rt_slot_open(3, &c, u));
	// Sealed at its size: the consumer maps it, and neither side can
	// shrink it under the other's mapping.
	const int seals = fcntl(s.fd, F_GET_SEALS);
	EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	EXPECT_NE(0, ftruncate(s.fd, 4096));
	EXPECT_EQ(errno, EPERM);
	EXPECT_EQ(i.total_size, (uint64_t)lseek(s.fd, 0, SEEK_END));
}

TEST(Rules, GlobsLoglevelsAndLastRuleWins)
{
	Slot s(2, config(STRATA_MODE_DISCARD, 1, 2, 4096), {});
	ASSERT_TRUE(s.reader);
	EXPECT_EQ(armed(2, {}), 0u);
	EXPECT_EQ(armed(2, {rule("rbtest:*")}), 15u);
	EXPECT_EQ(armed(2, {rule("*")}), 15u);
	EXPECT_EQ(armed(2, {rule("rbtest:rec")}), 1u);
	EXPECT_EQ(armed(2, {rule("rbtest:re")}), 0u);
	EXPECT_EQ(armed(2, {rule("rb*:a*l")}), 4u);
	EXPECT_EQ(armed(2, {rule("*s")}), 8u);
	EXPECT_EQ(armed(2, {rule("*:*i*")}), 2u);
	EXPECT_EQ(armed(2, {rule("other:*")}), 0u);
	EXPECT_EQ(armed(2, {rule("*"), rule("rbtest:sig", false)}), 13u);
	EXPECT_EQ(armed(2, {rule("rbtest:sig", false), rule("*")}), 15u);
	// loglevels: rec INFO(6), sig DEBUG(7), all WARNING(4), noargs ERR(3)
	EXPECT_EQ(armed(2, {rule("*", true, 4)}), 12u);
	EXPECT_EQ(armed(2, {rule("*", true, 6)}), 13u);
	EXPECT_EQ(armed(2, {rule("*"), rule("*", false, 3)}), 7u);
	// Only slot 2's bit moves.
	EXPECT_EQ(state_of(TP(rec)) & ~(1u << 2), 0u);
	// A field filter arms the event with FILTERED (tests/unit/filter_test.cpp).
	strata_rule f = rule("rbtest:rec");
	strcpy(f.filter, "seq > 3");
	EXPECT_EQ(armed(2, {f}), 1u);
	EXPECT_EQ(state_of(TP(rec)) & STRATA_TP_FILTERED, STRATA_TP_FILTERED);
	// Bad rule sets are refused and change nothing.
	std::vector<strata_rule> many(STRATA_MAX_RULES + 1, rule("*"));
	EXPECT_EQ(-E2BIG, strata_rt_slot_set_rules(2, many.data(), many.size()));
	strata_rule unterminated = rule("*");
	memset(unterminated.pattern, '*', sizeof unterminated.pattern);
	EXPECT_EQ(-EINVAL, strata_rt_slot_set_rules(2, &unterminated, 1));
	EXPECT_EQ(state_of(TP(rec)), (1u << 2) | STRATA_TP_FILTERED);
	// Closing the slot disarms it.
	strata_rt_slot_close(2);
	s.fd = -1;
	EXPECT_EQ(state_of(TP(rec)), 0u);
	EXPECT_TRUE(s.reader->producer_exited());
}

TEST(Registry, NamesIdsDedupLateModulesUnregister)
{
	char name[64];
	uint32_t ll = 99;
	uint32_t n = strata_rt_event_count();
	ASSERT_GE(n, 4u);
	EXPECT_EQ(0, strata_rt_event_name(TP(rec).id, name, sizeof name, &ll));
	EXPECT_STREQ(name, "rbtest:rec");
	EXPECT_EQ(ll, (uint32_t)STRATA_LOGLEVEL_INFO);
	EXPECT_EQ(0, strata_rt_event_name(TP(noargs).id, name, 8, nullptr));
	EXPECT_STREQ(name, "rbtest:"); // truncated, terminated
	EXPECT_EQ(-ENOENT, strata_rt_event_name(n + 100, name, sizeof name, nullptr));

	Slot s(4, config(STRATA_MODE_DISCARD, 1, 2, 4096), {rule("late:*")});
	ASSERT_TRUE(s.reader);
	// A "module" registered late (as by dlopen): described in the open
	// slot, armed by the slot's current rules.
	static const strata_field_desc fields[] = {{"x", STRATA_FIELD_INTEGER, 4, 0, 10, 0, nullptr}};
	static const strata_event_desc good = {STRATA_API_VERSION, 6, "late", "ev", 1, fields};
	static const strata_event_desc bad_name = {STRATA_API_VERSION, 6, "late", "bad name", 1, fields};
	static const strata_event_desc bad_version = {99, 6, "late", "v", 1, fields};
	static strata_tracepoint tp_good = {0, STRATA_TP_MAGIC, &good, 0, 0};
	static strata_tracepoint tp_bad_magic = {0, 0x1234, &good, 0, 0};
	static strata_tracepoint tp_bad_name = {0, STRATA_TP_MAGIC, &bad_name, 0, 0};
	static strata_tracepoint tp_bad_version = {0, STRATA_TP_MAGIC, &bad_version, 0, 0};
	static strata_tracepoint *const section[] = {&tp_good, &tp_bad_magic, &tp_bad_name, &tp_bad_version,
						     nullptr};
	strata_rt_stats before, after;
	strata_rt_get_stats(&before);
	strata_register_tracepoints(section, section + 5);
	strata_rt_get_stats(&after);
	EXPECT_EQ(after.rejected_tracepoints - before.rejected_tracepoints, 3u);
	EXPECT_EQ(tp_good.id, n); // ids in registration order
	EXPECT_EQ(strata_rt_event_count(), n + 1);
	EXPECT_EQ(state_of(tp_good), 1u << 4);
	EXPECT_EQ(state_of(tp_bad_magic), 0u);
	std::vector<strata::EventInfo> evs;
	std::vector<std::string> errs;
	ASSERT_TRUE(s.reader->read_new_events(&evs, &errs));
	ASSERT_EQ(evs.size(), 1u);
	EXPECT_EQ(evs[0].provider + ":" + evs[0].name, "late:ev");
	EXPECT_EQ(evs[0].id, n);
	// The same section again: ignored.
	strata_register_tracepoints(section, section + 5);
	evs.clear();
	ASSERT_TRUE(s.reader->read_new_events(&evs, &errs));
	EXPECT_TRUE(evs.empty());
	EXPECT_EQ(strata_rt_event_count(), n + 1);
	// Unregister (dlclose): disarmed, forgotten; a new registration gets a new id.
	strata_unregister_tracepoints(section, section + 5);
	EXPECT_EQ(state_of(tp_good), 0u);
	EXPECT_EQ(-ENOENT, strata_rt_event_name(n, name, sizeof name, nullptr));
	strata_register_tracepoints(section, section + 5);
	EXPECT_EQ(tp_good.id, n + 1); // ids are never reused
	EXPECT_EQ(state_of(tp_good), 1u << 4);
	strata_unregister_tracepoints(section, section + 5);
}

TEST(Writer, NestingDepthIsBoundedAndCounted)
{
	Slot s(5, config(STRATA_MODE_DISCARD, 1, 2, 4096), {rule("*")});
	ASSERT_TRUE(s.reader);
	strata_reservation r[5];
	for (int d = 0; d < 4; d++)
		ASSERT_EQ(1, strata_reserve(&r[d], &TP(noargs), 5, 0)) << "depth " << d;
	EXPECT_EQ(0, strata_reserve(&r[4], &TP(noargs), 5, 0)); // a 5th level: refused
	EXPECT_EQ(s.reader->lane_discarded(0), 1u);
	for (int d = 3; d >= 0; d--)
		strata_commit(&r[d]);
	ASSERT_EQ(1, strata_reserve(&r[0], &TP(noargs), 5, 0)); // depth is back to 0
	strata_commit(&r[0]);
	std::vector<uint8_t> pkt = one_packet(s);
	EXPECT_EQ(count_records(s, pkt), 5u);
	EXPECT_EQ(packet_header(pkt).events_discarded, 1u);
}

TEST(Writer, RecordsTooLargeForASubBufferAreDiscarded)
{
	const uint64_t S = 4096;
	Slot s(5, config(STRATA_MODE_DISCARD, 1, 2, S), {rule("*")});
	ASSERT_TRUE(s.reader);
	strata_reservation r;
	// The largest payload: an empty packet holds its header, the widest
	// record header and context, and one byte to spare.
	const uint64_t max =
		S - STRATA_PACKET_HEADER_SIZE - 1 - STRATA_REC_EXTENDED_SIZE - STRATA_REC_SHARED_CTX_SIZE;
	EXPECT_EQ(0, strata_reserve(&r, &TP(noargs), 5, max + 1));
	EXPECT_EQ(0, strata_reserve(&r, &TP(noargs), 5, 1 << 20));
	EXPECT_EQ(s.reader->lane_discarded(0), 2u);
	ASSERT_EQ(1, strata_reserve(&r, &TP(noargs), 5, max));
	memset(r.rec, 0, max);
	strata_commit(&r);
	std::vector<uint8_t> big(5000, 0x5a);
	const uint32_t none[1] = {0};
	strata_tracepoint(rbtest, all, 0, 0, 0, 0.0, 0.0f, 0, "", (const int16_t *)big.data(), none, 0,
			  big.data(), big.size());
	EXPECT_EQ(s.reader->lane_discarded(0), 3u);
	// The header as the writer closed it (peek_packet): the record's bytes
	// are not noargs' (no field), so check_records would cut them.
	strata_packet_header ph;
	std::vector<uint8_t> body;
	ASSERT_TRUE(raw_packet(s, 0, &ph, &body));
	// The record opened the packet: the compact header, no context (owned lane).
	EXPECT_EQ(ph.content_size / 8, STRATA_PACKET_HEADER_SIZE + STRATA_REC_COMPACT_SIZE + max);
	EXPECT_EQ(ph.events_discarded, 3u);
}

TEST(Reader, FlushWaitsForInFlightCommitsAndCutsWhatADeadWriterLeft)
{
	Slot s(6, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("*")});
	ASSERT_TRUE(s.reader);
	strata_tracepoint(rbtest, noargs);
	strata_reservation r;
	ASSERT_EQ(1, strata_reserve(&r, &TP(noargs), 6, 0)); // a writer between reserve and commit
	std::string msg;
	EXPECT_EQ(strata::FlushStatus::kPending, s.reader->flush(0, false, 20, &msg));
	std::vector<uint8_t> pkt;
	EXPECT_EQ(strata::ReadStatus::kEmpty, s.reader->next_packet(0, &pkt, &msg));
	strata_commit(&r); // it finishes: the packet completes
	EXPECT_EQ(strata::FlushStatus::kDone, s.reader->flush(0, false, 1000, &msg)) << msg;
	ASSERT_EQ(strata::ReadStatus::kPacket, s.reader->next_packet(0, &pkt, &msg)) << msg;
	EXPECT_EQ(count_records(s, pkt), 2u);

	// Now it never commits and the producer is declared dead: the packet is
	// cut after the record committed before it, the reservation counted.
	strata_tracepoint(rbtest, noargs);
	ASSERT_EQ(1, strata_reserve(&r, &TP(noargs), 6, 0));
	EXPECT_EQ(strata::FlushStatus::kDone, s.reader->flush(0, true, 20, &msg));
	EXPECT_NE(msg.find("never committed"), std::string::npos) << msg;
	msg.clear();
	ASSERT_EQ(strata::ReadStatus::kPacket, s.reader->next_packet(0, &pkt, &msg)) << msg;
	EXPECT_EQ(count_records(s, pkt), 1u);
	strata_packet_header ph;
	memcpy(&ph, pkt.data(), sizeof ph);
	EXPECT_EQ(ph.events_discarded, 0u); // counted from the next packet on
	EXPECT_EQ(s.reader->stats().cut_short, 1u);
	EXPECT_EQ(s.reader->stats().incomplete_dropped, 0u);
	EXPECT_EQ(strata::ReadStatus::kEmpty, s.reader->next_packet(0, &pkt, &msg));
	ASSERT_TRUE(s.reader->trailing_loss_packet(0, &pkt)); // none follows: the trailing one counts it
	memcpy(&ph, pkt.data(), sizeof ph);
	EXPECT_EQ(ph.events_discarded, 1u);
	strata_commit(&r); // (restores this thread's nesting depth)
}

TEST(Reader, TrailingLossPacketCarriesTheFinalCount)
{
	Slot s(7, config(STRATA_MODE_DISCARD, 1, 2, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	// Nobody drains: two sub-buffers fill, the rest is discarded.
	const uint64_t n = 1000;
	for (uint64_t i = 0; i < n; i++)
		strata_tracepoint(rbtest, rec, 1u, i, checksum(1, i));
	std::vector<uint8_t> pkt;
	std::string msg;
	uint64_t recorded = 0, last_seq = 0, last_ts = 0;
	while (s.reader->next_packet(0, &pkt, &msg) == strata::ReadStatus::kPacket) {
		recorded += count_records(s, pkt);
		last_seq = packet_header(pkt).packet_seq_num;
		last_ts = packet_header(pkt).timestamp_end;
	}
	EXPECT_EQ(strata::FlushStatus::kDone, s.reader->flush(0, false, 1000, &msg)) << msg;
	while (s.reader->next_packet(0, &pkt, &msg) == strata::ReadStatus::kPacket) {
		recorded += count_records(s, pkt);
		last_seq = packet_header(pkt).packet_seq_num;
		last_ts = packet_header(pkt).timestamp_end;
	}
	ASSERT_TRUE(s.reader->trailing_loss_packet(0, &pkt));
	strata_packet_header ph = packet_header(pkt);
	EXPECT_EQ(pkt.size(), STRATA_PACKET_HEADER_SIZE);
	EXPECT_EQ(ph.content_size, STRATA_PACKET_HEADER_SIZE * 8u); // the header, vtid included
	EXPECT_EQ(ph.packet_size, STRATA_PACKET_HEADER_SIZE * 8);
	EXPECT_EQ(ph.packet_seq_num, last_seq + 1);
	EXPECT_EQ(ph.timestamp_begin, last_ts);
	EXPECT_EQ(recorded + ph.events_discarded, n);
	EXPECT_GT(ph.events_discarded, 0u);
	EXPECT_FALSE(s.reader->trailing_loss_packet(0, &pkt)); // once
}

namespace {
std::atomic<int> g_hook_calls{0};
void fork_hook()
{
	g_hook_calls.fetch_add(1, std::memory_order_relaxed); // a counter, no ordering
}
} // namespace

TEST(Fork, TheChildNeverWritesIntoTheParentsBuffers)
{
	Slot s(8, config(STRATA_MODE_DISCARD, 1, 4, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	strata_tracepoint(rbtest, rec, 1u, 0u, checksum(1, 0));
	strata_rt_set_fork_child_hook(fork_hook);
	std::string err;
	std::unique_ptr<strata::Reader> view = strata::Reader::attach(s.fd, &err);
	ASSERT_TRUE(view);
	pid_t pid = fork();
	if (pid == 0) {
		int bad = 0;
		if (g_hook_calls.load() != 1)
			bad |= 1;
		if (state_of(TP(rec)) != 0)
			bad |= 2;
		strata_reservation r;
		if (strata_reserve(&r, &TP(rec), 8, 40))
			bad |= 4;
		for (uint64_t i = 0; i < 1000; i++) // disarmed: nothing happens
			strata_tracepoint(rbtest, rec, 2u, i, checksum(2, i));
		// The child can open its own slot (as its control plane would).
		strata_channel_config c = config(STRATA_MODE_DISCARD, 1, 2, 4096);
		int fd = strata_rt_slot_open(8, &c, test_uuid());
		if (fd < 0)
			bad |= 8;
		_exit(bad);
	}
	expect_child_exits_0(pid, "bits: 1 hook, 2 state, 4 reserve, 8 own slot");
	strata_rt_set_fork_child_hook(nullptr);
	// The parent's buffer holds exactly its own single event.
	std::vector<uint8_t> pkt = one_packet(s);
	EXPECT_EQ(count_records(s, pkt), 1u);
	EXPECT_NE(state_of(TP(rec)), 0u); // and the parent still traces
}

// Each record names the kernel id (gettid) of the thread that wrote it, in
// an owned lane (the packet's vtid) and in a shared one (the record's own):
// six threads alive at once on two lanes, then one that takes a lane an
// exited thread left open, then a fork's child in a slot of its own.  The
// writer reads the id from glibc's thread descriptor, not gettid
// (writer_lanes.cpp, tid_slow); a child keeps its parent's descriptor,
// which glibc updates.
TEST(Writer, RecordsNameTheirThreadsKernelId)
{
	Slot s(9, config(STRATA_MODE_DISCARD, 2, 4, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	constexpr uint32_t kThreads = 6;
	std::vector<uint32_t> tids(kThreads + 1);
	std::atomic<uint32_t> wrote{0};
	auto writer = [&](uint32_t i, uint32_t wait_for) {
		tids[i] = (uint32_t)syscall(SYS_gettid);
		strata_tracepoint(rbtest, rec, i, 0u, checksum(i, 0));
		// Acq_rel/acquire: a counter that keeps every thread alive until
		// all wrote once, so that more threads than lanes write at once.
		wrote.fetch_add(1, std::memory_order_acq_rel);
		while (wrote.load(std::memory_order_acquire) < wait_for)
			sched_yield();
		strata_tracepoint(rbtest, rec, i, 1u, checksum(i, 1));
	};
	std::vector<std::thread> th;
	for (uint32_t i = 0; i < kThreads; i++)
		th.emplace_back(writer, i, kThreads);
	for (auto &t : th)
		t.join();
	std::thread(writer, kThreads, 0).join();
	std::map<uint32_t, std::vector<uint32_t>> got;
	for (const auto &[thread, tid] : thread_ids(s))
		got[thread].push_back(tid);
	ASSERT_EQ(got.size(), kThreads + 1);
	for (uint32_t i = 0; i <= kThreads; i++)
		EXPECT_EQ(got[i], std::vector<uint32_t>(2, tids[i])) << "thread " << i;

	// The child: its first record after the fork, in a slot of its own.
	const uint32_t parent_tid = (uint32_t)syscall(SYS_gettid);
	strata_tracepoint(rbtest, rec, 100u, 0u, checksum(100, 0)); // the parent's id cached
	pid_t pid = fork();
	if (pid == 0) {
		int bad = 0;
		Slot c(10, config(STRATA_MODE_DISCARD, 1, 2, 4096), {rule("rbtest:rec")});
		strata_tracepoint(rbtest, rec, 7u, 0u, checksum(7, 0));
		const auto ids = c.reader ? thread_ids(c) : decltype(thread_ids(c)){};
		if (ids.size() != 1 || ids[0].first != 7)
			bad |= 1;
		else if (ids[0].second != (uint32_t)syscall(SYS_gettid) || ids[0].second == parent_tid)
			bad |= 2;
		_exit(bad);
	}
	expect_child_exits_0(pid, "bits: 1 the child's record, 2 its id");
}
