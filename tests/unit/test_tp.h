/* Tracepoints of the ring-buffer and runtime unit tests. */
#include <strata/tracepoint.h>

/* A record with a per-thread sequence number and a checksum of both. */
STRATA_EVENT(rbtest, rec, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, thread), strata_int(uint64_t, seq),
	     strata_hex(uint64_t, check))
/* The same, emitted from signal handlers. */
STRATA_EVENT(rbtest, sig, STRATA_LOGLEVEL_DEBUG, strata_int(uint32_t, thread), strata_int(uint64_t, seq),
	     strata_hex(uint64_t, check))
STRATA_ENUM(rbtest, color, STRATA_ENUM_VALUE("red", 0), STRATA_ENUM_RANGE("warm", 1, 5),
	    STRATA_ENUM_VALUE("minus one", -1))
/* Every field kind. */
STRATA_EVENT(rbtest, all, STRATA_LOGLEVEL_WARNING, strata_int(int8_t, a), strata_hex(uint16_t, b),
	     strata_int_base(int64_t, c, 8), strata_float(double, d), strata_float(float, e),
	     strata_enum(rbtest, color, int, f), strata_string(g), strata_array(int16_t, h, 3),
	     strata_sequence(uint32_t, i), strata_bytes(j))
STRATA_EVENT_NOARGS(rbtest, noargs, STRATA_LOGLEVEL_ERR)
