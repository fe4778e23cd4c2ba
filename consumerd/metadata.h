/*
 * metadata.h - CTF 1.8 metadata (TSDL text) for one Strata sub-trace.
 *
 * The layout described here is the one fixed by abi/strata_abi.h:
 * the 88-byte packet header/context, then records in one of two formats
 * (TraceEnv::record_format).  STRATA_REC_COMPACT (user space): byte-packed
 * records with LTTng's compact/extended header (5-bit id, 27-bit timestamp,
 * or id 31 then u32 id and u64 timestamp), two stream classes: `stream_id`
 * for owned lanes (the thread in the packet context's vtid) and
 * `stream_id + 1` for shared lanes (an event context { vtid }); every event
 * is declared in both.  STRATA_REC_WIDE (the kernel): the 16-byte record
 * header (id u16 at 0, timestamp u64 at 2, tid u32 at 10, cpu u16 at 14) and
 * payload fields at natural alignment.  Every sub-trace of a session gets the
 * same clock block (offset measured once per session), so babeltrace2 merges
 * them without drift (../shared/notes/ctf.md, "Clocks").
 */
#ifndef STRATA_CONSUMERD_METADATA_H
#define STRATA_CONSUMERD_METADATA_H

#include <cstdint>
#include <string>
#include <vector>

#include "ctf_clock.h"
#include "event_info.h"

namespace strata {

struct TraceEnv {
	std::string domain = "ust";
	std::string procname;
	int64_t pid = 0;      // env.vpid: the pid the process sees
	int64_t host_pid = 0; // env.pid, when it differs (a process in a container): the daemon's view
	std::string hostname;
	std::string clock_source; // env.clock: "kclock-page", "consumer-page", "monotonic" ("" : not written)
	std::string tracer_name = "strata";
	uint32_t record_format = 0; // STRATA_REC_WIDE (kernel) or STRATA_REC_COMPACT (user)
};

// The kernel sub-trace follows lttng-modules' conventions (event names
// without provider, lttng-modules' env fields) so that tools that know
// LTTng kernel traces read it: see docs/kernel-module.md, "Reading kernel
// traces with LTTng tools".
bool lttng_kernel_layout(const TraceEnv &env);

// Whole metadata for a new sub-trace (stream class `stream_id`, and
// `stream_id + 1` in the COMPACT format).
std::string ctf_metadata(const uint8_t uuid[16], const ClockInfo &clock, const TraceEnv &env,
			 uint32_t stream_id, const std::vector<EventInfo> &events);

// Event blocks to append to an existing metadata file when descriptors grow.
// env: the sub-trace's (event names depend on its domain).
std::string ctf_metadata_events(uint32_t stream_id, const std::vector<EventInfo> &events,
				const TraceEnv &env);

// Boot id and REALTIME - MONOTONIC, measured now: once per session, or once
// per daemon where it has clock links (SessionTable::use_clock).
ClockInfo measure_session_clock();

// "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx"
std::string uuid_to_string(const uint8_t uuid[16]);

} // namespace strata
#endif
