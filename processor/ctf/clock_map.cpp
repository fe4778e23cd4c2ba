// clock_map.cpp - a follower's clocks.json read back; contract in clock_map.h.
#include "clock_map.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace strata {

namespace {

using JVal = JsonValue;

bool as_int(const JVal *v, int64_t *out)
{
	return v && v->as_int(out);
}

bool as_double(const JVal *v, double *out)
{
	return v && v->as_double(out);
}

bool is_str(const JVal *v, const char *s)
{
	return v && v->kind == JVal::Str && v->text == s;
}

// One stored segment as a piece; false when it gives none (unbounded) or
// cannot be trusted (*why set).
bool piece_of(const JVal &seg, ClockPiece *p, int64_t *last, SegmentLine *line, std::string *why)
{
	const JVal *bounded = seg.get("bounded");
	if (bounded && bounded->kind == JVal::Bool && !bounded->b)
		return false;
	int64_t x_first, x_last;
	if (!as_int(seg.get("x_first"), &x_first) || !as_int(seg.get("x_last"), &x_last) ||
	    !as_int(seg.get("x0"), &p->x0) || !as_int(seg.get("y0"), &p->y0) ||
	    !as_double(seg.get("slope"), &p->slope)) {
		*why = "a segment lacks x_first, x_last, x0, y0 or slope";
		return false;
	}
	// Slopes are bounded by +-1000 ppm a priori (docs/clocks.md); the
	// times are ns of a clock since boot (whole centuries at most).
	constexpr int64_t kMax = INT64_C(1) << 62;
	if (x_first > x_last || p->slope < 0.99 || p->slope > 1.01 || std::llabs(p->x0) > kMax ||
	    std::llabs(p->y0) > kMax || std::llabs(x_first) > kMax || std::llabs(x_last) > kMax) {
		*why = "a segment's numbers are out of range";
		return false;
	}
	p->from = x_first;
	*last = x_last;
	line->piece_from = INT64_MIN;
	if (int64_t f; as_int(seg.get("piece_from"), &f))
		line->piece_from = f; // kept by a refinement (checked by the caller)
	line->x_first = x_first;
	line->x_last = x_last;
	line->x0 = p->x0;
	line->y0 = p->y0;
	line->slope = p->slope;
	line->width = 0; // the widest knot (what the daemon's metadata says)
	if (const JVal *knots = seg.get("knots"); knots && knots->kind == JVal::Arr)
		for (const JVal &k : knots->arr) {
			int64_t lo, hi;
			if (k.kind == JVal::Arr && k.arr.size() == 3 && as_int(&k.arr[1], &lo) &&
			    as_int(&k.arr[2], &hi) && lo > -kMax && lo < kMax && hi > -kMax && hi < kMax &&
			    hi - lo > line->width)
				line->width = hi - lo;
		}
	return true;
}

} // namespace

int64_t piece_handover(const ClockPiece &earlier, int64_t earlier_last, const ClockPiece &later,
		       int64_t later_first)
{
	const int64_t lo = earlier_last < later_first ? earlier_last + 1 : later_first;
	// earlier.at(x) == later.at(later_first), solved for x (long double:
	// the values are ns since boot, the slopes within 1%).
	const long double y = static_cast<long double>(later.at(later_first));
	const long double x =
		static_cast<long double>(earlier.x0) +
		(y - static_cast<long double>(earlier.y0)) / static_cast<long double>(earlier.slope);
	if (!(x > static_cast<long double>(lo)))
		return lo;
	if (!(x < static_cast<long double>(later_first)))
		return later_first;
	return static_cast<int64_t>(std::ceil(x));
}

size_t ClockMap::piece_at(uint64_t x) const
{
	const int64_t v = x > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(x);
	// The last piece that starts at or before v (the first for anything before).
	auto it = std::upper_bound(pieces.begin() + 1, pieces.end(), v,
				   [](int64_t a, const ClockPiece &p) { return a < p.from; });
	return static_cast<size_t>(it - pieces.begin()) - 1;
}

uint64_t ClockMap::piece_end(size_t i) const
{
	return i + 1 < pieces.size() ? static_cast<uint64_t>(pieces[i + 1].from) : UINT64_MAX;
}

namespace {

// The follower link named `link` of a clocks.json document; null with
// *why when the document is not one or names no such link.
const JVal *follower_link(const JVal &root, const std::string &link, std::string *why)
{
	const JVal *links = root.get("links");
	int64_t version = 0;
	if (root.kind != JVal::Obj || !is_str(root.get("format"), "strata-clocks") ||
	    !as_int(root.get("version"), &version) || version != 1 || !links || links->kind != JVal::Arr) {
		*why = "not a strata-clocks file of version 1 with links";
		return nullptr;
	}
	const JVal *lk = nullptr;
	for (const JVal &l : links->arr)
		if (l.kind == JVal::Obj && is_str(l.get("name"), link.c_str()) &&
		    is_str(l.get("role"), "follower"))
			lk = &l;
	if (!lk)
		*why = "no follower link named '" + link + "' (the metadata's sync_peer)";
	return lk;
}

// The link's segments into out's pieces and lines, each piece from its
// handover; false with *why on a malformed segment or one out of order.
bool read_segments(const JVal &segs, const std::string &link, ClockMap *out, std::string *why)
{
	int64_t prev_last = 0;
	for (const JVal &s : segs.arr) {
		ClockPiece piece;
		SegmentLine line;
		line.index = static_cast<size_t>(&s - segs.arr.data());
		int64_t last = 0;
		why->clear();
		if (s.kind != JVal::Obj || !piece_of(s, &piece, &last, &line, why)) {
			if (s.kind != JVal::Obj || !why->empty()) {
				*why = "link '" + link +
				       "': " + (why->empty() ? "a segment is not an object" : *why);
				return false;
			}
			continue; // unbounded: no line (the earlier segment's covers it)
		}
		if (!out->pieces.empty() && piece.from <= out->pieces.back().from) {
			*why = "link '" + link + "': segments not in increasing time";
			return false;
		}
		if (!out->pieces.empty()) {
			// A stored handover (a refinement keeps the split's) within
			// the gap, else the one the lines give.
			const int64_t first = piece.from;
			if (line.piece_from > prev_last && line.piece_from <= first)
				piece.from = line.piece_from;
			else
				piece.from = piece_handover(out->pieces.back(), prev_last, piece, first);
			line.piece_from = piece.from;
		} else {
			line.piece_from = INT64_MIN;
		}
		prev_last = last;
		out->pieces.push_back(piece);
		out->lines.push_back(line);
	}
	return true;
}

} // namespace

bool parse_clock_map(const std::string &text, const std::string &link, ClockMap *out, std::string *why)
{
	JVal root;
	if (!parse_json(text, &root, why))
		return false;
	const JVal *lk = follower_link(root, link, why);
	if (!lk)
		return false;
	const JVal *segs = lk->get("segments");
	if (!as_int(lk->get("peer_clock_offset_ns"), &out->offset_ns) || !segs || segs->kind != JVal::Arr) {
		*why = "link '" + link + "' lacks peer_clock_offset_ns or segments";
		return false;
	}
	out->link = link;
	out->pieces.clear();
	out->lines.clear();
	out->n_segments = segs->arr.size();
	out->names = MapNames();
	out->names.link = link;
	out->names.peer_offset_ns = out->offset_ns;
	if (const JVal *v = root.get("machine"); v && v->kind == JVal::Str)
		out->names.hostname = v->text;
	if (const JVal *v = lk->get("peer_hostname"); v && v->kind == JVal::Str)
		out->names.peer_hostname = v->text;
	if (const JVal *v = lk->get("peer_boot_id"); v && v->kind == JVal::Str)
		out->names.peer_boot_id = v->text;
	if (!read_segments(*segs, link, out, why))
		return false;
	if (out->pieces.empty()) {
		*why = "link '" + link + "' has no bounded segment";
		return false;
	}
	out->pieces.front().from = INT64_MIN;
	return true;
}

std::string find_clocks_json(const std::string &dir)
{
	namespace fs = std::filesystem;
	std::error_code ec;
	fs::path d = fs::absolute(fs::path(dir), ec).lexically_normal();
	if (ec)
		return "";
	if (d.filename().empty())
		d = d.parent_path();
	for (int up = 0; up <= 8 && !d.empty(); up++) {
		const fs::path f = d / "clocks.json";
		if (fs::is_regular_file(f, ec))
			return f.string();
		if (d == d.parent_path())
			break;
		d = d.parent_path();
	}
	return "";
}

} // namespace strata
