/*
 * strata/dynamic.h - events declared at run time.
 * Usable from C11 and C++17.
 *
 * For code that cannot know its events at compile time: language bindings
 * (the JVM agent and the Java API), plugins, generated events.  A declared
 * event is an ordinary tracepoint to the rest of Strata: it goes into the
 * same buffers and CTF metadata, shows in `strata list`, and follows
 * patterns, log levels, field filters, `--wait` acknowledgement and early
 * tracing (STRATA_EARLY) exactly as a static one.  It may be declared while
 * sessions are recording; the trace's metadata then describes it too.
 *
 *     static const struct strata_dyn_field f[] = {
 *         { "count", STRATA_FIELD_INTEGER, 4, 0, 10, 0 },
 *         { "what", STRATA_FIELD_STRING, 0, 0, 0, 0 },
 *     };
 *     strata_dyn_event *ev;
 *     int rc = strata_dyn_declare("app", "step", STRATA_LOGLEVEL_INFO, f, 2, &ev);
 *     if (rc < 0)
 *         fprintf(stderr, "%s\n", strata_dyn_strerror(rc));
 *     ...
 *     if (strata_dyn_enabled(ev)) {        // one load and one branch
 *         union strata_dyn_value v[2];
 *         v[0].u = 42;
 *         v[1].s = "hello";
 *         strata_dyn_emit(ev, v, 2);
 *     }
 *     strata_dyn_release(ev);
 *
 * Declaring is thread-safe but allocates: not from a signal handler.
 * strata_dyn_enabled and strata_dyn_emit are as async-signal-safe as a
 * static tracepoint (no lock, no allocation, no system call but at a
 * sub-buffer boundary).  Declaring the same provider:event again with the
 * same log level and fields returns the same handle (counted); with other
 * fields it is refused (-EEXIST).  A handle stays valid after its last
 * strata_dyn_release: the event is switched off and no longer listed, and
 * its memory is kept (a thread may still be inside strata_dyn_emit), to be
 * reused if the event is declared again.
 */
#ifndef STRATA_DYNAMIC_H
#define STRATA_DYNAMIC_H

#include <strata/tracepoint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * One field.  kind: STRATA_FIELD_INTEGER, FLOAT, STRING, ARRAY (of
 * integers, `length` elements) or SEQUENCE (of integers, length given at
 * each emit).  size: bytes of the integer, float (4 or 8) or element (1, 2,
 * 4, 8); ignored for strings.  base: display base of integers (2, 8, 10,
 * 16; 0 means 10).
 */
struct strata_dyn_field {
	const char *name;
	uint8_t kind;
	uint8_t size;
	uint8_t is_signed;
	uint8_t base;
	uint32_t length;
};

/* One argument of strata_dyn_emit, by the kind of its field. */
union strata_dyn_value {
	int64_t i;     /* INTEGER, signed (truncated to the field's size) */
	uint64_t u;    /* INTEGER, unsigned */
	double f;      /* FLOAT (rounded to float for a 4-byte field) */
	const char *s; /* STRING (NULL is recorded as "(null)") */
	struct {
		const void *ptr; /* ARRAY: `length` elements; SEQUENCE: `len` */
		size_t len;
	} seq;
};

/* The handle: the event's tracepoint (its `state` word is the switch). */
typedef struct strata_tracepoint strata_dyn_event;

/*
 * Declares provider:name (identifiers: [A-Za-z_][A-Za-z0-9_]*, at most 255 characters) with up to
 * 16 fields.  0 and *out on success; else a negative errno, described by
 * strata_dyn_strerror:
 *   -EINVAL  a bad name, field kind, size, base or array length, or a
 *            log level outside 0..7
 *   -E2BIG   more than 64 fields, or a description over the size limit
 *   -EEXIST  provider:name already declared with another log level or fields
 *   -ENOSPC  no event id left (65536 events per process)
 *   -ENOMEM  out of memory
 *   -EBUSY   called from a signal handler interrupting a Strata control call
 */
int strata_dyn_declare(const char *provider, const char *name, int loglevel,
		       const struct strata_dyn_field *fields, uint32_t n_fields, strata_dyn_event **out);

/* A sentence for a code strata_dyn_declare returned (never NULL). */
const char *strata_dyn_strerror(int err);

/* Whether any session records the event: one relaxed load. */
static inline int strata_dyn_enabled(const strata_dyn_event *ev)
{
	return __atomic_load_n(&ev->state, __ATOMIC_RELAXED) != 0;
}

/*
 * Records the event in every session that enables it.  values[i] is the
 * argument of field i; n_values must equal the declared field count (else
 * nothing is recorded, and the runtime warns once).
 */
void strata_dyn_emit(strata_dyn_event *ev, const union strata_dyn_value *values, uint32_t n_values);

/*
 * Records the event from its payload already laid out as the trace stores
 * it: the fields in order, byte-packed, in native byte order; an integer or
 * float in its declared size, a string's bytes and its NUL, an array's
 * elements, a sequence's uint32_t count then its elements.  For bindings
 * that marshal arguments into a buffer anyway (the Java API): one check and
 * one copy.  The layout is checked against the event's fields (every string
 * terminated inside, the fields ending exactly at `len`); a payload that does
 * not match records nothing, and the runtime warns once.
 */
void strata_dyn_emit_packed(strata_dyn_event *ev, const void *payload, size_t len);

/* Drops one declaration; the last one switches the event off (see above). */
void strata_dyn_release(strata_dyn_event *ev);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_DYNAMIC_H */
