/*
 * top_json.h - what `strata top --json` (and `record --aggregate --json`)
 * prints: one snapshot of aggregation regions as a JSON object, written
 * through the JSON writer (libtrace/json/json_writer.h), so that a key's
 * text or a process name holding any bytes (they come from a traced
 * process's memory) still makes valid JSON.
 */
#ifndef STRATA_CLI_TOP_JSON_H
#define STRATA_CLI_TOP_JSON_H

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "agg_reader.h"

namespace strata {
namespace cli {

// One process's part (a session's view): its regions' hits together.
struct ProcHits {
	uint32_t pid = 0;
	std::string comm;
	uint64_t hits = 0;
	bool alive = true;
};

// The processes shown: pid(s) seen, and those that have exited (their
// regions stay mapped: their last values are kept).
struct Seen {
	std::vector<uint32_t> pids, exited;
	std::vector<ProcHits> procs; // -s only
};

// A key as shown: its text, "(all)", "tid N" or 0xHEX.
std::string agg_key_name(const AggSnapshot &s, const AggKey &k);

// What the snapshot shows.  single: one --pid (its "pid" and "alive"),
// else "pids" and "exited"; session: -s SESSION's name ("" none), with its
// processes; keys: the keys of a region to list, in order.
struct TopJson {
	bool single = false;
	uint32_t pid = 0;
	std::string session;
	std::function<std::vector<const AggKey *>(const AggSnapshot &)> keys;
};
// The JSON object and a newline, appended to out.
void top_json(std::string &out, const TopJson &t, const std::vector<AggSnapshot> &snaps, const Seen &seen);

} // namespace cli
} // namespace strata

#endif
