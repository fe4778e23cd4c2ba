/*
 * Aggregation in the process (libtrace/runtime/agg.h, agg_layout.h, agg_reader.h):
 * the aggregates equal what the test computes from the events it emitted,
 * read through a second, read-only mapping of the region's memfd as another
 * process would, live while threads hit and exactly once they stop; keys by
 * integer field, string field, thread and event; overflow of a full table
 * counted exactly; a forked child's own region; the STRATA_AGGREGATE
 * syntax; a region the reader must refuse.
 */
#define STRATA_DEFINE_PROVIDERS
#include <strata/tracepoint.h>
STRATA_EVENT(aggt, op, STRATA_LOGLEVEL_INFO, strata_hex(uint64_t, lock), strata_int(uint64_t, wait_ns),
	     strata_string(path))
STRATA_EVENT(aggt, other, STRATA_LOGLEVEL_INFO, strata_int(int32_t, wait_ns))
STRATA_EVENT(aggt, novalue, STRATA_LOGLEVEL_INFO, strata_string(wait_ns))
// Fields after a sequence (two arguments), of every integer size.
STRATA_EVENT(aggt, mixed, STRATA_LOGLEVEL_INFO, strata_sequence(uint8_t, blob), strata_int(int16_t, small),
	     strata_int(uint8_t, k8), strata_int(uint64_t, big), strata_int(int32_t, mid))

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "agg.h"
#include "agg_reader.h"

namespace {

strata_agg_spec spec(const char *pattern, const char *value, const char *key, uint32_t max_keys)
{
	strata_agg_spec s{};
	snprintf(s.pattern, sizeof s.pattern, "%s", pattern);
	snprintf(s.value_field, sizeof s.value_field, "%s", value);
	snprintf(s.key_field, sizeof s.key_field, "%s", key);
	s.max_keys = max_keys;
	return s;
}

// The region as another process maps it: read-only, from the memfd.
struct View {
	void *map = MAP_FAILED;
	size_t len = 0;
	explicit View(int fd)
	{
		len = (size_t)lseek(fd, 0, SEEK_END);
		map = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
		EXPECT_NE(MAP_FAILED, map);
	}
	~View()
	{
		if (map != MAP_FAILED)
			munmap(map, len);
	}
	strata::AggSnapshot read()
	{
		strata::AggSnapshot s;
		std::string err;
		EXPECT_TRUE(strata::agg_read(map, len, &s, &err)) << err;
		return s;
	}
};

struct Expect {
	uint64_t count = 0;
	int64_t sum = 0, min = INT64_MAX, max = INT64_MIN;
	std::array<uint64_t, STRATA_AGG_BUCKETS> hist{};
	void add(int64_t v)
	{
		count++;
		sum = (int64_t)((uint64_t)sum + (uint64_t)v); // wraps, as the region's atomic add
		min = std::min(min, v);
		max = std::max(max, v);
		unsigned b = 0;
		while (b < 63 && v >= (int64_t)1 << b) // 2^(b) <= v: bucket b + 1
			b++;
		hist[v <= 0 ? 0 : b]++;
	}
};

void expect_key(const strata::AggKey &k, const Expect &e)
{
	EXPECT_EQ(e.count, k.count) << k.key << " " << k.text;
	EXPECT_EQ(e.sum, k.sum) << k.key;
	EXPECT_EQ(e.min, k.min) << k.key;
	EXPECT_EQ(e.max, k.max) << k.key;
	EXPECT_EQ(e.hist, k.hist) << k.key;
}

constexpr uint32_t kThreads = 4, kPerThread = 5000, kLocks = 10;

uint64_t wait_of(uint32_t t, uint32_t i)
{
	// 0, small, and values across many log2 buckets (up to 2^40).
	return i % 7 == 0 ? 0 : ((uint64_t)(i * 2654435761u + t) >> (i % 24));
}

TEST(Agg, ByIntegerKeyExactAndLiveFromThreads)
{
	strata_rt_agg *ag;
	const strata_agg_spec s = spec("aggt:op", "wait_ns", "lock", 64);
	ASSERT_EQ(0, strata_rt_agg_open(&s, &ag));
	View v(strata_rt_agg_fd(ag));
	std::atomic<uint32_t> done{0};
	std::vector<std::thread> ts;
	for (uint32_t t = 0; t < kThreads; t++)
		ts.emplace_back([t, &done] {
			for (uint32_t i = 0; i < kPerThread; i++)
				strata_tracepoint(aggt, op, 0x1000 + (i % kLocks), wait_of(t, i), "p");
			done.fetch_add(1);
		});
	// Live reads while they run: counts only grow, never past the total.
	uint64_t last = 0;
	while (done.load() != kThreads) {
		strata::AggSnapshot snap = v.read();
		uint64_t c = 0;
		for (auto &k : snap.keys)
			c += k.count;
		EXPECT_GE(c, last);
		EXPECT_LE(c, (uint64_t)kThreads * kPerThread);
		last = c;
	}
	for (auto &t : ts)
		t.join();
	std::map<uint64_t, Expect> want;
	for (uint32_t t = 0; t < kThreads; t++)
		for (uint32_t i = 0; i < kPerThread; i++)
			want[0x1000 + (i % kLocks)].add((int64_t)wait_of(t, i));
	strata::AggSnapshot snap = v.read();
	EXPECT_EQ((uint64_t)kThreads * kPerThread, snap.hits);
	EXPECT_EQ(0u, snap.overflow);
	EXPECT_EQ(0u, snap.no_value);
	EXPECT_EQ("aggt:op", snap.pattern);
	EXPECT_EQ("lock", snap.key_field);
	EXPECT_EQ((uint32_t)getpid(), snap.pid);
	ASSERT_EQ(want.size(), snap.keys.size());
	for (auto &k : snap.keys) {
		ASSERT_TRUE(want.count(k.key)) << k.key;
		expect_key(k, want[k.key]);
	}
	strata_rt_agg_close(ag);
	strata_tracepoint(aggt, op, 1, 1, "after"); // no probe, no region: nothing happens
}

// The per-description read plan (agg.cpp, field codes): argv indexes past a
// sequence, 1/2/4/8-byte fields, signed ones sign-extended, an unsigned
// 64-bit value above INT64_MAX clamped; the plan cached after the first hit
// gives the same figures on every later one.
TEST(Agg, FieldsOfEverySizeAfterASequence)
{
	strata_rt_agg *by_k8, *big_by_mid;
	const strata_agg_spec s1 = spec("aggt:mixed", "small", "k8", 16);
	const strata_agg_spec s2 = spec("aggt:mixed", "big", "mid", 16);
	ASSERT_EQ(0, strata_rt_agg_open(&s1, &by_k8));
	ASSERT_EQ(0, strata_rt_agg_open(&s2, &big_by_mid));
	std::map<uint64_t, Expect> want1, want2;
	const uint8_t blob[3] = {1, 2, 3};
	for (int i = 0; i < 300; i++) {
		const int16_t small = (int16_t)(i * 37 - 5000);
		const uint8_t k8 = (uint8_t)(200 + i % 5);
		const uint64_t big = i % 3 == 0 ? UINT64_MAX - (uint64_t)i : (uint64_t)i << 33;
		const int32_t mid = -(i % 4);
		strata_tracepoint(aggt, mixed, blob, (size_t)(i % 4), small, k8, big, mid);
		want1[k8].add(small);
		want2[(uint64_t)(int64_t)mid].add(big > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)big);
	}
	View v1(strata_rt_agg_fd(by_k8)), v2(strata_rt_agg_fd(big_by_mid));
	strata::AggSnapshot a = v1.read(), b = v2.read();
	EXPECT_EQ(300u, a.hits);
	EXPECT_EQ(0u, a.no_value);
	ASSERT_EQ(want1.size(), a.keys.size());
	for (auto &k : a.keys) {
		ASSERT_TRUE(want1.count(k.key)) << k.key;
		expect_key(k, want1[k.key]);
	}
	EXPECT_EQ(300u, b.hits);
	ASSERT_EQ(want2.size(), b.keys.size());
	for (auto &k : b.keys) {
		ASSERT_TRUE(want2.count(k.key)) << k.key;
		expect_key(k, want2[k.key]);
	}
	strata_rt_agg_close(by_k8);
	strata_rt_agg_close(big_by_mid);
}

TEST(Agg, OverflowOfAFullTableCountedExactly)
{
	strata_rt_agg *ag;
	const strata_agg_spec s = spec("aggt:op", "", "lock", 8);
	ASSERT_EQ(0, strata_rt_agg_open(&s, &ag));
	// Keys 0..19 in order, five times: the first round takes 8 entries.
	for (int r = 0; r < 5; r++)
		for (uint64_t k = 0; k < 20; k++)
			strata_tracepoint(aggt, op, k, 0, "");
	View v(strata_rt_agg_fd(ag));
	strata::AggSnapshot snap = v.read();
	EXPECT_EQ(100u, snap.hits);
	EXPECT_EQ(12u * 5, snap.overflow);
	ASSERT_EQ(8u, snap.keys.size());
	for (auto &k : snap.keys) {
		EXPECT_LT(k.key, 8u);
		EXPECT_EQ(5u, k.count);
		EXPECT_EQ(0, k.sum); // counts only: no value kept
	}
	strata_rt_agg_close(ag);
}

TEST(Agg, KeysByStringThreadAndEvent)
{
	strata_rt_agg *by_path, *by_tid, *by_event;
	const strata_agg_spec sp = spec("aggt:op", "wait_ns", "path", 16);
	const strata_agg_spec st = spec("aggt:op", "", "$tid", 16);
	const strata_agg_spec se = spec("aggt:*", "wait_ns", "$event", 16);
	ASSERT_EQ(0, strata_rt_agg_open(&sp, &by_path));
	ASSERT_EQ(0, strata_rt_agg_open(&st, &by_tid));
	ASSERT_EQ(0, strata_rt_agg_open(&se, &by_event));
	const char *paths[3] = {"/tmp/a", "/var/log/a-rather-long-path-that-is-truncated-in-the-key",
				"/tmp/b"};
	std::map<std::string, Expect> want_path;
	Expect want_op, want_other;
	std::vector<std::thread> ts;
	for (uint32_t t = 0; t < 3; t++)
		ts.emplace_back([t, &paths] {
			for (uint32_t i = 0; i < 1000 * (t + 1); i++)
				strata_tracepoint(aggt, op, 1, i, paths[(i + t) % 3]);
		});
	for (auto &t : ts)
		t.join();
	for (uint32_t t = 0; t < 3; t++)
		for (uint32_t i = 0; i < 1000 * (t + 1); i++) {
			want_path[std::string(paths[(i + t) % 3]).substr(0, STRATA_AGG_KEY_TEXT - 1)].add(i);
			want_op.add(i);
		}
	for (int32_t i = -5; i < 5; i++) {
		strata_tracepoint(aggt, other, i);
		want_other.add(i);
	}
	strata_tracepoint(aggt, novalue, "no number here");

	View vp(strata_rt_agg_fd(by_path)), vt(strata_rt_agg_fd(by_tid)), ve(strata_rt_agg_fd(by_event));
	strata::AggSnapshot p = vp.read(), t = vt.read(), e = ve.read();
	ASSERT_EQ(3u, p.keys.size());
	for (auto &k : p.keys) {
		ASSERT_TRUE(want_path.count(k.text)) << k.text;
		expect_key(k, want_path[k.text]);
	}
	// One key per thread, 1000, 2000 and 3000 hits: largest first.
	ASSERT_EQ(3u, t.keys.size());
	EXPECT_EQ(3000u, t.keys[0].count);
	EXPECT_EQ(2000u, t.keys[1].count);
	EXPECT_EQ(1000u, t.keys[2].count);
	EXPECT_NE(t.keys[0].key, t.keys[1].key);
	// By event: op and other, and novalue counted as lacking the value.
	EXPECT_EQ(1u, e.no_value);
	ASSERT_EQ(2u, e.keys.size());
	EXPECT_EQ("aggt:op", e.keys[0].text);
	expect_key(e.keys[0], want_op);
	EXPECT_EQ("aggt:other", e.keys[1].text);
	expect_key(e.keys[1], want_other); // signed values, negative ones in bucket 0
	strata_rt_agg_close(by_path);
	strata_rt_agg_close(by_tid);
	strata_rt_agg_close(by_event);
}

TEST(Agg, ParsesTheEnvironmentSyntax)
{
	strata_agg_spec s;
	char err[128];
	ASSERT_EQ(0,
		  strata_rt_agg_parse("  pthread:mutex_lock:wait_ns by lock limit 64 ", &s, err, sizeof err))
		<< err;
	EXPECT_STREQ("pthread:mutex_lock", s.pattern);
	EXPECT_STREQ("wait_ns", s.value_field);
	EXPECT_STREQ("lock", s.key_field);
	EXPECT_EQ(64u, s.max_keys);
	ASSERT_EQ(0, strata_rt_agg_parse("app:*", &s, err, sizeof err)) << err;
	EXPECT_STREQ("app:*", s.pattern);
	EXPECT_STREQ("", s.value_field);
	EXPECT_STREQ("", s.key_field);
	EXPECT_EQ(256u, s.max_keys);
	ASSERT_EQ(0, strata_rt_agg_parse("app:req by $tid", &s, err, sizeof err)) << err;
	EXPECT_STREQ("$tid", s.key_field);
	for (const char *bad :
	     {"", "app", ":req", "app:", "app::x", "app:req by", "app:req with x", "app:req limit 0",
	      "app:req limit 5000", "app:req by $pid", "a:b c d e f g h"}) {
		err[0] = 0;
		EXPECT_EQ(-EINVAL, strata_rt_agg_parse(bad, &s, err, sizeof err)) << bad;
		EXPECT_NE(0, err[0]) << bad;
	}
}

TEST(Agg, AForkedChildCountsInARegionOfItsOwn)
{
	strata_rt_agg *ag;
	const strata_agg_spec s = spec("aggt:op", "wait_ns", "lock", 8);
	ASSERT_EQ(0, strata_rt_agg_open(&s, &ag));
	for (int i = 0; i < 5; i++)
		strata_tracepoint(aggt, op, 1, 10, "");
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) { // the child's own region: 3 hits of its own, none of the parent's
		for (int i = 0; i < 3; i++)
			strata_tracepoint(aggt, op, 2, 20, "");
		View v(strata_rt_agg_fd(ag));
		strata::AggSnapshot c = v.read();
		const bool ok = c.hits == 3 && c.pid == (uint32_t)getpid() && c.keys.size() == 1 &&
				c.keys[0].key == 2 && c.keys[0].count == 3 && c.keys[0].sum == 60;
		_exit(ok ? 0 : 1);
	}
	int st = 0;
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "the child's region";
	View v(strata_rt_agg_fd(ag));
	strata::AggSnapshot p = v.read(); // the parent's: untouched by the child
	EXPECT_EQ(5u, p.hits);
	ASSERT_EQ(1u, p.keys.size());
	EXPECT_EQ(1u, p.keys[0].key);
	EXPECT_EQ(5u, p.keys[0].count);
	strata_rt_agg_close(ag);
}

TEST(Agg, RefusedSpecsAndRegions)
{
	strata_rt_agg *ag;
	strata_agg_spec s = spec("aggt:op", "", "$nope", 8);
	EXPECT_EQ(-EINVAL, strata_rt_agg_open(&s, &ag));
	s = spec("aggt:op", "", "", 0);
	EXPECT_EQ(-EINVAL, strata_rt_agg_open(&s, &ag));
	s = spec("aggt:op", "", "", STRATA_AGG_MAX_ENTRIES + 1);
	EXPECT_EQ(-EINVAL, strata_rt_agg_open(&s, &ag));
	s = spec("", "", "", 1);
	EXPECT_EQ(-EINVAL, strata_rt_agg_open(&s, &ag));

	// A region as hostile input: each corruption refused with a reason.
	std::vector<uint8_t> buf(sizeof(strata_agg_header) + 2 * sizeof(strata_agg_entry));
	auto *h = reinterpret_cast<strata_agg_header *>(buf.data());
	auto good = [&] {
		memset(buf.data(), 0, buf.size());
		h->magic = STRATA_AGG_MAGIC;
		h->version = STRATA_AGG_VERSION;
		h->header_size = sizeof(strata_agg_header);
		h->entry_size = sizeof(strata_agg_entry);
		h->n_entries = 2;
		memset(h->pattern, 'x', sizeof h->pattern); // unterminated: bounded
	};
	strata::AggSnapshot snap;
	std::string err;
	good();
	ASSERT_TRUE(strata::agg_read(buf.data(), buf.size(), &snap, &err)) << err;
	EXPECT_EQ(std::string(sizeof h->pattern, 'x'), snap.pattern);
	EXPECT_FALSE(strata::agg_read(buf.data(), sizeof(strata_agg_header) - 1, &snap, &err));
	h->magic = 0;
	EXPECT_FALSE(strata::agg_read(buf.data(), buf.size(), &snap, &err));
	EXPECT_NE(std::string::npos, err.find("magic"));
	good();
	h->version = STRATA_AGG_VERSION + 1;
	EXPECT_FALSE(strata::agg_read(buf.data(), buf.size(), &snap, &err));
	EXPECT_NE(std::string::npos, err.find("another version"));
	// Hits: version 2 derives them (every hit is in one count, in overflow
	// or in no_value); a version 1 region's header counted them.
	auto *e = reinterpret_cast<strata_agg_entry *>(buf.data() + sizeof(strata_agg_header));
	good();
	e[1].state = STRATA_AGG_LIVE;
	e[1].count = 5;
	h->overflow = 2;
	h->no_value = 1;
	h->hits = 99; // not read in version 2
	ASSERT_TRUE(strata::agg_read(buf.data(), buf.size(), &snap, &err)) << err;
	EXPECT_EQ(8u, snap.hits);
	h->version = 1;
	ASSERT_TRUE(strata::agg_read(buf.data(), buf.size(), &snap, &err)) << err;
	EXPECT_EQ(99u, snap.hits);
	ASSERT_EQ(1u, snap.keys.size());
	EXPECT_EQ(5u, snap.keys[0].count);
	good();
	h->n_entries = 4; // more than the mapping holds
	EXPECT_FALSE(strata::agg_read(buf.data(), buf.size(), &snap, &err));
	good();
	h->n_entries = 3; // not a power of two
	EXPECT_FALSE(strata::agg_read(buf.data(), buf.size(), &snap, &err));
}

} // namespace
