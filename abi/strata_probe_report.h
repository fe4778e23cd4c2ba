/*
 * The probe report of a traced process (issue 35): the probes registered
 * in it (strata_probe_register, and the runtime's own aggregation probes),
 * in a memfd named "strata-probes" that `strata list` reads through
 * /proc/PID/fd while the process runs (docs/probes.md, "Who is on a
 * tracepoint").  Fixed-width fields, little-endian (the machine's), version 1.
 *
 * Writer: the process, under its runtime control lock (one writer at a
 * time), rewriting the whole report at each register and unregister: seq
 * is made odd (relaxed store, then a release fence), the header's counts
 * and the entries written, then seq made even with a release store.
 * Reader (another process, read-only mapping or pread): seq loaded
 * (acquire), retried while odd; the report copied; an acquire fence; seq
 * loaded again and the copy kept only if unchanged.  The reader treats the
 * report as hostile: magic, version, entry_size, n <= STRATA_PROBE_REPORT_MAX,
 * pid equal to the process it reads (a forked child inherits its parent's
 * descriptor until its first change makes its own), every string
 * NUL-terminated within its array.
 */
#ifndef STRATA_PROBE_REPORT_H
#define STRATA_PROBE_REPORT_H

#include <stdint.h>

#define STRATA_PROBE_REPORT_MAGIC 0x50505453u /* "STPP" */
#define STRATA_PROBE_REPORT_VERSION 1u
#define STRATA_PROBE_REPORT_MAX 64u /* entries listed; total counts them all */
#define STRATA_PROBE_REPORT_NAME "strata-probes"

enum strata_probe_report_kind {
	STRATA_PROBE_USER = 1,      /* strata_probe_register */
	STRATA_PROBE_AGGREGATE = 2, /* the runtime's aggregation (STRATA_AGGREGATE) */
};

struct strata_probe_report_entry { /* 256 bytes */
	char pattern[128];         /* at 0: "provider:event" glob, NUL-terminated */
	char symbol[96];           /* at 128: the callback's symbol (dladdr), "" unknown */
	int32_t loglevel_max;      /* at 224: -1 any level */
	uint32_t kind;             /* at 228: enum strata_probe_report_kind */
	uint64_t fn;               /* at 232: the callback's address */
	uint8_t reserved[16];      /* at 240 */
};

struct strata_probe_report {  /* 64-byte header, then the entries */
	uint32_t magic;       /* at 0 */
	uint32_t version;     /* at 4 */
	uint32_t seq;         /* at 8: odd while written */
	uint32_t pid;         /* at 12: the process that wrote it */
	uint32_t n;           /* at 16: entries valid, <= STRATA_PROBE_REPORT_MAX */
	uint32_t total;       /* at 20: probes registered */
	uint32_t entry_size;  /* at 24: sizeof(struct strata_probe_report_entry) */
	uint8_t reserved[36]; /* at 28 */
	struct strata_probe_report_entry entries[STRATA_PROBE_REPORT_MAX]; /* at 64 */
};

#ifdef __cplusplus
static_assert(sizeof(struct strata_probe_report_entry) == 256, "probe report entry layout");
static_assert(sizeof(struct strata_probe_report) == 64 + 256 * STRATA_PROBE_REPORT_MAX,
	      "probe report layout");
#else
_Static_assert(sizeof(struct strata_probe_report_entry) == 256, "probe report entry layout");
_Static_assert(sizeof(struct strata_probe_report) == 64 + 256 * STRATA_PROBE_REPORT_MAX,
	       "probe report layout");
#endif

#endif
