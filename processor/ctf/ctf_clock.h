/*
 * ctf_clock.h - a CTF 1.8 clock block and its rewrite in a metadata text:
 * what a follower's stop writes (docs/clocks.md, "One timeline") and the
 * split by clock piece (trace_split.h) rewrites, shared by the daemon and
 * the CLI (`strata receive`, `strata split`) so that both write the same
 * text.
 *
 * Glossary:
 *   clock block  `clock { name; uuid; description; freq; precision;
 *                offset_s; offset; absolute; };` of a metadata text.
 *   env lines    `\tsync_...;` lines of the metadata's env block, what the
 *                rewrite says about the map (docs/clocks.md).
 *   segment line y = y0 + slope*(x - x0) of one segment of a follower's
 *                map (clocks.json), with its extent and widest bound.
 */
#ifndef STRATA_LIBTRACE_CTF_CLOCK_H
#define STRATA_LIBTRACE_CTF_CLOCK_H

#include <cstdint>
#include <string>

namespace strata {

struct ClockInfo {
	std::string name = "monotonic";
	std::string uuid;      // boot id, 8-4-4-4-12
	int64_t offset_s = 0;  // REALTIME - MONOTONIC, seconds part
	int64_t offset_ns = 0; // and nanoseconds part, 0 <= offset_ns < 1e9 (CTF's `offset`:
			       // cycles of freq when freq is not 1e9)
	std::string description = "Monotonic Clock";
	// Cycles per second of the values: 1e9 (ns) but in a sub-trace put onto
	// another machine's clock (docs/clocks.md: the drift as a rate).
	uint64_t freq = 1000000000;
};

// A TSDL string literal of s (quotes and control bytes escaped).
std::string tsdl_quote(const std::string &s);

// The `clock { ... };` block alone (what rewrite_metadata_clock replaces).
std::string ctf_clock_block(const ClockInfo &clock);

// The metadata text with its clock block replaced by `c` and its env given
// `env_lines` (earlier sync_ lines dropped).  Unchanged if it has no clock
// block.
std::string rewrite_metadata_clock(const std::string &text, const ClockInfo &c, const std::string &env_lines);
// The same for the env block alone (the clock block kept).
std::string rewrite_metadata_env(const std::string &text, const std::string &env_lines);

// One segment of a follower's map, as clocks.json stores it.
struct SegmentLine {
	size_t index = 0; // in clocks.json's segments
	int64_t x_first = 0, x_last = 0;
	int64_t x0 = 0, y0 = 0;
	double slope = 1.0;
	int64_t width = 0; // the widest knot's hi - lo
	// The first source value its piece covers when stored (a refinement
	// keeps the split's handover, clocks.json's `piece_from`); INT64_MIN:
	// none, the handover the lines give (clock_map.h).
	int64_t piece_from = INT64_MIN;
};

// Who maps onto whom: the names a mapped clock block and its env carry.
struct MapNames {
	std::string link;           // the follower link's name (env sync_peer)
	std::string hostname;       // this (the follower's) machine
	std::string peer_hostname;  // the reference's
	std::string peer_boot_id;   // the reference's boot id (the clock's uuid)
	int64_t peer_offset_ns = 0; // the reference's REALTIME - MONOTONIC
};

// The clock block and env lines that put `local`'s values onto the peer's
// by `seg`'s line (its rate in whole Hz); n_segs: the map's segment count.
void segment_clock(const SegmentLine &seg, size_t n_segs, const MapNames &names, const ClockInfo &local,
		   ClockInfo *out, std::string *env);

} // namespace strata
#endif
