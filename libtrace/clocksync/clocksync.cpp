// clocksync.cpp - the convex-hull clock map; see clocksync.h and docs/clocks.md.
#include "clocksync.h"

#include "json_reader.h"
#include "json_writer.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace strata {
namespace clocksync {
namespace {

// Cross product of (a - o) and (b - o): > 0 a left turn o -> a -> b.
__int128 cross(const Point &o, const Point &a, const Point &b)
{
	return static_cast<__int128>(a.x - o.x) * (b.y - o.y) -
	       static_cast<__int128>(a.y - o.y) * (b.x - o.x);
}

// Search iterations: the slope interval is at most 2e-3 wide; (2/3)^90
// shrinks it below 1e-18, which over 1e12 ns of source time is 1e-6 ns.
constexpr int kIter = 90;
// g(a) <= kFit: a line fits (doubles over relative coordinates of up to
// ~1e12 ns carry ~1e-4 ns of rounding).
constexpr double kFit = 0.01;

double rel(int64_t v, int64_t org)
{
	return static_cast<double>(v - org);
}

} // namespace

const char *start_name(Start s)
{
	switch (s) {
	case Start::First:
		return "first";
	case Start::LinkLost:
		return "link-lost";
	case Start::Step:
		return "step";
	case Start::Fault:
		return "fault";
	}
	return "?";
}

Estimator::Estimator(const Options &o) : opt_(o)
{
}

// Upper hull (the line must pass above these points), x increasing.
void Estimator::push_lower(std::vector<Point> &h, Point p)
{
	if (!h.empty() && p.x < h.back().x) {
		// Out of order: rebuild from the hull and p (points inside the
		// hull never constrain a line).
		std::vector<Point> all = h;
		all.push_back(p);
		std::sort(all.begin(), all.end(), [](const Point &a, const Point &b) {
			return a.x < b.x || (a.x == b.x && a.y > b.y);
		});
		h.clear();
		for (const Point &q : all)
			push_lower(h, q);
		return;
	}
	if (!h.empty() && p.x == h.back().x) {
		if (p.y <= h.back().y)
			return;
		h.pop_back();
	}
	while (h.size() >= 2 && cross(h[h.size() - 2], h.back(), p) >= 0)
		h.pop_back();
	h.push_back(p);
}

// Lower hull (the line must pass below these points), x increasing.
void Estimator::push_upper(std::vector<Point> &h, Point p)
{
	if (!h.empty() && p.x < h.back().x) {
		std::vector<Point> all = h;
		all.push_back(p);
		std::sort(all.begin(), all.end(), [](const Point &a, const Point &b) {
			return a.x < b.x || (a.x == b.x && a.y < b.y);
		});
		h.clear();
		for (const Point &q : all)
			push_upper(h, q);
		return;
	}
	if (!h.empty() && p.x == h.back().x) {
		if (p.y >= h.back().y)
			return;
		h.pop_back();
	}
	while (h.size() >= 2 && cross(h[h.size() - 2], h.back(), p) <= 0)
		h.pop_back();
	h.push_back(p);
}

namespace {

// For slope a: the least offset a line above every lower point may have,
// and the greatest a line below every upper point may have (relative
// coordinates).
double b_low(const std::vector<Point> &lower, const Point &org, double a)
{
	double m = -std::numeric_limits<double>::infinity();
	for (const Point &p : lower)
		m = std::max(m, rel(p.y, org.y) - a * rel(p.x, org.x));
	return m;
}

double b_high(const std::vector<Point> &upper, const Point &org, double a)
{
	double m = std::numeric_limits<double>::infinity();
	for (const Point &p : upper)
		m = std::min(m, rel(p.y, org.y) - a * rel(p.x, org.x));
	return m;
}

// Minimum of a convex function over [lo, hi] (ternary search): its argument.
template <class F> double argmin_convex(F f, double lo, double hi)
{
	for (int i = 0; i < kIter; i++) {
		const double m1 = lo + (hi - lo) / 3, m2 = hi - (hi - lo) / 3;
		if (f(m1) <= f(m2))
			hi = m2;
		else
			lo = m1;
	}
	return (lo + hi) / 2;
}

} // namespace

// The interval of slopes that fit both hulls.  False: none fits.
bool Estimator::slopes(const Hulls &h, double *amin, double *amax) const
{
	const double p = opt_.max_ppm * 1e-6;
	double lo = 1 - p, hi = 1 + p;
	if (h.lower.empty() || h.upper.empty()) {
		*amin = lo, *amax = hi;
		return true;
	}
	auto g = [&](double a) { return b_low(h.lower, h.org, a) - b_high(h.upper, h.org, a); };
	const double best = argmin_convex(g, lo, hi);
	if (g(best) > kFit)
		return false;
	// The fitting slopes' ends, by bisection from the best one outwards;
	// each end kept on its outer (not fitting) side, so the interval found
	// contains the true one.
	auto edge = [&](double out) {
		if (g(out) <= kFit)
			return out;
		double in = best;
		for (int i = 0; i < kIter; i++) {
			const double m = (in + out) / 2;
			(g(m) <= kFit ? in : out) = m;
		}
		return out;
	};
	lo = edge(lo);
	hi = edge(hi);
	*amin = lo, *amax = hi;
	return true;
}

// [lo, hi]: the target times the fitting lines give at source time x.
// lo(x) = min over a of (a*x + b_low(a)) (convex in a), hi(x) = max over a
// of (a*x + b_high(a)) (concave).  Rounded outwards, plus 1 ns for the
// search's own error.
bool Estimator::extent(const Hulls &h, double amin, double amax, int64_t x, int64_t *lo, int64_t *hi) const
{
	if (h.lower.empty() || h.upper.empty())
		return false;
	const double xr = rel(x, h.org.x);
	auto flo = [&](double a) { return a * xr + b_low(h.lower, h.org, a); };
	auto fhi = [&](double a) { return -(a * xr + b_high(h.upper, h.org, a)); };
	const double vlo = flo(argmin_convex(flo, amin, amax));
	const double vhi = -fhi(argmin_convex(fhi, amin, amax));
	*lo = h.org.y + static_cast<int64_t>(std::floor(vlo)) - 1;
	*hi = h.org.y + static_cast<int64_t>(std::ceil(vhi)) + 1;
	if (*lo > *hi) // a fitting set thinner than the rounding
		std::swap(*lo, *hi);
	return true;
}

bool Estimator::add(bool source_sent, int64_t send, int64_t recv)
{
	total_++;
	const Point p = source_sent ? Point{send, recv} : Point{recv, send};
	if (pending_break_) {
		if (cur_.n) {
			done_.push_back(summarise(cur_));
			cur_ = Hulls();
		}
		cur_.start = done_.empty() ? Start::First : pending_why_;
		cur_.note = done_.empty() ? std::string() : pending_note_;
		pending_break_ = false;
	}
	if (!cur_.n) {
		cur_.org = p;
		cur_.x_first = cur_.x_last = p.x;
	}
	Hulls next = cur_;
	if (source_sent)
		push_upper(next.upper, p);
	else
		push_lower(next.lower, p);
	double amin, amax;
	bool fits = slopes(next, &amin, &amax);
	if (!fits) {
		// The step came after this kind's last message that fitted:
		// the old segment ends there (what lies between is the gap
		// whose map is either segment's, docs/clocks.md).
		const int64_t end = source_sent ? cur_.x_last_upper : cur_.x_last_lower;
		if (end != INT64_MIN)
			cur_.x_last = std::max(cur_.x_first, std::min(cur_.x_last, end));
		done_.push_back(summarise(cur_));
		next = Hulls();
		next.start = Start::Step;
		next.org = p;
		next.x_first = next.x_last = p.x;
		if (source_sent)
			next.upper.push_back(p);
		else
			next.lower.push_back(p);
	}
	next.n++;
	(source_sent ? next.x_last_upper : next.x_last_lower) =
		std::max(source_sent ? next.x_last_upper : next.x_last_lower, p.x);
	next.x_first = std::min(next.x_first, p.x);
	next.x_last = std::max(next.x_last, p.x);
	cur_ = std::move(next);
	return fits;
}

bool Estimator::contradicts(bool source_sent, int64_t send, int64_t recv) const
{
	if (!cur_.n || pending_break_)
		return false;
	Hulls next = cur_;
	if (source_sent)
		push_upper(next.upper, Point{send, recv});
	else
		push_lower(next.lower, Point{recv, send});
	double amin, amax;
	return !slopes(next, &amin, &amax);
}

void Estimator::break_segment(Start why, const std::string &note)
{
	pending_break_ = true;
	pending_why_ = why;
	pending_note_ = note;
}

Segment Estimator::summarise(const Hulls &h) const
{
	Segment s;
	s.start = h.start;
	s.note = h.note;
	s.x_first = h.x_first;
	s.x_last = h.x_last;
	s.messages = h.n;
	double amin = 1, amax = 1;
	if (!slopes(h, &amin, &amax)) // cannot happen: add() kept it fitting
		return s;
	s.slope_min = amin;
	s.slope_max = amax;
	s.hull_lower = h.lower;
	s.hull_upper = h.upper;
	s.bounded = !h.lower.empty() && !h.upper.empty();
	if (!s.bounded) {
		s.x0 = h.org.x, s.y0 = h.org.y;
		return s;
	}
	// The middle slope, and at it the offset half-way between the two
	// hulls: a fitting line (the fitting set is convex), as far from the
	// nearest message of either kind as any line of that slope.  (The
	// middle of the min- and max-slope lines, used before, can pass much
	// nearer one hull: 0.37 of the band's width from it in a TCG guest,
	// where a program's message a little faster than the probes' then
	// printed inverted.)  The slope stays the middle one: the slope of the
	// widest band swings to an end of the fitting range over a short
	// segment (e2e.clock_step under TSan: 410 of 4000 inverted).
	const double a = (amin + amax) / 2;
	const double b = (b_low(h.lower, h.org, a) + b_high(h.upper, h.org, a)) / 2;
	// Anchor in the segment's middle, where the offset is best known.
	s.x0 = h.x_first + (h.x_last - h.x_first) / 2;
	s.slope = a;
	s.y0 = h.org.y + std::llround(a * rel(s.x0, h.org.x) + b);
	int64_t step = opt_.knot_step_ns;
	const int64_t span = h.x_last - h.x_first;
	if (opt_.max_knots > 2 && span / step > static_cast<int64_t>(opt_.max_knots) - 2)
		step = span / (opt_.max_knots - 2) + 1;
	for (int64_t x = h.x_first;; x += step) {
		if (x > h.x_last)
			x = h.x_last;
		Knot k;
		k.x = x;
		extent(h, amin, amax, x, &k.lo, &k.hi);
		s.knots.push_back(k);
		if (x == h.x_last)
			break;
	}
	return s;
}

std::vector<Segment> Estimator::segments() const
{
	std::vector<Segment> v = done_;
	if (cur_.n)
		v.push_back(summarise(cur_));
	return v;
}

bool Estimator::correlated() const
{
	return cur_.n && !cur_.lower.empty() && !cur_.upper.empty();
}

bool Estimator::bound(int64_t x, int64_t *lo, int64_t *hi) const
{
	double amin, amax;
	if (!correlated() || !slopes(cur_, &amin, &amax))
		return false;
	return extent(cur_, amin, amax, x, lo, hi);
}

int64_t Estimator::width_now() const
{
	return width_behind(0);
}

int64_t Estimator::width_behind(int64_t lag) const
{
	int64_t lo, hi;
	if (!bound(std::max(cur_.x_first, cur_.x_last - lag), &lo, &hi))
		return -1;
	return hi - lo;
}

bool refine_segment(const Segment &seg, const std::vector<Point> &lower, const std::vector<Point> &upper,
		    Segment *out, std::vector<size_t> *contradicting, const Options &o)
{
	const Segment &pr = seg.probes.empty() ? seg : seg.probes.front();
	// The probes' constraints: their hulls, else the knots (every fitting
	// line passes at or above lo and at or below hi there: a superset of
	// the probes' feasible set, so what fits the probes fits these).
	// (A refined segment stores the probes' hulls as its own.)
	std::vector<Point> plo = seg.hull_lower, pup = seg.hull_upper;
	if (plo.empty() && pup.empty())
		for (const Knot &k : pr.knots) {
			plo.push_back(Point{k.x, k.lo});
			pup.push_back(Point{k.x, k.hi});
		}
	const Estimator est(o);
	auto hulls = [&](const std::vector<Point> &lo, const std::vector<Point> &up) {
		Estimator::Hulls h;
		std::vector<Point> a = lo, b = up;
		std::sort(a.begin(), a.end(), [](const Point &p, const Point &q) {
			return p.x < q.x || (p.x == q.x && p.y > q.y);
		});
		std::sort(b.begin(), b.end(), [](const Point &p, const Point &q) {
			return p.x < q.x || (p.x == q.x && p.y < q.y);
		});
		for (const Point &p : a)
			Estimator::push_lower(h.lower, p);
		for (const Point &p : b)
			Estimator::push_upper(h.upper, p);
		h.org = !a.empty() ? a.front() : !b.empty() ? b.front() : Point{seg.x_first, seg.x_first};
		h.x_first = seg.x_first;
		h.x_last = seg.x_last;
		h.n = pr.messages;
		h.start = seg.start;
		h.note = seg.note;
		return h;
	};
	std::vector<Point> alo = plo, aup = pup;
	alo.insert(alo.end(), lower.begin(), lower.end());
	aup.insert(aup.end(), upper.begin(), upper.end());
	const Estimator::Hulls h = hulls(alo, aup);
	double amin, amax;
	if (!est.slopes(h, &amin, &amax)) {
		if (contradicting) {
			contradicting->clear();
			const Estimator::Hulls base = hulls(plo, pup);
			for (size_t i = 0; i < lower.size() + upper.size(); i++) {
				Estimator::Hulls one = base;
				if (i < lower.size())
					Estimator::push_lower(one.lower, lower[i]);
				else
					Estimator::push_upper(one.upper, upper[i - lower.size()]);
				if (!est.slopes(one, &amin, &amax))
					contradicting->push_back(i);
			}
		}
		return false;
	}
	Segment r = est.summarise(h);
	r.messages = pr.messages;
	// The probes' own constraints stay what the file stores (never the
	// messages': a second refinement starts from the same set).
	r.hull_lower = seg.hull_lower;
	r.hull_upper = seg.hull_upper;
	r.matched = lower.size() + upper.size();
	r.contradicting = 0;
	Segment keep = pr;
	keep.probes.clear();
	keep.hull_lower.clear(); // stored once, at the segment's level
	keep.hull_upper.clear();
	keep.matched = keep.contradicting = 0;
	r.probes.assign(1, keep);
	*out = std::move(r);
	return true;
}

bool segment_bound(const Segment &s, int64_t x, int64_t *lo, int64_t *hi)
{
	if (s.knots.empty())
		return false;
	const Knot &f = s.knots.front(), &l = s.knots.back();
	if (x <= f.x) {
		// Before the first knot, d = f.x - x back: a fitting line of
		// slope a is at its value at f.x less a*d, within
		// [f.lo - slope_max*d, f.hi - slope_min*d].
		const double d = static_cast<double>(f.x - x);
		*lo = f.lo - static_cast<int64_t>(std::ceil(s.slope_max * d));
		*hi = f.hi - static_cast<int64_t>(std::floor(s.slope_min * d));
		return true;
	}
	if (x >= l.x) {
		const double d = static_cast<double>(x - l.x);
		*lo = l.lo + static_cast<int64_t>(std::floor(s.slope_min * d));
		*hi = l.hi + static_cast<int64_t>(std::ceil(s.slope_max * d));
		return true;
	}
	// The knot pair around x (knots are in increasing x).
	auto it = std::upper_bound(s.knots.begin(), s.knots.end(), x,
				   [](int64_t v, const Knot &k) { return v < k.x; });
	const Knot &b = *it, &a = *(it - 1);
	const long double t = static_cast<long double>(x - a.x) / static_cast<long double>(b.x - a.x);
	*lo = static_cast<int64_t>(std::floor(a.lo + t * (b.lo - a.lo)));
	*hi = static_cast<int64_t>(std::ceil(a.hi + t * (b.hi - a.hi)));
	return true;
}

int64_t segment_map(const Segment &s, int64_t x)
{
	return s.y0 + std::llround(s.slope * static_cast<double>(x - s.x0));
}

namespace {

// A coordinate read back: within 2^62 either way (no overflow in the
// differences the map takes).
constexpr int64_t kMax = INT64_C(1) << 62;

// A segment's point lists: its knots (the map's bound, in increasing x)
// and its hull's lower and upper chains, each entry checked.
bool parse_points(const JsonValue &v, Segment *s, std::string *why)
{
	const auto triples = [&](const char *k, size_t width,
				 const std::function<void(const int64_t *)> &put) {
		const JsonValue *a = v.get(k);
		if (!a)
			return true;
		if (a->kind != JsonValue::Arr) {
			*why = std::string("a segment's \"") + k + "\" is not a list";
			return false;
		}
		for (const JsonValue &e : a->arr) {
			int64_t t[3] = {0, 0, 0};
			bool good = e.kind == JsonValue::Arr && e.arr.size() == width;
			for (size_t i = 0; good && i < width; i++)
				good = e.arr[i].as_int(&t[i]) && t[i] < kMax && t[i] > -kMax;
			if (!good) {
				*why = std::string("a segment's \"") + k + "\" holds a bad entry";
				return false;
			}
			put(t);
		}
		return true;
	};
	s->knots.clear();
	s->hull_lower.clear();
	s->hull_upper.clear();
	if (!triples("knots", 3,
		     [&](const int64_t *t) {
			     s->knots.push_back(Knot{t[0], t[1], t[2]});
		     }) ||
	    !triples("hull_lower", 2,
		     [&](const int64_t *t) {
			     s->hull_lower.push_back(Point{t[0], t[1]});
		     }) ||
	    !triples("hull_upper", 2, [&](const int64_t *t) {
		    s->hull_upper.push_back(Point{t[0], t[1]});
	    }))
		return false;
	for (size_t i = 1; i < s->knots.size(); i++)
		if (s->knots[i].x <= s->knots[i - 1].x) {
			*why = "a segment's knots are not in increasing x";
			return false;
		}
	return true;
}

bool parse_one(const JsonValue &v, Segment *s, std::string *why, int depth)
{
	const auto num = [&](const char *k, int64_t *out) {
		const JsonValue *f = v.get(k);
		if (!f || !f->as_int(out) || *out > kMax || *out < -kMax) {
			*why = std::string("a segment's \"") + k + "\" is missing or out of range";
			return false;
		}
		return true;
	};
	const auto dbl = [&](const char *k, double *out) {
		const JsonValue *f = v.get(k);
		if (!f || !f->as_double(out) || *out < 0.99 || *out > 1.01) {
			*why = std::string("a segment's \"") + k + "\" is missing or out of range";
			return false;
		}
		return true;
	};
	if (v.kind != JsonValue::Obj) {
		*why = "a segment is not an object";
		return false;
	}
	int64_t n = 0;
	if (!num("x_first", &s->x_first) || !num("x_last", &s->x_last) || !num("x0", &s->x0) ||
	    !num("y0", &s->y0) || !dbl("slope", &s->slope) || !dbl("slope_min", &s->slope_min) ||
	    !dbl("slope_max", &s->slope_max) || !num("messages", &n))
		return false;
	if (s->x_first > s->x_last || n < 0) {
		*why = "a segment ends before it begins";
		return false;
	}
	s->messages = static_cast<uint64_t>(n);
	const JsonValue *st = v.get("start");
	s->start = Start::First;
	if (st && st->kind == JsonValue::Str)
		for (Start k : {Start::First, Start::LinkLost, Start::Step, Start::Fault})
			if (st->text == start_name(k))
				s->start = k;
	if (const JsonValue *nt = v.get("note"); nt && nt->kind == JsonValue::Str)
		s->note = nt->text;
	const JsonValue *b = v.get("bounded");
	s->bounded = !b || b->kind != JsonValue::Bool || b->b;
	if (!parse_points(v, s, why))
		return false;
	int64_t m = 0;
	if (const JsonValue *f = v.get("matched_messages"); f && f->as_int(&m) && m > 0)
		s->matched = static_cast<uint64_t>(m);
	if (const JsonValue *f = v.get("contradicting_messages"); f && f->as_int(&m) && m > 0)
		s->contradicting = static_cast<uint64_t>(m);
	if (int64_t f; v.get("piece_from") && v.get("piece_from")->as_int(&f))
		s->piece_from = f;
	s->probes.clear();
	if (const JsonValue *p = v.get("probes_map")) {
		if (depth > 0) {
			*why = "a probes_map inside a probes_map";
			return false;
		}
		Segment q;
		if (!parse_one(*p, &q, why, depth + 1))
			return false;
		s->probes.push_back(std::move(q));
	}
	return true;
}

} // namespace

bool parse_segments(const JsonValue &segs, std::vector<Segment> *out, std::string *why)
{
	out->clear();
	if (segs.kind != JsonValue::Arr) {
		*why = "\"segments\" is not a list";
		return false;
	}
	for (const JsonValue &v : segs.arr) {
		out->emplace_back();
		if (!parse_one(v, &out->back(), why, 0))
			return false;
	}
	return true;
}

namespace {

// One segment at `indent` (its lines after the first: indent + 3).
void write_segment(JsonWriter &w, const Segment &s, unsigned indent)
{
	const unsigned in = indent + 3;
	w.begin_object().key("start").str(start_name(s.start)).key("note").str(s.note);
	w.key("bounded").boolean(s.bounded).key("messages").u64(s.messages);
	w.key("x_first").i64(s.x_first).key("x_last").i64(s.x_last);
	w.newline(in).key("x0").i64(s.x0).key("y0").i64(s.y0).key("slope").f64(s.slope);
	w.key("slope_min").f64(s.slope_min).key("slope_max").f64(s.slope_max);
	w.newline(in).key("knots").begin_array();
	for (const Knot &k : s.knots)
		w.begin_array().i64(k.x).i64(k.lo).i64(k.hi).end_array();
	w.end_array();
	const auto points = [&](const char *name, const std::vector<Point> &v) {
		if (v.empty())
			return;
		w.newline(in).key(name).begin_array();
		for (const Point &p : v)
			w.begin_array().i64(p.x).i64(p.y).end_array();
		w.end_array();
	};
	points("hull_lower", s.hull_lower);
	points("hull_upper", s.hull_upper);
	if (s.piece_from != INT64_MIN)
		w.newline(in).key("piece_from").i64(s.piece_from);
	if (s.matched || s.contradicting)
		w.newline(in)
			.key("matched_messages")
			.u64(s.matched)
			.key("contradicting_messages")
			.u64(s.contradicting);
	if (!s.probes.empty()) {
		w.newline(in).key("probes_map");
		write_segment(w, s.probes.front(), in);
	}
	w.end_object();
}

} // namespace

void write_segments(JsonWriter &w, const std::vector<Segment> &segs, unsigned indent)
{
	w.begin_array();
	for (const Segment &s : segs) {
		w.newline(indent + 2);
		write_segment(w, s, indent);
	}
	w.newline(indent).end_array();
}

std::string segments_json(const std::vector<Segment> &segs, unsigned indent)
{
	std::string o;
	JsonWriter w(o, JsonWriter::Style::kLines);
	write_segments(w, segs, indent);
	return o;
}

} // namespace clocksync
} // namespace strata
