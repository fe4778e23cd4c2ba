/*
 * agg_reader.h - reading an aggregation region (agg_layout.h) from outside
 * the process that fills it, live: the region is hostile input (any byte
 * may be anything, and change while read), so everything is checked
 * against the mapped size, strings are bounded, and only LIVE entries are
 * read (acquire on their state).  Entries of one key are merged.  Used by
 * `strata top` (a process's regions, or a session's from the daemon, which
 * itself never maps them) and the tests.
 */
#ifndef STRATA_LIBTRACE_AGG_READER_H
#define STRATA_LIBTRACE_AGG_READER_H

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "agg_layout.h"

namespace strata {

struct AggKey {
	uint64_t key = 0;
	std::string text; // string and event keys
	uint64_t count = 0;
	int64_t sum = 0;
	int64_t min = INT64_MAX;
	int64_t max = INT64_MIN;
	std::array<uint64_t, STRATA_AGG_BUCKETS> hist{};
};

struct AggSnapshot {
	uint32_t pid = 0;
	uint32_t key_kind = 0;
	bool has_value = false;
	std::string pattern, value_field, key_field;
	uint64_t hits = 0, overflow = 0, no_value = 0;
	std::vector<AggKey> keys; // by count, largest first (then by key)
};

// One snapshot of the region mapped at [map, map + len).  False (with
// *err) when it is not a region this reader knows: magic, version, sizes,
// entry count against len.
bool agg_read(const void *map, size_t len, AggSnapshot *out, std::string *err);

} // namespace strata
#endif
