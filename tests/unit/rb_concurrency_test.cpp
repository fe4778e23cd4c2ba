/*
 * Ring buffer under concurrency: the real writer (libstrata) against the
 * real reader (strata_shm_reader), with exact oracles:
 *   written == read + discarded, per (slot, thread) sequences strictly
 *   increasing, timestamps non-decreasing per lane, every checksum right,
 *   every record decodable with the descriptors the reader parsed.
 */
#define STRATA_DEFINE_PROVIDERS
#include "test_tp.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/rseq.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "rb_test_util.h"

using namespace rbtest;

namespace {

void emit_records(uint32_t thread, uint64_t n)
{
	for (uint64_t s = 0; s < n; s++)
		strata_tracepoint(rbtest, rec, thread, s, checksum(thread, s));
}

} // namespace

TEST(RingBuffer, ConcurrentWritersSeveralSlotsSharedLanes)
{
	constexpr uint32_t kThreads = 4;
	constexpr uint64_t kEvents = 50000;
	// Slot 0: 2 lanes for 4 threads (shared lanes), tiny ring (discards).
	// Slot 1: 8 lanes (one per thread), a bit more room.
	Slot s0(0, config(STRATA_MODE_DISCARD, 2, 4, 4096), {rule("rbtest:rec")});
	Slot s1(1, config(STRATA_MODE_DISCARD, 8, 8, 4096), {rule("rbtest:r*")});
	ASSERT_TRUE(s0.reader && s1.reader);
	Drainer d({&s0, &s1});
	std::vector<std::thread> w;
	for (uint32_t t = 0; t < kThreads; t++)
		w.emplace_back(emit_records, t, kEvents);
	for (auto &th : w)
		th.join();
	d.finish();
	for (const auto &e : d.errors())
		ADD_FAILURE() << e;
	Slot *slots[] = {&s0, &s1};
	for (size_t s = 0; s < 2; s++) {
		Tally t;
		check_lanes(
			*slots[s], [&](uint32_t l) -> const Packets & { return d.lane(s, l); }, false, &t);
		EXPECT_EQ(t.records + t.discarded, kThreads * kEvents) << "slot " << s;
		EXPECT_GT(t.records, 0u);
		// The discard counts along each lane never went backwards (the
		// reader would have raised them: writer.cpp, load_discarded).
		EXPECT_EQ(slots[s]->reader->stats().discards_clamped, 0u) << "slot " << s;
		std::printf("slot %zu: %llu read, %llu discarded, %llu packets\n", s,
			    (unsigned long long)t.records, (unsigned long long)t.discarded,
			    (unsigned long long)t.packets);
	}
}

TEST(RingBuffer, WrapAroundManyLaps)
{
	constexpr uint64_t kMinEvents = 300000;
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 2, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	Drainer d({&s});
	// Write until the ring (2 sub-buffers of 4 KiB) went round more than
	// 100 times, as seen in the lane's position (bounded: 20 M events).
	uint64_t emitted = 0;
	std::thread w([&] {
		for (uint64_t seq = 0; seq < 20000000; seq++) {
			if (seq >= kMinEvents && seq % 1024 == 0 &&
			    s.reader->info().lane_stride * 101 < s.reader->lane_position(0))
				break;
			strata_tracepoint(rbtest, rec, 7u, seq, checksum(7, seq));
			emitted = seq + 1;
		}
	});
	w.join();
	d.finish();
	for (const auto &e : d.errors())
		ADD_FAILURE() << e;
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return d.lane(0, l); }, true, &t);
	EXPECT_EQ(t.records + t.discarded, emitted);
	std::printf("%llu emitted, %llu read, %llu discarded, %llu packets\n", (unsigned long long)emitted,
		    (unsigned long long)t.records, (unsigned long long)t.discarded,
		    (unsigned long long)t.packets);
	EXPECT_GT(t.packets / 2, 100u); // laps of the ring actually read
}

TEST(RingBuffer, OverwriteKeepsTheNewest)
{
	constexpr uint64_t kEvents = 10000;
	constexpr uint32_t kSub = 4;
	Slot s(0, config(STRATA_MODE_OVERWRITE, 1, kSub, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	emit_records(3, kEvents);
	Packets pk;
	std::string msg;
	// The kSub newest, after a header-only packet that makes the count of
	// the first a difference babeltrace2 reports.
	ASSERT_EQ(kSub + 1, s.reader->collect_overwrite(0, 1000, &pk, &msg)) << msg;
	std::vector<uint8_t> trailing;
	EXPECT_FALSE(s.reader->trailing_loss_packet(0, &trailing)); // nothing discarded
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return l == 0 ? pk : kNoPackets; }, true, &t);
	auto &seqs = t.seqs[{"rbtest:rec", 3}];
	ASSERT_FALSE(seqs.empty());
	EXPECT_EQ(seqs.back(), kEvents - 1); // the newest event is kept
	for (size_t i = 1; i < seqs.size(); i++)
		ASSERT_EQ(seqs[i], seqs[i - 1] + 1);        // and nothing in between is lost
	EXPECT_GT(packet_header(pk[1]).packet_seq_num, 0u); // older packets were overwritten
	// and what they held is counted, exactly: the first packet carries it
	EXPECT_EQ(t.records + t.discarded, kEvents);
	EXPECT_EQ(packet_header(pk[0]).events_discarded, 0u);
	EXPECT_EQ(packet_header(pk[0]).packet_seq_num + 1, packet_header(pk[1]).packet_seq_num);
	EXPECT_EQ(packet_header(pk[1]).events_discarded, kEvents - t.records);
	EXPECT_EQ(s.reader->lane_discarded(0), 0u); // none by the writer
}

TEST(RingBuffer, OverwriteSharedLaneThenCollect)
{
	constexpr uint64_t kEvents = 20000;
	Slot s(0, config(STRATA_MODE_OVERWRITE, 1, 8, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	// This thread owns the one owned lane: both writers then share lane 1.
	strata_tracepoint(rbtest, rec, 0u, 0u, checksum(0, 0));
	ASSERT_EQ(s.reader->info().first_shared, 1u);
	std::thread a(emit_records, 1, kEvents), b(emit_records, 2, kEvents);
	a.join();
	b.join();
	Packets pk, own;
	std::string msg;
	size_t n = s.reader->collect_overwrite(1, 1000, &pk, &msg);
	EXPECT_EQ(n, 9u) << msg; // 8, after a header-only packet (OverwriteKeepsTheNewest)
	EXPECT_EQ(s.reader->collect_overwrite(0, 1000, &own, &msg), 1u) << msg;
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return l == 1 ? pk : own; }, true, &t);
	EXPECT_EQ(t.seqs[std::make_pair(std::string("rbtest:rec"), 0u)].size(), 1u);
	uint64_t newest = 0;
	for (auto &kv : t.seqs)
		newest = std::max(newest, kv.second.back());
	EXPECT_EQ(newest, kEvents - 1); // the thread that finished last has its last event kept
	// Discards happen only when a sub-buffer's previous lap is still being
	// written; whatever happened, the shared counter and packets agree.
	EXPECT_EQ(t.discarded, s.reader->lane_discarded(0) + s.reader->lane_discarded(1) +
				       s.reader->lane_overwritten(0) + s.reader->lane_overwritten(1));
	EXPECT_EQ(t.records + t.discarded, 2 * kEvents + 1); // kept + discarded + overwritten
}

namespace {
bool pin_to(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	// Returns once the thread runs on `cpu` (the kernel migrates it first).
	return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0 && sched_getcpu() == cpu;
}

// The first n CPUs of `set`.
std::vector<int> first_cpus(const cpu_set_t &set, size_t n)
{
	std::vector<int> cpus;
	for (int c = 0; c < CPU_SETSIZE && cpus.size() < n; c++)
		if (CPU_ISSET(c, &set))
			cpus.push_back(c);
	return cpus;
}

} // namespace

// A thread without an owned lane writes the shared lane of the CPU it runs
// on (writer.cpp, shared_lane), and its compact-header bound follows it: the
// first record after a move back to a lane idle for longer than the compact
// header's 2^27 ns reach is extended, and decodes to its true timestamp.
TEST(RingBuffer, SharersWriteTheirCpusLane)
{
	cpu_set_t orig;
	ASSERT_EQ(0, pthread_getaffinity_np(pthread_self(), sizeof orig, &orig));
	const std::vector<int> cpus = first_cpus(orig, 2);
	if (cpus.size() < 2 || __rseq_size == 0)
		GTEST_SKIP() << "needs 2 CPUs and glibc's rseq registration";
	// 4 owned lanes, 2 shared; ring large enough that nothing is discarded.
	Slot s(0, config(STRATA_MODE_DISCARD, 4, 8, 65536), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	const uint32_t first_shared = s.reader->info().first_shared;
	ASSERT_EQ(s.reader->info().n_lanes - first_shared, 2u);
	// Four threads take the owned lanes and keep them until they exit.
	std::atomic<int> claimed{0};
	std::atomic<bool> release{false};
	std::vector<std::thread> owners;
	for (uint32_t t = 0; t < 4; t++)
		owners.emplace_back([&, t] {
			strata_tracepoint(rbtest, rec, 10 + t, 0u, checksum(10 + t, 0));
			claimed.fetch_add(1, std::memory_order_release); // pairs with the acquire below
			while (!release.load(std::memory_order_acquire))
				sched_yield();
		});
	while (claimed.load(std::memory_order_acquire) < 4)
		sched_yield();
	uint64_t seq = 0;
	std::vector<std::pair<uint64_t, int>> expect; // (seq, cpu index) of the sharer's records
	std::thread sharer([&] {
		auto burst = [&](int k, int n) {
			ASSERT_TRUE(pin_to(cpus[k])) << "cpu " << cpus[k];
			for (int i = 0; i < n; i++, seq++) {
				strata_tracepoint(rbtest, rec, 1u, seq, checksum(1, seq));
				expect.push_back({seq, k});
			}
		};
		burst(1, 100);
		burst(0, 100);
		// Longer than 2^27 ns (134 ms) with the other lane idle: not a
		// synchronisation, the time span is what is tested.
		std::this_thread::sleep_for(std::chrono::milliseconds(200));
		burst(0, 1); // our bound is now recent, but in the other lane
		burst(1, 100);
		burst(0, 100);
	});
	sharer.join();
	release.store(true, std::memory_order_release);
	for (auto &th : owners)
		th.join();
	ASSERT_EQ(0, pthread_setaffinity_np(pthread_self(), sizeof orig, &orig));
	std::vector<Packets> lanes;
	ASSERT_NO_FATAL_FAILURE(flush_and_read(s, &lanes));
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return lanes[l]; }, true, &t);
	EXPECT_EQ(t.discarded, 0u);
	EXPECT_EQ(t.seqs[std::make_pair(std::string("rbtest:rec"), 1u)].size(),
		  expect.size()); // all, in program order
	// Each record in the lane of the CPU it was written on; the first after
	// the long idle span of lane (first_shared + 1) is extended.
	std::map<uint64_t, std::pair<uint32_t, Record>> where; // seq -> (lane, record)
	for (uint32_t l = first_shared; l < lanes.size(); l++)
		for (const auto &p : lanes[l]) {
			std::vector<Record> recs;
			std::string err;
			ASSERT_TRUE(decode_packet(p, s.events, &recs, &err)) << err;
			for (const Record &r : recs)
				if (r.fields.at(0).u == 1)
					where[r.fields.at(1).u] = {l, r};
		}
	ASSERT_EQ(where.size(), expect.size());
	for (const auto &e : expect)
		ASSERT_EQ(where[e.first].first, first_shared + (uint32_t)cpus[e.second] % 2)
			<< "seq " << e.first;
	const Record &back = where[201].second; // first record of burst(1, 100) after the sleep
	EXPECT_TRUE(back.extended);
	EXPECT_GT(back.ts, where[200].second.ts); // its true time, after the record before it
	EXPECT_GT(back.ts - where[99].second.ts, (uint64_t)150000000); // the lane's previous one
}

// Records of thread `who` (field 0) per lane.
std::map<uint32_t, uint64_t> records_of(Slot &s, const std::vector<Packets> &lanes, uint32_t who)
{
	std::map<uint32_t, uint64_t> n;
	for (uint32_t l = 0; l < lanes.size(); l++)
		for (const auto &p : lanes[l]) {
			std::vector<Record> recs;
			std::string err;
			EXPECT_TRUE(decode_packet(p, s.events, &recs, &err)) << err;
			for (const Record &r : recs)
				if (r.fields.at(0).u == who)
					n[l]++;
		}
	return n;
}

// Flushes and reads every lane, checks each (order, checksums): the
// records of thread 7 ("rbtest:rec" with a = 7), none discarded.
uint64_t writer7_records(Slot &s, std::vector<Packets> *lanes)
{
	flush_and_read(s, lanes);
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return (*lanes)[l]; }, true, &t);
	EXPECT_EQ(t.discarded, 0u);
	return t.seqs[std::make_pair(std::string("rbtest:rec"), 7u)].size();
}

// The default: a thread's first event claims a free owned lane with no
// packet open; where every free lane holds an exited owner's open packet,
// its first 64 records go to the shared lanes and the rest to the owned
// lane it then claims, in program order.
TEST(RingBuffer, AThreadClaimsItsOwnLaneAfterItsFirstRecords)
{
	strata_rt_set_own_after(64);
	Slot s(0, config(STRATA_MODE_DISCARD, 4, 8, 65536), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	// Four threads of one record each: each takes a lane never written,
	// and leaves its packet open there.
	const uint32_t first_shared = leave_owned_lanes_open(
		s, [](uint32_t th) { strata_tracepoint(rbtest, rec, 50 + th, 0u, checksum(50 + th, 0)); });
	std::thread w([] {
		for (uint64_t i = 0; i < 200; i++)
			strata_tracepoint(rbtest, rec, 7u, i, checksum(7, i));
	});
	w.join();
	strata_rt_set_own_after(0);
	std::vector<Packets> lanes;
	EXPECT_EQ(writer7_records(s, &lanes), 200u); // all, in order
	uint64_t shared = 0, owned = 0;
	for (const auto &[l, n] : records_of(s, lanes, 7))
		(l >= first_shared ? shared : owned) += n;
	EXPECT_EQ(shared, 64u);
	EXPECT_EQ(owned, 136u);
	for (uint32_t th = 0; th < first_shared; th++) // each in a lane of its own
		EXPECT_EQ(records_of(s, lanes, 50 + th).begin()->first, th) << "thread " << 50 + th;
}

// A thread that found every owned lane taken writes the shared lanes, and
// claims a lane its owner handed back at exit once it opens a packet
// there: four live owners, then a writer in the shared lanes; the first
// owner exits, and the writer's later records go to that owner's lane.
// Without the retry they all stayed in the shared lanes (owned == 0).
TEST(RingBuffer, ASharerClaimsALaneHandedBackAtExit)
{
	strata_rt_set_own_after(64);
	Slot s(0, config(STRATA_MODE_DISCARD, 4, 8, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	const uint32_t first_shared = s.reader->info().first_shared;
	std::mutex m;
	std::condition_variable cv;
	uint32_t ready = 0, released = 0; // holders with a record; holders told to exit
	std::vector<std::thread> holders;
	for (uint32_t th = 0; th < first_shared; th++)
		holders.emplace_back([&, th] {
			strata_tracepoint(rbtest, rec, 50 + th, 0u, checksum(50 + th, 0));
			std::unique_lock<std::mutex> lk(m);
			ready++;
			cv.notify_all();
			cv.wait(lk, [&] { return released > th; });
		});
	{
		std::unique_lock<std::mutex> lk(m);
		cv.wait(lk, [&] { return ready == first_shared; });
	}
	constexpr uint64_t kBefore = 300, kAfter = 600;
	std::thread w([&] {
		for (uint64_t i = 0; i < kBefore; i++) // every owned lane taken
			strata_tracepoint(rbtest, rec, 7u, i, checksum(7, i));
		{
			std::lock_guard<std::mutex> lk(m);
			released = 1; // the first holder exits ...
			cv.notify_all();
		}
		holders[0].join(); // ... and has handed its lane back
		for (uint64_t i = kBefore; i < kBefore + kAfter; i++)
			strata_tracepoint(rbtest, rec, 7u, i, checksum(7, i));
	});
	w.join();
	{
		std::lock_guard<std::mutex> lk(m);
		released = first_shared;
		cv.notify_all();
	}
	for (uint32_t th = 1; th < first_shared; th++)
		holders[th].join();
	strata_rt_set_own_after(0);
	std::vector<Packets> lanes;
	EXPECT_EQ(writer7_records(s, &lanes), kBefore + kAfter);
	const uint32_t freed = records_of(s, lanes, 50).begin()->first;
	uint64_t owned = 0;
	for (const auto &[l, n] : records_of(s, lanes, 7))
		if (l < first_shared) {
			EXPECT_EQ(l, freed) << "only the lane handed back, no live owner's";
			owned += n;
		}
	// At most a shared packet or two after the exit (one per shared lane
	// the writer's CPU picks) before the claim.
	EXPECT_GT(owned, kAfter / 2);
	EXPECT_LE(owned, kAfter);
}

// Threads that emit a few records and exit take no packet of their own:
// 300 of them, five records each, fit a ring of 2 x 64 KiB per lane with
// no consumer running.  Claiming an owned lane at the first record,
// each would close its predecessor's packet and open one, and the ring
// would be full after a few threads.
TEST(RingBuffer, ShortLivedThreadsTakeNoPacketOfTheirOwn)
{
	for (const unsigned own_after : {64u, 0u}) {
		strata_rt_set_own_after(own_after);
		Slot s(0, config(STRATA_MODE_DISCARD, 4, 2, 65536), {rule("rbtest:rec")});
		ASSERT_TRUE(s.reader);
		for (uint32_t th = 0; th < 300; th++)
			std::thread([th] {
				for (uint64_t i = 0; i < 5; i++)
					strata_tracepoint(rbtest, rec, 100 + th, i, checksum(100 + th, i));
			}).join();
		strata_rt_set_own_after(0);
		std::vector<Packets> lanes;
		flush_and_read(s, &lanes);
		uint64_t recorded = 0, discarded = 0;
		for (uint32_t l = 0; l < lanes.size(); l++) {
			discarded += s.reader->lane_discarded(l);
			for (const auto &p : lanes[l]) {
				std::vector<Record> recs;
				std::string err;
				ASSERT_TRUE(decode_packet(p, s.events, &recs, &err)) << err;
				recorded += recs.size();
			}
		}
		EXPECT_EQ(recorded + discarded, 1500u) << "own after " << own_after;
		if (own_after) {
			EXPECT_EQ(discarded, 0u) << "300 short threads in the shared lanes";
			Tally t;
			check_lanes(
				s, [&](uint32_t l) -> const Packets & { return lanes[l]; }, true, &t);
			EXPECT_EQ(t.records, 1500u);
		} else {
			EXPECT_GT(discarded, 0u)
				<< "a packet per thread fills the ring (the oracle's premise)";
		}
	}
}

// A first event takes a free owned lane with no packet open, if there is
// one; after a look that found none, the next 15 first events share
// without looking (take_owned_lane's hint) and the 16th looks again: a
// lane the consumer's close made clean meanwhile is claimed then, not
// never.
TEST(RingBuffer, AFirstEventLooksForACleanLaneAgainAfterAMiss)
{
	strata_rt_set_own_after(0); // each thread claims at its first record
	Slot s(0, config(STRATA_MODE_DISCARD, 4, 4, 65536), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	const uint32_t first_shared = s.reader->info().first_shared;
	const auto one = [](uint32_t who) {
		std::thread([who] { strata_tracepoint(rbtest, rec, who, 0, checksum(who, 0)); }).join();
	};
	for (uint32_t th = 0; th < first_shared; th++)
		one(th); // every owned lane handed back with its packet open
	strata_rt_set_own_after(64);
	one(100); // looks, finds none clean: shares
	std::vector<Packets> before, lanes;
	ASSERT_NO_FATAL_FAILURE(flush_and_read(s, &before)); // the consumer closes them: all clean
	for (uint32_t th = 101; th <= 116; th++)
		one(th);
	strata_rt_set_own_after(0);
	ASSERT_NO_FATAL_FAILURE(flush_and_read(s, &lanes));
	for (uint32_t th = 100; th <= 116; th++) {
		const std::map<uint32_t, uint64_t> in = records_of(s, th == 100 ? before : lanes, th);
		ASSERT_EQ(in.size(), 1u) << "thread " << th;
		EXPECT_EQ(in.begin()->first < first_shared, th == 116)
			<< "thread " << th << " in lane " << in.begin()->first;
	}
}

namespace {
std::atomic<uint64_t> g_sig_count[2];
pthread_t g_victim;

void on_signal(int signo)
{
	int k = signo == SIGALRM ? 0 : 1;
	// Relaxed: the handler of one signal is not re-entered (its signal is
	// blocked while it runs), this only numbers its events.
	uint64_t seq = g_sig_count[k].load(std::memory_order_relaxed);
	strata_tracepoint(rbtest, sig, (uint32_t)signo, seq, checksum((uint32_t)signo, seq));
	g_sig_count[k].store(seq + 1, std::memory_order_relaxed);
}
} // namespace

TEST(RingBuffer, SignalHandlersNestInsideWriters)
{
	constexpr uint64_t kEvents = 100000;
	Slot s(0, config(STRATA_MODE_DISCARD, 1, 8, 4096), {rule("rbtest:*")});
	ASSERT_TRUE(s.reader);
	struct sigaction sa {};
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask); // SIGUSR1 may interrupt the SIGALRM handler: depth 3
	ASSERT_EQ(0, sigaction(SIGALRM, &sa, nullptr));
	ASSERT_EQ(0, sigaction(SIGUSR1, &sa, nullptr));
	Drainer d({&s});
	std::atomic<bool> done{false};
	// The writer's events so far, for the hammer only (emitted, below, is
	// read after the join).  Relaxed: a pace, nothing is read through it.
	std::atomic<uint64_t> progress{0};
	uint64_t emitted = 0;
	std::thread w([&] {
		// At least kEvents, and on until many handlers ran inside it
		// (bounded: a machine that delivers no signal fails the test).
		for (uint64_t seq = 0; seq < 50 * kEvents; seq++) {
			if (seq >= kEvents &&
			    g_sig_count[0].load(std::memory_order_relaxed) +
					    g_sig_count[1].load(std::memory_order_relaxed) >=
				    1000)
				break;
			strata_tracepoint(rbtest, rec, 0u, seq, checksum(0, seq));
			emitted = seq + 1;
			progress.store(emitted, std::memory_order_relaxed);
			// Where this thread and the hammer share one CPU (a loaded
			// machine), the hammer runs only when this one stops: without
			// a yield that is once a time slice, a few signals each.
			if (seq >= kEvents && (seq & 1023) == 0)
				sched_yield();
		}
		done.store(true, std::memory_order_release); // pairs with the hammer's acquire
	});
	g_victim = w.native_handle();
	// A volley of both signals once the writer wrote kPace events since
	// the last one: signals still land anywhere in its writes (and SIGUSR1
	// in SIGALRM's handler), but cannot outrun it.  Unpaced, a hammer on
	// its own CPU could keep the writer in its handlers: under TSan, whose
	// delivery is slow, one run in a few took 20 s to over 120 s for its
	// 100,000 events, with 30,000 handlers of each signal by 20 s.
	constexpr uint64_t kPace = 16;
	uint64_t paced = 0;
	while (!done.load(std::memory_order_acquire)) {
		const uint64_t now = progress.load(std::memory_order_relaxed);
		if (now - paced < kPace) {
			sched_yield();
			continue;
		}
		paced = now;
		pthread_kill(g_victim, SIGALRM);
		pthread_kill(g_victim, SIGUSR1);
	}
	w.join();
	signal(SIGALRM, SIG_IGN);
	signal(SIGUSR1, SIG_IGN);
	d.finish();
	for (const auto &e : d.errors())
		ADD_FAILURE() << e;
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return d.lane(0, l); }, true, &t);
	uint64_t handled = g_sig_count[0].load() + g_sig_count[1].load();
	EXPECT_GE(handled, 100u); // signals did interrupt the writer
	EXPECT_EQ(t.records + t.discarded, emitted + handled);
	EXPECT_EQ(s.reader->stats().discards_clamped, 0u); // as in ConcurrentWriters...
	std::printf("%llu signal events, %llu read, %llu discarded\n", (unsigned long long)handled,
		    (unsigned long long)t.records, (unsigned long long)t.discarded);
}

#if defined(__SANITIZE_THREAD__)
#define STRATA_TEST_UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define STRATA_TEST_UNDER_TSAN 1
#endif
#endif

TEST(RingBuffer, OverwriteCollectWhileWritersRun)
{
#ifdef STRATA_TEST_UNDER_TSAN
	GTEST_SKIP() << "the collector's copy races with writers by design (seqlock check after)";
#endif
	Slot s(0, config(STRATA_MODE_OVERWRITE, 1, 4, 4096), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	// This thread owns the one owned lane: both writers share lane 1.
	strata_tracepoint(rbtest, rec, 0u, 0u, checksum(0, 0));
	constexpr uint32_t kLane = 1;
	ASSERT_EQ(s.reader->info().first_shared, kLane);
	std::atomic<bool> stop{false};
	auto writer = [&](uint32_t thread) {
		for (uint64_t seq = 0; !stop.load(std::memory_order_relaxed); seq++) // a flag only
			strata_tracepoint(rbtest, rec, thread, seq, checksum(thread, seq));
	};
	std::thread a(writer, 1), b(writer, 2);
	Packets all;
	size_t rounds = 0;
	// Collect (consumer-side close, copy, seqlock check) again and again
	// while both writers lap the 4 sub-buffers: every packet that comes out
	// must be whole and consistent; torn copies must have been dropped.
	// Until the writers lapped the ring 100 times while we collected.
	const uint64_t laps = 100 * s.reader->info().lane_stride;
	const uint64_t start = s.reader->lane_position(kLane);
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
	uint64_t seen = start;
	while (rounds < 300 || s.reader->lane_position(kLane) - start < laps) {
		ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "writers made no progress";
		uint64_t pos = s.reader->lane_position(kLane);
		if (pos - seen < s.reader->info().subbuf_size) {
			std::this_thread::yield(); // let the writers run (2 cores, 3 threads)
			continue;
		}
		seen = pos;
		std::string msg;
		s.reader->collect_overwrite(kLane, 100, &all, &msg);
		rounds++;
	}
	stop.store(true, std::memory_order_relaxed);
	a.join();
	b.join();
	std::string msg;
	s.reader->collect_overwrite(kLane, 1000, &all, &msg);
	std::vector<uint8_t> trailing;
	if (s.reader->trailing_loss_packet(kLane, &trailing))
		all.push_back(trailing);
	Packets own;
	EXPECT_EQ(s.reader->collect_overwrite(0, 1000, &own, &msg), 1u) << msg;
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return l == kLane ? all : own; }, false, &t);
	EXPECT_GE(t.packets, rounds / 2); // most rounds bring at least the packet they closed
	std::printf("%llu packets collected in %zu rounds, %llu lapped during the copy\n",
		    (unsigned long long)t.packets, rounds,
		    (unsigned long long)s.reader->stats().lapped_packets);
}

// A buffer at the first event (docs/ring-buffer.md): strata_rt_slot_open_lazy
// arms the slot but makes no buffer; the first event of any thread makes it
// and calls the hand-off once, however many threads race for it, and no
// event of the race is lost.
namespace {

std::atomic<int> g_handoff_calls{0};
std::atomic<int> g_handoff_fd{-1};

int test_handoff(unsigned, int memfd, const void *ctx)
{
	int verdict;
	memcpy(&verdict, ctx, sizeof verdict);
	// Relaxed: read by the test after the writers are joined.
	g_handoff_calls.fetch_add(1, std::memory_order_relaxed);
	if (verdict == 0)
		g_handoff_fd.store(dup(memfd), std::memory_order_relaxed);
	return verdict;
}

// The buffer handed off as memfd `fd` holds `events` records, none
// discarded; closes the slot and fd.
void expect_whole_run(unsigned slot, int fd, uint64_t events)
{
	{
		Slot s(slot, fd);
		ASSERT_TRUE(s.reader);
		Drainer d({&s});
		d.finish();
		for (const auto &e : d.errors())
			ADD_FAILURE() << e;
		Tally t;
		check_lanes(
			s, [&](uint32_t l) -> const Packets & { return d.lane(0, l); }, false, &t);
		EXPECT_EQ(t.records + t.discarded, events);
		EXPECT_EQ(t.discarded, 0u) << "the ring holds the whole run";
	} // closes the slot
	close(fd);
}

} // namespace

TEST(LazyBuffer, MadeOnceByTheFirstEventsOfRacingThreads)
{
	constexpr unsigned kSlot = 5;
	constexpr uint32_t kThreads = 6;
	constexpr uint64_t kEvents = 20000;
	g_handoff_calls.store(0, std::memory_order_relaxed);
	const strata_channel_config cfg = config(STRATA_MODE_DISCARD, 8, 8, 128 * 1024);
	const int ok = 0;
	ASSERT_EQ(0, strata_rt_slot_open_lazy(kSlot, &cfg, test_uuid(), test_handoff, &ok, sizeof ok));
	const strata_rule r = rule("rbtest:rec");
	ASSERT_EQ(0, strata_rt_slot_set_rules(kSlot, &r, 1));
	EXPECT_EQ(0, g_handoff_calls.load(std::memory_order_relaxed)) << "a buffer made before any event";
	EXPECT_EQ(-EEXIST, strata_rt_slot_open(kSlot, &cfg, test_uuid())) << "a pending slot is open";
	std::atomic<uint32_t> ready{0};
	std::vector<std::thread> w;
	for (uint32_t t = 0; t < kThreads; t++)
		w.emplace_back([t, &ready] {
			// Acquire/release: a start line only, so that the first
			// events race.
			ready.fetch_add(1, std::memory_order_acq_rel);
			while (ready.load(std::memory_order_acquire) < kThreads)
				sched_yield();
			emit_records(t, kEvents);
		});
	for (auto &th : w)
		th.join();
	ASSERT_EQ(1, g_handoff_calls.load(std::memory_order_relaxed)) << "one buffer, handed off once";
	const int fd = g_handoff_fd.load(std::memory_order_relaxed);
	ASSERT_GE(fd, 0);
	expect_whole_run(kSlot, fd, kThreads * kEvents);
}

// A hand-off that fails keeps the buffer in the process: the threads record
// into it, and the hand-off is tried again (at a packet switch, at the
// slot's close, at exit) so that the daemon gets every event or its count
// (docs/ring-buffer.md, "A hand-over that fails").  Here the first try is
// refused and the one at the close succeeds.
namespace {

std::atomic<int> g_handoff_refusals{0};

int flaky_handoff(unsigned slot, int memfd, const void *)
{
	// Relaxed: the test's own counters, read after the writers joined.
	if (g_handoff_refusals.fetch_sub(1, std::memory_order_relaxed) > 0) {
		g_handoff_calls.fetch_add(1, std::memory_order_relaxed);
		return -EPIPE;
	}
	const int ok = 0;
	return test_handoff(slot, memfd, &ok);
}

} // namespace

TEST(LazyBuffer, AFailedHandOffIsRetriedAndNothingIsLost)
{
	constexpr unsigned kSlot = 6;
	constexpr uint64_t kEvents = 1000;
	g_handoff_calls.store(0, std::memory_order_relaxed);
	g_handoff_fd.store(-1, std::memory_order_relaxed);
	g_handoff_refusals.store(1, std::memory_order_relaxed);
	const strata_channel_config cfg = config(STRATA_MODE_DISCARD, 4, 4, 64 * 1024);
	const int unused = 0;
	ASSERT_EQ(0,
		  strata_rt_slot_open_lazy(kSlot, &cfg, test_uuid(), flaky_handoff, &unused, sizeof unused));
	const strata_rule r = rule("rbtest:rec");
	ASSERT_EQ(0, strata_rt_slot_set_rules(kSlot, &r, 1));
	std::vector<std::thread> w;
	for (uint32_t t = 0; t < 3; t++)
		w.emplace_back(emit_records, t, kEvents);
	for (auto &th : w)
		th.join();
	EXPECT_EQ(1, g_handoff_calls.load(std::memory_order_relaxed)) << "refused once, not retried yet";
	EXPECT_EQ(-1, g_handoff_fd.load(std::memory_order_relaxed));
	strata_rt_slot_close(kSlot); // the last try: accepted
	EXPECT_EQ(2, g_handoff_calls.load(std::memory_order_relaxed)) << "retried at the close";
	const int fd = g_handoff_fd.load(std::memory_order_relaxed);
	ASSERT_GE(fd, 0);
	expect_whole_run(kSlot, fd, 3 * kEvents);
}

TEST(LazyBuffer, RefusesWhatAnOpenWouldRefuse)
{
	strata_channel_config bad = config(STRATA_MODE_DISCARD, 4, 3, 64 * 1024); // 3: not a power of two
	const int ok = 0;
	EXPECT_EQ(-EINVAL, strata_rt_slot_open_lazy(7, &bad, test_uuid(), test_handoff, &ok, sizeof ok));
	const strata_channel_config cfg = config(STRATA_MODE_DISCARD, 4, 4, 64 * 1024);
	EXPECT_EQ(-EINVAL, strata_rt_slot_open_lazy(7, &cfg, test_uuid(), nullptr, &ok, sizeof ok));
	uint8_t big[STRATA_RT_HANDOFF_CTX + 1] = {};
	EXPECT_EQ(-EINVAL, strata_rt_slot_open_lazy(7, &cfg, test_uuid(), test_handoff, big, sizeof big));
	EXPECT_EQ(-EINVAL, strata_rt_slot_open_lazy(STRATA_MAX_SLOTS, &cfg, test_uuid(), test_handoff, &ok,
						    sizeof ok));
}
