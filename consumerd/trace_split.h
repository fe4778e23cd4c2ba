/*
 * trace_split.h - a follower's sub-trace split into one CTF trace per clock
 * piece at stop, so that babeltrace2 (one linear clock per trace) places
 * every event across a step (a paused VM) as Strata's reader does with
 * clocks.json (docs/clocks.md, "babeltrace2 across a step").
 *
 * Glossary:
 *   piece       one bounded segment of the follower's map with its own line,
 *               covering raw values [from, the next piece's from) (the
 *               first one everything before too): clock_map.h's piece.
 *   base        the sub-trace directory the drains wrote (`<dir>`): after a
 *               split it holds the latest piece that has packets, with
 *               that piece's clock line; later appends land there.
 *   piece dir   `<dir>~seg<k>`, a sibling (neither reader looks inside a
 *               trace directory), k the segment's index in clocks.json:
 *               the packets of an earlier piece, its metadata with that
 *               piece's clock line and no trace uuid (babeltrace2 would
 *               merge directories of one uuid into one trace).
 *   range       env `sync_piece_from` / `sync_piece_to` in a piece's
 *               metadata: the raw values its packets begin in; Strata's
 *               reader skips a packet outside (a split interrupted by a
 *               kill never shows a packet twice).
 *
 * A packet whose records lie in two pieces (a process that wrote nothing
 * between the step and the stop switched no packet) is cut at a record
 * boundary: each part gets its own header (timestamps, sizes), so every
 * packet lies wholly in one piece.
 *
 * Contract: runs on closed files only (the session's drains finished: the
 * stop path, sync_link.h's session_stopped); idempotent (a second run over
 * a split directory moves nothing, a run after more appends moves only
 * what the later steps cut off); crash-safe order: a piece dir's stream
 * files, then its metadata, then the base's metadata, then its stream files
 * (each replaced whole by a rename).  The files are the daemon's own but
 * not trusted: a packet header that does not check makes the file stay
 * whole in the base (logged); work is linear in the bytes moved.
 */
#ifndef STRATA_CONSUMERD_TRACE_SPLIT_H
#define STRATA_CONSUMERD_TRACE_SPLIT_H

#include <cstdint>
#include <string>
#include <vector>

#include "metadata.h"

namespace strata {
namespace daemon_impl {

struct CtfPiece {
	size_t segment = 0;       // its index in clocks.json's segments (the piece dir's name)
	int64_t from = INT64_MIN; // first raw value it covers (the first piece: all before too)
	ClockInfo clock;          // its line as a CTF clock
	std::string env;          // its env lines (sync_*)
};

struct SplitStats {
	size_t dirs_made = 0;     // piece dirs written (new or appended to)
	size_t packets_moved = 0; // packets (or parts) moved out of the base
	size_t packets_cut = 0;   // packets cut at a record boundary
	uint64_t bytes_moved = 0;
};

// Split sub-trace `dir` (a follower's, its metadata already rewritten onto
// the peer's clock) by `pieces` (from increasing, at least one).  False
// with *err when it could not (the directory is then left readable: whole,
// or split up to a consistent point).
bool split_subtrace(const std::string &dir, const std::vector<CtfPiece> &pieces, SplitStats *st,
		    std::string *err);

// Whether `dir` names a piece dir (`...~seg<k>`).
bool is_piece_dir(const std::string &dir);

// The metadata text without its trace block's uuid line.
std::string drop_trace_uuid(const std::string &text);

} // namespace daemon_impl
} // namespace strata
#endif
