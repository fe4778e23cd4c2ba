// The futex waits of the multiplexed drains (consumerd/futex_waits.h), both
// implementations through their common contract: every wait's tag comes
// back exactly once (woken, value moved, cancelled); FutexWaitv's fixed
// capacity says false beyond it; a word unmapped under a wait ends that
// wait, not the process.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <linux/futex.h>
#include <map>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "futex_ring.h"
#include "futex_waitv.h"

namespace strata {
namespace {

// The waiters' threads never exit and name their object: never freed.
FutexWaitv *new_waitv(unsigned waiters)
{
	auto *w = new FutexWaitv();
	return w->open(waiters) ? w : nullptr;
}

FutexRing *new_ring()
{
	auto *r = new FutexRing();
	return r->open(1024) ? r : nullptr;
}

// What a writer does: bump the word, then wake its waiters.
void bump(uint32_t *word)
{
	__atomic_add_fetch(word, 1, __ATOMIC_SEQ_CST);
	syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Reaps until `n` completions came; their count per tag.
std::map<uint64_t, int> reap_n(FutexWaits &f, size_t n, std::vector<FutexWaits::Done> *all = nullptr)
{
	std::map<uint64_t, int> got;
	size_t total = 0;
	std::vector<FutexWaits::Done> done;
	while (total < n) {
		done.clear();
		f.reap(done);
		for (const auto &d : done) {
			got[d.tag]++;
			total++;
			if (all)
				all->push_back(d);
		}
	}
	return got;
}

void exactly_once(FutexWaits &f)
{
	uint32_t moved = 5, woken = 7, cancelled = 9;
	// Moved before the wait: completes at once.
	ASSERT_TRUE(f.submit_wait(&moved, 4, 100));
	// Woken by a writer from another thread.
	ASSERT_TRUE(f.submit_wait(&woken, 7, 101));
	std::thread t([&woken] { bump(&woken); });
	// Cancelled.
	ASSERT_TRUE(f.submit_wait(&cancelled, 9, 102));
	ASSERT_TRUE(f.submit_cancel(102));
	std::vector<FutexWaits::Done> all;
	auto got = reap_n(f, 3, &all);
	t.join();
	EXPECT_EQ(got[100], 1);
	EXPECT_EQ(got[101], 1);
	EXPECT_EQ(got[102], 1);
	for (const auto &d : all)
		if (d.tag == 102) {
			EXPECT_TRUE(d.res == -ECANCELED || d.res == 0 || d.res == -EAGAIN) << d.res;
		}
	// A cancel after its completion: true, and nothing more comes; the
	// next completion is a fresh wait's.
	EXPECT_TRUE(f.submit_cancel(101));
	uint32_t sentinel = 1;
	ASSERT_TRUE(f.submit_wait(&sentinel, 0, 103));
	got = reap_n(f, 1);
	EXPECT_EQ(got.size(), 1u);
	EXPECT_EQ(got[103], 1);
}

TEST(FutexWaits, WaitvExactlyOnce)
{
	FutexWaitv *f = new_waitv(2);
	ASSERT_NE(f, nullptr) << "futex_waitv (Linux >= 5.16)";
	exactly_once(*f);
}

TEST(FutexWaits, RingExactlyOnce)
{
	FutexRing *f = new_ring();
	if (!f)
		GTEST_SKIP() << "no io_uring futex waits (Linux < 6.7)";
	exactly_once(*f);
}

// One waiter: 127 waits fit, the 128th does not (the caller polls it); a
// slot freed takes a new wait again.
TEST(FutexWaits, WaitvCapacity)
{
	FutexWaitv *f = new_waitv(1);
	ASSERT_NE(f, nullptr);
	EXPECT_EQ(f->capacity(), FutexWaitv::kSlots);
	static uint32_t words[FutexWaitv::kSlots + 1];
	for (unsigned i = 0; i < FutexWaitv::kSlots; i++)
		ASSERT_TRUE(f->submit_wait(&words[i], 0, 1000 + i)) << i;
	EXPECT_FALSE(f->submit_wait(&words[FutexWaitv::kSlots], 0, 2000));
	bump(&words[3]);
	auto got = reap_n(*f, 1);
	EXPECT_EQ(got[1003], 1);
	EXPECT_TRUE(f->submit_wait(&words[FutexWaitv::kSlots], 0, 2000));
	for (unsigned i = 0; i < FutexWaitv::kSlots; i++)
		if (i != 3) {
			ASSERT_TRUE(f->submit_cancel(1000 + i));
		}
	ASSERT_TRUE(f->submit_cancel(2000));
	got = reap_n(*f, FutexWaitv::kSlots);
	for (unsigned i = 0; i < FutexWaitv::kSlots; i++)
		if (i != 3) {
			EXPECT_EQ(got[1000 + i], 1) << i;
		}
	EXPECT_EQ(got[2000], 1);
}

// A drain unmaps its buffer before it cancels its wait: the waiter must
// neither crash nor lose the other waits of its set.
TEST(FutexWaits, WaitvUnmappedWord)
{
	FutexWaitv *f = new_waitv(1);
	ASSERT_NE(f, nullptr);
	void *page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(page, MAP_FAILED);
	auto *gone = static_cast<uint32_t *>(page);
	static uint32_t kept = 0, other = 0;
	ASSERT_TRUE(f->submit_wait(gone, 0, 1));
	ASSERT_TRUE(f->submit_wait(&kept, 0, 2));
	munmap(page, 4096);
	// A change of the set wakes the waiter: its next call meets the hole.
	ASSERT_TRUE(f->submit_wait(&other, 0, 3));
	ASSERT_TRUE(f->submit_cancel(1));
	auto got = reap_n(*f, 1);
	EXPECT_EQ(got[1], 1);
	bump(&kept);
	bump(&other);
	got = reap_n(*f, 2);
	EXPECT_EQ(got[2], 1);
	EXPECT_EQ(got[3], 1);
}

// Writers bump many words at once while the waits are resubmitted at each
// completion (as the drains do): no wake-up is lost for good.  At the end,
// every wait whose word moved since it was queued must come back by itself
// (a lost one hangs the test: ctest's timeout); the others are cancelled.
void no_lost_wakeup(FutexWaits &f)
{
	constexpr unsigned kWords = 200, kRounds = 200;
	static uint32_t words[kWords];
	std::vector<uint32_t> seen(kWords);
	std::vector<bool> queued(kWords);
	unsigned out = 0;
	auto submit = [&](unsigned i) {
		seen[i] = __atomic_load_n(&words[i], __ATOMIC_SEQ_CST);
		queued[i] = f.submit_wait(&words[i], seen[i], 10 + i);
		out += queued[i];
	};
	for (unsigned i = 0; i < kWords; i++)
		submit(i);
	// The writer's end is a wait too: the reaper may be blocked when it
	// comes, with every other wait on a word that no longer moves.  On the
	// word's current value: it is static, and a test that ran before left
	// it bumped (a wait on 0 then ended at once, and the reaper could
	// block for good: unit.futex_waits_test hung once in CI that way).
	static uint32_t stop_word = 0;
	std::atomic<bool> stop{false};
	ASSERT_TRUE(f.submit_wait(&stop_word, __atomic_load_n(&stop_word, __ATOMIC_SEQ_CST), 5));
	out++;
	std::thread writer([&] {
		for (unsigned r = 0; r < kRounds; r++)
			for (unsigned i = 0; i < kWords; i++)
				bump(&words[(i * 7 + r) % kWords]);
		stop.store(true, std::memory_order_release);
		bump(&stop_word);
	});
	std::vector<FutexWaits::Done> done;
	bool ending = false;
	while (out) {
		if (!ending && stop.load(std::memory_order_acquire)) {
			ending = true; // no write any more: cancel the waits on words that did not move
			for (unsigned i = 0; i < kWords; i++)
				if (queued[i] && __atomic_load_n(&words[i], __ATOMIC_SEQ_CST) == seen[i]) {
					ASSERT_TRUE(f.submit_cancel(10 + i));
				}
		}
		done.clear();
		f.reap(done);
		for (const auto &d : done) {
			out--;
			if (d.tag == 5)
				continue;
			const unsigned i = static_cast<unsigned>(d.tag - 10);
			ASSERT_TRUE(queued[i]) << "a second completion for " << i;
			queued[i] = false;
			if (!ending)
				submit(i);
		}
	}
	writer.join();
}

TEST(FutexWaits, WaitvNoLostWakeup)
{
	FutexWaitv *f = new_waitv(2); // 254 slots for 200 words
	ASSERT_NE(f, nullptr);
	no_lost_wakeup(*f);
}

TEST(FutexWaits, RingNoLostWakeup)
{
	FutexRing *f = new_ring();
	if (!f)
		GTEST_SKIP() << "no io_uring futex waits (Linux < 6.7)";
	no_lost_wakeup(*f);
}

} // namespace
} // namespace strata
