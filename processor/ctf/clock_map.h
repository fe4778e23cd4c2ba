/*
 * clock_map.h - a follower sub-trace's clock put onto its reference's, as
 * the follower's clocks.json stores it (docs/clocks.md, "Stored format").
 *
 * A follower daemon (a guest) rewrites its sub-traces' metadata clock with
 * one line per directory (across a step it splits each sub-trace into one
 * directory per piece, consumerd/trace_split.h); a metadata copied or cut
 * apart from that split places events after a step off by it.  The map in
 * clocks.json has every segment; Strata's reader applies it: a raw
 * clock value x of the follower maps with the line of the piece that
 * covers x (within a segment its line; before the first, the first's),
 * then onto the reference's absolute time by the reference's REALTIME -
 * MONOTONIC (`peer_clock_offset_ns`, the quantity the metadata rewrite
 * uses too).
 *
 * In the gap between two segments a step lies at an unknown point: an
 * event before it belongs on the earlier line, one after it on the later.
 * The handover (piece_handover) is where the earlier line reaches the
 * later segment's first target time: an event the earlier line would put
 * past the later segment's start cannot be before the step (time on the
 * reference runs forward), so it takes the later line.  Across a forward
 * step S longer than the gap's real time d (a paused VM caught up, a
 * written TSC) this sorts every event exactly: the earlier events lie
 * below the handover, the later ones at least S - d above it.
 *
 * Glossary:
 *   piece     one bounded segment's line, used from its handover (the
 *             first piece: from everything before) up to the next piece's.
 *   handover  the first source value a piece covers: within the gap
 *             before its segment, never before the earlier segment's last
 *             message nor after its own first.
 *
 * The file is hostile: the parser's work is linear in its size, its depth
 * bounded, every number range-checked; a file it does not trust is
 * refused with a reason (the caller falls back to the metadata's line and
 * says so).  Plain data, immutable once loaded: shared by every sub-trace
 * under one clocks.json and by every reader pass.
 */
#ifndef STRATA_LIBTRACE_CLOCK_MAP_H
#define STRATA_LIBTRACE_CLOCK_MAP_H

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "ctf_clock.h"
#include "json_reader.h"

namespace strata {

struct ClockPiece {
	int64_t from = INT64_MIN; // first source ns it covers (the first piece: all before too)
	int64_t x0 = 0, y0 = 0;   // the line: y = y0 + slope * (x - x0), target ns
	double slope = 1.0;

	int64_t at(int64_t x) const { return y0 + std::llround(slope * static_cast<double>(x - x0)); }
};

// The handover from `earlier` (whose segment's last message is at source
// value earlier_last) to `later` (whose first is at later_first): the
// first source value where earlier's line reaches later's target time at
// later_first, kept within (earlier_last, later_first].  Used by this
// reader and by the follower's split (trace_split.h), so both place an
// event in a gap alike.
int64_t piece_handover(const ClockPiece &earlier, int64_t earlier_last, const ClockPiece &later,
		       int64_t later_first);

struct ClockMap {
	std::string file;               // the clocks.json it came from
	std::string link;               // the follower link's name (the metadata's sync_peer)
	int64_t offset_ns = 0;          // the reference's REALTIME - MONOTONIC
	std::vector<ClockPiece> pieces; // from increasing; never empty once loaded
	// What a split by piece (trace_split.h) writes into each piece's
	// metadata: each piece's segment (lines[i] is pieces[i]'s), the map's
	// segment count (unbounded ones too) and the names.
	std::vector<SegmentLine> lines;
	size_t n_segments = 0;
	MapNames names;

	// The piece that maps source value x.
	size_t piece_at(uint64_t x) const;
	// First source value the piece after `i` covers (UINT64_MAX: none).
	uint64_t piece_end(size_t i) const;
	// ns from the Unix epoch on the reference's clock of source value x
	// mapped by piece i (as clocksync::segment_map rounds it).
	int64_t ns_with(size_t i, uint64_t x) const
	{
		return offset_ns + pieces[i].at(static_cast<int64_t>(x));
	}
	int64_t ns(uint64_t x) const { return ns_with(piece_at(x), x); }
};

// The map of follower link `link` in the text of a clocks.json.  False
// with *why when the text is not a clocks.json this reader trusts, or the
// link is absent, not a follower's, or has no bounded segment.
bool parse_clock_map(const std::string &text, const std::string &link, ClockMap *out, std::string *why);

// The clocks.json that governs the sub-trace in `dir`: the nearest one in
// `dir` or above it (at most 8 levels up), or "" when none.
std::string find_clocks_json(const std::string &dir);

} // namespace strata
#endif
