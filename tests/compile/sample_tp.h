/* sample_tp.h - a provider used from C (sample.c) and C++ (sample.cpp) and
 * by the negative compile cases (bad_call.c). */
#include <strata/tracepoint.h>

STRATA_ENUM(sample, mood, STRATA_ENUM_VALUE("calm", 0), STRATA_ENUM_RANGE("busy", 1, 9))

STRATA_EVENT(sample, all, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, count), strata_int(int64_t, delta),
	     strata_hex(uint16_t, flags), strata_float(double, ratio),
	     strata_enum(sample, mood, uint8_t, mood), strata_string(label), strata_array(uint8_t, mac, 6),
	     strata_sequence(uint32_t, ids), strata_bytes(raw))

STRATA_EVENT(sample, one, STRATA_LOGLEVEL_DEBUG, strata_int(int, value))

STRATA_EVENT_NOARGS(sample, ping, STRATA_LOGLEVEL_DEBUG)
