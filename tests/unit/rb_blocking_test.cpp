/*
 * Blocking mode (docs/ring-buffer.md, "Blocking mode"): a writer whose ring
 * is full waits, up to the channel's timeout, for the consumer instead of
 * discarding.  Links libstrata-hooked: STRATA_W_BLOCK_WAIT runs at each
 * check of a wait, where a test raises a signal (its handler emits) or
 * plays the consumer.
 *
 * Oracles, exact: with a consumer that keeps up, recorded == emitted and
 * nothing is discarded however small the ring; a nested writer (a handler
 * that interrupted a waiting writer) never waits: it is discarded and
 * counted (recorded + discarded == emitted, discarded == nested); with no
 * consumer, one wait gives up at its timeout, the writers after it discard
 * without waiting until the consumer releases a sub-buffer again; a writer
 * asleep in its wait is woken by the consumer's release itself.
 */
#define STRATA_DEFINE_PROVIDERS
#include "test_tp.h"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <thread>

#include "rb_test_util.h"
#include "rt_internal.h"
#include "writer_hooks.h"

using namespace rbtest;

namespace {

// A discard-mode channel that blocks up to `ms` (strata_abi.h, the mode word).
strata_channel_config blocking(uint32_t ms, uint32_t lanes, uint32_t nsub)
{
	return config(STRATA_MODE_DISCARD | (ms << STRATA_MODE_BLOCK_SHIFT), lanes, nsub, 4096);
}

std::atomic<uint64_t> g_waits; // checks made by waiting writers
void count_waits(strata_writer_step step)
{
	if (step == STRATA_W_BLOCK_WAIT)
		g_waits.fetch_add(1, std::memory_order_relaxed); // a count, read after join
}

// Drains lane 0 of `s` into `pk` (single-threaded tests).
void drain(Slot &s, Packets *pk)
{
	std::vector<uint8_t> pkt;
	std::string err;
	strata::ReadStatus st;
	while ((st = s.reader->next_packet(0, &pkt, &err)) != strata::ReadStatus::kEmpty) {
		ASSERT_EQ(st, strata::ReadStatus::kPacket) << err;
		pk->push_back(pkt);
	}
}

void finish(Slot &s, Packets *pk)
{
	std::string msg;
	ASSERT_EQ(s.reader->flush(0, false, 5000, &msg), strata::FlushStatus::kDone) << msg;
	drain(s, pk);
	std::vector<uint8_t> loss;
	if (s.reader->trailing_loss_packet(0, &loss))
		pk->push_back(loss);
}

} // namespace

// Four threads, two owned lanes and one shared, two 4 KiB sub-buffers per
// lane: far less room than the burst.  Every event is recorded.  The
// consumer starts once a writer waits (the ring full), so that the waits
// are made whatever the two sides' speeds (under TSan a consumer started
// with the writers kept up with them: no wait, a test that proved nothing).
TEST(Blocking, BurstFromThreadsIntoTinyBuffersLosesNothing)
{
	constexpr uint32_t kThreads = 4;
	constexpr uint64_t kEvents = 20000;
	Slot s(0, blocking(10000, 2, 2), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	g_waits = 0;
	strata_test_writer_hook = count_waits;
	std::vector<std::thread> w;
	for (uint32_t t = 0; t < kThreads; t++)
		w.emplace_back([t] {
			for (uint64_t i = 0; i < kEvents; i++)
				strata_tracepoint(rbtest, rec, t, i, checksum(t, i));
		});
	// A writer's first check of its wait, well inside its 10 s timeout.
	const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
	while (g_waits.load(std::memory_order_relaxed) == 0 && std::chrono::steady_clock::now() < deadline)
		std::this_thread::yield();
	EXPECT_GT(g_waits.load(), 0u) << "no writer waited within 5 s: the ring never filled";
	Drainer d({&s});
	for (auto &th : w)
		th.join();
	d.finish();
	strata_test_writer_hook = nullptr;
	for (const auto &e : d.errors())
		ADD_FAILURE() << e;
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return d.lane(0, l); }, false, &t);
	EXPECT_EQ(t.discarded, 0u);
	EXPECT_EQ(t.records, kThreads * kEvents);
}

namespace {
Slot *g_slot;
Packets *g_pk;
uint64_t g_nested; // nested events emitted (by the handler, run inside raise: no race)
bool g_in_hook;

// A real signal handler's event (nested in the waiting writer: it must not
// wait).
void on_signal(int)
{
	g_nested++;
	strata_tracepoint(rbtest, rec, 1u, g_nested, checksum(1, g_nested));
}

// At a waiting writer's check: a signal arrives (raise delivers it to this
// thread before it returns), then the "consumer" drains, so the outer
// writer goes on.
void nest_then_drain(strata_writer_step step)
{
	if (step != STRATA_W_BLOCK_WAIT || g_in_hook)
		return;
	g_in_hook = true;
	raise(SIGUSR1);
	drain(*g_slot, g_pk);
	g_in_hook = false;
}

struct SignalHandler {
	struct sigaction old {};
	SignalHandler()
	{
		struct sigaction sa {};
		sa.sa_handler = on_signal;
		sigemptyset(&sa.sa_mask);
		sigaction(SIGUSR1, &sa, &old);
	}
	~SignalHandler() { sigaction(SIGUSR1, &old, nullptr); }
};
} // namespace

TEST(Blocking, SignalHandlerInAWaitingWriterNeverWaitsAndIsCounted)
{
	constexpr uint64_t kEvents = 3000; // ~10 fills of two 4 KiB sub-buffers
	Slot s(0, blocking(10000, 1, 2), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	Packets pk;
	g_slot = &s;
	g_pk = &pk;
	g_nested = 0;
	SignalHandler sig;
	strata_test_writer_hook = nest_then_drain;
	for (uint64_t i = 0; i < kEvents; i++)
		strata_tracepoint(rbtest, rec, 0u, i, checksum(0, i));
	strata_test_writer_hook = nullptr;
	finish(s, &pk);
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return l == 0 ? pk : kNoPackets; }, false, &t);
	EXPECT_GT(g_nested, 0u) << "no writer waited";
	EXPECT_EQ(t.discarded, g_nested);
	EXPECT_EQ(t.records, kEvents);
	EXPECT_EQ(t.records + t.discarded, kEvents + g_nested);
}

// No consumer (a daemon that died): the first writer to find the ring full
// waits its timeout, then discards and counts; the next ones do not wait.
// Once the consumer releases a sub-buffer, writers block again.
TEST(Blocking, GivesUpAtTheTimeoutThenDiscardsUntilTheConsumerReturns)
{
	constexpr uint32_t kTimeoutMs = 50;
	constexpr uint64_t kEvents = 2000; // the ring holds ~290
	Slot s(0, blocking(kTimeoutMs, 1, 2), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	g_waits = 0;
	strata_test_writer_hook = count_waits;
	uint64_t i = 0;
	const auto t0 = std::chrono::steady_clock::now();
	for (; g_waits.load() == 0 && i < kEvents; i++)
		strata_tracepoint(rbtest, rec, 0u, i, checksum(0, i));
	const auto waited = std::chrono::steady_clock::now() - t0;
	const uint64_t checks = g_waits.load();
	ASSERT_GT(checks, 0u) << "the ring never filled";
	EXPECT_GE(waited, std::chrono::milliseconds(kTimeoutMs)); // it waited its timeout...
	EXPECT_LT(waited, std::chrono::seconds(20));              // ...and came back
	for (; i < kEvents; i++)                                  // stalled: discarded at once, no wait
		strata_tracepoint(rbtest, rec, 0u, i, checksum(0, i));
	EXPECT_EQ(g_waits.load(), checks) << "a writer waited for a consumer known gone";
	Packets pk;
	drain(s, &pk); // the consumer is back
	g_waits = 0;
	SignalHandler sig;
	strata_test_writer_hook = nest_then_drain; // from now on it keeps up
	g_slot = &s;
	g_pk = &pk;
	g_nested = 0;
	for (; i < 2 * kEvents; i++)
		strata_tracepoint(rbtest, rec, 0u, i, checksum(0, i));
	strata_test_writer_hook = nullptr;
	finish(s, &pk);
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return l == 0 ? pk : kNoPackets; }, false, &t);
	EXPECT_GT(g_nested, 0u) << "writers did not block again";
	// The first phase lost what did not fit the ring (the waiting event
	// included); the second only the nested events.
	EXPECT_EQ(t.records + t.discarded, 2 * kEvents + g_nested);
	EXPECT_GT(t.discarded, kEvents / 2 + g_nested);
	EXPECT_EQ(t.records + t.discarded - g_nested, 2 * kEvents);
}

namespace {
std::atomic<uint64_t> g_woken; // waits the consumer's release ended
void count_woken(strata_writer_step step)
{
	if (step == STRATA_W_BLOCK_WOKEN)
		g_woken.fetch_add(1, std::memory_order_relaxed); // a count, read after join
}

// Is thread `tid` of this process inside futex(2) now
// (/proc/self/task/TID/syscall: the number of the call it sleeps in)?
bool in_futex(pid_t tid)
{
	std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
	long nr = -1;
	return (f >> nr) && nr == SYS_futex;
}
} // namespace

// The release wakes a sleeping writer (ABI 3.5, writers_waiting): one
// writer thread into a two-sub-buffer ring; the test, as the consumer,
// waits until the writer sleeps in its wait (its thread inside futex(2)),
// then releases a sub-buffer.  Woken by that release, not by its sleep's
// end: without the consumer's FUTEX_WAKE every sleep runs to its timeout
// and none counts.
TEST(Blocking, TheReleaseWakesASleepingWriter)
{
	constexpr uint64_t kEvents = 6000; // ~20 fills of two 4 KiB sub-buffers
	Slot s(0, blocking(10000, 1, 2), {rule("rbtest:rec")});
	ASSERT_TRUE(s.reader);
	g_woken = 0;
	strata_test_writer_hook = count_woken;
	std::atomic<pid_t> tid{0};
	std::atomic<bool> done{false};
	std::thread w([&] {
		tid.store((pid_t)syscall(SYS_gettid), std::memory_order_release); // read by the consumer
		for (uint64_t i = 0; i < kEvents; i++)
			strata_tracepoint(rbtest, rec, 0u, i, checksum(0, i));
		done.store(true, std::memory_order_release); // pairs with the loop's acquire
	});
	Packets pk;
	while (tid.load(std::memory_order_acquire) == 0)
		std::this_thread::yield();
	while (!done.load(std::memory_order_acquire)) {
		if (in_futex(tid.load(std::memory_order_relaxed)))
			drain(s, &pk);
		std::this_thread::yield();
	}
	w.join();
	strata_test_writer_hook = nullptr;
	finish(s, &pk);
	Tally t;
	check_lanes(
		s, [&](uint32_t l) -> const Packets & { return l == 0 ? pk : kNoPackets; }, false, &t);
	EXPECT_EQ(t.discarded, 0u);
	EXPECT_EQ(t.records, kEvents);
	EXPECT_GT(g_woken.load(), 0u) << "no wait of the writer ended by the release";
}
