// analyze_model_test.cpp - the lock analysis on hand-made event streams,
// with exact expected figures (no trace, no babeltrace2).
#include <algorithm>
#include <map>
#include <functional>
#include <deque>
#include <cerrno>
#include <cstdio>
#include <string>
#include <vector>
#include <cstring>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "analyze_model.h"
#include "analyze_report.h"
#include "analyze_symbols.h"
#include "lock_model.h"

using namespace strata::analyze;

namespace {

Event ev(int64_t ts, int64_t tid, Op op, uint64_t lock, int32_t ret = 0, bool contended = false,
	 uint64_t wait = 0, uint64_t caller = 0x1000)
{
	Event e;
	e.ts = ts;
	e.tid = tid;
	e.op = op;
	e.lock = lock;
	e.ret = ret;
	e.contended = contended;
	e.wait_ns = wait;
	e.caller = caller;
	return e;
}

const LockStats *find(const Report &r, uint64_t addr, uint32_t proc = 0)
{
	for (const LockStats &l : r.locks)
		if (l.addr == addr && l.proc == proc)
			return &l;
	return nullptr;
}

} // namespace

TEST(AnalyzeModel, TwoThreadsOneContendedLock)
{
	Input in;
	in.procs.push_back({"prog", 42, ""});
	const uint64_t A = 0xa000, B = 0xb000;
	// t1 holds A 100..400; t2 waits 150..400, holds 400..450; B uncontended.
	in.events = {
		ev(100, 1, Op::MutexLock, A, 0, false, 0, 0x111),
		ev(400, 1, Op::MutexUnlock, A),
		ev(400, 2, Op::MutexLock, A, 0, true, 250, 0x222),
		ev(450, 2, Op::MutexUnlock, A),
		ev(500, 1, Op::MutexTrylock, B),
		ev(510, 1, Op::MutexUnlock, B),
		ev(520, 2, Op::MutexTrylock, B, EBUSY),
		ev(900, 2, Op::MutexTimedlock, B, ETIMEDOUT, true, 300),
	};
	Report r = analyze(in, Options(), nullptr);
	ASSERT_EQ(r.locks.size(), 2u);
	EXPECT_EQ(r.locks[0].addr, A); // sorted by total wait
	const LockStats *a = find(r, A), *b = find(r, B);
	ASSERT_TRUE(a && b);
	EXPECT_EQ(a->acquisitions, 2u);
	EXPECT_EQ(a->contended, 1u);
	EXPECT_EQ(a->wait_total, 250u);
	EXPECT_EQ(a->wait_max, 250u);
	EXPECT_EQ(a->wait_p99, 250u);
	EXPECT_DOUBLE_EQ(a->wait_mean, 250.0); // over the one wait, not the two acquisitions
	EXPECT_EQ(a->holds, 2u);
	EXPECT_EQ(a->hold_max, 300u);
	EXPECT_EQ(a->hold_total, 350u);
	ASSERT_EQ(a->sites.size(), 2u);
	EXPECT_EQ(a->sites[0].caller, 0x222u);
	EXPECT_EQ(a->sites[0].wait_total, 250u);
	// t2 waited behind t1's hold, taken at 0x111.
	ASSERT_EQ(a->blockers.size(), 1u);
	EXPECT_EQ(a->blockers[0].caller, 0x111u);
	EXPECT_EQ(a->blockers[0].contended, 1u);
	EXPECT_EQ(a->blockers[0].wait_total, 250u);
	EXPECT_EQ(b->acquisitions, 1u);
	EXPECT_EQ(b->failed, 2u);
	EXPECT_EQ(b->failed_wait, 300u);
	EXPECT_EQ(b->wait_total, 0u);
	EXPECT_EQ(b->hold_max, 10u);
	EXPECT_EQ(r.unmatched_unlocks, 0u);
	// Timeline: A's wait of t2 and both holds, B's hold.
	size_t waits = 0, holds = 0;
	for (const Interval &iv : r.timeline)
		(iv.wait ? waits : holds)++;
	EXPECT_EQ(waits, 1u);
	EXPECT_EQ(holds, 3u);
}

// memcached's case: most acquisitions do not wait; the statistics of the
// waits must not be those of all acquisitions (p99 0 ns).
TEST(AnalyzeModel, WaitStatisticsAreOverTheWaits)
{
	Input in;
	in.procs.push_back({"prog", 42, ""});
	const uint64_t A = 0xa000;
	int64_t t = 0;
	for (int i = 0; i < 100; i++) {
		in.events.push_back(ev(t += 10, 1, Op::MutexLock, A));
		in.events.push_back(ev(t += 10, 1, Op::MutexUnlock, A));
	}
	in.events.push_back(ev(t += 2000, 2, Op::MutexLock, A, 0, true, 1000));
	in.events.push_back(ev(t += 10, 2, Op::MutexUnlock, A));
	in.events.push_back(ev(t += 4000, 2, Op::MutexLock, A, 0, true, 3000));
	in.events.push_back(ev(t += 10, 2, Op::MutexUnlock, A));
	Report r = analyze(in, Options(), nullptr);
	const LockStats *a = find(r, A);
	ASSERT_TRUE(a);
	EXPECT_EQ(a->acquisitions, 102u);
	EXPECT_EQ(a->contended, 2u);
	EXPECT_EQ(a->wait_p99, 3000u);
	EXPECT_DOUBLE_EQ(a->wait_mean, 2000.0);
	EXPECT_EQ(a->wait_max, 3000u);
	EXPECT_EQ(a->wait_total, 4000u);
}

Event cev(int64_t ts, int64_t tid, Op op, uint64_t cond, uint64_t mutex, uint64_t wait = 0, int32_t ret = 0)
{
	Event e = ev(ts, tid, op, mutex, ret, false, wait, 0x3000 + static_cast<uint64_t>(tid));
	e.cond = cond;
	return e;
}

// CPython's GIL: a mutex M and a condition variable G that the same threads
// both wait on (take_gil, timed waits retried while the GIL is held) and
// signal (drop_gil).  It is a lock whose waits cost time; a pool's
// condition variable Q (workers wait, a producer signals) stays one.
TEST(AnalyzeModel, MutexPlusCondLockIsALock)
{
	Input in;
	in.procs.push_back({"python3", 7, ""});
	const uint64_t M = 0x100, G = 0x200, QM = 0x300, Q = 0x400;
	in.events = {
		// t1 holds the GIL; t2 waits 1000 ns in two timed waits (no unlock between).
		ev(10, 2, Op::MutexLock, M),
		cev(510, 2, Op::CondTimedwait, G, M, 500, ETIMEDOUT),
		cev(1010, 2, Op::CondTimedwait, G, M, 490),
		ev(1020, 2, Op::MutexUnlock, M),
		// t1 dropped it at 1000: lock, signal, unlock.
		ev(995, 1, Op::MutexLock, M),
		cev(1000, 1, Op::CondSignal, G, 0),
		ev(1001, 1, Op::MutexUnlock, M),
		// t1 waits 3000 ns for it back; t2 drops it.
		ev(1100, 1, Op::MutexLock, M),
		cev(4100, 1, Op::CondWait, G, M, 3000),
		ev(4110, 1, Op::MutexUnlock, M),
		ev(4090, 2, Op::MutexLock, M),
		cev(4095, 2, Op::CondSignal, G, 0),
		ev(4096, 2, Op::MutexUnlock, M),
		// A pool: t3 waits 50000 ns for work, t4 signals.
		ev(5000, 3, Op::MutexLock, QM),
		cev(55000, 3, Op::CondWait, Q, QM, 50000),
		ev(55010, 3, Op::MutexUnlock, QM),
		ev(54990, 4, Op::MutexLock, QM),
		cev(54995, 4, Op::CondSignal, Q, 0),
		ev(54996, 4, Op::MutexUnlock, QM),
	};
	std::stable_sort(in.events.begin(), in.events.end(),
			 [](const Event &a, const Event &b) { return a.ts < b.ts; });
	Report r = analyze(in, Options(), nullptr);
	const LockStats *g = find(r, G);
	ASSERT_TRUE(g);
	EXPECT_EQ(g->kind, "mutex+cond");
	EXPECT_EQ(g->contended, 2u);     // t2's two timed waits are one wait
	EXPECT_EQ(g->wait_total, 4000u); // 1000 + 3000
	EXPECT_EQ(g->wait_max, 3000u);
	EXPECT_EQ(g->wait_p99, 3000u);
	EXPECT_EQ(g->acquisitions, 2u); // two releases
	EXPECT_EQ(r.locks[0].addr, G);  // the lock that costs the most
	ASSERT_EQ(g->sites.size(), 2u);
	EXPECT_EQ(g->sites[0].caller, 0x3001u);
	EXPECT_EQ(g->sites[0].wait_total, 3000u);
	// Q waited longer but is a pool's condition variable: not a lock.
	EXPECT_EQ(find(r, Q), nullptr);
	ASSERT_EQ(r.conds.size(), 1u);
	EXPECT_EQ(r.conds[0].addr, Q);
	EXPECT_EQ(r.conds[0].wait_total, 50000u);
}

TEST(AnalyzeModel, RecursiveAndCondWaitAndProcesses)
{
	Input in;
	in.procs.push_back({"parent", 10, ""});
	in.procs.push_back({"child", 11, ""});
	const uint64_t M = 0x5000;
	Event c = ev(0, 1, Op::CondWait, M, 0, false, 100);
	in.events = {
		ev(10, 1, Op::MutexLock, M),   // outer
		ev(20, 1, Op::MutexLock, M),   // recursive
		ev(30, 1, Op::MutexUnlock, M), // inner hold 10
		ev(40, 1, Op::MutexUnlock, M), // outer hold 30
		ev(50, 1, Op::MutexUnlock, M), // unmatched
		ev(100, 1, Op::MutexLock, M),
	};
	c.ts = 300; // released at 200 (hold 100), re-acquired at 300
	c.lock = M;
	c.cond = 0xc0;
	in.events.push_back(c);
	in.events.push_back(ev(350, 1, Op::MutexUnlock, M)); // hold 50
	Event other = ev(360, 7, Op::MutexLock, M);
	other.proc = 1; // same address, other process: another lock
	in.events.push_back(other);
	Report r = analyze(in, Options(), nullptr);
	const LockStats *p = find(r, M, 0), *ch = find(r, M, 1);
	ASSERT_TRUE(p && ch);
	EXPECT_EQ(p->acquisitions, 3u);
	EXPECT_EQ(p->holds, 4u);
	EXPECT_EQ(p->hold_max, 100u);
	EXPECT_EQ(p->hold_total, 10u + 30u + 100u + 50u);
	EXPECT_EQ(p->cond_waits, 1u);
	EXPECT_EQ(r.unmatched_unlocks, 1u);
	EXPECT_EQ(ch->acquisitions, 1u);
	EXPECT_EQ(r.cond_waits, 1u);
	ASSERT_EQ(r.conds.size(), 1u);
	EXPECT_EQ(r.conds[0].addr, 0xc0u);
	EXPECT_EQ(r.conds[0].waits, 1u);
	EXPECT_EQ(r.conds[0].wait_total, 100u);
	EXPECT_EQ(r.conds[0].mutex, M);
}

TEST(AnalyzeModel, PercentileNearestRank)
{
	std::vector<uint64_t> v;
	for (uint64_t i = 1; i <= 100; i++)
		v.push_back(i);
	EXPECT_EQ(percentile(v, 99), 99u);
	EXPECT_EQ(percentile(v, 100), 100u);
	v.push_back(1000);
	EXPECT_EQ(percentile(v, 99), 100u); // ceil(0.99 * 101) = 100th value
	EXPECT_EQ(percentile({}, 99), 0u);
	EXPECT_EQ(percentile({7}, 99), 7u);
}

// Up to WaitDist::kExact waits the percentile is exact; past it, within
// 1/128 of the true value and never above the max.
TEST(AnalyzeModel, WaitDistExactThenBounded)
{
	WaitDist d;
	std::vector<uint64_t> v;
	for (uint64_t i = 1; i <= 1000; i++) {
		d.add(i * 37);
		v.push_back(i * 37);
	}
	EXPECT_TRUE(d.exact());
	EXPECT_EQ(d.percentile(99), percentile(v, 99));
	for (uint64_t i = 0; i < 3 * WaitDist::kExact; i++) {
		uint64_t x = (i * 2654435761u) % 5000000u; // spread 0..5 ms
		d.add(x);
		v.push_back(x);
	}
	EXPECT_FALSE(d.exact());
	EXPECT_EQ(d.count(), v.size());
	for (double p : {50.0, 90.0, 99.0, 100.0}) {
		const double want = static_cast<double>(percentile(v, p)),
			     got = static_cast<double>(d.percentile(p));
		EXPECT_GE(got, want) << p;
		EXPECT_LE(got, want * (1.0 + 1.0 / 128)) << p;
	}
	EXPECT_EQ(d.percentile(100), *std::max_element(v.begin(), v.end()));
	uint64_t in_buckets = 0;
	for (int k = 0; k < WaitDist::kUsBuckets; k++)
		in_buckets += d.us_buckets()[k];
	EXPECT_EQ(in_buckets, v.size());
}

// Streaming at scale: 3 M holds over 3 s of trace time (past the holds'
// horizon and cap, so holds leave memory as the stream goes) with a few
// contended waits among them: counts and blockers stay exact.
// The sanitizer builds are Debug builds (-O0) about 200x slower on these
// streams; a tenth of the length exercises the same paths.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
static const int kStreamScale = 10;
#else
static const int kStreamScale = 1;
#endif

TEST(AnalyzeModel, LongStreamStaysExact)
{
	const uint64_t L = 0x70, A = 0xa, B = 0xb;
	const int64_t n = 3000000 / kStreamScale;
	uint64_t waits = 0;
	Report r = analyze_feed(
		[&](EventSink &on) {
			for (int64_t i = 0; i < n; i++) {
				const int64_t t = i * 1000;
				if (i % 500000 == 250000) {
					// t1 holds [t, t+600) from site A; t2 waits [t+100, t+600).
					on(ev(t, 1, Op::MutexLock, L, 0, false, 0, A));
					on(ev(t + 600, 1, Op::MutexUnlock, L));
					on(ev(t + 600, 2, Op::MutexLock, L, 0, true, 500, B));
					on(ev(t + 700, 2, Op::MutexUnlock, L));
					waits++;
					continue;
				}
				on(ev(t, 1 + i % 2, Op::MutexLock, L, 0, false, 0, B));
				on(ev(t + 10, 1 + i % 2, Op::MutexUnlock, L));
			}
		},
		Input(), Options(), nullptr);
	ASSERT_EQ(r.locks.size(), 1u);
	const LockStats &l = r.locks[0];
	EXPECT_FALSE(r.blockers_partial);
	EXPECT_EQ(l.acquisitions, static_cast<uint64_t>(n) + waits);
	EXPECT_EQ(l.holds, static_cast<uint64_t>(n) + waits);
	EXPECT_EQ(l.hold_total, static_cast<uint64_t>(n - waits) * 10 + waits * (600 + 100));
	EXPECT_EQ(l.hold_max, 600u);
	EXPECT_EQ(l.contended, waits);
	EXPECT_EQ(l.wait_p99, 500u);
	ASSERT_EQ(l.blockers.size(), 1u);
	EXPECT_EQ(l.blockers[0].caller, A);
	EXPECT_EQ(l.blockers[0].contended, waits);
	EXPECT_EQ(l.blockers[0].wait_total, waits * 500);
	EXPECT_GE(waits, 1u);
	EXPECT_TRUE(r.timeline_truncated); // 3 M holds (300 k), 20000 kept
	EXPECT_EQ(r.timeline.size(), Options().timeline_max);
}

// The model's one-call hold (Model::held, the compact records' fast path)
// against the two events it stands for (EventSink::held's default): the
// same report, text and JSON, on random streams where other threads'
// holds, contended acquisitions and failed trylocks interleave with the
// compact holds, and pauses beyond the settling time let waits be blamed.
TEST(AnalyzeModel, OneCallHoldEqualsItsTwoEvents)
{
	const int seeds = 60 / kStreamScale + 4;
	for (int seed = 1; seed <= seeds; seed++) {
		auto feed = [seed](EventSink &on, bool one_call) {
			uint64_t x = 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(seed);
			auto rnd = [&x](uint64_t n) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				return x % n;
			};
			std::map<std::pair<int64_t, uint64_t>, int64_t> open; // (tid, lock) -> since
			int64_t t = 1000;
			for (int i = 0; i < 3000; i++) {
				t += 1 + static_cast<int64_t>(rnd(rnd(100) == 0 ? 30000000 : 2000));
				const int64_t tid = 1 + static_cast<int64_t>(rnd(4));
				const uint64_t lock = 0x100 * (1 + rnd(3));
				const uint64_t caller = 0x1000 + 0x10 * rnd(3);
				const uint64_t k = rnd(10);
				auto held = open.find({tid, lock});
				if (held != open.end()) { // its own open hold: released
					on(ev(t, tid, Op::MutexUnlock, lock));
					open.erase(held);
				} else if (k < 6) { // a compact hold
					const Event acq =
						ev(t, tid, rnd(4) ? Op::MutexLock : Op::MutexTrylock, lock, 0,
						   false, 0, caller);
					const int64_t end = t + 1 + static_cast<int64_t>(rnd(500));
					if (one_call)
						on.held(acq, end);
					else
						on.EventSink::held(acq, end);
				} else if (k <
					   8) { // an acquisition left open for a while, maybe after a wait
					const bool waited = rnd(2);
					on(ev(t, tid, Op::MutexLock, lock, 0, waited,
					      waited ? 1 + rnd(5000) : 0, caller));
					open[{tid, lock}] = t;
				} else if (k < 9) {
					on(ev(t, tid, Op::MutexTrylock, lock, EBUSY, false, 0, caller));
				} else if (!open.empty()) { // another thread's hold ends
					auto it = open.begin();
					std::advance(it, static_cast<long>(rnd(open.size())));
					on(ev(t, it->first.first, Op::MutexUnlock, it->first.second));
					open.erase(it);
				}
			}
		};
		Options opt;
		std::ostringstream j1, j2, t1, t2;
		const Report a = analyze_feed([&](EventSink &on) { feed(on, true); }, Input(), opt, nullptr);
		const Report b = analyze_feed([&](EventSink &on) { feed(on, false); }, Input(), opt, nullptr);
		write_json(j1, a, opt);
		write_json(j2, b, opt);
		write_text(t1, a, opt);
		write_text(t2, b, opt);
		ASSERT_EQ(j1.str(), j2.str()) << "seed " << seed;
		ASSERT_EQ(t1.str(), t2.str()) << "seed " << seed;
		ASSERT_GT(a.events, 3000u);
	}
}

// Many busy locks: the timeline's candidates over all locks stay within
// their budget (each lock keeps fewer), counts stay exact.
TEST(AnalyzeModel, ManyBusyLocksShareTheTimelineBudget)
{
	// 300 locks (30 in the sanitizer builds): the expectations below hold
	// for any number of equally busy locks above the 5 that are kept.
	const int locks = 300 / kStreamScale, per = 10000;
	Report r = analyze_feed(
		[&](EventSink &on) {
			for (int i = 0; i < per; i++)
				for (int l = 0; l < locks; l++) {
					const int64_t t = (static_cast<int64_t>(i) * locks + l) * 100;
					on(ev(t, 1 + l % 3, Op::MutexLock,
					      0x1000 + static_cast<uint64_t>(l) * 64));
					on(ev(t + 10 + i % 7, 1 + l % 3, Op::MutexUnlock,
					      0x1000 + static_cast<uint64_t>(l) * 64));
				}
		},
		Input(), Options(), nullptr);
	ASSERT_EQ(r.locks.size(), static_cast<size_t>(locks));
	for (const LockStats &l : r.locks) {
		EXPECT_EQ(l.acquisitions, static_cast<uint64_t>(per));
		EXPECT_EQ(l.holds, static_cast<uint64_t>(per));
		EXPECT_EQ(l.hold_max, 16u);
	}
	// The timeline: the 20000 longest holds of the top 5 locks, as without
	// the budget: each lock has 1428 holds of each length 10..16 (i % 7), so
	// all of 16 and 15 (5 x 1428 each), and 5720 of 14.
	EXPECT_TRUE(r.timeline_truncated);
	ASSERT_EQ(r.timeline.size(), Options().timeline_max);
	std::map<int64_t, size_t> by_len;
	for (const Interval &iv : r.timeline)
		by_len[iv.end - iv.start]++;
	EXPECT_EQ(by_len[16], 5u * 1428);
	EXPECT_EQ(by_len[15], 5u * 1428);
	EXPECT_EQ(by_len[14], 20000u - 2 * 5 * 1428);
	EXPECT_EQ(by_len.size(), 3u);
}

TEST(AnalyzeModel, ReportsRenderAndEscape)
{
	Input in;
	in.procs.push_back({"we\"ird<name>", 1, ""});
	in.events = {ev(1, 1, Op::RwWrlock, 0x10, 0, true, 5000), ev(9000, 1, Op::RwUnlock, 0x10)};
	Report r = analyze(in, Options(), [](uint32_t, uint64_t a, bool code) {
		Symbol s;
		s.function = code ? "f<int>\"" : "g_lock";
		s.location = code ? "x.c:1" : "";
		(void)a;
		return s;
	});
	std::ostringstream j, h, t;
	write_json(j, r, Options());
	write_html(h, r, Options());
	write_text(t, r, Options());
	EXPECT_NE(j.str().find("\"kind\": \"rwlock\""), std::string::npos);
	EXPECT_NE(j.str().find("\"name\": \"we\\\"ird<name>\""), std::string::npos);
	EXPECT_NE(j.str().find("\"symbol\": \"g_lock\""), std::string::npos);
	EXPECT_EQ(h.str().find("<name>"), std::string::npos);
	EXPECT_NE(h.str().find("we&quot;ird&lt;name&gt;"), std::string::npos);
	EXPECT_NE(h.str().find("<svg"), std::string::npos);
	EXPECT_NE(t.str().find("g_lock"), std::string::npos);
}

// Names are shown whole in the text table, however long (memcached's
// "(io_threads_mute..." was cut at 34 columns), and the columns stay aligned.
TEST(AnalyzeModel, TextTableShowsNamesWhole)
{
	Input in;
	in.procs.push_back({"a-process-with-a-rather-long-name-indeed", 1, ""});
	in.procs.push_back({"p2", 2, ""});
	in.events = {ev(1, 1, Op::MutexLock, 0x10), ev(9, 1, Op::MutexUnlock, 0x10)};
	Event e2 = ev(20, 2, Op::MutexLock, 0x20, 0, true, 5);
	e2.proc = 1;
	in.events.push_back(e2);
	const std::string longname = "io_threads_mutex_of_a_very_long_static_name_in_a_namespace";
	Report r = analyze(in, Options(), [&](uint32_t, uint64_t a, bool code) {
		Symbol s;
		if (!code && a == 0x10)
			s.function = longname;
		return s;
	});
	std::ostringstream t;
	write_text(t, r, Options());
	const std::string text = t.str();
	EXPECT_NE(text.find("0x10 (" + longname + ")"), std::string::npos) << text;
	EXPECT_NE(text.find("a-process-with-a-rather-long-name-indeed[1]"), std::string::npos) << text;
	// Header and rows: the "kind" column starts at the same offset.
	std::istringstream lines(text);
	std::string line;
	std::vector<size_t> at;
	while (std::getline(lines, line))
		if (line.find(" mutex ") != std::string::npos || line.find(" kind ") != std::string::npos)
			at.push_back(
				line.find(line.find(" kind ") != std::string::npos ? " kind " : " mutex "));
	ASSERT_EQ(at.size(), 3u) << text;
	EXPECT_EQ(at[0], at[1]);
	EXPECT_EQ(at[1], at[2]);
}

TEST(AnalyzeModel, TimelineKeepsLongestWaitsWhenBounded)
{
	Input in;
	in.procs.push_back({"p", 1, ""});
	const uint64_t L = 0x40;
	int64_t t = 0;
	// 10 short uncontended holds, then one long wait + hold, then 10 more.
	for (int i = 0; i < 21; i++) {
		bool big = i == 10;
		in.events.push_back(ev(t + (big ? 1000 : 10), 1, Op::MutexLock, L, 0, big, big ? 990 : 0));
		in.events.push_back(ev(t + (big ? 1500 : 20), 1, Op::MutexUnlock, L));
		t += 2000;
	}
	Options opt;
	opt.timeline_max = 3;
	Report r = analyze(in, opt, nullptr);
	ASSERT_EQ(r.timeline.size(), 3u);
	EXPECT_TRUE(r.timeline_truncated);
	EXPECT_TRUE(r.timeline[0].wait || r.timeline[1].wait || r.timeline[2].wait);
	bool long_hold = false;
	for (const Interval &iv : r.timeline)
		long_hold = long_hold || (!iv.wait && iv.end - iv.start == 500);
	EXPECT_TRUE(long_hold);
	for (size_t i = 1; i < r.timeline.size(); i++)
		EXPECT_LE(r.timeline[i - 1].start, r.timeline[i].start);
}

TEST(AnalyzeModel, BlockersShareWaitsByOverlap)
{
	// t1 holds [0,100) (site A); t2 waits [10,100) then holds [100,130)
	// (site B); t3 waits [20,130) then holds [130,140) (site C).
	Input in;
	in.procs.push_back({"p", 1, ""});
	const uint64_t L = 0x50, A = 0xa, B = 0xb, C = 0xc;
	in.events = {
		ev(0, 1, Op::MutexLock, L, 0, false, 0, A),    ev(100, 1, Op::MutexUnlock, L),
		ev(100, 2, Op::MutexLock, L, 0, true, 90, B),  ev(130, 2, Op::MutexUnlock, L),
		ev(130, 3, Op::MutexLock, L, 0, true, 110, C), ev(140, 3, Op::MutexUnlock, L),
	};
	Report r = analyze(in, Options(), nullptr);
	ASSERT_EQ(r.locks.size(), 1u);
	const LockStats &l = r.locks[0];
	ASSERT_EQ(l.blockers.size(), 2u);
	EXPECT_EQ(l.blockers[0].caller, A); // 90 (t2) + 80 (t3)
	EXPECT_EQ(l.blockers[0].contended, 2u);
	EXPECT_EQ(l.blockers[0].wait_total, 170u);
	EXPECT_EQ(l.blockers[0].wait_max, 90u);
	EXPECT_EQ(l.blockers[1].caller, B); // 30 of t3's wait
	EXPECT_EQ(l.blockers[1].contended, 1u);
	EXPECT_EQ(l.blockers[1].wait_total, 30u);
}

TEST(AnalyzeModel, LateUnlockEventIsCappedByTheNextAcquisition)
{
	// t1's unlock event is stamped at 150 (preempted after the real unlock),
	// but t2 owned the mutex from 100: t1's hold ends at 100.
	Input in;
	in.procs.push_back({"p", 1, ""});
	const uint64_t L = 0x60;
	in.events = {
		ev(0, 1, Op::MutexLock, L, 0, false, 0, 0xa),
		ev(100, 2, Op::MutexLock, L, 0, true, 90, 0xb),
		ev(150, 1, Op::MutexUnlock, L),
		ev(200, 2, Op::MutexUnlock, L),
		// Read holds may overlap: a second reader does not end the first.
		ev(300, 1, Op::RwRdlock, 0x70),
		ev(310, 2, Op::RwRdlock, 0x70),
		ev(320, 1, Op::RwUnlock, 0x70),
		ev(330, 2, Op::RwUnlock, 0x70),
	};
	Report r = analyze(in, Options(), nullptr);
	ASSERT_EQ(r.locks.size(), 2u);
	const LockStats &m = r.locks[0];
	EXPECT_EQ(m.addr, L);
	EXPECT_EQ(m.holds, 2u);
	EXPECT_EQ(m.hold_max, 100u);
	EXPECT_EQ(m.hold_total, 200u);
	EXPECT_EQ(r.unmatched_unlocks, 0u);
	ASSERT_EQ(m.blockers.size(), 1u);
	EXPECT_EQ(m.blockers[0].wait_total, 90u);
	const LockStats &rw = r.locks[1];
	EXPECT_EQ(rw.holds, 2u);
	EXPECT_EQ(rw.hold_max, 20u);
}

TEST(AnalyzeModel, CondWaitReleaseSeenAfterAHandoff)
{
	// A waits on a condvar from 100 to 500 (its event comes at 500); B takes
	// the mutex meanwhile at 200.  A's first hold ends at 100, not at 200.
	Input in;
	in.procs.push_back({"p", 1, ""});
	const uint64_t M = 0x80;
	Event cw = ev(500, 1, Op::CondWait, M, 0, false, 400);
	cw.cond = 0xc8;
	in.events = {
		ev(0, 1, Op::MutexLock, M),     ev(200, 2, Op::MutexLock, M),
		ev(250, 2, Op::MutexUnlock, M), cw,
		ev(530, 1, Op::MutexUnlock, M),
	};
	Report r = analyze(in, Options(), nullptr);
	ASSERT_EQ(r.locks.size(), 1u);
	EXPECT_EQ(r.locks[0].holds, 3u);
	EXPECT_EQ(r.locks[0].hold_max, 100u);
	EXPECT_EQ(r.locks[0].hold_total, 100u + 50u + 30u);
	EXPECT_EQ(r.unmatched_unlocks, 0u);
}

// ---- symbolizer ------------------------------------------------------------

extern "C" __attribute__((noinline, used)) int strata_test_symbolized_function(int x)
{
	return x * 3 + 1;
}
int strata_test_symbolized_data = 42;

namespace {

// This process's file-backed mappings, as the preload library records them.
std::vector<Mapping> own_maps()
{
	std::vector<Mapping> out;
	FILE *f = std::fopen("/proc/self/maps", "r");
	char line[4096];
	while (f && std::fgets(line, sizeof line, f)) {
		unsigned long long s = 0, e = 0, off = 0;
		char perms[8] = {}, path[3000] = {};
		if (std::sscanf(line, "%llx-%llx %7s %llx %*s %*s %2999s", &s, &e, perms, &off, path) == 5 &&
		    path[0] == '/' && perms[2] == 'x')
			out.push_back({0, s, e, off, path});
	}
	if (f)
		std::fclose(f);
	return out;
}

} // namespace

// Counting mode (docs/pthread.md): counted pairs are acquisitions and holds
// of their lock and site, with no interval; untimed holds count at the
// timed mean; a process whose counts end without its final flush is named.
TEST(AnalyzeModel, CountedPairs)
{
	Input in;
	in.procs.push_back({"prog", 42, ""});
	in.procs.push_back({"child", 43, ""});
	const uint64_t A = 0xa000;
	auto counts = [](int64_t ts, uint32_t proc, uint64_t n, uint64_t timed, uint64_t sum, uint64_t max,
			 uint64_t waited, uint64_t caller) {
		Event e = ev(ts, 1, Op::MutexCounts, 0xa000, 0, false, 0, caller);
		e.proc = proc;
		e.count = n;
		e.timed = timed;
		e.hold_sum = sum;
		e.hold_max = max;
		e.waited_untimed = waited;
		return e;
	};
	Event done = ev(900, 1, Op::CountsDone, 0);
	in.events = {
		ev(100, 2, Op::MutexLock, A, 0, true, 50, 0x222), // a contended one, in full
		ev(150, 2, Op::MutexUnlock, A),
		counts(200, 0, 1000, 1000, 20000, 90, 0, 0x111),
		counts(300, 0, 160, 10, 300, 95, 1, 0x333), // sampled: 150 untimed at 30 ns
		done,
		counts(400, 1, 7, 7, 70, 12, 0, 0x111), // the child: no final flush after it
	};
	Report r = analyze(in, Options(), nullptr);
	const LockStats *a = find(r, A);
	ASSERT_TRUE(a);
	EXPECT_EQ(a->acquisitions, 1161u);
	EXPECT_EQ(a->counted, 1160u);
	EXPECT_EQ(a->untimed, 150u);
	EXPECT_EQ(a->holds, 1161u);
	EXPECT_EQ(a->hold_total, 50u + 20000u + 300u + 150u * 30u);
	EXPECT_EQ(a->hold_max, 95u);
	EXPECT_EQ(a->contended, 1u);
	EXPECT_EQ(a->wait_total, 50u);
	ASSERT_EQ(a->sites.size(), 3u);
	EXPECT_EQ(a->sites[0].caller, 0x222u); // by wait, then acquisitions
	EXPECT_EQ(a->sites[1].caller, 0x111u);
	EXPECT_EQ(a->sites[1].acquisitions, 1000u);
	EXPECT_EQ(r.counted, 1167u);
	EXPECT_EQ(r.untimed, 150u);
	EXPECT_EQ(r.waited_untimed, 1u);
	EXPECT_TRUE(r.blockers_partial);
	EXPECT_EQ(r.counts_unfinished, std::vector<uint32_t>{1});
	EXPECT_TRUE(std::none_of(r.timeline.begin(), r.timeline.end(),
				 [](const Interval &iv) { return iv.end - iv.start == 0; }));
	std::ostringstream text, json;
	write_text(text, r, Options());
	write_json(json, r, Options());
	EXPECT_NE(text.str().find("1167 uncontended acquisitions were counted"), std::string::npos);
	EXPECT_NE(text.str().find("COUNTS INCOMPLETE: child"), std::string::npos) << text.str();
	EXPECT_NE(json.str().find("\"counts_unfinished\": [1]"), std::string::npos);
	EXPECT_NE(json.str().find("\"counted\": 1160, \"untimed\": 150"), std::string::npos);
}

// The lock model's FIFO (lock_model.h's Ring): its first chunk grows in
// place from first_chunk() elements to a whole chunk, then chunks are
// added; through every step it answers as a deque does, and its last chunk
// is full exactly at the sizes the lock model's held() relies on.
TEST(AnalyzeRing, GrowsInPlaceThenByChunksLikeADeque)
{
	using strata::analyze::model::Ring;
	Ring<int64_t> ring;
	std::deque<int64_t> want;
	uint64_t pushed = 0, state = 12345;
	auto rnd = [&state](uint64_t n) {
		state = state * 6364136223846793005ull + 1442695040888963407ull;
		return (state >> 33) % n;
	};
	const size_t first = Ring<int64_t>::first_chunk(), chunk = Ring<int64_t>::chunk();
	ASSERT_LT(first, chunk);
	for (int step = 0; step < 200000; step++) {
		const uint64_t r = rnd(100);
		if (r < 70 || want.empty()) { // pushes outrun pops: the ring grows through its sizes
			// Full only where the pushes so far (counted from the first,
			// as held()'s n is) reach a size the chunks can end at (or
			// before the first push); and full there unless emptied.
			const bool at_end = pushed >= chunk ? pushed % chunk == 0
							    : pushed >= first && (pushed & (pushed - 1)) == 0;
			ASSERT_TRUE(!ring.full() || at_end || pushed == 0) << pushed;
			ASSERT_TRUE(!at_end || ring.empty() || ring.full()) << pushed;
			ring.push_back(static_cast<int64_t>(pushed));
			want.push_back(static_cast<int64_t>(pushed));
			pushed++;
		} else if (r < 90) {
			ring.pop_front();
			want.pop_front();
		} else if (r < 97) {
			const size_t n = rnd(want.size() + 1);
			ring.drop_front(n);
			want.erase(want.begin(), want.begin() + static_cast<ptrdiff_t>(n));
		} else {
			size_t run = 0;
			const size_t i = rnd(want.size());
			const int64_t *p = ring.run(i, &run);
			ASSERT_GE(run, 1u);
			for (size_t k = 0; k < run; k++)
				ASSERT_EQ(p[k], want[i + k]);
		}
		ASSERT_EQ(ring.size(), want.size());
		if (!want.empty()) {
			ASSERT_EQ(ring.front(), want.front());
			ASSERT_EQ(ring.back(), want.back());
			const size_t i = rnd(want.size());
			ASSERT_EQ(ring[i], want[i]);
		}
	}
	EXPECT_GT(pushed, 8 * chunk); // the run went past the first chunk's growth
}

TEST(AnalyzeSymbols, OwnFunctionDataAndLine)
{
	SymbolTable t(own_maps());
	uint64_t fn = reinterpret_cast<uint64_t>(&strata_test_symbolized_function);
	Symbol s = t.lookup(0, fn + 1, true);
	EXPECT_EQ(s.function, "strata_test_symbolized_function+0x1");
	EXPECT_NE(s.location.find("analyze_model_test.cpp:"), std::string::npos) << s.location;
	Symbol d = t.lookup(0, reinterpret_cast<uint64_t>(&strata_test_symbolized_data), false);
	EXPECT_EQ(d.function, "strata_test_symbolized_data");
	EXPECT_EQ(t.lookup(1, fn, true).function, ""); // unknown process
}

// An address shown without its process (strata query's table) is named
// when every process that maps it names it the same: a fork child's copy
// agrees; a process with the object elsewhere names it otherwise, and
// then the address has no name.
TEST(AnalyzeSymbols, UniqueNameAcrossProcesses)
{
	std::vector<Mapping> maps = own_maps();
	const size_t own = maps.size();
	for (size_t i = 0; i < own; i++) {
		Mapping child = maps[i];
		child.proc = 1;
		maps.push_back(child);
	}
	const uint64_t fn = reinterpret_cast<uint64_t>(&strata_test_symbolized_function);
	{
		SymbolTable t(maps);
		EXPECT_EQ(t.unique_name(fn + 1), "strata_test_symbolized_function+0x1");
		EXPECT_EQ(t.unique_name(reinterpret_cast<uint64_t>(&strata_test_symbolized_data)),
			  "strata_test_symbolized_data");
		EXPECT_EQ(t.unique_name(0x10), ""); // mapped by none
	}
	for (size_t i = 0; i < own; i++) {
		Mapping moved = maps[i];
		moved.proc = 2;
		moved.start += 0x1000;
		moved.end += 0x1000;
		maps.push_back(moved);
	}
	SymbolTable t(maps);
	const std::string other = t.lookup(2, fn + 1, false).function; // 0x1000 further into the text
	ASSERT_NE(other, "");
	ASSERT_NE(other, "strata_test_symbolized_function+0x1");
	EXPECT_EQ(t.unique_name(fn + 1), "");
}

// A stripped binary: its addresses show as object+offset and the report
// names its build id and the debug file to get; with that debug file under
// a .build-id directory libdw searches, the symbols come back.
TEST(AnalyzeSymbols, StrippedBinaryByBuildId)
{
	FILE *f = std::fopen(PT_STRIPPED, "rb");
	ASSERT_TRUE(f);
	unsigned char eh[64];
	ASSERT_EQ(std::fread(eh, 1, sizeof eh, f), sizeof eh);
	std::fclose(f);
	uint64_t entry;
	std::memcpy(&entry, eh + 24, 8); // e_entry: _start
	uint16_t type;
	std::memcpy(&type, eh + 16, 2); // e_type
	// A position-independent binary (ET_DYN) mapped where the loader would
	// put it; one that is not (ET_EXEC: the ASan build links executables so)
	// where its addresses say, its entry an address already.
	const uint64_t base = type == 2 ? 0 : 0x7f0000000000;
	const uint64_t start = type == 2 ? (entry & ~0xfffffull) : base;
	const std::vector<Mapping> maps = {{0, start, start + 0x100000, 0, PT_STRIPPED}};
	std::string id;
	{
		unsetenv("STRATA_DEBUGINFO_PATH");
		SymbolTable t(maps);
		Symbol s = t.lookup(0, base + entry, false);
		EXPECT_EQ(s.function.rfind("pt_stripped+0x", 0), 0u) << s.function;
		std::vector<MissingDebug> m = t.missing_debug();
		ASSERT_EQ(m.size(), 1u);
		EXPECT_EQ(m[0].object, PT_STRIPPED);
		ASSERT_EQ(m[0].build_id.size(), 40u); // SHA-1, gcc's default
		id = m[0].build_id;
		EXPECT_EQ(m[0].debug_file,
			  "/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug");
		EXPECT_EQ(m[0].package, ""); // not installed by a package
		Report r;
		r.missing_debug = m;
		std::ostringstream txt;
		write_text(txt, r, Options());
		EXPECT_NE(txt.str().find("build id " + id), std::string::npos) << txt.str();
		EXPECT_NE(txt.str().find("DEBUGINFOD_URLS"), std::string::npos) << txt.str();
	}
	char dir[] = "/tmp/strata-pt-dbgXXXXXX";
	ASSERT_TRUE(mkdtemp(dir));
	const std::string sub = std::string(dir) + "/.build-id/" + id.substr(0, 2);
	const std::string dbg = sub + "/" + id.substr(2) + ".debug";
	ASSERT_EQ(mkdir((std::string(dir) + "/.build-id").c_str(), 0700), 0);
	ASSERT_EQ(mkdir(sub.c_str(), 0700), 0);
	ASSERT_EQ(symlink(PT_STRIPPED ".symbols", dbg.c_str()), 0);
	setenv("STRATA_DEBUGINFO_PATH", dir, 1);
	{
		SymbolTable t(maps);
		EXPECT_EQ(t.lookup(0, base + entry, false).function, "_start");
		EXPECT_TRUE(t.missing_debug().empty());
	}
	unsetenv("STRATA_DEBUGINFO_PATH");
	unlink(dbg.c_str());
	rmdir(sub.c_str());
	rmdir((std::string(dir) + "/.build-id").c_str());
	rmdir(dir);
}

TEST(AnalyzeSymbols, HostilePathsAreNotOpenedForReading)
{
	// A trace may name any path: a FIFO must not block, a directory or a
	// non-ELF file must not be taken for an object.
	char dir[] = "/tmp/strata-pt-symXXXXXX";
	ASSERT_TRUE(mkdtemp(dir));
	std::string fifo = std::string(dir) + "/fifo", text = std::string(dir) + "/text";
	ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
	FILE *f = std::fopen(text.c_str(), "w");
	ASSERT_TRUE(f);
	std::fputs("not an ELF file\n", f);
	std::fclose(f);
	SymbolTable t(
		{{0, 0x1000, 0x2000, 0, fifo}, {0, 0x3000, 0x4000, 0, dir}, {0, 0x5000, 0x6000, 0, text}});
	EXPECT_EQ(t.lookup(0, 0x1800, true).function, "");
	EXPECT_EQ(t.lookup(0, 0x3800, true).function, "");
	EXPECT_EQ(t.lookup(0, 0x5800, true).function, "");
	unlink(fifo.c_str());
	unlink(text.c_str());
	rmdir(dir);
}
