/*
 * Probes (include/strata/probe.h): every field kind read back exactly
 * through the accessors and strata_probe_pack; patterns and log levels;
 * several probes on one tracepoint, in order; a probe beside a recording
 * session (each hit recorded AND probed, with the same values, stamped on
 * the same clock); exactly one call per hit from several threads and from
 * signal handlers; tracepoints registered later (a module, a run-time
 * event) get matching probes; fork; and unregistration racing hits with the
 * probe's private data freed as soon as unregister returns (run under ASan
 * and TSan too).
 */
#define STRATA_DEFINE_PROVIDERS
#include "probe_tp.h"

#include <strata/dynamic.h>
#include <strata/probe.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <thread>

#include "rb_test_util.h"

using namespace rbtest;

namespace {

uint32_t state_of(const strata_tracepoint &tp)
{
	return __atomic_load_n(&tp.state, __ATOMIC_RELAXED);
}

// What a probe saw, field by field, as text (exact and readable in a diff).
struct Seen {
	std::vector<std::string> calls;
	std::vector<std::vector<uint8_t>> packed;
	std::vector<uint64_t> ts;
};

std::string describe(const strata_probe_event *ev)
{
	std::string out = std::string(ev->desc->provider) + ":" + ev->desc->name;
	for (uint32_t i = 0; i < ev->desc->n_fields; i++) {
		const strata_field_desc &f = ev->desc->fields[i];
		out += " " + std::string(f.name) + "=";
		char buf[64];
		switch (f.kind) {
		case STRATA_FIELD_INTEGER:
		case STRATA_FIELD_ENUM:
			if (f.is_signed)
				snprintf(buf, sizeof buf, "%lld", (long long)strata_probe_int(ev, i));
			else
				snprintf(buf, sizeof buf, "%llu",
					 (unsigned long long)(uint64_t)strata_probe_int(ev, i));
			out += buf;
			break;
		case STRATA_FIELD_FLOAT:
			snprintf(buf, sizeof buf, "%.17g", strata_probe_float(ev, i));
			out += buf;
			break;
		case STRATA_FIELD_STRING:
			out += std::string("\"") + strata_probe_string(ev, i) + "\"";
			break;
		default:
			out += "[";
			for (size_t k = 0; k < strata_probe_count(ev, i); k++) {
				snprintf(buf, sizeof buf, "%s%lld", k ? "," : "",
					 (long long)strata_probe_elem(ev, i, k));
				out += buf;
			}
			out += "]";
		}
	}
	return out;
}

void record_probe(const strata_probe_event *ev, void *priv)
{
	auto *s = static_cast<Seen *>(priv);
	s->calls.push_back(describe(ev));
	std::vector<uint8_t> p(strata_probe_pack(ev, nullptr, 0));
	EXPECT_EQ(p.size(), strata_probe_pack(ev, p.data(), p.size()));
	s->packed.push_back(p);
	s->ts.push_back(ev->timestamp);
}

struct Guard { // unregisters at scope exit
	strata_probe *p = nullptr;
	~Guard()
	{
		if (p) {
			EXPECT_EQ(0, strata_probe_unregister(p));
		}
	}
};

const char *const kInts = "ptest:ints i8=-128 u8=255 i16=-32768 u16=65535 i32=-2147483648 "
			  "u32=4294967295 i64=-9223372036854775808 u64=18446744073709551615";

void hit_ints()
{
	strata_tracepoint(ptest, ints, INT8_MIN, UINT8_MAX, INT16_MIN, UINT16_MAX, INT32_MIN, UINT32_MAX,
			  INT64_MIN, UINT64_MAX);
}

void hit_mix(const char *s, uint32_t tail)
{
	const int16_t a[3] = {-1, 0, 32767};
	const uint32_t q[2] = {7, 4000000000u};
	const uint8_t b[3] = {0xde, 0xad, 0};
	strata_tracepoint(ptest, mix, 0.1f, -2.5e300, 7, s, a, q, 2, b, 3, tail);
}

TEST(Probe, EveryFieldKindExactlyOnce)
{
	Seen seen;
	Guard g1, g2;
	ASSERT_EQ(0, strata_probe_register("ptest:ints", -1, record_probe, &seen, &g1.p));
	ASSERT_EQ(0, strata_probe_register("ptest:mix", -1, record_probe, &seen, &g2.p));
	EXPECT_EQ(1u, strata_probe_attached(g1.p));
	EXPECT_NE(0u, state_of(strata__tp__ptest__ints) & STRATA_TP_PROBED);
	EXPECT_EQ(0u, state_of(strata__tp__ptest__ints) & STRATA_TP_SLOTS_MASK);
	hit_ints();
	hit_mix("héllo", 1);
	hit_mix(nullptr, 2);
	strata_tracepoint(ptest, hit, 1, 2); // no probe on it
	ASSERT_EQ(3u, seen.calls.size());
	EXPECT_EQ(kInts, seen.calls[0]);
	char d[40];
	snprintf(d, sizeof d, "%.17g", (double)0.1f);
	EXPECT_EQ(std::string("ptest:mix f=") + d +
			  " d=-2.5000000000000001e+300 m=7 s=\"héllo\" "
			  "a=[-1,0,32767] q=[7,4000000000] b=[222,173,0] tail=1",
		  seen.calls[1]);
	EXPECT_EQ(std::string("ptest:mix f=") + d +
			  " d=-2.5000000000000001e+300 m=7 s=\"(null)\" "
			  "a=[-1,0,32767] q=[7,4000000000] b=[222,173,0] tail=2",
		  seen.calls[2]);
	// The packed payload, byte for byte: 1+1+2+2+4+4+8+8 bytes of integers.
	std::vector<uint8_t> want;
	auto put = [&](const void *p, size_t n) {
		want.insert(want.end(), (const uint8_t *)p, (const uint8_t *)p + n);
	};
	int8_t i8 = INT8_MIN;
	uint8_t u8 = UINT8_MAX;
	int16_t i16 = INT16_MIN;
	uint16_t u16 = UINT16_MAX;
	int32_t i32 = INT32_MIN;
	uint32_t u32 = UINT32_MAX;
	int64_t i64 = INT64_MIN;
	uint64_t u64 = UINT64_MAX;
	put(&i8, 1);
	put(&u8, 1);
	put(&i16, 2);
	put(&u16, 2);
	put(&i32, 4);
	put(&u32, 4);
	put(&i64, 8);
	put(&u64, 8);
	EXPECT_EQ(want, seen.packed[0]);
	want.clear();
	float f = 0.1f;
	double dd = -2.5e300;
	int m = 7;
	const int16_t a[3] = {-1, 0, 32767};
	uint32_t n2 = 2, n3 = 3, tail = 2;
	const uint32_t q[2] = {7, 4000000000u};
	const uint8_t b[3] = {0xde, 0xad, 0};
	put(&f, 4);
	put(&dd, 8);
	put(&m, 4);
	put("(null)", 7);
	put(a, 6);
	put(&n2, 4);
	put(q, 8);
	put(&n3, 4);
	put(b, 3);
	put(&tail, 4);
	EXPECT_EQ(want, seen.packed[2]);
	// Accessors refuse the wrong kind or index.
	EXPECT_EQ(-1, strata_probe_field_index(strata__tp__ptest__mix.desc, "nope"));
	EXPECT_EQ(3, strata_probe_field_index(strata__tp__ptest__mix.desc, "s"));
}

void count_probe(const strata_probe_event *, void *priv)
{
	static_cast<std::atomic<uint64_t> *>(priv)->fetch_add(1, std::memory_order_relaxed);
}

TEST(Probe, PatternsAndLogLevels)
{
	std::atomic<uint64_t> n{0};
	Guard g;
	strata_probe *bad = nullptr;
	EXPECT_EQ(-EINVAL, strata_probe_register("", -1, count_probe, &n, &bad));
	EXPECT_EQ(-EINVAL, strata_probe_register("x", -1, nullptr, &n, &bad));
	EXPECT_EQ(-EINVAL, strata_probe_register(std::string(200, 'x').c_str(), -1, count_probe, &n, &bad));
	EXPECT_STRNE("unknown error", strata_probe_strerror(-EINVAL));
	EXPECT_EQ(-EINVAL, strata_probe_unregister(nullptr));
	// INFO (6) and more severe: ints (6), mix (4), bare (3); not hit (7).
	ASSERT_EQ(0, strata_probe_register("ptest:*", STRATA_LOGLEVEL_INFO, count_probe, &n, &g.p));
	EXPECT_EQ(3u, strata_probe_attached(g.p));
	hit_ints();
	hit_mix("x", 0);
	strata_tracepoint(ptest, bare);
	strata_tracepoint(ptest, hit, 0, 0);
	EXPECT_EQ(3u, n.load());
	EXPECT_EQ(0u, state_of(strata__tp__ptest__hit)); // disabled: nothing on it
}

struct Order {
	std::vector<int> *log;
	int who;
};

void order_probe(const strata_probe_event *, void *priv)
{
	auto *o = static_cast<Order *>(priv);
	o->log->push_back(o->who);
}

TEST(Probe, SeveralProbesInRegistrationOrder)
{
	std::vector<int> log;
	Order a{&log, 1}, b{&log, 2}, c{&log, 3};
	Guard ga, gb;
	strata_probe *pc;
	ASSERT_EQ(0, strata_probe_register("ptest:hit", -1, order_probe, &a, &ga.p));
	ASSERT_EQ(0, strata_probe_register("ptest:h*", -1, order_probe, &b, &gb.p));
	ASSERT_EQ(0, strata_probe_register("*:hit", -1, order_probe, &c, &pc));
	strata_tracepoint(ptest, hit, 0, 0);
	EXPECT_EQ((std::vector<int>{1, 2, 3}), log);
	ASSERT_EQ(0, strata_probe_unregister(pc)); // the middle one stays in order
	strata_tracepoint(ptest, hit, 0, 1);
	EXPECT_EQ((std::vector<int>{1, 2, 3, 1, 2}), log);
}

TEST(Probe, BesideARecordingSession)
{
	Slot s(2, config(STRATA_MODE_DISCARD, 1, 8, 65536), {rule("ptest:mix"), rule("ptest:hit")});
	ASSERT_TRUE(s.reader);
	Seen seen;
	Guard g;
	ASSERT_EQ(0, strata_probe_register("ptest:mix", -1, record_probe, &seen, &g.p));
	EXPECT_EQ((1u << 2) | STRATA_TP_PROBED, state_of(strata__tp__ptest__mix));
	EXPECT_EQ(1u << 2, state_of(strata__tp__ptest__hit));
	constexpr uint32_t kN = 100;
	for (uint32_t i = 0; i < kN; i++) {
		hit_mix(i % 2 ? "odd" : "even", i);
		strata_tracepoint(ptest, hit, 9, i);
	}
	std::vector<Record> recs = drain_records(s);
	ASSERT_EQ(2 * kN, recs.size());   // recorded: every hit, probed or not
	ASSERT_EQ(kN, seen.calls.size()); // probed: every hit of ptest:mix
	for (uint32_t i = 0; i < kN; i++) {
		const Record &r = recs[2 * i];
		ASSERT_EQ("ptest:mix", r.name);
		EXPECT_EQ(i, r.fields[7].u);
		EXPECT_EQ(i % 2 ? "odd" : "even", r.fields[3].s);
		EXPECT_NE(std::string::npos,
			  seen.calls[i].find(std::string("s=\"") + (i % 2 ? "odd" : "even")));
		// Probes run before the record is reserved, on the same clock.
		EXPECT_LE(seen.ts[i], r.ts);
		if (i > 0) {
			EXPECT_LE(recs[2 * i - 1].ts, seen.ts[i]);
		}
	}
	// A rule change keeps the probe; unregistering keeps the session.
	ASSERT_EQ(0, strata_rt_slot_set_rules(2, nullptr, 0));
	EXPECT_EQ(STRATA_TP_PROBED, state_of(strata__tp__ptest__mix));
	ASSERT_EQ(0, strata_probe_unregister(g.p));
	g.p = nullptr;
	EXPECT_EQ(0u, state_of(strata__tp__ptest__mix));
}

// ---- threads and signal handlers ----------------------------------------

constexpr uint32_t kThreads = 4;
constexpr uint32_t kPerThread = 20000;
constexpr uint32_t kMaxSig = 4096;

struct Exact {
	// Per thread (and per thread + kThreads for its signal handler): a bit per seq.
	std::atomic<uint64_t> bits[2 * kThreads][kPerThread / 64 + 1];
	std::atomic<uint64_t> dup{0}, calls{0}, bad{0};
};

void exact_probe(const strata_probe_event *ev, void *priv)
{
	auto *x = static_cast<Exact *>(priv);
	x->calls.fetch_add(1, std::memory_order_relaxed);
	const uint64_t t = (uint64_t)strata_probe_int(ev, 0), seq = (uint64_t)strata_probe_int(ev, 1);
	if (t >= 2 * kThreads || seq >= kPerThread) {
		x->bad.fetch_add(1, std::memory_order_relaxed);
		return;
	}
	const uint64_t bit = 1ull << (seq % 64);
	if (x->bits[t][seq / 64].fetch_or(bit, std::memory_order_relaxed) & bit)
		x->dup.fetch_add(1, std::memory_order_relaxed);
}

thread_local uint32_t t_index;
thread_local uint32_t t_sig_seq;
std::atomic<uint64_t> g_sig_hits{0};

void on_usr1(int)
{
	if (t_sig_seq < kMaxSig) {
		strata_tracepoint(ptest, hit, t_index + kThreads, t_sig_seq++);
		g_sig_hits.fetch_add(1, std::memory_order_relaxed);
	}
}

TEST(Probe, ExactlyOncePerHitFromThreadsAndSignalHandlers)
{
	auto *x = new Exact();
	Guard g;
	ASSERT_EQ(0, strata_probe_register("ptest:hit", -1, exact_probe, x, &g.p));
	struct sigaction sa {};
	sa.sa_handler = on_usr1;
	sigemptyset(&sa.sa_mask);
	ASSERT_EQ(0, sigaction(SIGUSR1, &sa, nullptr));
	std::atomic<uint32_t> running{kThreads};
	std::vector<std::thread> ts;
	std::vector<pthread_t> handles(kThreads);
	std::atomic<uint32_t> started{0};
	for (uint32_t t = 0; t < kThreads; t++)
		ts.emplace_back([&, t] {
			t_index = t;
			handles[t] = pthread_self();
			// The first hit registers the thread with liburcu, with
			// the thread's own probe hits skipped meanwhile: before
			// any signal (probes.md).
			strata_tracepoint(ptest, hit, t, 0);
			started.fetch_add(1);
			for (uint32_t i = 1; i < kPerThread; i++)
				strata_tracepoint(ptest, hit, t, i);
			// Stay until the signaller is done with us.
			running.fetch_sub(1);
			while (running.load() != 0 || started.load() != kThreads + 1)
				std::this_thread::yield();
		});
	while (started.load() != kThreads)
		std::this_thread::yield();
	uint64_t sent = 0;
	while (running.load() != 0) // signals land while the threads hit the tracepoint
		for (uint32_t t = 0; t < kThreads && sent < 2000; t++, sent++)
			pthread_kill(handles[t], SIGUSR1);
	started.fetch_add(1); // let them go
	for (auto &t : ts)
		t.join();
	signal(SIGUSR1, SIG_DFL);
	EXPECT_EQ(0u, x->dup.load());
	EXPECT_EQ(0u, x->bad.load());
	const uint64_t sig = g_sig_hits.load();
	EXPECT_EQ(kThreads * kPerThread + sig, x->calls.load());
	for (uint32_t t = 0; t < kThreads; t++)
		for (uint32_t i = 0; i < kPerThread; i++)
			ASSERT_TRUE(x->bits[t][i / 64].load() & (1ull << (i % 64))) << t << " " << i;
	uint64_t sig_seen = 0;
	for (uint32_t t = kThreads; t < 2 * kThreads; t++)
		for (uint32_t i = 0; i < kPerThread; i++)
			sig_seen += (x->bits[t][i / 64].load() >> (i % 64)) & 1;
	EXPECT_EQ(sig, sig_seen);
	EXPECT_EQ(0, strata_probe_unregister(g.p));
	g.p = nullptr;
	delete x;
}

// ---- tracepoints registered after the probe -------------------------------

TEST(Probe, LateModulesAndRunTimeEvents)
{
	std::atomic<uint64_t> n{0};
	Seen seen;
	Guard g, gd;
	ASSERT_EQ(0, strata_probe_register("late:*", -1, count_probe, &n, &g.p));
	ASSERT_EQ(0, strata_probe_register("dynp:*", -1, record_probe, &seen, &gd.p));
	EXPECT_EQ(0u, strata_probe_attached(g.p));
	// A module loaded later (as by dlopen).
	static const strata_field_desc fields[] = {{"x", STRATA_FIELD_INTEGER, 4, 0, 10, 0, nullptr}};
	static const strata_event_desc good = {STRATA_API_VERSION, 6, "late", "probed", 1, fields};
	static strata_tracepoint tp = {0, STRATA_TP_MAGIC, &good, 0, 0};
	static strata_tracepoint *const section[] = {&tp};
	strata_register_tracepoints(section, section + 1);
	EXPECT_EQ(1u, strata_probe_attached(g.p));
	EXPECT_EQ(STRATA_TP_PROBED, state_of(tp));
	uint32_t x = 5;
	const void *const argv[] = {&x, nullptr};
	strata_probe_fire(&tp, argv);
	EXPECT_EQ(1u, n.load());
	strata_unregister_tracepoints(section, section + 1); // dlclose
	EXPECT_EQ(0u, strata_probe_attached(g.p));
	EXPECT_EQ(0u, state_of(tp));

	// A run-time event: strata_dyn_emit and strata_dyn_emit_packed.
	const strata_dyn_field df[] = {
		{"count", STRATA_FIELD_INTEGER, 2, 1, 10, 0},
		{"ratio", STRATA_FIELD_FLOAT, 4, 1, 0, 0},
		{"what", STRATA_FIELD_STRING, 0, 0, 0, 0},
		{"ids", STRATA_FIELD_SEQUENCE, 8, 0, 10, 0},
	};
	strata_dyn_event *ev;
	ASSERT_EQ(0, strata_dyn_declare("dynp", "ev", STRATA_LOGLEVEL_INFO, df, 4, &ev));
	EXPECT_TRUE(strata_dyn_enabled(ev));
	EXPECT_EQ(1u, strata_probe_attached(gd.p));
	const uint64_t ids[2] = {1, UINT64_MAX};
	union strata_dyn_value v[4];
	v[0].i = -3;
	v[1].f = 0.5;
	v[2].s = "dyn";
	v[3].seq.ptr = ids;
	v[3].seq.len = 2;
	strata_dyn_emit(ev, v, 4);
	ASSERT_EQ(1u, seen.calls.size());
	EXPECT_EQ("dynp:ev count=-3 ratio=0.5 what=\"dyn\" ids=[1,-1]", seen.calls[0]);
	// The packed payload the probe rebuilt is what emit_packed takes.
	strata_dyn_emit_packed(ev, seen.packed[0].data(), seen.packed[0].size());
	ASSERT_EQ(2u, seen.calls.size());
	EXPECT_EQ(seen.calls[0], seen.calls[1]);
	EXPECT_EQ(seen.packed[0], seen.packed[1]);
	strata_dyn_release(ev); // the event goes: the probe leaves it
	EXPECT_EQ(0u, strata_probe_attached(gd.p));
	EXPECT_FALSE(strata_dyn_enabled(ev));
	ASSERT_EQ(0, strata_dyn_declare("dynp", "ev", STRATA_LOGLEVEL_INFO, df, 4, &ev));
	EXPECT_EQ(1u, strata_probe_attached(gd.p)); // declared again: probed again
	strata_dyn_emit(ev, v, 4);
	EXPECT_EQ(3u, seen.calls.size());
	strata_dyn_release(ev);
}

TEST(Probe, KeptInAForkedChild)
{
	std::atomic<uint64_t> n{0};
	Guard g;
	ASSERT_EQ(0, strata_probe_register("ptest:bare", -1, count_probe, &n, &g.p));
	pid_t pid = fork();
	ASSERT_GE(pid, 0);
	if (pid == 0) {
		for (int i = 0; i < 7; i++)
			strata_tracepoint(ptest, bare);
		_exit((int)n.load());
	}
	int st = 0;
	ASSERT_EQ(pid, waitpid(pid, &st, 0));
	ASSERT_TRUE(WIFEXITED(st));
	EXPECT_EQ(7, WEXITSTATUS(st));
	EXPECT_EQ(0u, n.load());
}

// ---- unregistration racing hits --------------------------------------------

constexpr uint64_t kLive = 0x11fe11fe11fe11feull, kDead = 0xdeaddeaddeaddeadull;
struct Priv {
	std::atomic<uint64_t> magic{kLive};
	std::atomic<uint64_t> hits{0};
};
std::atomic<uint64_t> g_after_unregister{0};

void race_probe(const strata_probe_event *, void *priv)
{
	auto *p = static_cast<Priv *>(priv);
	// Relaxed: a called-after-unregister probe finds kDead (or, freed,
	// ASan and TSan report the access).
	if (p->magic.load(std::memory_order_relaxed) != kLive)
		g_after_unregister.fetch_add(1, std::memory_order_relaxed);
	p->hits.fetch_add(1, std::memory_order_relaxed);
}

TEST(Probe, UnregisterRacingHitsFreesPrivateData)
{
	std::atomic<bool> stop{false};
	std::atomic<uint64_t> hits{0};
	std::vector<std::thread> ts;
	for (uint32_t t = 0; t < 3; t++)
		ts.emplace_back([&, t] {
			uint64_t i = 0;
			while (!stop.load(std::memory_order_relaxed)) {
				strata_tracepoint(ptest, hit, t, i++);
				strata_tracepoint(ptest, bare);
			}
			hits.fetch_add(i);
		});
	uint64_t probed = 0;
	constexpr int kRounds = 50;
	for (int r = 0; r < kRounds; r++) {
		auto *a = new Priv(), *b = new Priv();
		strata_probe *pa, *pb;
		ASSERT_EQ(0, strata_probe_register("ptest:hit", -1, race_probe, a, &pa));
		ASSERT_EQ(0, strata_probe_register("ptest:*", -1, race_probe, b, &pb));
		// Hits land on both for a while: wait until each saw one.
		while (a->hits.load() == 0 || b->hits.load() == 0)
			std::this_thread::yield();
		ASSERT_EQ(0, strata_probe_unregister(r % 2 ? pa : pb));
		Priv *gone = r % 2 ? a : b;
		gone->magic.store(kDead, std::memory_order_relaxed);
		const uint64_t h = gone->hits.load();
		// Freed right away: no thread may touch it any more.
		delete gone;
		probed += h;
		ASSERT_EQ(0, strata_probe_unregister(r % 2 ? pb : pa));
		delete (r % 2 ? b : a);
	}
	stop.store(true);
	for (auto &t : ts)
		t.join();
	EXPECT_EQ(0u, g_after_unregister.load());
	EXPECT_GE(probed, (uint64_t)kRounds);
	EXPECT_EQ(0u, state_of(strata__tp__ptest__hit));
	EXPECT_GT(hits.load(), 0u);
}

} // namespace
