/*
 * demo_tp.h - the provider of the bundled example, strata-demo.
 *
 * It uses every field kind of <strata/tracepoint.h> so that the end-to-end
 * tests (tests/e2e/) can check each one read back through babeltrace2.
 * Field values are a pure function of (thread index, sequence number): see
 * demo_values.h, which the tests mirror in tests/e2e/demo_oracle.py.
 */
#include <strata/tracepoint.h>

STRATA_ENUM(demo, state, STRATA_ENUM_VALUE("idle", 0), STRATA_ENUM_VALUE("busy", 1),
	    STRATA_ENUM_RANGE("custom", 10, 19))

/* Every integer width, signed and unsigned, and a hexadecimal one. */
STRATA_EVENT(demo, ints, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, thread), strata_int(uint64_t, seq),
	     strata_int(int8_t, s8), strata_int(uint8_t, u8), strata_int(int16_t, s16),
	     strata_int(uint16_t, u16), strata_int(int32_t, s32), strata_int(uint32_t, u32),
	     strata_int(int64_t, s64), strata_hex(uint64_t, x64))

/* Floating point, enum, string, fixed array, sequence, bytes. */
STRATA_EVENT(demo, mix, STRATA_LOGLEVEL_DEBUG, strata_int(uint32_t, thread), strata_int(uint64_t, seq),
	     strata_float(float, f32), strata_float(double, f64), strata_enum(demo, state, int32_t, state),
	     strata_string(msg), strata_array(uint16_t, arr, 4), strata_sequence(int32_t, vals),
	     strata_bytes(blob))

/* Emitted once by the main thread before the workers start. */
STRATA_EVENT_NOARGS(demo, start, STRATA_LOGLEVEL_NOTICE)
