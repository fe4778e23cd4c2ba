/*
 * bench_tp_lttng.h - the LTTng-UST provider of the benchmark: the same four
 * event shapes as bench_tp_strata.h, written with lttng-ust 2.13's classic
 * TRACEPOINT_EVENT macros.  bench_lttng_tp.c creates the probes.
 */
#undef TRACEPOINT_PROVIDER
#define TRACEPOINT_PROVIDER bench

#undef TRACEPOINT_INCLUDE
#define TRACEPOINT_INCLUDE "./bench_tp_lttng.h"

#if !defined(BENCH_TP_LTTNG_H) || defined(TRACEPOINT_HEADER_MULTI_READ)
#define BENCH_TP_LTTNG_H

#include <stdint.h>
#include <lttng/tracepoint.h>

/* (a) two integer fields */
TRACEPOINT_EVENT(bench, ints, TP_ARGS(uint32_t, a, uint64_t, b),
		 TP_FIELDS(ctf_integer(uint32_t, a, a) ctf_integer(uint64_t, b, b)))

/* (b) one 64-byte string */
TRACEPOINT_EVENT(bench, str, TP_ARGS(const char *, s), TP_FIELDS(ctf_string(s, s)))

/* (c) eight mixed fields */
TRACEPOINT_EVENT(bench, mixed,
		 TP_ARGS(uint8_t, a, int16_t, b, uint32_t, c, int64_t, d, uint16_t, e, double, f,
			 const char *, g, int32_t, h),
		 TP_FIELDS(ctf_integer(uint8_t, a, a) ctf_integer(int16_t, b, b) ctf_integer(uint32_t, c, c)
				   ctf_integer(int64_t, d, d) ctf_integer_hex(uint16_t, e, e)
					   ctf_float(double, f, f) ctf_string(g, g)
						   ctf_integer(int32_t, h, h)))

/* latency probe: the emitter's own CLOCK_MONOTONIC reading */
TRACEPOINT_EVENT(bench, tick, TP_ARGS(uint64_t, now_ns, uint64_t, seq),
		 TP_FIELDS(ctf_integer(uint64_t, now_ns, now_ns) ctf_integer(uint64_t, seq, seq)))

#endif /* BENCH_TP_LTTNG_H */

#include <lttng/tracepoint-event.h>
