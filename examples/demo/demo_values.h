/*
 * demo_values.h - the deterministic field values of strata-demo.
 * Thread t (0-based) emits events i = 0 .. N-1: demo:ints for even i,
 * demo:mix for odd i.  tests/e2e/demo_oracle.py computes the same values;
 * change both together.
 */
#ifndef STRATA_DEMO_VALUES_H
#define STRATA_DEMO_VALUES_H

#include <stdint.h>
#include <stdio.h>

struct demo_ints {
	int8_t s8;
	uint8_t u8;
	int16_t s16;
	uint16_t u16;
	int32_t s32;
	uint32_t u32;
	int64_t s64;
	uint64_t x64;
};

static inline struct demo_ints demo_ints_of(uint32_t t, uint64_t i)
{
	struct demo_ints v;
	v.s8 = (int8_t)(-(int64_t)(i % 128));
	v.u8 = (uint8_t)((i + t) % 256);
	v.s16 = (int16_t)(-(int64_t)(i % 32768));
	v.u16 = (uint16_t)((i * 3) % 65536);
	v.s32 = (int32_t)(-(int64_t)(i % 1000000000) - (int64_t)t);
	v.u32 = (uint32_t)(i * 7 + t);
	v.s64 = -(int64_t)i * 1000003 - (int64_t)t;
	v.x64 = 0xdead000000000000ull | ((uint64_t)t << 32) | (i & 0xffffffffu);
	return v;
}

#define DEMO_SEQ_MAX 4
#define DEMO_BLOB_MAX 3

struct demo_mix {
	float f32;
	double f64;
	int32_t state; /* 0 idle, 1 busy, 10..19 custom */
	char msg[48];
	uint16_t arr[4];
	int32_t vals[DEMO_SEQ_MAX];
	size_t n_vals; /* 0 .. DEMO_SEQ_MAX */
	uint8_t blob[DEMO_BLOB_MAX];
	size_t n_blob; /* 0 .. DEMO_BLOB_MAX */
};

static inline void demo_mix_of(uint32_t t, uint64_t i, struct demo_mix *v)
{
	size_t k;
	v->f32 = (float)(i % 1000000) * 0.5f; /* exact in a float */
	v->f64 = (double)i / 4.0 + (double)t; /* exact in a double */
	v->state = (i % 3 == 0) ? 0 : (i % 3 == 1) ? 1 : (int32_t)(10 + (i / 3) % 10);
	snprintf(v->msg, sizeof v->msg, "t%u-%llu", (unsigned)t, (unsigned long long)i);
	v->arr[0] = (uint16_t)(i & 0xffff);
	v->arr[1] = (uint16_t)t;
	v->arr[2] = 7;
	v->arr[3] = 65535;
	v->n_vals = (size_t)(i % (DEMO_SEQ_MAX + 1));
	for (k = 0; k < v->n_vals; k++)
		v->vals[k] = (int32_t)(i % 100000) - (int32_t)k * 1000;
	v->n_blob = (size_t)(i % (DEMO_BLOB_MAX + 1));
	for (k = 0; k < v->n_blob; k++)
		v->blob[k] = (uint8_t)((i + k * 17) & 0xff);
}

#endif
