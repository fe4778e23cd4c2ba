/* Tracepoints of the probe unit test (probe_test.cpp): every field kind. */
#include <strata/tracepoint.h>

STRATA_ENUM(ptest, mood, STRATA_ENUM_VALUE("calm", 0), STRATA_ENUM_RANGE("busy", 1, 9))
/* Integers of every width and signedness. */
STRATA_EVENT(ptest, ints, STRATA_LOGLEVEL_INFO, strata_int(int8_t, i8), strata_int(uint8_t, u8),
	     strata_int(int16_t, i16), strata_hex(uint16_t, u16), strata_int(int32_t, i32),
	     strata_int(uint32_t, u32), strata_int(int64_t, i64), strata_int_base(uint64_t, u64, 8))
/* Everything else. */
STRATA_EVENT(ptest, mix, STRATA_LOGLEVEL_WARNING, strata_float(float, f), strata_float(double, d),
	     strata_enum(ptest, mood, int, m), strata_string(s), strata_array(int16_t, a, 3),
	     strata_sequence(uint32_t, q), strata_bytes(b), strata_int(uint32_t, tail))
/* Hits from threads and signal handlers. */
STRATA_EVENT(ptest, hit, STRATA_LOGLEVEL_DEBUG, strata_int(uint32_t, thread), strata_int(uint64_t, seq))
STRATA_EVENT_NOARGS(ptest, bare, STRATA_LOGLEVEL_ERR)
