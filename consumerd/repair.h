/*
 * repair.h - make stream files end on a packet boundary again.
 *
 * The consumer appends each packet with one write(2), but a consumer killed
 * in the middle of a write, or a full disk, can leave a stream file that
 * ends inside a packet; babeltrace2 then refuses the WHOLE trace.  Repair
 * walks the packets of every stream file (packet_size from each CTF packet
 * header, validated) and truncates the file after the last whole packet,
 * unless a whole packet of the same trace follows the bad bytes: damage
 * inside a file (a flipped bit, a zeroed run) is left as it is, since
 * cutting there would lose every packet after it, and Strata's readers
 * skip it (docs/reading.md).  A whole file with blocks allocated past its
 * end (a killed daemon's, output_disk.cpp) has them given back: truncated
 * to its own size, its bytes unchanged.
 */
#ifndef STRATA_CONSUMERD_REPAIR_H
#define STRATA_CONSUMERD_REPAIR_H

#include <cstdint>
#include <string>

namespace strata {

struct RepairStats {
	uint64_t files = 0;     // stream files examined
	uint64_t repaired = 0;  // files truncated (check only: files torn)
	uint64_t bytes_cut = 0; // (check only: bytes that would be cut)
	uint64_t errors = 0;    // files that could not be read or truncated
	uint64_t damaged = 0;   // files left with damage inside (whole packets after it)
};

// Repair one stream file.  Returns 1 if it was truncated, 0 if it was whole,
// 2 if it holds damage with whole packets after it (left as it is; `why`
// says where), -errno on failure.  `why` tells what was cut.  check_only:
// the file is opened read-only and left as it is; 1 means it is torn.
int repair_stream_file(const std::string &path, uint64_t &bytes_cut, std::string &why,
		       bool check_only = false);

// Repair every stream file under `dir` (recursively; a directory holding a
// `metadata` file is a trace, its other regular files are streams).  Logs
// each repair (check_only: each torn file) to stderr.
RepairStats repair_tree(const std::string &dir, bool check_only = false);

} // namespace strata
#endif
