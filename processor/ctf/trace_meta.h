/*
 * trace_meta.h - the CTF 1.8 metadata of a Strata sub-trace, read back.
 *
 * Strata writes one TSDL text per sub-trace (consumerd/metadata.cpp): the
 * packet header and context of strata_abi.h, one of two record formats,
 * and an event block per event, its fields in the types of event_info.h.
 * parse_trace_meta() reads such a text back into the same EventInfo the
 * consumer wrote it from, so that the record walk the consumer checked the
 * records with (record_walk.h) checks them again as they are read.
 *
 * The text is hostile (a damaged disk, a cut file): the parser's work is
 * linear in the text's size, its recursion bounded, every number range-
 * checked; a text it does not understand is refused with a reason, never
 * half-trusted.  A metadata text that another tracer wrote (LTTng's) is not
 * Strata's: is_strata_metadata() says so, and such traces are read by
 * babeltrace2.
 */
#ifndef STRATA_LIBTRACE_TRACE_META_H
#define STRATA_LIBTRACE_TRACE_META_H

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "clock_map.h"
#include "event_info.h"

namespace strata {

struct MetaEnvValue {
	bool is_int = false;
	int64_t i = 0;
	std::string s;
};

struct MetaClock {
	std::string name = "monotonic";
	std::string uuid;
	std::string description;
	uint64_t freq = 1000000000;
	int64_t offset_s = 0;
	int64_t offset = 0; // cycles
	bool absolute = false;
};

// An event class of one stream class.
struct MetaEvent {
	EventInfo info;        // provider/name split at the first ':' (kernel events: no provider)
	std::string full_name; // as the metadata names it ("hello:greet", "sched_switch")
	uint32_t loglevel = 0;
};

struct TraceMeta {
	uint8_t uuid[16] = {};
	bool has_uuid = false;
	std::vector<std::pair<std::string, MetaEnvValue>> env;
	MetaClock clock;
	uint32_t record_format = 0; // STRATA_REC_WIDE or STRATA_REC_COMPACT
	// Stream classes: owned lanes' id and, COMPACT, shared lanes' (id + 1,
	// with the writer's thread in each record).
	uint32_t stream_id = 0;
	bool has_shared = false;
	// By stream class id, then event id.
	std::map<uint32_t, std::map<uint32_t, MetaEvent>> events;
	// Non-empty when the text was damaged after its stream blocks and
	// read up to the damage: what was lost.
	std::string damage;
	size_t text_used = 0; // bytes of the text read (all of it, unless damaged)
	// A follower's clock map (clocks.json, clock_map.h): when set, it and
	// not `clock` places the values (the reader sets it after parsing).
	std::shared_ptr<const ClockMap> map;

	const MetaEnvValue *env_value(const std::string &key) const;
	std::string env_string(const std::string &key) const; // "" if absent or not a string
	bool env_int(const std::string &key, int64_t *out) const;
	bool is_kernel() const { return env_string("domain") == "kernel"; }
	bool shared_stream(uint32_t sid) const { return has_shared && sid == stream_id + 1; }
	bool known_stream(uint32_t sid) const { return sid == stream_id || shared_stream(sid); }
	// ns from the clock's origin (the Unix epoch when absolute) of a clock
	// value: by the map when there is one, else by the clock's one line.
	int64_t ns_from_origin(uint64_t value) const;
};

// Whether `text` is a metadata text Strata wrote (its env names Strata as
// the tracer).  Cheap: looks at the text, does not parse it.
bool is_strata_metadata(const std::string &text);

// Parse a Strata metadata text.  False with *why (and the byte offset) when
// the text is not one: cut, damaged, or of a layout this reader does not
// know.  Events appended after a cut are lost with the cut, those before it
// kept only if the text up to them parses (`*out` is valid only on true).
bool parse_trace_meta(const std::string &text, TraceMeta *out, std::string *why);

} // namespace strata
#endif
