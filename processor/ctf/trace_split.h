/*
 * trace_split.h - a follower's sub-trace split into one CTF trace per clock
 * piece (at a disk follower's stop, by `strata receive` and by `strata
 * split` on a received or relayed trace), so that babeltrace2 (one linear clock per trace) places
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
 * stop path, sync_link.h's session_stopped; a receiver's line stopped; a
 * relayd's session closed); idempotent (a second run over
 * a split directory moves nothing, a run after more appends moves only
 * what the later steps cut off); crash-safe order: a piece dir's stream
 * files, then its metadata, then the base's metadata, then its stream files
 * (each replaced whole by a rename).  The files are the daemon's own but
 * not trusted: a packet header that does not check makes the file stay
 * whole in the base (SplitStats::whole_files, for the caller to say); work
 * is linear in the bytes moved.  Shared by the daemon and the CLI (one
 * implementation: libtrace/shm_reader).
 */
#ifndef STRATA_LIBTRACE_TRACE_SPLIT_H
#define STRATA_LIBTRACE_TRACE_SPLIT_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ctf_clock.h"

namespace strata {

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
	std::vector<std::string> whole_files; // a packet header did not check: left whole in the base
};

// What each file the split creates is handed to (a root daemon gives a
// user's trace back to the user: fs.h's Owner); none: left as created.
struct SplitOwner {
	std::function<void(int fd)> give;
	void apply(int fd) const
	{
		if (give)
			give(fd);
	}
};

// Split sub-trace `dir` (a follower's, its metadata already rewritten onto
// the peer's clock) by `pieces` (from increasing, at least one).  With
// `reline`, piece dirs made before that get no packet now still get their
// metadata's clock block and env onto their piece's line as `pieces` give
// it (a map refined since, `strata align`, which keeps the handovers in
// clocks.json's `piece_from`, so that the ranges stay).  False with *err
// when it could not (the directory is then left readable: whole, or split
// up to a consistent point).
bool split_subtrace(const std::string &dir, const std::vector<CtfPiece> &pieces, SplitStats *st,
		    std::string *err, const SplitOwner &own = SplitOwner(), bool reline = false);

// Every bounded segment as a piece with its own line (segs: the bounded
// ones, in order; n_segs: the map's segment count, unbounded ones too),
// from the handover as clock_map.h's pieces.  The daemon's stop and the
// CLI's split of a stored clocks.json both make their pieces here.
std::vector<CtfPiece> ctf_pieces(const std::vector<SegmentLine> &segs, size_t n_segs, const MapNames &names,
				 const ClockInfo &local);

// What split_tree did.
struct TreeSplit {
	size_t subtraces = 0; // sub-trace directories seen (piece dirs aside)
	size_t split = 0;     // of which split (their map has two pieces or more)
	size_t one_piece = 0; // of which on a one-piece map: nothing to do
	size_t skipped = 0;   // not correlated (no rewrite), or no usable map: said in notes
	size_t relined = 0;   // one-piece ones whose metadata took the map's line anew (reline)
	SplitStats st;
	std::vector<std::string> notes; // one line per sub-trace or file left as it was, and why
};

// Every follower sub-trace under `root` (a received or relayed trace: each
// directory holding a `metadata` that says sync_state "correlated", piece
// dirs aside) split by the pieces of the nearest clocks.json's map of its
// link (clock_map.h).  With `only`, those sub-trace directories alone (a
// receiver's own: another run's under the same root may follow another
// map).  With `reline`, a sub-trace on a one-piece map also gets its
// metadata's clock block and env onto that piece's line when they differ
// (a map refined since: `strata align`), and split pieces' metadata are
// rewritten anyway (split_subtrace).  False with *err when one could not
// be split (the others still are).
bool split_tree(const std::string &root, TreeSplit *out, std::string *err,
		const std::vector<std::string> *only = nullptr, bool reline = false);

// Whether `dir` names a piece dir (`...~seg<k>`).
bool is_piece_dir(const std::string &dir);

// The metadata text without its trace block's uuid line.
std::string drop_trace_uuid(const std::string &text);

} // namespace strata
#endif
