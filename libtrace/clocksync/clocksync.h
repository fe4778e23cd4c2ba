/*
 * clocksync.h - the map of one machine's trace clock onto another's, with a
 * guaranteed bound, from the messages the two exchange (docs/clocks.md).
 *
 * Each message between the two clocks says that its send happened before
 * its receive.  With the map source -> target taken as a line
 * y = a*x + b within a segment, a message from the target (sent at y,
 * received at x) puts the line above the point (x, y), a message from the
 * source (sent at x, received at y) below it.  The Estimator keeps the two
 * convex hulls that matter, the interval of slopes that fit them, and from
 * these the exact interval [lo, hi] of target times any fitting line gives
 * at a source time, and the mapping: the middle slope with the offset
 * half-way between the hulls there, which fits every message (the fitting
 * set is convex), so no
 * exchanged message is inverted once mapped.  When no line fits any more
 * (a step: a paused VM, a written TSC) or the caller says the link was lost,
 * the next message starts a new segment.
 *
 * Contract: an Estimator is plain data, used by one thread at a time (the
 * daemon's sync link thread, under its lock).  Times are signed ns of each
 * clock; messages are expected in roughly increasing source time (a late
 * one costs a hull rebuild, never correctness).  Nothing here reads a clock.
 */
#ifndef STRATA_CLOCKSYNC_H
#define STRATA_CLOCKSYNC_H

#include <cstdint>
#include <string>
#include <vector>

namespace strata {
struct JsonValue; // json_reader.h
class JsonWriter; // json_writer.h
namespace clocksync {

// Why a segment starts.
enum class Start {
	First,    // the first message ever
	LinkLost, // break_segment(): no answer for too long, reconnected
	Step,     // no line fits the previous segment and this message
	Fault,    // break_segment(): a fault the caller knows of (TSC written, ...)
};
const char *start_name(Start s);

struct Point {
	int64_t x = 0; // source ns
	int64_t y = 0; // target ns
};

// The fitting set's extent at source time x: every line that fits gives a
// target time in [lo, hi] there.
struct Knot {
	int64_t x = 0;
	int64_t lo = 0;
	int64_t hi = 0;
};

// One segment's result.  The mapping: y = y0 + slope * (x - x0).
struct Segment {
	Start start = Start::First;
	std::string note;    // the caller's words for a Fault / LinkLost
	int64_t x_first = 0; // source times of its first and last messages
	int64_t x_last = 0;
	uint64_t messages = 0;  // messages in it (each probe gives two)
	int64_t x0 = 0, y0 = 0; // the mapping's anchor (integers: exact in JSON)
	double slope = 1.0;     // and its slope (target ns per source ns)
	double slope_min = 1.0; // the fitting slopes
	double slope_max = 1.0;
	std::vector<Knot> knots; // x increasing; x_first and x_last included
	bool bounded = false;    // both kinds of message seen: lo and hi finite
	// The probes' constraints that matter: the upper hull of the "line
	// above" points and the lower hull of the "line below" points (x
	// increasing).  Exactly the feasible set's description: a refinement
	// (refine_segment) starts from them.  Empty in a file written before
	// they were stored: the knots then stand for them (weaker, sound).
	std::vector<Point> hull_lower, hull_upper;
	// Set by a refinement with traced messages (`strata align`,
	// docs/clocks.md "Traced messages as constraints"): how many of them
	// this segment used, how many contradicted the probes (then none is
	// used and the map stays the probes'), and the map the probes alone
	// gave (0 or 1 element: kept so that a refinement is idempotent and the
	// probes' map recoverable).
	uint64_t matched = 0;
	uint64_t contradicting = 0;
	std::vector<Segment> probes;
	// The first source value its piece covers, when a refinement keeps the
	// split's handover (clock_map.h); INT64_MIN: not stored.
	int64_t piece_from = INT64_MIN;
};

struct Options {
	double max_ppm = 1000; // a priori |slope - 1| bound
	// Knots at least this far apart (source ns), at most max_knots a
	// segment (spread wider for long segments).
	int64_t knot_step_ns = 100000000;
	unsigned max_knots = 2048;
};

class Estimator {
public:
	explicit Estimator(const Options &o = Options());

	// A message: source_sent true: sent by the source at `send` (source
	// clock), received by the target at `recv` (target clock); false: sent
	// by the target at `send`, received by the source at `recv`.  False when
	// it could not join the current segment (no line fits): a new segment
	// began with it (Start::Step).
	bool add(bool source_sent, int64_t send, int64_t recv);
	// True if no line of the current segment fits this message (so a step
	// lies before its receive), without adding it.  False with no current
	// segment or a break pending: nothing to contradict.
	bool contradicts(bool source_sent, int64_t send, int64_t recv) const;
	// The next message starts a new segment (link lost, a known fault).
	void break_segment(Start why, const std::string &note = "");
	// The target time of the current segment's first message (INT64_MIN
	// with none, or a break pending).  The target's clock runs forward,
	// so an exchange begun before it (its earliest target stamp lower)
	// that no line of the segment fits is from before the segment's step,
	// fed late: it must not begin a segment going back (SyncLink).
	int64_t first_target() const { return cur_.n && !pending_break_ ? cur_.org.y : INT64_MIN; }

	// The finished segments, then the current one (its knots computed now).
	std::vector<Segment> segments() const;
	size_t segment_count() const { return done_.size() + (cur_.n ? 1 : 0); }
	uint64_t messages() const { return total_; }

	// The current segment: is there a bounded map, and its bound at x
	// (exact: the extreme fitting lines' values at x).
	bool correlated() const;
	bool bound(int64_t x, int64_t *lo, int64_t *hi) const;
	// hi - lo at the current segment's last message (-1: not correlated).
	int64_t width_now() const;
	// hi - lo `lag` ns of source time before it (at the segment's first
	// message if that is later): where exchanges lie on both sides, so that
	// the slopes' spread no longer widens it as it does at the edge.
	int64_t width_behind(int64_t lag) const;

private:
	struct Hulls {
		uint64_t n = 0; // messages
		int64_t x_first = 0, x_last = 0;
		// The last source time of each kind of message: a step shows
		// as a message of one kind that no line fits; the other kind's
		// messages since that kind's last one may be on either side
		// of the step, so the segment ends at that kind's last.
		int64_t x_last_lower = INT64_MIN, x_last_upper = INT64_MIN;
		Point org;                // coordinates below are relative to it
		std::vector<Point> lower; // upper hull of "line above" points
		std::vector<Point> upper; // lower hull of "line below" points
		Start start = Start::First;
		std::string note;
	};
	static void push_lower(std::vector<Point> &h, Point p);
	static void push_upper(std::vector<Point> &h, Point p);
	bool slopes(const Hulls &h, double *amin, double *amax) const;
	bool extent(const Hulls &h, double amin, double amax, int64_t x, int64_t *lo, int64_t *hi) const;
	Segment summarise(const Hulls &h) const;
	friend bool refine_segment(const Segment &, const std::vector<Point> &, const std::vector<Point> &,
				   Segment *, std::vector<size_t> *, const Options &);

	Options opt_;
	Hulls cur_;
	std::vector<Segment> done_;
	bool pending_break_ = false;
	Start pending_why_ = Start::First;
	std::string pending_note_;
	uint64_t total_ = 0;
};

// The bound a stored segment gives at source time x (docs/clocks.md,
// "Stored format"): between knots by linear interpolation (safe: lo is
// concave, hi convex), beyond them by the extreme slopes.  False if the
// segment has no knots.
bool segment_bound(const Segment &s, int64_t x, int64_t *lo, int64_t *hi);
// The mapping of a stored segment at x (rounded to the nearest ns).
int64_t segment_map(const Segment &s, int64_t x);

// A stored segment refined by more messages than its probes (traced
// messages matched across the two machines): the probes' constraints
// (seg's hulls, else its knots' lo and hi) with `lower` ("line above")
// and `upper` ("line below") points added, fitted as the Estimator fits a
// segment (same middle line, knots, extent), seg's x_first, x_last, start
// and note kept.  If no line fits them all, false: *out untouched and
// *contradicting (may be null) gets the indices of the points that no line
// fits together with the probes alone (lower ones first, then upper ones
// numbered after them; empty when only several together contradict).
// `seg` itself may be a refined one: its probes' map is started from, so a
// second refinement with the same points gives the same segment.
bool refine_segment(const Segment &seg, const std::vector<Point> &lower, const std::vector<Point> &upper,
		    Segment *out, std::vector<size_t> *contradicting, const Options &o = Options());

// The "segments" array of a clocks.json read back (what write_segments
// writes: knots, hulls, a refinement's probes_map).  False with *why when
// a segment lacks a field or holds a number out of range.
bool parse_segments(const JsonValue &segs, std::vector<Segment> *out, std::string *why);

// One list of segments (the "segments" array of clocks.json) into w, a
// JsonWriter of Style::kLines: each segment on lines of its own at
// indent + 2, the closing bracket at indent.  segments_json: the array
// alone, as text.
void write_segments(JsonWriter &w, const std::vector<Segment> &segs, unsigned indent);
std::string segments_json(const std::vector<Segment> &segs, unsigned indent);

} // namespace clocksync
} // namespace strata
#endif
