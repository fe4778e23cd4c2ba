/*
 * clocks_file.h - clocks.json, the one place its format is written and
 * read (docs/clocks.md, "Stored format"): the daemon's stop writes it
 * (consumerd/sync_map.cpp, with sync_kvm.cpp's KVM facts), `strata align`
 * reads it, refines a link's segments and writes it again; the trace
 * reader's clock map (processor/ctf/clock_map.h) reads the follower
 * link's segments out of the same tree (parse_json).
 *
 * The layout (what the writer keeps byte for byte from run to run):
 *
 *   {"format": "strata-clocks", "version": 1,
 *    "machine": ..., "boot_id": ..., "clock_offset_ns": N,
 *    "links": [
 *     {"name": ..., "spec": ..., "role": "follower" | "reference",
 *      "source": ..., "target": ...,
 *      "peer_hostname": ..., "peer_boot_id": ..., "peer_clock_offset_ns": N,
 *      "state": ..., "correlated": B, "probes": N, ... "kernel_receive_stamps": N,
 *      "silences": N, "longest_silence_ns": N,
 *      "segments": [ ... ],          (clocksync.h's write_segments)
 *      "kvm": {...},                 (a link to a KVM guest: the TSC facts)
 *      "refined": {...}}             (`strata align`: what refined it)
 *    ],
 *    "ctf": {...}}                   (a follower: the line its metadata carries)
 *
 * Plain data; every string through the one escaper, every number an
 * integer but the slopes (%.17g, which read back to the same double; one
 * not finite, which the estimator never gives, is written null, and a
 * reader refuses the segment).
 */
#ifndef STRATA_CLOCKS_FILE_H
#define STRATA_CLOCKS_FILE_H

#include <cstdint>
#include <string>
#include <vector>

#include "clocksync.h"

namespace strata {
namespace clocksync {

// What the daemon read of a KVM guest's TSC (consumerd/sync_kvm.h).
struct KvmFacts {
	int64_t pid = 0;
	bool read = false; // the fields below up to `changes`: only when read
	int64_t tsc_offset = 0;
	uint64_t tsc_scaling_ratio = 0;
	uint64_t tsc_scaling_frac_bits = 0;
	uint64_t vcpus = 0;
	uint64_t changes = 0;
	bool checked = false;
	std::string error;         // checked: "" when the map agrees
	std::string why_unchecked; // not checked: why not
	std::string problem;       // read, with a problem: its words ("" none)
};

// `strata align`'s account of a refinement.
struct Refinement {
	std::string match, hold_out;
	uint64_t messages = 0, used = 0, held_out = 0, outside_segments = 0;
	uint64_t segments_refined = 0, segments_contradicted = 0;
};

struct ClocksLink {
	std::string name, spec;
	bool follower = false;
	std::string source, target;
	std::string peer_hostname, peer_boot_id;
	int64_t peer_clock_offset_ns = 0;
	std::string state;
	bool correlated = false;
	uint64_t probes = 0, answered = 0, used = 0;
	int64_t min_rtt_ns = -1, width_now_ns = -1;
	uint64_t garbage_bytes = 0, kernel_receive_stamps = 0;
	uint64_t silences = 0;          // spells without an answer (no segment by themselves)
	int64_t longest_silence_ns = 0; // the longest of them
	std::vector<Segment> segments;
	bool has_kvm = false;
	KvmFacts kvm;
	bool has_refined = false;
	Refinement refined;
};

// The follower's CTF clock line (its metadata's clock block).
struct CtfLine {
	std::string link;
	bool rewritten = false;
	uint64_t freq = 0;
	int64_t offset_s = 0, offset = 0;
};

struct ClocksFile {
	std::string machine, boot_id;
	int64_t clock_offset_ns = 0;
	std::vector<ClocksLink> links;
	bool has_ctf = false;
	CtfLine ctf;
};

// The file's text (a final newline included).
std::string clocks_json(const ClocksFile &f);
// A KVM watch's facts alone, as the link's "kvm" object (one line).
std::string kvm_json(const KvmFacts &k);

// The text of a clocks.json read back whole.  False with *why when it is
// not JSON, not a strata-clocks file of version 1, or a link or segment
// lacks what the writer always writes (a link's counters and a "kvm" or
// "refined" object may be missing: defaults).
bool parse_clocks(const std::string &text, ClocksFile *out, std::string *why);

} // namespace clocksync
} // namespace strata

#endif
