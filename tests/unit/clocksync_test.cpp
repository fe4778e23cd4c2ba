/*
 * The clock map between two machines (libtrace/clocksync, docs/clocks.md)
 * against synthetic exchanges whose true map is known: an offset, a drift,
 * one-way delays with jitter and asymmetry, a step (a paused VM), a lost
 * link, a message out of order.  Oracles: the true map lies within the
 * stated bound at every probed time (exact bound and the stored knots'),
 * no exchanged message is inverted after mapping, the segments start where
 * and why they should; the bound's width is printed beside the minimum RTT.
 */
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <random>

#include "clock_map.h"
#include "clocksync.h"
#include "message_match.h"

using namespace strata::clocksync;

namespace {

// The source clock against true time (the target's clock, in ns): source
// reads x = (t - b) / a before the step, with the step `step_ns` added to
// b from true time `step_at` on (the source's clock stood still).
struct Truth {
	double a = 1.0; // target ns per source ns
	double b = 0;   // target time at source time 0
	double step_at = 1e300;
	double step_ns = 0;
	double offset(double t) const { return b + (t >= step_at ? step_ns : 0); }
	int64_t source_at(double t) const { return static_cast<int64_t>(std::floor((t - offset(t)) / a)); }
	// The true target time of source time x on the side of the step that
	// true time t is on.
	double target_of(int64_t x, double t) const { return a * static_cast<double>(x) + offset(t); }
};

struct Msg {
	bool source_sent;
	int64_t send, recv;
	double t_send; // true time of the send (for the truth at it)
};

struct Exchanges {
	std::vector<Msg> msgs;
	int64_t min_rtt = INT64_MAX;
};

// `probes` probes `period` ns apart from true time t0: the source sends,
// the target answers after `turn` ns; delays base + exponential jitter,
// `asym` more on the way back.
Exchanges simulate(const Truth &tr, int probes, double t0, double period, double base, double jitter,
		   double asym, double turn, uint32_t seed)
{
	std::mt19937_64 rng(seed);
	std::exponential_distribution<double> ex(1.0 / jitter);
	Exchanges r;
	for (int i = 0; i < probes; i++) {
		const double ts = t0 + i * period;
		const double tr1 = ts + base + ex(rng);
		const double tt = tr1 + turn;
		const double tr2 = tt + base + asym + ex(rng);
		const int64_t x1 = tr.source_at(ts);
		const int64_t y2 = static_cast<int64_t>(std::ceil(tr1));
		const int64_t y3 = static_cast<int64_t>(std::floor(tt));
		const int64_t x4 = tr.source_at(tr2) + 1;
		r.msgs.push_back({true, x1, y2, ts});
		r.msgs.push_back({false, y3, x4, tt});
		// RTT in source ns (the two clocks' rates differ by ppm).
		r.min_rtt = std::min(r.min_rtt, (x4 - x1) - (y3 - y2));
	}
	return r;
}

// The segment of `segs` whose source range holds x, else nullptr.
const Segment *covering(const std::vector<Segment> &segs, int64_t x)
{
	for (const Segment &s : segs)
		if (x >= s.x_first && x <= s.x_last)
			return &s;
	return nullptr;
}

struct Checked {
	int64_t worst_width = 0, mid_width = 0;
	size_t inversions = 0, outside = 0, checked = 0, in_gaps = 0;
};

// Every message: the truth at its source time within its segment's stored
// bound, and not inverted by the segment's map.
Checked check(const Truth &tr, const Exchanges &run, const std::vector<Segment> &segs)
{
	Checked c;
	for (const Msg &m : run.msgs) {
		const int64_t x = m.source_sent ? m.send : m.recv;
		const Segment *s = covering(segs, x);
		int64_t lo, hi;
		if (!s) {
			// Between two segments (around a step): either map, the
			// union of the two bounds (docs/clocks.md).
			const Segment *before = nullptr, *after = nullptr;
			for (const Segment &g : segs) {
				if (g.x_last < x)
					before = &g;
				if (g.x_first > x && !after)
					after = &g;
			}
			int64_t l1, h1, l2, h2;
			if (!before || !after || !segment_bound(*before, x, &l1, &h1) ||
			    !segment_bound(*after, x, &l2, &h2))
				continue;
			c.checked++, c.in_gaps++;
			const double truth = tr.target_of(x, m.t_send);
			if (truth < std::min(l1, l2) || truth > std::max(h1, h2))
				c.outside++;
			continue;
		}
		if (!s->bounded || !segment_bound(*s, x, &lo, &hi))
			continue;
		c.checked++;
		const double truth = tr.target_of(x, m.t_send);
		if (truth < lo || truth > hi)
			c.outside++;
		c.worst_width = std::max(c.worst_width, hi - lo);
		const int64_t y = segment_map(*s, x);
		if (m.source_sent ? !(y <= m.recv) : !(y >= m.send))
			c.inversions++;
	}
	for (const Segment &s : segs)
		if (s.bounded && !s.knots.empty())
			c.mid_width = std::max(c.mid_width, s.knots[s.knots.size() / 2].hi -
								    s.knots[s.knots.size() / 2].lo);
	return c;
}

// The least share of the band's width between the map and the nearer edge
// of the band, over every knot of the bounded segments (bands wider than
// 1 us: narrower ones are all rounding).
double least_share_in_band(const std::vector<Segment> &segs)
{
	double least = 1;
	for (const Segment &s : segs)
		for (const Knot &k : s.knots)
			if (s.bounded && k.hi - k.lo > 1000) {
				const double y = static_cast<double>(segment_map(s, k.x));
				const double w = static_cast<double>(k.hi - k.lo);
				least = std::min(least, std::min(y - k.lo, k.hi - y) / w);
			}
	return least;
}

Estimator feed(const Exchanges &run)
{
	Estimator e;
	for (const Msg &m : run.msgs)
		e.add(m.source_sent, m.send, m.recv);
	return e;
}

TEST(ClockSync, OffsetDriftJitter)
{
	Truth tr;
	tr.a = 1 + 47e-6; // 47 ppm
	tr.b = 3.7e9;     // the target 3.7 s ahead
	// 2000 probes 10 ms apart: 20 s; 40 us one way, 30 us mean jitter,
	// 5 us asymmetry.
	const Exchanges run = simulate(tr, 2000, 5e9, 1e7, 40000, 30000, 5000, 20000, 1);
	const Estimator e = feed(run);
	const std::vector<Segment> segs = e.segments();
	ASSERT_EQ(segs.size(), 1u);
	EXPECT_EQ(segs[0].start, Start::First);
	EXPECT_TRUE(segs[0].bounded);
	EXPECT_LE(segs[0].slope_min, tr.a);
	EXPECT_GE(segs[0].slope_max, tr.a);
	const Checked c = check(tr, run, segs);
	EXPECT_EQ(c.checked, run.msgs.size());
	EXPECT_EQ(c.outside, 0u);
	EXPECT_EQ(c.inversions, 0u);
	// Exact bound at every 997th message, and the knots never narrower.
	for (size_t i = 0; i < run.msgs.size(); i += 997) {
		const int64_t x = run.msgs[i].source_sent ? run.msgs[i].send : run.msgs[i].recv;
		int64_t lo, hi, klo, khi;
		ASSERT_TRUE(e.bound(x, &lo, &hi));
		ASSERT_TRUE(segment_bound(segs[0], x, &klo, &khi));
		EXPECT_LE(klo, lo + 1);
		EXPECT_GE(khi, hi - 1);
	}
	// The width stays within the minimum RTT (it is the sum of the two
	// least one-way delays' uncertainty).
	EXPECT_LE(c.worst_width, 2 * run.min_rtt);
	printf("offset+drift+jitter: min RTT %" PRId64 " ns, bound width %" PRId64
	       " ns at the middle, %" PRId64 " ns worst, %zu knots\n",
	       run.min_rtt, c.mid_width, c.worst_width, segs[0].knots.size());
	// Before and after the exchanges: the extrapolated bound still holds.
	for (double t : {1e9, 40e9}) {
		const int64_t x = tr.source_at(t);
		int64_t lo, hi;
		ASSERT_TRUE(segment_bound(segs[0], x, &lo, &hi));
		EXPECT_LE(lo, tr.target_of(x, t));
		EXPECT_GE(hi, tr.target_of(x, t));
	}
}

// The source (a guest) paused for 0.8 s at true 12.34 s: its clock stood
// still, so it is then 0.8 s further behind the target.  `probes` probes
// before the pause and as many after it.
Exchanges paused(Truth *tr, int probes)
{
	tr->a = 1 - 12e-6;
	tr->b = -2.5e9;
	tr->step_at = 12.34e9;
	tr->step_ns = 0.8e9;
	Exchanges run = simulate(*tr, probes, 7e9, 1e7, 30000, 20000, 0, 10000, 2);
	const Exchanges after = simulate(*tr, probes, 13.2e9, 1e7, 30000, 20000, 0, 10000, 3);
	run.msgs.insert(run.msgs.end(), after.msgs.begin(), after.msgs.end());
	run.min_rtt = std::min(run.min_rtt, after.min_rtt);
	return run;
}

TEST(ClockSync, PauseSteps)
{
	Truth tr;
	const Exchanges run = paused(&tr, 500);
	const Estimator e = feed(run);
	const std::vector<Segment> segs = e.segments();
	ASSERT_EQ(segs.size(), 2u);
	EXPECT_EQ(segs[1].start, Start::Step);
	// The step shows between the segments' maps.
	const int64_t step = segment_map(segs[1], segs[1].x_first) - segment_map(segs[0], segs[1].x_first);
	EXPECT_NEAR(static_cast<double>(step), 0.8e9, 1e5);
	const Checked c = check(tr, run, segs);
	EXPECT_EQ(c.checked, run.msgs.size());
	EXPECT_LE(c.in_gaps, 2u); // at most the step's own probe
	EXPECT_EQ(c.outside, 0u);
	EXPECT_EQ(c.inversions, 0u);
	printf("pause step: min RTT %" PRId64 " ns, bound width %" PRId64 " ns worst, step %" PRId64 " ns\n",
	       run.min_rtt, c.worst_width, step);
}

// The daemon's early sight of a step (consumerd/sync_link.cpp, a slow
// probe's legs): a message the target sent during the source's pause,
// received at its resume, contradicts the segment; one sent before the
// pause and received after it does not (it straddles the step and fits
// the old line), nor does an ordinary message.  Asking changes nothing.
TEST(ClockSync, ContradictsShowsAStepOnly)
{
	Truth tr;
	tr.b = 1e9;
	tr.step_at = 10.5e9;
	tr.step_ns = 1.5e9;
	const Exchanges run = simulate(tr, 300, 7e9, 1e7, 30000, 20000, 0, 10000, 4);
	Estimator e = feed(run);
	ASSERT_TRUE(e.correlated());
	const uint64_t before = e.messages();
	// Source resumes at true 12.0 s (its clock reads as at 10.5 s).
	const int64_t resume_x = tr.source_at(12.0e9 + 1000);
	EXPECT_FALSE(e.contradicts(false, static_cast<int64_t>(10.49e9), resume_x)); // straddles
	EXPECT_TRUE(e.contradicts(false, static_cast<int64_t>(11.0e9), resume_x));   // sent in the pause
	EXPECT_FALSE(e.contradicts(true, resume_x, static_cast<int64_t>(12.0e9 + 50000))); // loose, fits
	const int64_t ok_x = tr.source_at(10.2e9);
	EXPECT_FALSE(e.contradicts(false, static_cast<int64_t>(10.2e9) - 40000, ok_x));
	EXPECT_EQ(e.messages(), before);
	EXPECT_EQ(e.segment_count(), 1u);
	// Fed, the contradicting message starts the new segment at the resume.
	EXPECT_FALSE(e.add(false, static_cast<int64_t>(11.0e9), resume_x));
	const std::vector<Segment> segs = e.segments();
	ASSERT_EQ(segs.size(), 2u);
	EXPECT_EQ(segs[1].start, Start::Step);
	EXPECT_EQ(segs[1].x_first, resume_x);
	Estimator empty;
	EXPECT_FALSE(empty.contradicts(true, 1, 2));
}

// A clocks.json as a follower writes it (consumerd/sync_map.cpp), with
// `segs` as its map.
std::string clocks_json(const std::vector<Segment> &segs, int64_t peer_offset)
{
	return "{\"format\": \"strata-clocks\", \"version\": 1,\n \"machine\": \"g\", \"boot_id\": \"b\", "
	       "\"clock_offset_ns\": 5,\n \"links\": [\n  {\"name\": \"host\", \"spec\": \"tcp:h:1\", "
	       "\"role\": \"follower\",\n   \"source\": \"(this machine)\", \"target\": \"host\",\n   "
	       "\"peer_hostname\": \"h\", \"peer_boot_id\": \"c\", \"peer_clock_offset_ns\": " +
	       std::to_string(peer_offset) +
	       ",\n   \"state\": \"up\", \"correlated\": true, \"segments\": " + segments_json(segs, 3) +
	       "}\n ],\n \"ctf\": {\"link\": \"host\", \"rewritten\": true}\n}\n";
}

TEST(ClockMap, ReadBackSegmentBySegment)
{
	// The pause of PauseSteps, stored and read back as Strata's reader
	// does: within a segment its line, between two the earlier one's,
	// before the first the first's; on the reference's absolute time.
	Truth tr;
	const std::vector<Segment> segs = feed(paused(&tr, 300)).segments();
	ASSERT_EQ(segs.size(), 2u);
	const int64_t off = 1795677481000000000;
	const std::string text = clocks_json(segs, off);
	strata::ClockMap m;
	std::string why;
	ASSERT_TRUE(strata::parse_clock_map(text, "host", &m, &why)) << why;
	ASSERT_EQ(m.pieces.size(), 2u);
	EXPECT_EQ(m.offset_ns, off);
	// A pause: the later line lies above the earlier one's at its start,
	// so the earlier line holds across the whole gap.
	EXPECT_EQ(m.pieces[1].from, segs[1].x_first);
	for (int64_t x :
	     {segs[0].x_first - 1000000000, segs[0].x_first, segs[0].x_last, segs[0].x_last + 1,
	      segs[1].x_first - 1, segs[1].x_first, segs[1].x_last, segs[1].x_last + 1000000000}) {
		const Segment &s = x < segs[1].x_first ? segs[0] : segs[1];
		EXPECT_EQ(m.ns(static_cast<uint64_t>(x)), off + segment_map(s, x)) << x;
	}
	// A packet's piece once, then each record by its line: the same.
	const size_t p = m.piece_at(static_cast<uint64_t>(segs[0].x_last));
	EXPECT_EQ(p, 0u);
	EXPECT_EQ(m.piece_end(p), static_cast<uint64_t>(segs[1].x_first));
	EXPECT_EQ(m.piece_end(1), UINT64_MAX);
	// Not the link the metadata names, or not a follower's: refused.
	EXPECT_FALSE(strata::parse_clock_map(text, "vm1", &m, &why));
	EXPECT_NE(why.find("vm1"), std::string::npos);
	std::string ref = text;
	ref.replace(ref.find("\"follower\""), 10, "\"reference");
	EXPECT_FALSE(strata::parse_clock_map(ref, "host", &m, &why));
}

TEST(ClockMap, AForwardStepSortsTheGapsEvents)
{
	// The source's clock jumps 1.5 s ahead at true 1.005 s (a written
	// TSC); the link saw its last message before at 1.0 s and its first
	// after at true 1.02 s.  Events in the gap on either side of the step
	// land at their true times: the earlier line below the handover, the
	// later one above it.
	constexpr int64_t kStep = 1500000000;
	std::vector<Segment> segs(2);
	segs[0].x_first = 100000000;
	segs[0].x_last = 1000000000;
	segs[0].x0 = segs[0].y0 = 500000000;
	segs[1].start = Start::Step;
	segs[1].x_first = 1020000000 + kStep;
	segs[1].x_last = 2000000000 + kStep;
	segs[1].x0 = 1500000000 + kStep;
	segs[1].y0 = 1500000000;
	for (Segment &s : segs) {
		s.bounded = true;
		s.messages = 100;
		s.knots = {{s.x_first, s.x_first - s.x0 + s.y0 - 1000, s.x_first - s.x0 + s.y0 + 1000},
			   {s.x_last, s.x_last - s.x0 + s.y0 - 1000, s.x_last - s.x0 + s.y0 + 1000}};
	}
	strata::ClockMap m;
	std::string why;
	ASSERT_TRUE(strata::parse_clock_map(clocks_json(segs, 0), "host", &m, &why)) << why;
	ASSERT_EQ(m.pieces.size(), 2u);
	EXPECT_EQ(m.pieces[1].from, 1020000000); // the earlier line reaches 1.02 s there
	for (int64_t t : {1000000001, 1003000000, 1005000000})
		EXPECT_EQ(m.ns(static_cast<uint64_t>(t)), t) << "before the step " << t;
	for (int64_t t : {1005000001, 1010000000, 1019999999})
		EXPECT_EQ(m.ns(static_cast<uint64_t>(t + kStep)), t) << "after the step " << t;
	// The handover stays within the gap whatever the lines say.
	strata::ClockPiece a, b;
	b.y0 = kStep; // b far above a (a pause): a holds to b's first
	EXPECT_EQ(strata::piece_handover(a, 10, b, 20), 20);
	b.y0 = -kStep; // b far below a (a forward step): b right after a's last
	EXPECT_EQ(strata::piece_handover(a, 10, b, 20), 11);
	EXPECT_EQ(strata::piece_handover(a, 30, b, 20), 20); // overlapping: b's first
}

TEST(ClockMap, HostileTextRefusedWithAReason)
{
	Truth tr;
	tr.b = 1e9;
	const std::vector<Segment> segs =
		feed(simulate(tr, 50, 1e9, 1e7, 30000, 20000, 0, 10000, 4)).segments();
	const std::string text = clocks_json(segs, 7);
	strata::ClockMap m;
	std::string why;
	ASSERT_TRUE(strata::parse_clock_map(text, "host", &m, &why)) << why;
	// Every cut: refused with a reason (only the whole text is whole).
	for (size_t n = 0; n < text.size() - 1; n++) {
		why.clear();
		const bool ok = strata::parse_clock_map(text.substr(0, n), "host", &m, &why);
		EXPECT_TRUE(!ok && !why.empty()) << n;
	}
	// Flipped bytes: never a crash; a map read is one the checks passed.
	std::mt19937_64 rng(9);
	size_t taken = 0;
	for (int i = 0; i < 4000; i++) {
		std::string t = text;
		for (int k = 0; k < 3; k++)
			t[rng() % t.size()] = static_cast<char>(rng() % 256);
		why.clear();
		if (strata::parse_clock_map(t, "host", &m, &why)) {
			taken++;
			ASSERT_FALSE(m.pieces.empty());
			for (const strata::ClockPiece &p : m.pieces)
				ASSERT_TRUE(p.slope >= 0.99 && p.slope <= 1.01);
		} else {
			ASSERT_FALSE(why.empty());
		}
	}
	printf("flipped clocks.json: %zu of 4000 still read (a digit or a name changed)\n", taken);
	// Deep nesting, huge numbers, slopes out of range: refused.
	EXPECT_FALSE(strata::parse_clock_map(std::string(100000, '['), "host", &m, &why));
	std::string bad = text;
	const size_t sl = bad.find("\"slope\": ") + 9;
	bad.replace(sl, bad.find(',', sl) - sl, "1e308");
	EXPECT_FALSE(strata::parse_clock_map(bad, "host", &m, &why));
	EXPECT_NE(why.find("out of range"), std::string::npos) << why;
}

TEST(ClockSync, LinkLostAndOneWay)
{
	Truth tr;
	tr.b = 1e9;
	const Exchanges a = simulate(tr, 100, 1e9, 1e7, 30000, 10000, 0, 5000, 4);
	const Exchanges b = simulate(tr, 100, 5e9, 1e7, 30000, 10000, 0, 5000, 5);
	Estimator e;
	// One direction only: never bounded.
	for (const Msg &m : a.msgs)
		if (m.source_sent)
			e.add(m.source_sent, m.send, m.recv);
	EXPECT_FALSE(e.correlated());
	EXPECT_EQ(e.width_now(), -1);
	for (const Msg &m : a.msgs)
		if (!m.source_sent)
			e.add(m.source_sent, m.send, m.recv);
	EXPECT_TRUE(e.correlated()); // late and out of order: rebuilt hulls
	e.break_segment(Start::LinkLost, "no answer for 2 s");
	for (const Msg &m : b.msgs)
		e.add(m.source_sent, m.send, m.recv);
	const std::vector<Segment> segs = e.segments();
	ASSERT_EQ(segs.size(), 2u);
	EXPECT_EQ(segs[0].start, Start::First);
	EXPECT_EQ(segs[1].start, Start::LinkLost);
	EXPECT_EQ(segs[1].note, "no answer for 2 s");
	Exchanges all = a;
	all.msgs.insert(all.msgs.end(), b.msgs.begin(), b.msgs.end());
	const Checked c = check(tr, all, segs);
	EXPECT_EQ(c.checked, all.msgs.size());
	EXPECT_EQ(c.outside, 0u);
	EXPECT_EQ(c.inversions, 0u);
	EXPECT_GT(e.width_now(), 0);
	// Behind the latest exchange: the bound there (the probe rate judges
	// it so), clamped to the segment's first message.
	EXPECT_EQ(e.width_behind(0), e.width_now());
	int64_t lo, hi;
	ASSERT_TRUE(e.bound(segs[1].x_last - 500000000, &lo, &hi));
	EXPECT_EQ(e.width_behind(500000000), hi - lo);
	ASSERT_TRUE(e.bound(segs[1].x_first, &lo, &hi));
	EXPECT_EQ(e.width_behind(int64_t{1} << 50), hi - lo);
	// The stored form names every field a reader needs.
	const std::string j = segments_json(segs, 0);
	for (const char *k : {"\"start\": \"link-lost\"", "\"x0\"", "\"y0\"", "\"slope\"", "\"slope_min\"",
			      "\"slope_max\"", "\"knots\"", "\"bounded\": true"})
		EXPECT_NE(j.find(k), std::string::npos) << k;
}

TEST(ClockSync, ManySeedsNeverWrong)
{
	// Random offsets, drifts up to 200 ppm, delays and asymmetries: the
	// oracle over 40 runs.
	std::mt19937_64 rng(42);
	std::uniform_real_distribution<double> u(0, 1);
	size_t outside = 0, inversions = 0, checked = 0;
	double least_share = 1;
	for (int i = 0; i < 40; i++) {
		Truth tr;
		tr.a = 1 + (u(rng) - 0.5) * 400e-6;
		tr.b = (u(rng) - 0.5) * 1e12;
		const Exchanges run = simulate(tr, 300, 2e9, 2e6 + u(rng) * 2e7, 5000 + u(rng) * 100000,
					       1000 + u(rng) * 50000, (u(rng) - 0.5) * 20000, u(rng) * 50000,
					       static_cast<uint32_t>(100 + i));
		const Estimator e = feed(run);
		const std::vector<Segment> segs = e.segments();
		EXPECT_EQ(segs.size(), 1u);
		const Checked c = check(tr, run, segs);
		outside += c.outside, inversions += c.inversions, checked += c.checked;
		least_share = std::min(least_share, least_share_in_band(segs));
	}
	printf("40 random links: the map keeps at least %.3f of the band's width from either edge at "
	       "every knot\n",
	       least_share);
	// The map's line keeps near the band's middle: at least 0.447 of the
	// width from either edge at every knot on these seeds (the fitting
	// set's centroid alone keeps 1/3).  A map that tilts within the
	// fitting set, or leans on one hull, falls below.
	EXPECT_GE(least_share, 0.44);
	EXPECT_EQ(checked, 40u * 600u);
	EXPECT_EQ(outside, 0u);
	EXPECT_EQ(inversions, 0u);
}

// Traced messages as constraints (refine_segment, `strata align`): program
// messages that cross in 2-5 us where no probe leg took under 40 us.
struct FastMessages {
	std::vector<Point> lower, upper; // as refine_segment takes them
};

FastMessages fast_messages(const Truth &tr, double t0, double t1, int n, uint32_t seed)
{
	std::mt19937_64 rng(seed);
	std::uniform_real_distribution<double> u(0, 1);
	FastMessages f;
	for (int i = 0; i < n; i++) {
		const double t = t0 + (t1 - t0) * (i + u(rng)) / n;
		const double d = 2000 + 3000 * u(rng);
		if (i % 2) { // the source sends at x, the target receives d later
			const int64_t x = tr.source_at(t);
			f.upper.push_back({x, static_cast<int64_t>(std::ceil(t + d))});
		} else { // the target sends at t, the source receives d later
			f.lower.push_back({tr.source_at(t + d) + 1, static_cast<int64_t>(std::floor(t))});
		}
	}
	return f;
}

size_t inverted(const Segment &s, const FastMessages &f)
{
	size_t n = 0;
	for (const Point &p : f.upper)
		n += segment_map(s, p.x) >= p.y;
	for (const Point &p : f.lower)
		n += segment_map(s, p.x) <= p.y;
	return n;
}

// r's bound (probes' refined by f) holds for every message of f and for
// the truth, and is no wider than the probes' alone.
void expect_refined_bound(const Segment &r, const Segment &probes, const FastMessages &f, const Truth &tr)
{
	for (const Point &p : f.upper) {
		int64_t lo, hi;
		ASSERT_TRUE(segment_bound(r, p.x, &lo, &hi));
		EXPECT_LT(lo, p.y);
	}
	for (const Point &p : f.lower) {
		int64_t lo, hi;
		ASSERT_TRUE(segment_bound(r, p.x, &lo, &hi));
		EXPECT_GT(hi, p.y);
	}
	for (const Knot &k : r.knots) {
		const double t = tr.a * static_cast<double>(k.x) + tr.b;
		EXPECT_LE(k.lo, t);
		EXPECT_GE(k.hi, t);
		int64_t lo, hi;
		ASSERT_TRUE(segment_bound(probes, k.x, &lo, &hi));
		EXPECT_LE(k.hi - k.lo, hi - lo + 2);
	}
}

TEST(ClockRefine, AMessageFasterThanAnyProbeGetsOrdered)
{
	Truth tr;
	tr.a = 1 + 31e-6;
	tr.b = 1.9e9;
	// 400 probes 10 ms apart, at least 40 us from the source and 120 us
	// back (and 20 us mean jitter): the band is about 160 us wide, its
	// middle 40 us below the truth, so a 2-5 us message from the target
	// comes out inverted (the probes cannot know the asymmetry).
	const Exchanges run = simulate(tr, 400, 5e9, 1e7, 40000, 20000, 80000, 20000, 7);
	const std::vector<Segment> segs = feed(run).segments();
	ASSERT_EQ(segs.size(), 1u);
	ASSERT_FALSE(segs[0].hull_lower.empty());
	ASSERT_FALSE(segs[0].hull_upper.empty());
	const FastMessages f = fast_messages(tr, 5.1e9, 8.9e9, 200, 8);
	const size_t before = inverted(segs[0], f);
	EXPECT_GT(before, 0u); // the probes alone cannot order them
	Segment r;
	std::vector<size_t> contra;
	ASSERT_TRUE(refine_segment(segs[0], f.lower, f.upper, &r, &contra));
	EXPECT_EQ(inverted(r, f), 0u);
	EXPECT_EQ(r.matched, 200u);
	EXPECT_EQ(r.x_first, segs[0].x_first);
	EXPECT_EQ(r.x_last, segs[0].x_last);
	ASSERT_EQ(r.probes.size(), 1u); // the probes' map, recoverable
	EXPECT_EQ(r.probes[0].y0, segs[0].y0);
	EXPECT_EQ(r.probes[0].slope, segs[0].slope);
	// The refined bound holds for every message and for the truth, and
	// is no wider than the probes'.
	ASSERT_NO_FATAL_FAILURE(expect_refined_bound(r, segs[0], f, tr));
	EXPECT_EQ(check(tr, run, {r}).inversions, 0u); // the probes too
	printf("refined by 200 messages of 2-5 us: %zu inverted by the probes' map, 0 after; width "
	       "%" PRId64 " -> %" PRId64 " ns at the first knot\n",
	       before, segs[0].knots[0].hi - segs[0].knots[0].lo, r.knots[0].hi - r.knots[0].lo);

	// Idempotent: the stored refined segment, read back and refined with
	// the same messages, is the same text.
	const std::string j1 = segments_json({r}, 0);
	strata::JsonValue v;
	std::string why;
	ASSERT_TRUE(strata::parse_json(j1, &v, &why)) << why;
	std::vector<Segment> back;
	ASSERT_TRUE(parse_segments(v, &back, &why)) << why;
	ASSERT_EQ(back.size(), 1u);
	EXPECT_EQ(segments_json(back, 0), j1);
	Segment r2;
	ASSERT_TRUE(refine_segment(back[0], f.lower, f.upper, &r2, nullptr));
	EXPECT_EQ(segments_json({r2}, 0), j1);
	// With no message, a refined segment gives the probes' map back.
	Segment r0;
	ASSERT_TRUE(refine_segment(back[0], {}, {}, &r0, nullptr));
	// (the same hulls, fitted from other coordinates' origin: the same
	// line to the rounding)
	EXPECT_NEAR(static_cast<double>(segment_map(r0, r0.x0)),
		    static_cast<double>(segment_map(segs[0], r0.x0)), 2);
	EXPECT_NEAR(r0.slope, segs[0].slope, 1e-12);

	// A file from before the hulls were stored: the knots stand for the
	// probes (a wider set, so still sound); the messages still ordered.
	Segment old = segs[0];
	old.hull_lower.clear();
	old.hull_upper.clear();
	Segment r3;
	ASSERT_TRUE(refine_segment(old, f.lower, f.upper, &r3, nullptr));
	EXPECT_EQ(inverted(r3, f), 0u);
	for (const Knot &k : r3.knots) {
		const double t = tr.a * static_cast<double>(k.x) + tr.b;
		EXPECT_LE(k.lo, t);
		EXPECT_GE(k.hi, t);
	}
}

TEST(ClockRefine, AContradictingMessageIsReportedAndNothingChanges)
{
	Truth tr;
	tr.a = 1 - 20e-6;
	tr.b = -4.2e9;
	const Exchanges run = simulate(tr, 300, 3e9, 1e7, 30000, 20000, 0, 10000, 9);
	const std::vector<Segment> segs = feed(run).segments();
	ASSERT_EQ(segs.size(), 1u);
	FastMessages f = fast_messages(tr, 3.1e9, 5.9e9, 50, 10);
	// One "received" 1 ms before it was sent (a wrong match, or a step
	// the probes did not see): no line fits it and the probes.
	const int64_t x = tr.source_at(4e9);
	f.upper.push_back({x, static_cast<int64_t>(tr.target_of(x, 4e9) - 1e6)});
	const size_t bad = f.lower.size() + f.upper.size() - 1; // its index
	Segment r;
	r.y0 = 12345;
	std::vector<size_t> contra;
	EXPECT_FALSE(refine_segment(segs[0], f.lower, f.upper, &r, &contra));
	ASSERT_EQ(contra.size(), 1u);
	EXPECT_EQ(contra[0], bad);
	EXPECT_EQ(r.y0, 12345); // untouched
	// Without it, the others refine.
	f.upper.pop_back();
	EXPECT_TRUE(refine_segment(segs[0], f.lower, f.upper, &r, &contra));
	EXPECT_EQ(inverted(r, f), 0u);
}

} // namespace

// ---- KVM's facts (kvm_tsc.h) against a recorded debugfs tree -----------------

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "kvm_tsc.h"

namespace {

struct Tree {
	std::string root;
	Tree()
	{
		char t[] = "/tmp/strata-kvm-XXXXXX";
		root = mkdtemp(t);
	}
	~Tree() { std::filesystem::remove_all(root); }
	// One vCPU's files, as KVM's debugfs shows them (one number and "\n").
	void vcpu(const std::string &vm, unsigned n, const std::string &offset, const std::string &ratio,
		  const std::string &frac)
	{
		const std::string d = root + "/" + vm + "/vcpu" + std::to_string(n);
		mkdir((root + "/" + vm).c_str(), 0755);
		mkdir(d.c_str(), 0755);
		std::ofstream(d + "/tsc-offset") << offset << "\n";
		std::ofstream(d + "/tsc-scaling-ratio") << ratio << "\n";
		std::ofstream(d + "/tsc-scaling-ratio-frac-bits") << frac << "\n";
	}
};

TEST(KvmTsc, ReadsARecordedTree)
{
	Tree t;
	// As recorded on an Intel host (48 fraction bits, ratio 1.0): a guest
	// started long after the host booted has a large negative offset.
	t.vcpu("4242-13", 0, "-1845623400112", "281474976710656", "48");
	t.vcpu("4242-13", 1, "-1845623400112", "281474976710656", "48");
	t.vcpu("777-9", 0, "5", "281474976710656", "48");
	EXPECT_EQ(kvm_vm_dir(t.root, 4242), t.root + "/4242-13");
	EXPECT_EQ(kvm_vm_dir(t.root, 4243), "");
	std::vector<KvmTsc> v;
	std::string err;
	ASSERT_TRUE(read_kvm_tsc(t.root + "/4242-13", &v, &err)) << err;
	ASSERT_EQ(v.size(), 2u);
	EXPECT_EQ(v[1].vcpu, 1u);
	EXPECT_EQ(v[0].offset, -1845623400112);
	EXPECT_EQ(v[0].frac_bits, 48u);
	EXPECT_EQ(kvm_vcpus_disagree(v), "");
	EXPECT_EQ(kvm_host_tsc(v[0], 1000), 1000u + 1845623400112u);
	// A guest's TSC written on one vCPU only.
	t.vcpu("4242-13", 1, "-1845000000000", "281474976710656", "48");
	ASSERT_TRUE(read_kvm_tsc(t.root + "/4242-13", &v, &err)) << err;
	EXPECT_NE(kvm_vcpus_disagree(v).find("no one TSC"), std::string::npos);
	// Damaged files are named, never trusted.
	t.vcpu("9-1", 0, "12ab", "281474976710656", "48");
	EXPECT_FALSE(read_kvm_tsc(t.root + "/9-1", &v, &err));
	EXPECT_NE(err.find("tsc-offset"), std::string::npos) << err;
	t.vcpu("9-2", 0, "0", "0", "48");
	EXPECT_FALSE(read_kvm_tsc(t.root + "/9-2", &v, &err));
	t.vcpu("9-3", 0, "0", "281474976710656", "99");
	EXPECT_FALSE(read_kvm_tsc(t.root + "/9-3", &v, &err));
	EXPECT_FALSE(read_kvm_tsc(t.root + "/none", &v, &err));
}

TEST(KvmTsc, CheckedAgainstTheExchanges)
{
	// Host TSC at 2.5 GHz; the guest's TSC scaled by 1.5 (ratio 1.5 << 48)
	// and offset; each side's page maps its TSC to its ns.
	KvmTsc k;
	k.frac_bits = 48;
	k.ratio = (3ull << 48) / 2;
	k.offset = -4000000000000;
	TscLine host{1000000000000ull, 400000000000, 0.4};
	const uint64_t g0 =
		(static_cast<unsigned __int128>(host.tsc0) * k.ratio >> 48) + static_cast<uint64_t>(k.offset);
	TscLine guest{g0, 7000000000, 0.4 / 1.5};
	// The true map guest ns -> host ns through the facts, and exchanges
	// generated from it (30 us one way, jitter).
	auto host_of = [&](double gns) {
		const double gcyc = (gns - static_cast<double>(guest.ns0)) / guest.ns_per_cycle;
		const double hcyc = gcyc / 1.5;
		return static_cast<double>(host.ns0) + hcyc * host.ns_per_cycle;
	};
	Estimator e;
	std::mt19937_64 rng(7);
	std::exponential_distribution<double> ex(1.0 / 20000);
	for (int i = 0; i < 400; i++) {
		const double g = 8e9 + i * 1e7; // guest sends at guest time g
		const double h_recv = host_of(g) + 30000 + ex(rng);
		const double h_send = h_recv + 10000;
		// The guest's ns run at the host's rate here (0.4 ns a host cycle).
		const double g_recv = g + (h_send - host_of(g)) + 30000 + ex(rng);
		e.add(true, static_cast<int64_t>(g), static_cast<int64_t>(std::ceil(h_recv)));
		e.add(false, static_cast<int64_t>(h_send), static_cast<int64_t>(std::ceil(g_recv)));
	}
	const std::vector<Segment> segs = e.segments();
	ASSERT_EQ(segs.size(), 1u);
	EXPECT_EQ(kvm_check(segs[0], guest, k, host, 1000), "");
	// A TSC written unseen: 1 ms of host cycles off.
	KvmTsc moved = k;
	moved.offset += 3750000; // guest cycles: 1.5 * 2.5e6
	const std::string why = kvm_check(segs[0], guest, moved, host, 1000);
	EXPECT_NE(why.find("the exchanges allow only"), std::string::npos) << why;
}

} // namespace

// Traced messages matched by sender and key (message_match.h): a request
// and its reply that share an id are two messages.
namespace {
using strata::clocksync::MatchCounts;
using strata::clocksync::MatchedMessage;
using strata::clocksync::MessageEnd;
using strata::clocksync::MessageMatcher;

MessageEnd at(size_t machine, int64_t ts)
{
	MessageEnd e;
	e.machine = machine;
	e.ts = ts;
	return e;
}

// (sender, send ts, receiver, receive ts) of each message, sorted.
std::vector<std::vector<int64_t>> summary(const std::vector<MatchedMessage> &mm)
{
	std::vector<std::vector<int64_t>> v;
	for (const MatchedMessage &m : mm)
		v.push_back({static_cast<int64_t>(m.send.machine), m.send.ts,
			     static_cast<int64_t>(m.recv.machine), m.recv.ts});
	std::sort(v.begin(), v.end());
	return v;
}
} // namespace

TEST(MessageMatch, RequestAndReplySharingAnIdAreTwoMessages)
{
	MessageMatcher mm;
	for (int64_t id = 0; id < 3; id++) {
		mm.add_send(std::to_string(id), at(0, 100 * id));      // host's request
		mm.add_recv(std::to_string(id), at(1, 100 * id + 10)); // guest receives it
		mm.add_send(std::to_string(id), at(1, 100 * id + 20)); // guest's reply, same id
		mm.add_recv(std::to_string(id), at(0, 100 * id + 30)); // host receives it
	}
	MatchCounts c;
	const auto v = summary(mm.match(&c));
	ASSERT_EQ(v.size(), 6u);
	EXPECT_EQ(v[0], (std::vector<int64_t>{0, 0, 1, 10}));
	EXPECT_EQ(v[3], (std::vector<int64_t>{1, 20, 0, 30}));
	EXPECT_EQ(c.ambiguous + c.unmatched + c.same_machine, 0u);
}

TEST(MessageMatch, GuestToGuestIsAMessage)
{
	MessageMatcher mm;
	mm.add_send("k", at(1, 5));
	mm.add_recv("k", at(2, 9));
	MatchCounts c;
	const auto v = summary(mm.match(&c));
	ASSERT_EQ(v.size(), 1u);
	EXPECT_EQ(v[0], (std::vector<int64_t>{1, 5, 2, 9}));
}

TEST(MessageMatch, WhatCannotBeOneMessageIsCountedNotUsed)
{
	MessageMatcher mm;
	mm.add_send("twice", at(0, 1)); // one machine sends a key twice
	mm.add_send("twice", at(0, 2));
	mm.add_recv("twice", at(1, 3));
	mm.add_send("bcast", at(0, 1)); // received on two other machines
	mm.add_recv("bcast", at(1, 2));
	mm.add_recv("bcast", at(2, 2));
	mm.add_send("claim", at(1, 1)); // two senders, one receive
	mm.add_send("claim", at(2, 1));
	mm.add_recv("claim", at(0, 2));
	mm.add_send("lost", at(0, 1));  // never received
	mm.add_recv("stray", at(1, 1)); // never sent
	mm.add_send("self", at(1, 1));  // within one machine
	mm.add_recv("self", at(1, 2));
	MatchCounts c;
	EXPECT_TRUE(mm.match(&c).empty());
	EXPECT_EQ(c.ambiguous, 2u + 1u + 2u);
	EXPECT_EQ(c.unmatched, 2u);
	EXPECT_EQ(c.same_machine, 1u);
}
