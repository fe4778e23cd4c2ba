/*
 * bench_tp_strata.h - the Strata provider of the benchmark: the same four
 * event shapes as bench_tp_lttng.h.  bench_main.c defines it.
 */
#ifndef BENCH_TP_STRATA_H
#define BENCH_TP_STRATA_H
#include <strata/tracepoint.h>

/* (a) two integer fields */
STRATA_EVENT(bench, ints, STRATA_LOGLEVEL_INFO, strata_int(uint32_t, a), strata_int(uint64_t, b))

/* (b) one 64-byte string */
STRATA_EVENT(bench, str, STRATA_LOGLEVEL_INFO, strata_string(s))

/* (c) eight mixed fields */
STRATA_EVENT(bench, mixed, STRATA_LOGLEVEL_INFO, strata_int(uint8_t, a), strata_int(int16_t, b),
	     strata_int(uint32_t, c), strata_int(int64_t, d), strata_hex(uint16_t, e),
	     strata_float(double, f), strata_string(g), strata_int(int32_t, h))

/* latency probe: the emitter's own CLOCK_MONOTONIC reading */
STRATA_EVENT(bench, tick, STRATA_LOGLEVEL_INFO, strata_int(uint64_t, now_ns), strata_int(uint64_t, seq))
#endif
