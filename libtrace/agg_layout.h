/*
 * agg_layout.h - the shared-memory layout of an aggregation region
 * (docs/probes.md "Aggregation").  Written by the process (agg.cpp, from a
 * probe), read by anyone who maps the region's memfd (agg_reader.h), live,
 * without stopping the process.  Fixed-width fields, native byte order,
 * versioned: a reader refuses a magic, version or size it does not know.
 *
 * The region: one strata_agg_header, then n_entries strata_agg_entry.
 * An entry is a key's aggregate: it is claimed by one CAS of `state`
 * (FREE -> CLAIMING), its key written, then published with a release store
 * (LIVE); its counters are then updated with relaxed atomic RMWs by every
 * hit with that key.  A hit never waits: finding an entry CLAIMING it
 * probes on, so one key may own several entries (the reader merges them).
 * A hit whose key finds no entry within the table is counted in
 * `overflow`.  A reader acquires `state`, then reads counters relaxed:
 * each counter is exact once hits stop; while they run, counters of one
 * entry may be from slightly different moments.
 */
#ifndef STRATA_LIBTRACE_AGG_LAYOUT_H
#define STRATA_LIBTRACE_AGG_LAYOUT_H

#include <stdint.h>

#define STRATA_AGG_MAGIC 0x47474153u /* "SAGG" */
/* Version 2: `hits` is no longer written; a reader derives it (the counts
 * of the live entries + overflow + no_value, which is what it was).  A
 * reader of version 2 still reads version 1 regions. */
#define STRATA_AGG_VERSION 2u
#define STRATA_AGG_BUCKETS 64 /* log2 histogram, see below */
#define STRATA_AGG_KEY_TEXT 48
#define STRATA_AGG_MAX_ENTRIES 4096u

/* What keys the entries. */
enum strata_agg_key_kind {
	STRATA_AGG_KEY_NONE = 0,  /* one entry: the whole pattern */
	STRATA_AGG_KEY_FIELD = 1, /* a field: an integer or enum's value, or a
				      string's 64-bit hash with its first bytes
				      in key_text (non-empty only for strings) */
	STRATA_AGG_KEY_TID = 3,   /* the hitting thread ("$tid") */
	STRATA_AGG_KEY_EVENT = 4, /* the event ("$event"): provider:name kept */
};

enum strata_agg_entry_state {
	STRATA_AGG_FREE = 0,
	STRATA_AGG_CLAIMING = 1,
	STRATA_AGG_LIVE = 2,
};

struct strata_agg_header {
	uint32_t magic;       /* STRATA_AGG_MAGIC */
	uint32_t version;     /* STRATA_AGG_VERSION */
	uint32_t header_size; /* sizeof(struct strata_agg_header) */
	uint32_t entry_size;  /* sizeof(struct strata_agg_entry) */
	uint32_t n_entries;   /* power of two, <= STRATA_AGG_MAX_ENTRIES */
	uint32_t key_kind;    /* enum strata_agg_key_kind */
	uint32_t pid;         /* the aggregating process */
	uint32_t has_value;   /* 1: sum/min/max/hist of value_field */
	uint64_t hits;        /* version 1: hits seen; version 2: 0 (derived by readers) */
	uint64_t overflow;    /* hits whose key found no entry */
	uint64_t no_value;    /* hits whose event lacks an integer value_field (or key_field) */
	uint64_t reserved[3];
	char pattern[128];    /* "provider:event" glob, NUL-terminated */
	char value_field[64]; /* "" for counts only */
	char key_field[64];   /* "" , a field name, "$tid" or "$event" */
};

/*
 * Values are taken as int64_t (an unsigned value above INT64_MAX counts as
 * INT64_MAX).  Histogram bucket b counts values v with
 *   b == 0:  v <= 0
 *   b >= 1:  2^(b-1) <= v < 2^b   (b up to 63)
 */
struct strata_agg_entry {
	uint32_t state; /* enum strata_agg_entry_state */
	uint32_t reserved;
	uint64_t key;                       /* the integer, string hash, tid or event id */
	char key_text[STRATA_AGG_KEY_TEXT]; /* string/event keys: NUL-terminated */
	uint64_t count;
	int64_t sum; /* wraps on overflow */
	int64_t min; /* INT64_MAX until the first value */
	int64_t max; /* INT64_MIN until the first value */
	uint64_t hist[STRATA_AGG_BUCKETS];
};

#ifdef __cplusplus
static_assert(sizeof(strata_agg_header) == 336, "fixed-width header");
static_assert(sizeof(strata_agg_entry) == 608, "fixed-width entry");
#endif

#endif
